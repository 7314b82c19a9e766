// tier: unit
// bundle.json release.via (#43): an update path's releases before the final one, each carried
// whole. validateManifest bounds it (at most MAX_RELEASE_PATH_HOPS releases, each an upgrade of
// the one before, of the bundle's arch, its release image among the images); releasePath()
// reads it in the order a cluster takes the hops, the final release (what older readers read) last.
import t from 'tap';
import {
  MAX_RELEASE_PATH_HOPS,
  RELEASE_SIGNATURE_MEDIA_TYPE,
  releasePath,
  validateManifest,
} from '@offline-bundle/format';

const d = (c: string) => 'sha256:' + c.repeat(64);
const MT = 'application/vnd.oci.image.manifest.v1+json';
const hop = (
  version: string,
  digest: string,
  upgradeFrom: string[],
  extra: Record<string, unknown> = {},
) => ({
  name: version,
  version,
  arch: 'amd64',
  image: `quay.io/ocp/release:${version}`,
  digest,
  upgradeFrom,
  adds: { images: 2, bytes: 100 },
  ...extra,
});
const image = (digest: string) => ({
  repository: 'quay.io/ocp/release',
  tag: null,
  digest,
  mediaType: MT,
  platforms: [{ os: 'linux', architecture: 'amd64' }],
});

/** A bundle.json of the path 4.14.30 → 4.15.40 → 4.16.2, `via` and release changed by `change`. */
function manifest(change: (r: Record<string, any>) => void = () => undefined) {
  const release: Record<string, any> = {
    ...hop('4.16.2', d('2'), ['4.15.40']),
    via: [
      hop('4.15.40', d('1'), ['4.14.30'], {
        signatures: [{ digest: d('5'), keyIds: ['0123456789abcdef'] }],
      }),
    ],
  };
  change(release);
  return {
    schemaVersion: 2,
    mediaType: 'application/vnd.offline-bundle.v2+json',
    release,
    images: [image(d('1')), image(d('2')), image(d('3')), image(d('4'))],
    blobs: [d('1'), d('2'), d('3'), d('4')]
      .map((digest) => ({ digest, size: 100, mediaType: MT }))
      .concat([{ digest: d('5'), size: 3, mediaType: RELEASE_SIGNATURE_MEDIA_TYPE }]),
    index: { digest: d('c'), size: 10 },
    totals: { layoutBytes: 1000, imageStoreBytes: 0 },
    creator: { tool: 't', version: '1', createdAt: 'now' },
    signer: { algorithm: 'ed25519', fingerprint: d('d') },
  };
}

t.test('a path of two releases is read in the order a cluster takes them', async (t) => {
  t.doesNotThrow(
    () =>
      validateManifest(
        manifest((r) => {
          r.via[0].image = `quay.io/ocp/release@${d('1')}`;
          r.upgradeFrom = ['4.15.39', '4.15.40'];
          r.via[0].upgradeFrom = ['4.14.30', '4.15.39'];
        }),
      ),
    'image by digest; the final from another 4.15 the hop also upgrades from',
  );
  const m = validateManifest(manifest());
  const path = releasePath(m);
  t.same(
    path.map((h) => h.version),
    ['4.15.40', '4.16.2'],
    'the intermediate first, the final last',
  );
  t.equal(
    path[1]!.digest,
    m.release.digest,
    "the final one is bundle.json's release, as older readers read it",
  );
  t.notOk('via' in path[1]!, 'a hop carries no path of its own');
  t.same(
    path[0]!.signatures,
    [{ digest: d('5'), keyIds: ['0123456789abcdef'] }],
    'each hop with its own signatures',
  );
  const one = validateManifest(
    manifest((r) => {
      delete r.via;
      delete r.adds;
    }),
  );
  t.same(
    releasePath(one).map((h) => h.version),
    ['4.16.2'],
    'a bundle of one release: one entry',
  );
});

t.test('the validator bounds the path', async (t) => {
  const longest = validateManifest(
    manifest((r) => {
      r.via = [
        hop('4.13.1', d('1'), ['4.12.9']),
        hop('4.14.1', d('2'), ['4.13.1']),
        hop('4.15.1', d('3'), ['4.14.1']),
      ];
      Object.assign(r, {
        version: '4.16.0',
        name: '4.16.0',
        digest: d('4'),
        upgradeFrom: ['4.15.1'],
      });
      // each release adds one image: the path's adds sum to the bundle's four
      for (const h of [...r.via, r]) h.adds = { images: 1, bytes: 100 };
    }),
  );
  t.equal(
    releasePath(longest).length,
    MAX_RELEASE_PATH_HOPS,
    `${MAX_RELEASE_PATH_HOPS} releases are accepted`,
  );
  const bad: [string, (r: Record<string, any>) => void, RegExp][] = [
    [
      'too many hops',
      (r) => {
        r.via = [1, 2, 3, 4].map((n) => hop(`4.1${n}.0`, d('1'), []));
      },
      /path of 5 releases; a bundle carries at most 4/,
    ],
    [
      'an empty via',
      (r) => {
        r.via = [];
      },
      /at least one release/,
    ],
    [
      'a hop the next does not upgrade from',
      (r) => {
        r.upgradeFrom = ['4.15.39'];
      },
      /release\.upgradeFrom does not name 4\.15\.40: 4\.16\.2 is not an upgrade of the hop before it/,
    ],
    [
      'a hop going backwards',
      (r) => {
        r.via[0].version = '4.17.0';
        r.via[0].name = '4.17.0';
        r.upgradeFrom = ['4.17.0'];
      },
      /4\.16\.2 is not later than release\.via\[0\]\.version 4\.17\.0/,
    ],
    [
      "a hop's release image not carried",
      (r) => {
        r.via[0].digest = d('9');
      },
      /release\.via\[0\]\.digest sha256:9+ is not among the images/,
    ],
    [
      'the same release twice',
      (r) => {
        r.via[0].digest = d('2');
      },
      /is another hop's/,
    ],
    [
      'another arch',
      (r) => {
        r.via[0].arch = 'arm64';
      },
      /release\.via\[0\]\.arch must be the bundle's \(amd64\)/,
    ],
    [
      'a hop without adds',
      (r) => {
        delete r.via[0].adds;
      },
      /release\.via\[0\]\.adds must be an object/,
    ],
    [
      'adds beyond the layout',
      (r) => {
        r.adds.bytes = 10_000;
      },
      /release\.adds\.bytes is more than the bundle's layout/,
    ],
    [
      'adds without via',
      (r) => {
        delete r.via;
      },
      /release\.adds is a field of a release with via/,
    ],
    [
      'a path without a release image',
      (r) => {
        r.image = null;
        r.digest = null;
      },
      /needs release\.image/,
    ],
    [
      'a version that names a path',
      (r) => {
        r.via[0].version = '../x';
      },
      /release\.via\[0\]\.version must be letters/,
    ],
    [
      "a hop's unlisted signature",
      (r) => {
        r.via[0].signatures = [{ digest: d('8'), keyIds: [] }];
      },
      /release\.via\[0\]\.signatures\[0\] must name a blob/,
    ],
    [
      'a nested path',
      (r) => {
        r.via[0].via = [];
      },
      /a hop has no path of its own/,
    ],
    [
      'a hop without a version',
      (r) => {
        delete r.via[0].version;
      },
      /release\.via\[0\]\.version must be a non-empty string/,
    ],
    [
      'a hop without a name',
      (r) => {
        delete r.via[0].name;
      },
      /release\.via\[0\]\.name must be a non-empty string/,
    ],
    [
      "the final release upgrading from the path's start",
      (r) => {
        r.upgradeFrom = ['4.14.30', '4.15.40'];
      },
      /release\.upgradeFrom names 4\.14\.30, a release before 4\.15\.40 on the path/,
    ],
    [
      'a later hop upgrading from a hop before the one it follows',
      (r) => {
        r.via.push(hop('4.15.50', d('3'), ['4.15.40']));
        for (const h of [...r.via, r]) h.adds = { images: 1, bytes: 100 };
        r.upgradeFrom = ['4.15.40', '4.15.50'];
      },
      /release\.upgradeFrom names 4\.15\.40, a release before 4\.15\.50 on the path/,
    ],
    [
      "a hop's image another repository than its digest's",
      (r) => {
        r.via[0].image = 'quay.io/evil/release:4.15.40';
      },
      /release\.via\[0\]\.image quay\.io\/evil\/release:4\.15\.40 is not the carried image/,
    ],
    [
      "a hop's image naming another digest",
      (r) => {
        r.via[0].image = `quay.io/ocp/release@${d('3')}`;
      },
      /is not the carried image of release\.via\[0\]\.digest/,
    ],
    [
      'adds summing to more than the bundle',
      (r) => {
        r.adds.bytes = 600;
        r.via[0].adds.bytes = 600;
      },
      /the path's adds count more bytes than the bundle's layout \(1000 bytes\)/,
    ],
  ];
  for (const [what, change, message] of bad) {
    t.throws(() => validateManifest(manifest(change)), { code: 'INVALID_MANIFEST', message }, what);
  }
});

/**
 * The same path with each release's payload listed: images 1 (4.15.40's release image) and 3 its
 * payload, 2 (4.16.2's) and 4 its own, image 5 a payload image both share; image 6 an add-on
 * (no component) and 7 an operator catalog, in no payload.
 */
function withPayloads(
  change: (r: Record<string, any>, images: Record<string, any>[]) => void = () => undefined,
) {
  const m = manifest((r) => {
    r.via[0].payload = [d('1'), d('3'), d('5')];
    r.payload = [d('2'), d('4'), d('5')];
  });
  const comp = (digest: string, component?: string) => ({
    ...image(digest),
    ...(component ? { component } : {}),
  });
  const images: Record<string, any>[] = [
    comp(d('1'), 'release'),
    comp(d('2'), 'release'),
    comp(d('3'), 'etcd'),
    comp(d('4'), 'etcd'),
    comp(d('5'), 'cli'),
    comp(d('6')),
    comp(d('7'), 'operator-catalog'),
  ];
  const blobs = images
    .map((i) => ({ digest: i.digest, size: 100, mediaType: MT }))
    .concat([{ digest: d('8'), size: 3, mediaType: RELEASE_SIGNATURE_MEDIA_TYPE }]);
  // the hop's signature blob: d('5') is an image here
  m.release.via[0].signatures = [{ digest: d('8'), keyIds: ['0123456789abcdef'] }];
  change(m.release, images);
  return { ...m, images, blobs };
}

t.test("each release's payload: listed images, held to what the bundle carries", async (t) => {
  const m = validateManifest(withPayloads());
  t.same(
    releasePath(m).map((h) => [h.version, h.payload]),
    [
      ['4.15.40', [d('1'), d('3'), d('5')]],
      ['4.16.2', [d('2'), d('4'), d('5')]],
    ],
    'each release with its own images; a shared one in both',
  );
  t.doesNotThrow(
    () => validateManifest(manifest()),
    'a path without payloads (built before them) is read as before',
  );
  t.doesNotThrow(
    () =>
      validateManifest(
        withPayloads((_r, images) => {
          images.push({ ...images[2]!, repository: 'quay.io/site/addon' });
          delete images.at(-1)!.component;
        }),
      ),
    "an add-on of the same digest as a payload image: the digest is still a payload's",
  );
  const lying: [string, (r: Record<string, any>, images: Record<string, any>[]) => void, RegExp][] =
    [
      [
        'a digest the bundle does not carry',
        (r) => {
          r.payload.push(d('9'));
        },
        /release\.payload\[3\] sha256:9+ is not among the images: a release's payload is carried/,
      ],
      [
        'a payload image in no list',
        (r) => {
          r.payload = [d('2'), d('5')];
        },
        /images' quay\.io\/ocp\/release@sha256:4+ \(component etcd\) is in no release's payload/,
      ],
      [
        'a list without its own release image',
        (r) => {
          r.via[0].payload = [d('3'), d('5')];
        },
        /release\.via\[0\]\.payload does not list the release image sha256:1+/,
      ],
      [
        "the other release's image for its own",
        (r) => {
          r.via[0].payload = [d('2'), d('3'), d('5')];
        },
        /release\.via\[0\]\.payload\[0\] sha256:2+ is 4\.16\.2's release image: a release's payload names its own release image only/,
      ],
      [
        'an add-on (no component) in a payload',
        (r) => {
          r.payload.push(d('6'));
        },
        /release\.payload\[3\] sha256:6+ \(quay\.io\/ocp\/release\) has no payload component in images: an add-on is no release's payload/,
      ],
      [
        'the operator catalog in a payload',
        (r) => {
          r.via[0].payload.push(d('7'));
        },
        /release\.via\[0\]\.payload\[3\] sha256:7+ is the operator catalog's image/,
      ],
      [
        "one list holding the other's payload, its own only its release image",
        (r) => {
          r.via[0].payload = [d('1'), d('3'), d('4'), d('5')];
          r.payload = [d('2')];
        },
        /release\.payload lists only the release image: a release's payload lists its image-references too/,
      ],
      [
        'a digest twice',
        (r) => {
          r.payload.push(d('4'));
        },
        /release\.payload lists sha256:4+ twice/,
      ],
      [
        'one release listed, another not',
        (r) => {
          delete r.via[0].payload;
        },
        /release\.via\[0\]\.payload is missing: a path lists every release's payload or none/,
      ],
      [
        'not a digest',
        (r) => {
          r.payload[0] = 'latest';
        },
        /release\.payload\[0\] must be a sha256 digest/,
      ],
      [
        'a list longer than the images',
        (r, images) => {
          r.payload = [...images.map((i) => i.digest), d('2')];
        },
        /release\.payload must be a list/,
      ],
      [
        'a payload without a path',
        (r) => {
          delete r.via;
          delete r.adds;
        },
        /release\.payload is a field of a release with via/,
      ],
    ];
  for (const [what, change, message] of lying) {
    t.throws(
      () => validateManifest(withPayloads(change)),
      { code: 'INVALID_MANIFEST', message },
      what,
    );
  }
});

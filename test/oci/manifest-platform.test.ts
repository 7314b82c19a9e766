// tier: unit
// parseManifest (media type detection and validation) and platform helpers.
import t from 'tap';
import {
  formatPlatform,
  MediaType,
  normalizeArch,
  parseManifest,
  parsePlatform,
  platformMatches,
} from '@offline-bundle/oci';

const ociErr = (code: string) => ({ name: 'OciError', code });
const dg = (c: string) => 'sha256:' + c.repeat(64);
const json = (v: unknown) => Buffer.from(JSON.stringify(v));
const desc = (c: string, extra: object = {}) => ({
  mediaType: MediaType.OciManifest,
  digest: dg(c),
  size: 10,
  ...extra,
});

t.test('parseManifest: image manifests and indexes, OCI and Docker', async (t) => {
  const m = parseManifest(
    json({
      schemaVersion: 2,
      mediaType: MediaType.OciManifest,
      config: desc('a', { mediaType: MediaType.OciConfig }),
      layers: [desc('b')],
    }),
  );
  t.equal(m.kind, 'manifest');
  t.equal(m.mediaType, MediaType.OciManifest);
  t.equal(m.kind === 'manifest' && m.manifest.layers[0]?.digest, dg('b'));

  const i = parseManifest(
    json({
      schemaVersion: 2,
      mediaType: MediaType.OciIndex,
      manifests: [desc('c', { platform: { os: 'linux', architecture: 'arm64' } })],
    }),
  );
  t.equal(i.kind, 'index');
  t.equal(i.kind === 'index' && i.index.manifests[0]?.platform?.architecture, 'arm64');

  t.equal(
    parseManifest(
      json({
        schemaVersion: 2,
        mediaType: MediaType.DockerManifest,
        config: desc('a'),
        layers: [],
      }),
    ).mediaType,
    MediaType.DockerManifest,
  );
  t.equal(
    parseManifest(
      json({ schemaVersion: 2, mediaType: MediaType.DockerManifestList, manifests: [] }),
    ).kind,
    'index',
  );
});

t.test(
  'parseManifest: media type from the document, else Content-Type, else the shape',
  async (t) => {
    const noType = { schemaVersion: 2, config: desc('a'), layers: [] };
    t.equal(
      parseManifest(json(noType), `${MediaType.DockerManifest}; charset=utf-8`).mediaType,
      MediaType.DockerManifest,
      'Content-Type with parameters',
    );
    t.equal(
      parseManifest(json(noType)).mediaType,
      MediaType.OciManifest,
      'no type at all: OCI manifest',
    );
    t.equal(
      parseManifest(json(noType), 'application/json').mediaType,
      MediaType.OciManifest,
      'generic Content-Type ignored',
    );
    t.equal(
      parseManifest(json({ schemaVersion: 2, manifests: [] }), 'application/octet-stream')
        .mediaType,
      MediaType.OciIndex,
      'has manifests: OCI index',
    );
    t.equal(
      parseManifest(
        json({ ...noType, mediaType: MediaType.OciManifest }),
        MediaType.DockerManifestList,
      ).mediaType,
      MediaType.OciManifest,
      'the document wins over Content-Type',
    );
  },
);

t.test('parseManifest: invalid documents', async (t) => {
  t.throws(() => parseManifest(Buffer.from('<html>')), ociErr('INVALID_MANIFEST'), 'not JSON');
  t.throws(
    () => parseManifest(json({ schemaVersion: 1, name: 'x' })),
    ociErr('UNSUPPORTED_MEDIA_TYPE'),
    'schema 1',
  );
  t.throws(
    () =>
      parseManifest(
        json({
          schemaVersion: 2,
          mediaType: 'application/vnd.oci.artifact.manifest.v1+json',
          blobs: [],
        }),
      ),
    ociErr('UNSUPPORTED_MEDIA_TYPE'),
    'unknown media type',
  );
  t.throws(
    () => parseManifest(json({ schemaVersion: 2, mediaType: MediaType.OciManifest, layers: [] })),
    ociErr('INVALID_MANIFEST'),
    'no config',
  );
  t.throws(
    () =>
      parseManifest(
        json({ schemaVersion: 2, mediaType: MediaType.OciManifest, config: desc('a') }),
      ),
    ociErr('INVALID_MANIFEST'),
    'no layers',
  );
  t.throws(
    () => parseManifest(json({ schemaVersion: 2, mediaType: MediaType.OciIndex })),
    ociErr('INVALID_MANIFEST'),
    'index without manifests',
  );
  t.throws(
    () =>
      parseManifest(
        json({
          schemaVersion: 2,
          config: desc('a'),
          layers: [{ ...desc('b'), digest: 'sha256:xyz' }],
        }),
      ),
    ociErr('INVALID_MANIFEST'),
    'bad layer digest',
  );
  t.throws(
    () =>
      parseManifest(
        json({ schemaVersion: 2, config: desc('a'), layers: [{ ...desc('b'), size: -1 }] }),
      ),
    ociErr('INVALID_MANIFEST'),
    'negative size',
  );
  t.throws(
    () =>
      parseManifest(
        json({ schemaVersion: 2, config: desc('a'), layers: [{ ...desc('b'), size: 1.5 }] }),
      ),
    ociErr('INVALID_MANIFEST'),
    'fractional size',
  );
  t.throws(
    () => parseManifest(json({ schemaVersion: 2, manifests: [{ digest: dg('a'), size: 1 }] })),
    ociErr('INVALID_MANIFEST'),
    'descriptor without mediaType',
  );
  t.throws(
    () => parseManifest(json({ schemaVersion: 2, manifests: [null] })),
    ociErr('INVALID_MANIFEST'),
    'null descriptor',
  );
  t.throws(() => parseManifest(Buffer.from('null')), ociErr('INVALID_MANIFEST'), 'JSON null');
});

t.test('parsePlatform / formatPlatform / normalizeArch', async (t) => {
  t.strictSame(
    parsePlatform('arm64'),
    { os: 'linux', architecture: 'arm64' },
    'ARCH alone means linux',
  );
  t.strictSame(parsePlatform('x86_64'), { os: 'linux', architecture: 'amd64' }, 'alias normalized');
  t.strictSame(parsePlatform('linux/aarch64'), { os: 'linux', architecture: 'arm64' });
  t.strictSame(parsePlatform('linux/arm/v7'), { os: 'linux', architecture: 'arm', variant: 'v7' });
  t.strictSame(parsePlatform('windows/amd64'), { os: 'windows', architecture: 'amd64' });
  t.throws(
    () => parsePlatform('linux/arm/v7/extra'),
    ociErr('INVALID_REFERENCE'),
    'too many parts',
  );
  t.throws(() => parsePlatform('linux/'), ociErr('INVALID_REFERENCE'), 'empty arch');
  t.throws(() => parsePlatform('/amd64'), ociErr('INVALID_REFERENCE'), 'empty os');
  t.throws(() => parsePlatform(''), ociErr('INVALID_REFERENCE'), 'empty string');
  t.equal(formatPlatform({ os: 'linux', architecture: 'arm', variant: 'v7' }), 'linux/arm/v7');
  t.equal(formatPlatform({ os: 'linux', architecture: 'amd64' }), 'linux/amd64');
  for (const [from, to] of [
    ['x86_64', 'amd64'],
    ['x86-64', 'amd64'],
    ['aarch64', 'arm64'],
    ['armhf', 'arm'],
    ['armel', 'arm'],
    ['ppc64el', 'ppc64le'],
    ['s390x', 's390x'],
  ]) {
    t.equal(normalizeArch(from!), to, `${from} -> ${to}`);
  }
});

t.test('platformMatches', async (t) => {
  const amd64 = { os: 'linux', architecture: 'amd64' };
  t.equal(platformMatches(amd64, { os: 'linux', architecture: 'amd64' }), true);
  t.equal(
    platformMatches(amd64, { os: 'linux', architecture: 'x86_64' }),
    true,
    'aliases on the image side',
  );
  t.equal(platformMatches(amd64, { os: 'linux', architecture: 'arm64' }), false);
  t.equal(platformMatches(amd64, { os: 'windows', architecture: 'amd64' }), false, 'os must match');
  t.equal(
    platformMatches(amd64, undefined),
    false,
    'an index entry without platform never matches',
  );
  t.equal(
    platformMatches(
      { os: 'linux', architecture: 'arm64' },
      { os: 'linux', architecture: 'arm64', variant: 'v8' },
    ),
    true,
    'missing variant wanted',
  );
  t.equal(
    platformMatches(
      { os: 'linux', architecture: 'arm64', variant: 'v8' },
      { os: 'linux', architecture: 'arm64' },
    ),
    true,
    'missing variant in image',
  );
  t.equal(
    platformMatches(
      { os: 'linux', architecture: 'arm', variant: 'v7' },
      { os: 'linux', architecture: 'arm', variant: 'v6' },
    ),
    false,
    'different variants',
  );
});

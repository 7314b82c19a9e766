// `bundle create` against a real docker-registry on 127.0.0.1 seeded with skopeo:
// single-arch images by tag and by digest, a 2-platform index (--arch / --all-platforms),
// layers shared between images, an OpenShift-shaped release image, and the failures
// (wrong platform, missing image, contradicting --version) with their codes.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  blobEntry,
  bundle,
  bundleJson,
  errorCode,
  keygen,
  listDir,
  refNames,
  tarEntry,
  tarList,
  type BundleJson,
} from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-create-');
const keys = await keygen(work);
const H = reg.host;

const shared = { 'usr/share/base/os-release': 'ID=test\nVERSION_ID=1\n' };
const app = await pushImage(
  {
    tag: 'v1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [shared, { 'app/bin/app': 'app v1' }],
        config: { Cmd: ['/app/bin/app'] },
      },
    ],
  },
  `${H}/test/app:v1`,
);
const tool = await pushImage(
  {
    tag: 'v1',
    platforms: [
      { os: 'linux', architecture: 'amd64', layers: [shared, { 'tool/bin/tool': 'tool v1' }] },
    ],
  },
  `${H}/test/tool:v1`,
);
const multiBase = { 'etc/multi': 'common to both platforms' };
const multi = await pushImage(
  {
    tag: 'v2',
    platforms: [
      { os: 'linux', architecture: 'amd64', layers: [multiBase, { arch: 'amd64' }] },
      { os: 'linux', architecture: 'arm64', variant: 'v8', layers: [multiBase, { arch: 'arm64' }] },
    ],
  },
  `${H}/test/multi:v2`,
);
const multiAmd = multi.manifests[0]!;
const multiArm = multi.manifests[1]!;

let n = 0;
/** `bundle create --quiet --tls-verify=false --key KEY --cache C -o OUT ARGS...` in a fresh dir. */
async function create(args: string[], opts: { cache?: string; verbose?: boolean } = {}) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const output = path.join(dir, 'out', 'test.bundle');
  await mkdir(path.dirname(output));
  const cache = opts.cache ?? path.join(dir, 'cache');
  const r = await bundle([
    'create',
    ...(opts.verbose ? [] : ['--quiet']),
    '--tls-verify=false',
    '--key',
    keys.key,
    '--cache',
    cache,
    '-o',
    output,
    ...args,
  ]);
  return { ...r, output, outDir: path.dirname(output), cache };
}

const digests = (m: BundleJson) => m.blobs.map((b) => b.digest);
const plain = (p: { os: string; architecture: string; variant?: string }) => ({
  os: p.os,
  architecture: p.architecture,
  ...(p.variant ? { variant: p.variant } : {}),
});

t.test('single-arch image by tag', async (t) => {
  const r = await create(['--version', '1.0.0', '--image', `docker://${app.ref}`]);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stderr, '', '--quiet prints nothing');
  const m = await bundleJson(r.output);
  t.equal(m.images.length, 1);
  t.match(m.images[0], {
    repository: `${H}/test/app`,
    tag: 'v1',
    digest: app.digest,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
  });
  t.same(m.images[0]!.platforms.map(plain), [{ os: 'linux', architecture: 'amd64' }]);
  const want = [app.digest, app.manifests[0]!.config, ...app.manifests[0]!.layers].sort();
  t.same(digests(m), want, 'exactly the manifest, config and layers, sorted');
  t.equal(m.blobs.find((b) => b.digest === app.digest)!.size, app.size);
  t.same(m.release, {
    name: '1.0.0',
    version: '1.0.0',
    arch: 'amd64',
    image: null,
    digest: null,
    upgradeFrom: [],
  });
  t.same(await refNames(r.output), [`${H}/test/app:v1`]);
  const v = await bundle(['verify', r.output, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);
});

t.test('the same image by digest reference', async (t) => {
  const r = await create(['--version', '1.0.0', '--image', app.digestRef]);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.match(m.images, [{ repository: `${H}/test/app`, tag: null, digest: app.digest }]);
  t.same(digests(m), [app.digest, app.manifests[0]!.config, ...app.manifests[0]!.layers].sort());
  t.same(await refNames(r.output), [`${H}/test/app@${app.digest}`]);
});

t.test(
  'a tag and a digest reference of one image in one run (blobs once, two names)',
  async (t) => {
    // Both references resolve in parallel and need the same manifest and config at once.
    for (let i = 0; i < 2; i++) {
      const r = await create([
        '--version',
        '1.0.0',
        '--jobs',
        '4',
        '--image',
        app.ref,
        '--image',
        app.digestRef,
      ]);
      t.equal(r.code, 0, r.stderr);
      const m = await bundleJson(r.output);
      t.same(
        m.images.map((im) => [im.tag, im.digest]).sort(),
        [
          ['v1', app.digest],
          [null, app.digest],
        ].sort(),
      );
      t.equal(m.blobs.length, 4);
      t.same(await refNames(r.output), [`${H}/test/app:v1`, `${H}/test/app@${app.digest}`].sort());
    }
  },
);

t.test(
  '2-platform index with --arch amd64 keeps the index bytes and only the amd64 child',
  async (t) => {
    const r = await create(['--version', '2.0.0', '--image', multi.ref, '--arch', 'amd64']);
    t.equal(r.code, 0, r.stderr);
    const m = await bundleJson(r.output);
    t.match(m.images, [
      {
        repository: `${H}/test/multi`,
        tag: 'v2',
        digest: multi.digest,
        mediaType: 'application/vnd.oci.image.index.v1+json',
      },
    ]);
    t.same(m.images[0]!.platforms.map(plain), [{ os: 'linux', architecture: 'amd64' }]);
    t.same(digests(m), [multi.digest, multiAmd.digest, multiAmd.config, ...multiAmd.layers].sort());
    for (const d of [multiArm.digest, multiArm.config, multiArm.layers[1]!])
      t.notOk(digests(m).includes(d), `arm64 blob ${d} left out`);
    const names = await tarList(r.output);
    t.notOk(names.includes(blobEntry(multiArm.digest)), 'arm64 manifest is not in the archive');
    t.ok(
      (await tarEntry(r.output, blobEntry(multi.digest))).equals(multi.raw),
      'the index is carried byte for byte',
    );
    t.equal(m.release.arch, 'amd64');
  },
);

t.test('2-platform index with --arch arm64 picks the arm64/v8 child', async (t) => {
  const r = await create(['--version', '2.0.0', '--image', multi.ref, '--arch', 'arm64']);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(m.images[0]!.platforms.map(plain), [
    { os: 'linux', architecture: 'arm64', variant: 'v8' },
  ]);
  t.same(digests(m), [multi.digest, multiArm.digest, multiArm.config, ...multiArm.layers].sort());
  t.equal(m.release.arch, 'arm64');
});

t.test('2-platform index with --all-platforms keeps both children', async (t) => {
  const r = await create(['--version', '2.0.0', '--image', multi.ref, '--all-platforms']);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(m.images[0]!.platforms.map(plain), [
    { os: 'linux', architecture: 'amd64' },
    { os: 'linux', architecture: 'arm64', variant: 'v8' },
  ]);
  const want = [
    ...new Set([
      multi.digest,
      multiAmd.digest,
      multiAmd.config,
      ...multiAmd.layers,
      multiArm.digest,
      multiArm.config,
      ...multiArm.layers,
    ]),
  ].sort();
  t.same(digests(m), want);
  const v = await bundle(['verify', r.output, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);
});

t.test('two images sharing a layer: the blob is listed and archived once', async (t) => {
  t.equal(
    app.manifests[0]!.layers[0],
    tool.manifests[0]!.layers[0],
    'fixture: the base layer is shared',
  );
  const r = await create(['--version', '1.0.0', '--image', app.ref, '--image', tool.ref], {
    verbose: true,
  });
  t.equal(r.code, 0, r.stderr);
  // without --quiet and without a terminal: plain log lines, no redraws
  t.match(r.stderr, /^fetching 7 blobs of 2 images: /m, 'progress names blobs and images');
  t.match(r.stderr, /^wrote .*test\.bundle: .*2 images, 7 blobs, sha256:[0-9a-f]{64}$/m);
  t.notMatch(r.stderr, /\r|\x1b\[/, 'no terminal control sequences in a log');
  const m = await bundleJson(r.output);
  const sharedDigest = app.manifests[0]!.layers[0]!;
  t.equal(m.blobs.filter((b) => b.digest === sharedDigest).length, 1, 'once in bundle.json blobs');
  t.equal(m.blobs.length, 7, '4 + 4 blobs minus the shared one');
  t.equal(new Set(digests(m)).size, m.blobs.length, 'no duplicates at all');
  const names = await tarList(r.output);
  t.equal(
    names.filter((x) => x === blobEntry(sharedDigest)).length,
    1,
    'once in zstd -dc | tar -t',
  );
  t.equal(new Set(names).size, names.length);
  t.equal(m.images.length, 2);
});

t.test('--images-file adds images, one per line with comments', async (t) => {
  const dir = await tmpdir(t);
  const file = path.join(dir, 'images.txt');
  await writeFile(
    file,
    `# extra images\n${app.ref}\n\n  docker://${tool.digestRef}   # by digest\n`,
  );
  const r = await create(['--version', '1.0.0', '--images-file', file]);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(
    m.images.map((i) => `${i.repository}:${i.tag ?? i.digest}`).sort(),
    [`${H}/test/app:v1`, `${H}/test/tool:${tool.digest}`].sort(),
  );
});

t.test('failures: code on one stderr line, nothing left in the output directory', async (t) => {
  const cases: [string, string[], string][] = [
    [
      'wrong --arch for a single-arch image',
      ['--version', '1', '--image', app.ref, '--arch', 'arm64'],
      'PLATFORM_NOT_FOUND',
    ],
    [
      'an index without the platform',
      ['--version', '1', '--image', multi.ref, '--arch', 's390x'],
      'PLATFORM_NOT_FOUND',
    ],
    ['a missing tag', ['--version', '1', '--image', `${H}/test/app:nope`], 'NOT_FOUND'],
    [
      'a missing repository next to a good image',
      ['--version', '1', '--image', app.ref, '--image', `${H}/test/missing:v1`],
      'NOT_FOUND',
    ],
    [
      'a missing digest',
      ['--version', '1', '--image', `${H}/test/app@sha256:${'0'.repeat(64)}`],
      'NOT_FOUND',
    ],
    [
      'a malformed reference',
      ['--version', '1', '--image', `${H}/Test/UPPER:v1`],
      'INVALID_REFERENCE',
    ],
    [
      'an unknown transport',
      ['--version', '1', '--image', 'containers-storage:foo/bar'],
      'UNSUPPORTED_TRANSPORT',
    ],
    ['no --version without --release', ['--image', app.ref], 'INVALID_CONFIG'],
  ];
  const runs = await Promise.all(cases.map(([, args]) => create(args)));
  for (const [k, [what, , code]] of cases.entries()) {
    const r = runs[k]!;
    t.equal(r.code, 1, `${what}: exit 1`);
    t.equal(errorCode(r.stderr), code, `${what}: ${code}`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, `${what}: one line on stderr`);
    t.same(await listDir(r.outDir), [], `${what}: no output or temp file left`);
  }
  // One image failing while the others are still being fetched: the run stops at once and
  // the error is the last thing printed (no retries against a closed client afterwards).
  const r = await create(
    [
      '--version',
      '1',
      '--jobs',
      '2',
      '--image',
      tool.ref,
      '--image',
      multi.ref,
      '--image',
      `${H}/test/missing:v1`,
      '--image',
      app.ref,
    ],
    { verbose: true },
  );
  t.equal(errorCode(r.stderr), 'NOT_FOUND');
  t.equal(r.stderr.split('\n').filter((l) => l.startsWith('bundle:')).length, 1, 'one error line');
  t.notMatch(r.stderr, /retrying/, 'nothing retried after the failure');
  t.same(await listDir(r.outDir), []);
});

t.test('OpenShift-shaped release image', async (t) => {
  const art = `${H}/ocp/art-dev`;
  const compA = await pushImage(
    {
      tag: 'comp-a',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [shared, { 'usr/bin/cvo': 'cluster-version-operator' }],
        },
      ],
    },
    `${art}:comp-a`,
  );
  const compB = await pushImage(
    {
      tag: 'comp-b',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [{ 'usr/bin/mco': 'machine-config-operator' }],
        },
      ],
    },
    `${art}:comp-b`,
  );
  const compC = await pushImage(
    {
      tag: 'comp-c',
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/etcd': 'etcd amd64' }] },
        { os: 'linux', architecture: 'arm64', layers: [{ 'usr/bin/etcd': 'etcd arm64' }] },
      ],
    },
    `${art}:comp-c`,
  );
  const payload = {
    'cluster-version-operator': compA.digestRef,
    'machine-config-operator': compB.digestRef,
    etcd: compC.digestRef,
    // Real payloads name one image under several components.
    'machine-config-operator-alias': compB.digestRef,
  };
  const files = releaseFiles({
    version: '4.14.1',
    previous: ['4.14.0', '4.13.9'],
    images: payload,
  });
  const rel = await pushImage(
    { tag: '4.14.1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [shared, files] }] },
    `${H}/ocp/release:4.14.1`,
  );

  const r = await create(['--release', rel.ref, '--upgrade-from', '4.13.0', '--image', tool.ref]);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(
    m.release,
    {
      name: '4.14.1',
      version: '4.14.1',
      arch: 'amd64',
      image: `${H}/ocp/release:4.14.1`,
      digest: rel.digest,
      upgradeFrom: ['4.13.0', '4.13.9', '4.14.0'],
    },
    'version and upgrade edges from release-metadata, plus --upgrade-from',
  );
  const byRef = new Map(
    m.images.map((i) => [`${i.repository}${i.tag ? `:${i.tag}` : `@${i.digest}`}`, i]),
  );
  t.match(
    byRef.get(rel.ref),
    { digest: rel.digest, component: 'release' },
    'the release image itself',
  );
  t.match(byRef.get(compA.digestRef), {
    tag: null,
    digest: compA.digest,
    component: 'cluster-version-operator',
  });
  t.match(byRef.get(compC.digestRef), { tag: null, digest: compC.digest, component: 'etcd' });
  t.same(
    byRef.get(compC.digestRef)!.platforms.map(plain),
    [{ os: 'linux', architecture: 'amd64' }],
    'payload index narrowed to --arch',
  );
  t.match(
    byRef.get(compB.digestRef)?.component,
    /^machine-config-operator(-alias)?$/,
    'an image named by two components is carried once',
  );
  t.notOk(byRef.get(tool.ref)?.component, 'an --image has no component');
  t.equal(m.images.length, 5, 'release + 3 distinct payload images + 1 extra image');
  for (const d of [
    compA.digest,
    compB.digest,
    compC.digest,
    compC.manifests[0]!.digest,
    rel.digest,
  ])
    t.ok(digests(m).includes(d), `blob ${d}`);
  t.notOk(
    digests(m).includes(compC.manifests[1]!.digest),
    'arm64 child of the payload index left out',
  );
  t.same(await refNames(r.output), [...byRef.keys()].sort(), 'index.json names every image');

  const ok = await create(['--release', rel.digestRef, '--version', '4.14.1']);
  t.equal(ok.code, 0, `--version equal to the release's is accepted: ${ok.stderr}`);
  t.equal((await bundleJson(ok.output)).release.image, rel.digestRef);

  const bad = await create(['--release', rel.ref, '--version', '4.15.0']);
  t.equal(bad.code, 1);
  t.equal(errorCode(bad.stderr), 'INVALID_RELEASE', '--version contradicting release-metadata');
  t.same(await listDir(bad.outDir), []);

  const notRelease = await create(['--release', app.ref]);
  t.equal(
    errorCode(notRelease.stderr),
    'INVALID_RELEASE',
    'an image without release-manifests is not a release',
  );

  const tagged = await pushImage(
    {
      tag: '4.14.2',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [releaseFiles({ version: '4.14.2', images: { x: `${art}:comp-a` } })],
        },
      ],
    },
    `${H}/ocp/release:4.14.2`,
  );
  const byTag = await create(['--release', tagged.ref]);
  t.equal(errorCode(byTag.stderr), 'INVALID_RELEASE', 'payload images must be pinned by digest');
});

t.test(
  'many images at once (--jobs 8): no Node warning on stderr (every request in flight listens on the one abort signal; 11 printed a "memory leak" warning)',
  async (t) => {
    const refs: string[] = [];
    for (let i = 0; i < 16; i++) {
      const img = await pushImage(
        {
          tag: 'v1',
          platforms: [
            {
              os: 'linux',
              architecture: 'amd64',
              layers: [shared, { [`many/${i}/a`]: `a ${i}` }, { [`many/${i}/b`]: `b ${i}` }],
            },
          ],
        },
        `${H}/test/many-${i}:v1`,
      );
      refs.push('--image', img.ref);
    }
    const r = await create(['--version', '1.0.0', '--jobs', '8', ...refs], { verbose: true });
    t.equal(r.code, 0, r.stderr);
    t.notMatch(r.stderr, /Warning|\(node:\d+\)/, 'no Node warning among the progress lines');
    t.equal((await bundleJson(r.output)).images.length, 16);
  },
);

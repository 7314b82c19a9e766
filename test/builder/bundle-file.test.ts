// `bundle create -f FILE` (#23): a bundle file, or an oc-mirror v2 ImageSetConfiguration as is,
// against a real docker-registry on 127.0.0.1 holding two OpenShift-shaped releases; a release
// channel resolved against a Cincinnati graph file; fields a bundle does not carry refused by
// name; --dry-run; `bundle diff`; the shipped schema and the man page's field list.
import t from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { bundle, bundleJson, errorCode, listDir } from './lib.js';
import {
  work,
  keys,
  H,
  EPOCH,
  app,
  tool,
  cvo1,
  cvo2,
  etcd,
  rel1,
  rel2,
  graphFile,
  createFrom,
  own,
  refs,
} from './bundle-file-setup.js';

t.test('a bundle file gives the same bundle.json as the same flags', async (t) => {
  const flagsDir = path.join(work, 'flags');
  await mkdir(flagsDir);
  const byFlags = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--cache',
      path.join(work, 'cache'),
      '--key',
      keys.key,
      '-o',
      path.join(flagsDir, 'a.bundle'),
      '--release',
      rel2.ref,
      '--image',
      app.ref,
      '--image',
      tool.ref,
      '--upgrade-from',
      '4.13.9',
      '--name',
      'site release',
    ],
    { env: EPOCH },
  );
  t.equal(byFlags.code, 0, byFlags.stderr);
  await writeFile(path.join(work, 'factory-copy.key'), await readFile(keys.key));
  // relative paths are the file's directory's, not the working directory's
  const r = await createFrom(
    own({
      release: rel2.ref,
      images: [app.ref, tool.ref],
      upgradeFrom: ['4.13.9'],
      name: 'site release',
      key: '../factory-copy.key',
      output: 'out.bundle',
    }),
  );
  t.equal(r.code, 0, r.stderr);
  t.same(
    await bundleJson(path.join(r.dir, 'out.bundle')),
    await bundleJson(path.join(flagsDir, 'a.bundle')),
    'bundle.json identical',
  );
});

t.test('flags override the file; repeatable flags add to its lists', async (t) => {
  const r = await createFrom(
    own({
      version: '1.0',
      name: 'from file',
      images: [app.ref],
      upgradeFrom: ['0.9'],
      key: keys.key,
      output: 'file.bundle',
    }),
    ['--name', 'from flag', '--image', tool.ref, '--upgrade-from', '0.8', '-o', 'flag.bundle'],
  );
  t.equal(r.code, 0, r.stderr);
  t.same(
    await listDir(r.dir),
    ['bundle.yaml', 'flag.bundle', 'flag.bundle.sha256'],
    '-o wins over output:',
  );
  const m = await bundleJson(path.join(r.dir, 'flag.bundle'));
  t.equal(m.release.name, 'from flag');
  t.equal(m.release.version, '1.0', 'a key without its flag is kept');
  t.same(refs(m), [app.ref, tool.ref].sort(), '--image adds to images:');
  t.same(m.release.upgradeFrom, ['0.8', '0.9']);
});

t.test('a release channel and version range resolve against the update graph', async (t) => {
  const r = await createFrom(
    own({
      release: {
        channel: 'stable-4.14',
        versionRange: '>=4.14.0 <4.15.0',
        updateGraph: '../graph.json',
      },
      key: keys.key,
      output: 'o.bundle',
    }),
  );
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(path.join(r.dir, 'o.bundle'));
  t.equal(
    m.release.version,
    '4.14.2',
    'the newest of the channel in range (4.14.3 is candidate only)',
  );
  t.equal(m.release.digest, rel2.digest);
  t.equal(m.release.image, rel2.digestRef, "pinned by the graph's digest");
  const exact = await createFrom(
    own({
      release: { channel: 'stable-4.14', version: '4.14.1' },
      key: keys.key,
      output: 'o.bundle',
    }),
    ['--update-graph', graphFile],
  );
  t.equal(exact.code, 0, exact.stderr);
  t.equal(
    (await bundleJson(path.join(exact.dir, 'o.bundle'))).release.digest,
    rel1.digest,
    'version: exactly, graph from --update-graph',
  );
  const none = await createFrom(
    own({
      release: { channel: 'stable-4.14', versionRange: '>=4.15.0' },
      key: keys.key,
      output: 'o.bundle',
    }),
    ['--update-graph', graphFile],
  );
  t.equal(errorCode(none.stderr), 'NOT_FOUND');
  t.match(
    none.stderr,
    /bundle\.yaml:\d+ \(release\): no version in >=4\.15\.0 in channel stable-4\.14/,
  );
  const noGraph = await createFrom(
    own({ release: { channel: 'stable-4.14' }, key: keys.key, output: 'o.bundle' }),
  );
  t.equal(errorCode(noGraph.stderr), 'INVALID_CONFIG');
  t.match(noGraph.stderr, /--update-graph FILE/);
});

const imageSet = (mirror: object, extra: object = {}) => ({
  kind: 'ImageSetConfiguration',
  apiVersion: 'mirror.openshift.io/v2alpha1',
  ...extra,
  mirror,
});

t.test('an oc-mirror v2 ImageSetConfiguration is read as is', async (t) => {
  const r = await createFrom(
    imageSet(
      {
        platform: {
          channels: [
            {
              name: 'stable-4.14',
              type: 'ocp',
              minVersion: '4.14.1',
              maxVersion: '4.14.2',
              shortestPath: true,
            },
          ],
          graph: true,
          architectures: ['amd64'],
        },
        additionalImages: [{ name: app.ref }, { name: tool.ref }],
        operators: [],
        helm: {},
      },
      { archiveSize: 4 },
    ),
    ['--update-graph', graphFile, '--key', keys.key, '-o', 'isc.bundle'],
  );
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(path.join(r.dir, 'isc.bundle'));
  t.equal(m.release.digest, rel2.digest, 'maxVersion of the channel');
  t.same(
    refs(m),
    [rel2.digestRef, `${H}/ocp/art@${cvo2.digest}`, etcd.digestRef, app.ref, tool.ref].sort(),
    'the release, its payload and additionalImages',
  );
});

t.test('fields a bundle does not carry are refused by name, nothing written', async (t) => {
  const cases: [string, object, RegExp][] = [
    [
      "an operator's targetCatalog",
      imageSet({
        additionalImages: [{ name: app.ref }],
        operators: [
          {
            catalog: `${H}/redhat/redhat-operator-index:v4.14`,
            targetCatalog: 'x/y',
            packages: [{ name: 'p' }],
          },
        ],
      }),
      /bundle\.yaml:\d+ \(mirror\.operators\[0\]\.targetCatalog\): the catalog keeps its name/,
    ],
    [
      'an HTTP helm repository',
      imageSet({
        additionalImages: [{ name: app.ref }],
        helm: {
          repositories: [
            {
              name: 'x',
              url: 'https://charts.example.com',
              charts: [{ name: 'c', version: '1.0.0' }],
            },
          ],
        },
      }),
      /\(mirror\.helm\.repositories\[0\]\.url\): https:\/\/charts\.example\.com is an HTTP chart repository/,
    ],
    [
      'a local helm chart',
      imageSet({
        additionalImages: [{ name: app.ref }],
        helm: { local: [{ name: 'c', path: './c.tgz' }] },
      }),
      /\(mirror\.helm\.local\): a chart file on disk is not carried/,
    ],
    [
      'helm in a bundle file',
      own({ images: [app.ref], helm: {} }),
      /bundle\.yaml:\d+ \(helm\): helm: is an ImageSetConfiguration's field/,
    ],
    [
      'blockedImages',
      imageSet({ additionalImages: [{ name: app.ref }], blockedImages: [{ name: 'x' }] }),
      /\(mirror\.blockedImages\)/,
    ],
    [
      'two channels',
      imageSet({ platform: { channels: [{ name: 'stable-4.14' }, { name: 'fast-4.14' }] } }),
      /\(mirror\.platform\.channels\): 2 channels/,
    ],
    [
      'an unknown ImageSetConfiguration field',
      imageSet({ additionalImages: [{ name: app.ref }], samples: [] }),
      /\(mirror\.samples\): not a field/,
    ],
    [
      'a chart by path',
      own({ images: [app.ref], charts: ['oci:./chart-layout'] }),
      /bundle\.yaml:\d+ \(charts\[0\]\): chart "oci:\.\/chart-layout" is not an OCI reference/,
    ],
    [
      'a chart without a version',
      own({ images: [app.ref], charts: [`oci://${H}/charts/demo`] }),
      /bundle\.yaml:\d+ \(charts\[0\]\): chart "oci:\/\/[^"]+" names no version/,
    ],
    [
      'an unknown bundle file field',
      own({ images: [app.ref], imagez: [] }),
      /bundle\.yaml:\d+ \(imagez\): unknown field/,
    ],
    ['a bad type', own({ images: [app.ref], level: 30 }), /\(level\): must be <= 19/],
  ];
  for (const [what, doc, want] of cases) {
    const r = await createFrom(doc, ['--key', keys.key, '-o', 'never.bundle']);
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG', what);
    t.match(r.stderr, want, `${what}: names the field`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, `${what}: one line`);
    t.same(await listDir(r.dir), ['bundle.yaml'], `${what}: nothing written`);
  }
  const v1 = await createFrom(
    { kind: 'ImageSetConfiguration', apiVersion: 'mirror.openshift.io/v1alpha2', mirror: {} },
    ['--key', keys.key, '-o', 'never.bundle'],
  );
  t.match(v1.stderr, /\(apiVersion\): oc-mirror's v1 ImageSetConfiguration is not read/);
});

t.test('--dry-run lists the images with their sizes and writes nothing', async (t) => {
  const dryCache = path.join(work, 'dry-cache');
  const doc = own({ release: rel1.ref, images: [app.ref], key: keys.key, output: 'dry.bundle' });
  const r = await createFrom(doc, ['--dry-run', '--json', '--cache', dryCache]);
  t.equal(r.code, 0, r.stderr);
  t.same(await listDir(r.dir), ['bundle.yaml'], 'no bundle');
  const plan = JSON.parse(r.stdout) as {
    release: { version: string };
    images: { reference: string; bytes: number; from: string }[];
    blobs: number;
    totalBytes: number;
  };
  t.equal(plan.release.version, '4.14.1');
  // the real bundle of the same file: each image's bytes are its blobs' sizes
  const real = await createFrom(doc);
  t.equal(real.code, 0, real.stderr);
  const m = await bundleJson(path.join(real.dir, 'dry.bundle'));
  t.same(
    plan.images.map((i) => i.reference),
    refs(m),
    'exactly the images the bundle gets',
  );
  t.equal(plan.blobs, m.blobs.length);
  t.equal(
    plan.totalBytes,
    m.blobs.reduce((s, b) => s + b.size, 0),
    "total: the blobs' bytes",
  );
  const appBytes = m.blobs
    .filter((b) =>
      [app.digest, app.manifests[0]!.config, ...app.manifests[0]!.layers].includes(b.digest),
    )
    .reduce((s, b) => s + b.size, 0);
  t.equal(
    plan.images.find((i) => i.reference === app.ref)!.bytes,
    appBytes,
    'an image: its manifest, config and layers',
  );
  t.match(
    plan.images.find((i) => i.reference === app.ref)!.from,
    /bundle\.yaml:\d+ \(images\[0\]\)/,
    'where it was asked for',
  );
  t.same(
    (await listDir(path.join(dryCache, 'blobs', 'sha256'))).filter((f) =>
      app.manifests[0]!.layers.some((l) => l.endsWith(f)),
    ),
    [],
    "the app's layer was not fetched",
  );
  const text = await createFrom(doc, ['--dry-run']);
  t.equal(text.code, 0, text.stderr);
  t.match(
    text.stdout,
    new RegExp(`${app.ref.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s+\\d+(\\.\\d+)? (B|KiB|kB)`),
    'a line per image with its size',
  );
  t.match(text.stdout, /dry run: no bundle written/);
});

t.test('bundle diff: images added, removed, changed; blobs shared and new', async (t) => {
  const a = await createFrom(
    own({ release: rel1.ref, images: [app.ref], key: keys.key, output: 'a.bundle' }),
  );
  const b = await createFrom(
    own({ release: rel2.ref, images: [tool.ref], key: keys.key, output: 'b.bundle' }),
  );
  t.equal(a.code + b.code, 0, a.stderr + b.stderr);
  const fa = path.join(a.dir, 'a.bundle');
  const fb = path.join(b.dir, 'b.bundle');
  const r = await bundle(['diff', fa, fb, '--json']);
  t.equal(r.code, 0, r.stderr);
  const d = JSON.parse(r.stdout);
  const [ma, mb] = [await bundleJson(fa), await bundleJson(fb)];
  t.same(d.from.release.version, '4.14.1');
  t.same(d.to.release.version, '4.14.2');
  t.same(
    d.images.added.map((i: { reference: string }) => i.reference),
    [tool.ref],
  );
  t.same(
    d.images.removed.map((i: { reference: string }) => i.reference),
    [app.ref],
  );
  t.same(
    d.images.changed
      .map((c: { component?: string; from: string; to: string }) => [c.component, c.from, c.to])
      .sort(),
    [
      ['cluster-version-operator', cvo1.digest, cvo2.digest],
      ['release', rel1.digest, rel2.digest],
    ],
    'the payload component and the release image, paired by component',
  );
  t.equal(d.images.unchanged, 1, 'etcd');
  const inA = new Set(ma.blobs.map((x) => x.digest));
  const shared = mb.blobs.filter((x) => inA.has(x.digest));
  t.same(d.blobs.shared, { count: shared.length, bytes: shared.reduce((s, x) => s + x.size, 0) });
  t.equal(d.blobs.added.count, mb.blobs.length - shared.length);
  t.equal(d.blobs.removed.count, ma.blobs.length - shared.length);
  const text = await bundle(['diff', fa, fb]);
  t.match(text.stdout, /images: 1 added, 1 removed, 2 changed, 1 unchanged/);
  t.match(
    text.stdout,
    new RegExp(`~ cluster-version-operator .* ${cvo1.digest} -> ${cvo2.digest}`),
  );
});

// `bundle create -f FILE` (#23): a bundle file, or an oc-mirror v2 ImageSetConfiguration as is,
// against a real docker-registry on 127.0.0.1 holding two OpenShift-shaped releases; a release
// channel resolved against a Cincinnati graph file; fields a bundle does not carry refused by
// name; --dry-run; `bundle diff`; the shipped schema and the man page's field list.
import t from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Ajv } from 'ajv';
import { stringify } from 'yaml';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles, writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { ROOT, bundle, bundleJson, errorCode, keygen, listDir } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-file-');
const keys = await keygen(work);
const H = reg.host;
const EPOCH = { SOURCE_DATE_EPOCH: '1700000000' };

const app = await pushImage({ tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }] }, `${H}/team/app:v1`);
const tool = await pushImage({ tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'tool/v': '1' }] }] }, `${H}/team/tool:v1`);
const cvo1 = await pushImage({ tag: 'cvo-1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/cvo': 'cvo 1' }] }] }, `${H}/ocp/art:cvo-1`);
const cvo2 = await pushImage({ tag: 'cvo-2', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/cvo': 'cvo 2' }] }] }, `${H}/ocp/art:cvo-2`);
const etcd = await pushImage({ tag: 'etcd', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/etcd': 'etcd' }] }] }, `${H}/ocp/art:etcd`);
const release = async (version: string, previous: string[], cvo: string) => pushImage({
  tag: version, platforms: [{ os: 'linux', architecture: 'amd64', layers: [releaseFiles({ version, previous, images: { 'cluster-version-operator': cvo, etcd: etcd.digestRef } })] }],
}, `${H}/ocp/release:${version}`);
const rel1 = await release('4.14.1', ['4.14.0'], cvo1.digestRef);
const rel2 = await release('4.14.2', ['4.14.1'], cvo2.digestRef);

// The graph service's answer for stable-4.14 (and a node of another channel), by digest.
const graphFile = path.join(work, 'graph.json');
const channels = 'io.openshift.upgrades.graph.release.channels';
await writeFile(graphFile, JSON.stringify({
  nodes: [
    { version: '4.14.1', payload: rel1.digestRef, metadata: { [channels]: 'candidate-4.14,stable-4.14' } },
    { version: '4.14.2', payload: rel2.digestRef, metadata: { [channels]: 'candidate-4.14,stable-4.14' } },
    { version: '4.14.3', payload: `${H}/ocp/release@sha256:${'0'.repeat(64)}`, metadata: { [channels]: 'candidate-4.14' } },
  ],
  edges: [[0, 1], [1, 2]],
}));

let n = 0;
/** A fresh directory with FILE (an object, written as YAML) in it, and `bundle create -f FILE ARGS` run there. */
async function createFrom(doc: object | string, args: string[] = []) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  await writeFile(file, typeof doc === 'string' ? doc : stringify(doc));
  const r = await bundle(['create', '--quiet', '--tls-verify=false', '--cache', path.join(work, 'cache'), '-f', file, ...args], { env: EPOCH, cwd: dir });
  return { ...r, dir, file };
}
const own = (fields: object) => ({ apiVersion: 'offline-bundle/v1alpha1', kind: 'Bundle', ...fields });
const refs = (m: { images: { repository: string; tag: string | null; digest: string }[] }) => m.images.map((i) => (i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`)).sort();

t.test('a bundle file gives the same bundle.json as the same flags', async (t) => {
  const flagsDir = path.join(work, 'flags');
  await mkdir(flagsDir);
  const byFlags = await bundle(['create', '--quiet', '--tls-verify=false', '--cache', path.join(work, 'cache'), '--key', keys.key, '-o', path.join(flagsDir, 'a.bundle'),
    '--release', rel2.ref, '--image', app.ref, '--image', tool.ref, '--upgrade-from', '4.13.9', '--name', 'site release'], { env: EPOCH });
  t.equal(byFlags.code, 0, byFlags.stderr);
  await writeFile(path.join(work, 'factory-copy.key'), await readFile(keys.key));
  // relative paths are the file's directory's, not the working directory's
  const r = await createFrom(own({ release: rel2.ref, images: [app.ref, tool.ref], upgradeFrom: ['4.13.9'], name: 'site release', key: '../factory-copy.key', output: 'out.bundle' }));
  t.equal(r.code, 0, r.stderr);
  t.same(await bundleJson(path.join(r.dir, 'out.bundle')), await bundleJson(path.join(flagsDir, 'a.bundle')), 'bundle.json identical');
});

t.test('flags override the file; repeatable flags add to its lists', async (t) => {
  const r = await createFrom(own({ version: '1.0', name: 'from file', images: [app.ref], upgradeFrom: ['0.9'], key: keys.key, output: 'file.bundle' }),
    ['--name', 'from flag', '--image', tool.ref, '--upgrade-from', '0.8', '-o', 'flag.bundle']);
  t.equal(r.code, 0, r.stderr);
  t.same(await listDir(r.dir), ['bundle.yaml', 'flag.bundle', 'flag.bundle.sha256'], '-o wins over output:');
  const m = await bundleJson(path.join(r.dir, 'flag.bundle'));
  t.equal(m.release.name, 'from flag');
  t.equal(m.release.version, '1.0', 'a key without its flag is kept');
  t.same(refs(m), [app.ref, tool.ref].sort(), '--image adds to images:');
  t.same(m.release.upgradeFrom, ['0.8', '0.9']);
});

t.test('a release channel and version range resolve against the update graph', async (t) => {
  const r = await createFrom(own({ release: { channel: 'stable-4.14', versionRange: '>=4.14.0 <4.15.0', updateGraph: '../graph.json' }, key: keys.key, output: 'o.bundle' }));
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(path.join(r.dir, 'o.bundle'));
  t.equal(m.release.version, '4.14.2', 'the newest of the channel in range (4.14.3 is candidate only)');
  t.equal(m.release.digest, rel2.digest);
  t.equal(m.release.image, rel2.digestRef, 'pinned by the graph\'s digest');
  const exact = await createFrom(own({ release: { channel: 'stable-4.14', version: '4.14.1' }, key: keys.key, output: 'o.bundle' }), ['--update-graph', graphFile]);
  t.equal(exact.code, 0, exact.stderr);
  t.equal((await bundleJson(path.join(exact.dir, 'o.bundle'))).release.digest, rel1.digest, 'version: exactly, graph from --update-graph');
  const none = await createFrom(own({ release: { channel: 'stable-4.14', versionRange: '>=4.15.0' }, key: keys.key, output: 'o.bundle' }), ['--update-graph', graphFile]);
  t.equal(errorCode(none.stderr), 'NOT_FOUND');
  t.match(none.stderr, /bundle\.yaml:\d+ \(release\): no version in >=4\.15\.0 in channel stable-4\.14/);
  const noGraph = await createFrom(own({ release: { channel: 'stable-4.14' }, key: keys.key, output: 'o.bundle' }));
  t.equal(errorCode(noGraph.stderr), 'INVALID_CONFIG');
  t.match(noGraph.stderr, /--update-graph FILE/);
});

const imageSet = (mirror: object, extra: object = {}) => ({ kind: 'ImageSetConfiguration', apiVersion: 'mirror.openshift.io/v2alpha1', ...extra, mirror });

t.test('an oc-mirror v2 ImageSetConfiguration is read as is', async (t) => {
  const r = await createFrom(imageSet({
    platform: { channels: [{ name: 'stable-4.14', type: 'ocp', minVersion: '4.14.1', maxVersion: '4.14.2', shortestPath: true }], graph: true, architectures: ['amd64'] },
    additionalImages: [{ name: app.ref }, { name: tool.ref }],
    operators: [],
    helm: {},
  }, { archiveSize: 4 }), ['--update-graph', graphFile, '--key', keys.key, '-o', 'isc.bundle']);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(path.join(r.dir, 'isc.bundle'));
  t.equal(m.release.digest, rel2.digest, 'maxVersion of the channel');
  t.same(refs(m), [rel2.digestRef, `${H}/ocp/art@${cvo2.digest}`, etcd.digestRef, app.ref, tool.ref].sort(), 'the release, its payload and additionalImages');
});

t.test('fields a bundle does not carry are refused by name, nothing written', async (t) => {
  const cases: [string, object, RegExp][] = [
    ['an operator\'s targetCatalog', imageSet({ additionalImages: [{ name: app.ref }], operators: [{ catalog: `${H}/redhat/redhat-operator-index:v4.14`, targetCatalog: 'x/y', packages: [{ name: 'p' }] }] }), /bundle\.yaml:\d+ \(mirror\.operators\[0\]\.targetCatalog\): the catalog keeps its name/],
    ['helm', imageSet({ additionalImages: [{ name: app.ref }], helm: { repositories: [{ name: 'x', url: 'https://charts.example.com' }] } }), /\(mirror\.helm\): Helm charts/],
    ['blockedImages', imageSet({ additionalImages: [{ name: app.ref }], blockedImages: [{ name: 'x' }] }), /\(mirror\.blockedImages\)/],
    ['two channels', imageSet({ platform: { channels: [{ name: 'stable-4.14' }, { name: 'fast-4.14' }] } }), /\(mirror\.platform\.channels\): 2 channels/],
    ['an unknown ImageSetConfiguration field', imageSet({ additionalImages: [{ name: app.ref }], samples: [] }), /\(mirror\.samples\): not a field/],
    ['charts of a bundle file', own({ images: [app.ref], charts: [{ name: 'x' }] }), /bundle\.yaml:\d+ \(charts\): Helm charts are not carried/],
    ['an unknown bundle file field', own({ images: [app.ref], imagez: [] }), /bundle\.yaml:\d+ \(imagez\): unknown field/],
    ['a bad type', own({ images: [app.ref], level: 30 }), /\(level\): must be <= 19/],
  ];
  for (const [what, doc, want] of cases) {
    const r = await createFrom(doc, ['--key', keys.key, '-o', 'never.bundle']);
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG', what);
    t.match(r.stderr, want, `${what}: names the field`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, `${what}: one line`);
    t.same(await listDir(r.dir), ['bundle.yaml'], `${what}: nothing written`);
  }
  const v1 = await createFrom({ kind: 'ImageSetConfiguration', apiVersion: 'mirror.openshift.io/v1alpha2', mirror: {} }, ['--key', keys.key, '-o', 'never.bundle']);
  t.match(v1.stderr, /\(apiVersion\): oc-mirror's v1 ImageSetConfiguration is not read/);
});

t.test('--dry-run lists the images with their sizes and writes nothing', async (t) => {
  const dryCache = path.join(work, 'dry-cache');
  const doc = own({ release: rel1.ref, images: [app.ref], key: keys.key, output: 'dry.bundle' });
  const r = await createFrom(doc, ['--dry-run', '--json', '--cache', dryCache]);
  t.equal(r.code, 0, r.stderr);
  t.same(await listDir(r.dir), ['bundle.yaml'], 'no bundle');
  const plan = JSON.parse(r.stdout) as { release: { version: string }; images: { reference: string; bytes: number; from: string }[]; blobs: number; totalBytes: number };
  t.equal(plan.release.version, '4.14.1');
  // the real bundle of the same file: each image's bytes are its blobs' sizes
  const real = await createFrom(doc);
  t.equal(real.code, 0, real.stderr);
  const m = await bundleJson(path.join(real.dir, 'dry.bundle'));
  t.same(plan.images.map((i) => i.reference), refs(m), 'exactly the images the bundle gets');
  t.equal(plan.blobs, m.blobs.length);
  t.equal(plan.totalBytes, m.blobs.reduce((s, b) => s + b.size, 0), 'total: the blobs\' bytes');
  const appBytes = m.blobs.filter((b) => [app.digest, app.manifests[0]!.config, ...app.manifests[0]!.layers].includes(b.digest)).reduce((s, b) => s + b.size, 0);
  t.equal(plan.images.find((i) => i.reference === app.ref)!.bytes, appBytes, 'an image: its manifest, config and layers');
  t.match(plan.images.find((i) => i.reference === app.ref)!.from, /bundle\.yaml:\d+ \(images\[0\]\)/, 'where it was asked for');
  t.same((await listDir(path.join(dryCache, 'blobs', 'sha256'))).filter((f) => app.manifests[0]!.layers.some((l) => l.endsWith(f))), [], 'the app\'s layer was not fetched');
  const text = await createFrom(doc, ['--dry-run']);
  t.equal(text.code, 0, text.stderr);
  t.match(text.stdout, new RegExp(`${app.ref.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s+\\d+(\\.\\d+)? (B|KiB|kB)`), 'a line per image with its size');
  t.match(text.stdout, /dry run: no bundle written/);
});

t.test('bundle diff: images added, removed, changed; blobs shared and new', async (t) => {
  const a = await createFrom(own({ release: rel1.ref, images: [app.ref], key: keys.key, output: 'a.bundle' }));
  const b = await createFrom(own({ release: rel2.ref, images: [tool.ref], key: keys.key, output: 'b.bundle' }));
  t.equal(a.code + b.code, 0, a.stderr + b.stderr);
  const fa = path.join(a.dir, 'a.bundle');
  const fb = path.join(b.dir, 'b.bundle');
  const r = await bundle(['diff', fa, fb, '--json']);
  t.equal(r.code, 0, r.stderr);
  const d = JSON.parse(r.stdout);
  const [ma, mb] = [await bundleJson(fa), await bundleJson(fb)];
  t.same(d.from.release.version, '4.14.1');
  t.same(d.to.release.version, '4.14.2');
  t.same(d.images.added.map((i: { reference: string }) => i.reference), [tool.ref]);
  t.same(d.images.removed.map((i: { reference: string }) => i.reference), [app.ref]);
  t.same(d.images.changed.map((c: { component?: string; from: string; to: string }) => [c.component, c.from, c.to]).sort(), [
    ['cluster-version-operator', cvo1.digest, cvo2.digest],
    ['release', rel1.digest, rel2.digest],
  ], 'the payload component and the release image, paired by component');
  t.equal(d.images.unchanged, 1, 'etcd');
  const inA = new Set(ma.blobs.map((x) => x.digest));
  const shared = mb.blobs.filter((x) => inA.has(x.digest));
  t.same(d.blobs.shared, { count: shared.length, bytes: shared.reduce((s, x) => s + x.size, 0) });
  t.equal(d.blobs.added.count, mb.blobs.length - shared.length);
  t.equal(d.blobs.removed.count, ma.blobs.length - shared.length);
  const text = await bundle(['diff', fa, fb]);
  t.match(text.stdout, /images: 1 added, 1 removed, 2 changed, 1 unchanged/);
  t.match(text.stdout, new RegExp(`~ cluster-version-operator .* ${cvo1.digest} -> ${cvo2.digest}`));
});

t.test('the shipped schema is the one the tool checks with, and the man page lists every field', async (t) => {
  const printed = await bundle(['schema']);
  t.equal(await readFile(path.join(ROOT, 'builder', 'bundle.schema.json'), 'utf8'), printed.stdout, 'builder/bundle.schema.json is `bundle schema`');
  const validate = new Ajv({ strict: true, strictRequired: false }).compile(JSON.parse(printed.stdout));
  t.ok(validate(own({ release: { channel: 'stable-4.14', versionRange: '>=4.14.0' }, images: ['x'], key: 'k', level: 3 })), 'accepts a good file');
  t.notOk(validate(own({ charts: [] })), 'refuses what the tool refuses');
  t.notOk(validate(own({ operators: [{ catalog: 'c' }] })), 'an operator needs its packages');
  const man = (await bundle(['man'])).stdout;
  const fields = [...printed.stdout.matchAll(/^ {4}"([a-zA-Z]+)": \{/gm)].map((m) => m[1]!);
  t.ok(fields.length > 20);
  for (const f of [...fields, 'release.channel', 'release.versionRange', 'release.updateGraph']) t.match(man, new RegExp(`^\\.B ${f.replace('.', '\\.')}$`, 'm'), `man page: ${f}`);
});

t.test('limits: a bundle file over 4 MiB, an alias bomb, a graph over 32 MiB, a graph that is not one', async (t) => {
  const big = await createFrom(`apiVersion: offline-bundle/v1alpha1\nkind: Bundle\n#${'x'.repeat(4 * 1024 * 1024)}\n`, ['--key', keys.key, '-o', 'o.bundle']);
  t.equal(errorCode(big.stderr), 'FILE_TOO_LARGE', 'bundle file');
  const laughs = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]', ...Array.from({ length: 8 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10).fill(`*${String.fromCharCode(97 + i)}`).join(',')}]`)].join('\n');
  const bomb = await createFrom(`apiVersion: offline-bundle/v1alpha1\nkind: Bundle\n${laughs}\n`, ['--key', keys.key, '-o', 'o.bundle']);
  t.equal(errorCode(bomb.stderr), 'INVALID_CONFIG', 'alias bomb');
  t.match(bomb.stderr, /alias/i);
  const hugeGraph = path.join(work, 'huge-graph.json');
  await writeFile(hugeGraph, `{"nodes":[],"pad":"${'x'.repeat(32 * 1024 * 1024)}"}`);
  const doc = own({ release: { channel: 'stable-4.14' }, key: keys.key, output: 'o.bundle' });
  const huge = await createFrom(doc, ['--update-graph', hugeGraph]);
  t.equal(errorCode(huge.stderr), 'FILE_TOO_LARGE', 'graph');
  const notGraph = path.join(work, 'not-graph.json');
  await writeFile(notGraph, JSON.stringify({ nodes: [{ version: '4.14.1', payload: 'x' }], edges: [[0, 5]] }));
  const bad = await createFrom(doc, ['--update-graph', notGraph]);
  t.equal(errorCode(bad.stderr), 'INVALID_CONFIG');
  t.match(bad.stderr, /is not an update graph: edges\[0\] is not a pair of node indexes/);
});

t.test('a missing image names the line or flag that asked for it, and whether the repository or the tag is unknown', async (t) => {
  const tag = await createFrom(own({ version: '1', images: [app.ref, `${H}/team/app:v9`], key: keys.key, output: 'o.bundle' }));
  t.equal(errorCode(tag.stderr), 'NOT_FOUND');
  t.match(tag.stderr, /bundle\.yaml:\d+ \(images\[1\]\): manifest v9 not found in [^ ]+\/team\/app \(the repository exists; the tag or digest does not\)/);
  const repo = await createFrom(own({ version: '1', key: keys.key, output: 'o.bundle' }), ['--image', app.ref, '--image', `${H}/team/nothing:v1`]);
  t.equal(errorCode(repo.stderr), 'NOT_FOUND');
  t.match(repo.stderr, /--image #2: manifest v1 not found: the repository [^ ]+\/team\/nothing is unknown to the registry/);
  t.same(await listDir(repo.dir), ['bundle.yaml'], 'nothing written');
});

t.test('a missing key file is one plain sentence, from the file or the flag', async (t) => {
  const r = await createFrom(own({ version: '1', images: [app.ref], key: 'nowhere.key', output: 'o.bundle' }));
  t.equal(errorCode(r.stderr), 'KEY_ERROR');
  t.match(r.stderr, /the key file \/.*\/nowhere\.key does not exist: check the path/);
  t.notMatch(r.stderr, /ENOENT/);
});

t.test('--update-graph without a release named by channel is refused', async (t) => {
  const noFile = await bundle(['create', '--quiet', '--version', '1', '--image', app.ref, '--update-graph', graphFile, '--key', keys.key, '-o', path.join(work, 'never.bundle')]);
  t.equal(errorCode(noFile.stderr), 'INVALID_CONFIG');
  t.match(noFile.stderr, /--update-graph goes with -f/);
  const pinned = await createFrom(own({ release: rel1.ref, key: keys.key, output: 'o.bundle' }), ['--update-graph', graphFile]);
  t.equal(errorCode(pinned.stderr), 'INVALID_CONFIG');
  t.same(await listDir(pinned.dir), ['bundle.yaml']);
});

t.test('many problems: the first 20 named, then how many more (each located once, not by a search per problem)', async (t) => {
  const unknown = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`unknown${i}`, i]));
  for (const [what, doc, re] of [
    ['bundle file', own({ images: [app.ref], ...unknown }), /5000 problems in the bundle file .*unknown19\): unknown field[^;]*; and 4980 more$/],
    ['ImageSetConfiguration', { kind: 'ImageSetConfiguration', apiVersion: 'mirror.openshift.io/v2alpha1', mirror: { additionalImages: [{ name: app.ref }] }, ...unknown }, /5000 fields of the ImageSetConfiguration .*\(unknown19\): not a field[^;]*; and 4980 more$/],
  ] as const) {
    const r = await createFrom(doc, ['--key', keys.key, '-o', 'o.bundle']);
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG', what);
    t.match(r.stderr.trimEnd(), re, `${what}: 20 problems and a count`);
    t.notMatch(r.stderr, /unknown20\)/, `${what}: the 21st not listed`);
  }
  // keys are checked unique in one pass (the yaml library's own check is quadratic): still refused
  const dup = await createFrom('apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nimages: [x]\nimages: [y]\n', ['--key', keys.key, '-o', 'o.bundle']);
  t.match(dup.stderr, /bundle\.yaml:4 is not valid YAML: the key "images" appears twice in one mapping/);
});

t.test('a key whose value is a block mapping or list is located on the key\'s line', async (t) => {
  const text = 'apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nimages:\n  - x\ncharts:\n  - name: c\nimagez:\n  a: 1\n';
  const refused = await createFrom(text, ['--key', keys.key, '-o', 'o.bundle']);
  t.match(refused.stderr, /bundle\.yaml:5 \(charts\): Helm charts/, 'charts: is line 5');
  const unknown = await createFrom(text.replace('charts:\n  - name: c\n', ''), ['--key', keys.key, '-o', 'o.bundle']);
  t.match(unknown.stderr, /bundle\.yaml:5 \(imagez\): unknown field/, 'imagez: is line 5');
});

t.test('a graph with two payloads for one version, many versions left out, several YAML documents: one plain line each', async (t) => {
  const dup = path.join(work, 'dup-graph.json');
  await writeFile(dup, JSON.stringify({ nodes: [{ version: '4.14.1', payload: rel1.digestRef }, { version: '4.14.1', payload: rel2.digestRef }], edges: [] }));
  const twice = await createFrom(own({ release: { channel: 'stable-4.14' }, key: keys.key, output: 'o.bundle' }), ['--update-graph', dup]);
  t.equal(errorCode(twice.stderr), 'INVALID_CONFIG');
  t.match(twice.stderr, /nodes\[0\] and nodes\[1\] give version 4\.14\.1 different payloads/);
  const wide = path.join(work, 'wide-graph.json');
  await writeFile(wide, JSON.stringify({ nodes: [{ version: '4.14.2', payload: rel2.digestRef }, ...Array.from({ length: 40 }, (_, i) => ({ version: `4.13.${i}`, payload: rel1.digestRef }))], edges: [] }));
  const rangeFile = path.join(work, 'range.yaml');
  await writeFile(rangeFile, stringify(own({ release: { channel: 'stable-4.14', versionRange: '>=4.13.0' }, images: [app.ref] })));
  const range = await bundle(['create', '--tls-verify=false', '--cache', path.join(work, 'cache'), '-f', rangeFile, '--update-graph', wide, '--dry-run'], { env: EPOCH });
  t.equal(range.code, 0, range.stderr);
  t.match(range.stdout + range.stderr, /warning: a bundle carries one release, the newest in range: (4\.13\.\d+, ){9}4\.13\.\d+ and 30 more left out/);
  const docs = await createFrom('apiVersion: offline-bundle/v1alpha1\nkind: Bundle\n---\nimages: [x]\n', ['--key', keys.key, '-o', 'o.bundle']);
  t.match(docs.stderr, /bundle\.yaml:\d+ is not valid YAML: it holds several documents \(---\); a bundle file is one/);
  t.notMatch(docs.stderr, /parseAllDocuments/);
});

t.test('relative paths of release: (a string) and of imagesFile:\'s lines are the file\'s directory\'s, from any working directory', async (t) => {
  const dir = path.join(work, 'relative');
  await mkdir(path.join(dir, 'lists'), { recursive: true });
  await writeImageLayout(path.join(dir, 'release-layout'), { tag: '4.14.1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [releaseFiles({ version: '4.14.1', previous: [], images: { 'cluster-version-operator': cvo1.digestRef, etcd: etcd.digestRef } })] }] });
  await writeImageLayout(path.join(dir, 'app-layout'), { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': 'from a layout' }] }] });
  await writeFile(path.join(dir, 'lists', 'images.txt'), 'oci:app-layout:v1=registry.example.com/team/local:v1\n');
  await writeFile(path.join(dir, 'bundle.yaml'), stringify(own({ release: 'oci:release-layout:4.14.1=registry.example.com/ocp/release:4.14.1', imagesFile: 'lists/images.txt' })));
  await writeFile(path.join(dir, 'isc.yaml'), stringify({ kind: 'ImageSetConfiguration', apiVersion: 'mirror.openshift.io/v2alpha1', mirror: { platform: { release: 'oci:release-layout:4.14.1=registry.example.com/ocp/release:4.14.1' } } }));
  for (const file of ['bundle.yaml', 'isc.yaml']) {
    const r = await bundle(['create', '--tls-verify=false', '--cache', path.join(work, 'cache'), '-f', path.join(dir, file), '--dry-run', '--json'], { env: EPOCH, cwd: work });
    t.equal(r.code, 0, `${file}: ${r.stderr}`);
    t.match(r.stdout, /4\.14\.1/, `${file}: the release from the layout beside the file`);
    if (file === 'bundle.yaml') t.match(r.stdout, /registry\.example\.com\/team\/local:v1/, 'the images file\'s line from the file\'s directory');
  }
});

t.test('a value from the file is named by its key, not blamed on a flag; help says what -f and --dry-run do', async (t) => {
  const r = await createFrom(own({ version: '1.0/evil', images: [app.ref], upgradeFrom: ['x y'] }), ['--key', keys.key, '-o', 'o.bundle']);
  t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
  t.match(r.stderr, /bundle\.yaml: (version "1\.0\/evil" is not a valid release version|upgradeFrom\[0\] "x y" is not a valid version)/);
  t.notMatch(r.stderr, /--version|--upgrade-from/, 'no flag named');
  const flag = await createFrom(own({ images: [app.ref] }), ['--key', keys.key, '-o', 'o.bundle', '--version', '1.0/evil']);
  t.match(flag.stderr, /--version "1\.0\/evil" is not a valid release version/, 'a flag is named as a flag');
  const help = (await bundle(['create', '--help'])).stdout.replace(/\s+/g, ' ');
  t.match(help, /--dry-run .*the cache gets the manifests, the release image's layers .* each operator catalog image's layers/);
  t.match(help, /Examples:.*bundle create -f bundle\.yaml --dry-run/);
  t.match((await bundle(['--help'])).stdout.replace(/\s+/g, ' '), /bundle create -f bundle\.yaml.*--dry-run/);
});

t.test('bundle diff or catalog-sources of a path that does not exist: one line naming it', async (t) => {
  for (const args of [['diff', path.join(work, 'nope-a.bundle'), path.join(work, 'nope-b.bundle')], ['catalog-sources', path.join(work, 'nope-a.bundle')]]) {
    const r = await bundle(args);
    t.equal(errorCode(r.stderr), 'IO_ERROR', args[0]);
    t.match(r.stderr.trimEnd(), /nope-a\.bundle does not exist: give the path of a \.bundle file$/, args[0]);
    t.notMatch(r.stderr, /ENOENT/);
  }
});

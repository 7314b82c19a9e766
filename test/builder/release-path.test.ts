// An EUS-to-EUS upgrade from one stick (#43): three generated OpenShift-shaped releases (4.14.30,
// 4.15.40, 4.16.2) in a real docker-registry, and a saved update graph with no edge from 4.14.30
// to 4.16.2. `bundle create -f` with release.from carries the graph's path through 4.15.40: both
// payloads, the images they share once, both releases' signatures, the path in the signed head;
// inspect, --dry-run and diff show it; a graph without the intermediate's edge is refused in one line.
import t from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { loadTrust, readReleaseSignatures, withBundle } from '@offline-bundle/format';
import path from 'node:path';
import { stringify } from 'yaml';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  ROOT,
  bundle,
  bundleJson,
  errorCode,
  keygen,
  refNames,
  run,
  type BundleJson,
} from './lib.js';
import { releaseKey, signRelease } from './release-signing.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-path-');
const keys = await keygen(work);
const H = reg.host;
const cache = path.join(work, 'cache');

// every component shares the base layer; etcd is the same image in all three releases
const base = { 'usr/share/base/os-release': 'ID=rhcos\n' };
const comp = (name: string, content: string) =>
  pushImage(
    {
      tag: name,
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [base, { [`usr/bin/${name}`]: content }] },
      ],
    },
    `${H}/ocp/art:${name}`,
  );
// one at a time: parallel pushes into one repository race in docker-registry
const cvo14 = await comp('cvo-14', 'cvo 4.14');
const cvo15 = await comp('cvo-15', 'cvo 4.15');
const cvo16 = await comp('cvo-16', 'cvo 4.16');
const etcd = await comp('etcd', 'etcd 3.5');
const mco15 = await comp('mco-15', 'mco 4.15');
const mco16 = await comp('mco-16', 'mco 4.16');
type Pushed = Awaited<ReturnType<typeof comp>>;
const release = (version: string, previous: string[], images: Record<string, Pushed>) =>
  pushImage(
    {
      tag: version,
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            releaseFiles({
              version,
              previous,
              images: Object.fromEntries(Object.entries(images).map(([k, v]) => [k, v.digestRef])),
            }),
          ],
        },
      ],
    },
    `${H}/ocp/release:${version}`,
  );
const r14 = await release('4.14.30', [], { 'cluster-version-operator': cvo14, etcd });
const r15 = await release('4.15.40', ['4.14.30'], {
  'cluster-version-operator': cvo15,
  etcd,
  'machine-config-operator': mco15,
});
// its release-metadata still names 4.14.30, an edge the graph has pulled: the graph decides
const r16 = await release('4.16.2', ['4.15.40', '4.14.30'], {
  'cluster-version-operator': cvo16,
  etcd,
  'machine-config-operator': mco16,
});

const channels = 'io.openshift.upgrades.graph.release.channels';
/** The graph service's answer for eus-4.16 with these edges (node 0: 4.14.30, 1: 4.15.40, 2: 4.16.2). */
async function graph(name: string, edges: [number, number][]): Promise<string> {
  const file = path.join(work, name);
  await writeFile(
    file,
    JSON.stringify({
      nodes: [
        [r14, '4.14.30'],
        [r15, '4.15.40'],
        [r16, '4.16.2'],
      ].map(([r, version]) => ({
        version,
        payload: (r as Pushed).digestRef,
        metadata: { [channels]: 'eus-4.16' },
      })),
      edges,
    }),
  );
  return file;
}
const fullGraph = await graph('graph.json', [
  [0, 1],
  [1, 2],
]);
const noHopGraph = await graph('graph-no-hop.json', [[0, 1]]);

const signing = await releaseKey();
const keyring = path.join(work, 'release.asc');
await writeFile(keyring, signing.armored);
const sig = async (r: Pushed, name: string) => {
  const file = path.join(work, name);
  await writeFile(file, await signRelease(signing, r.ref, r.digest));
  return file;
};
const [sig15, sig16, sig14] = await Promise.all([
  sig(r15, 'sig-4.15'),
  sig(r16, 'sig-4.16'),
  sig(r14, 'sig-4.14'),
]);

let n = 0;
/** `bundle create -f FILE ARGS` in a fresh directory, FILE written as YAML from `doc`. */
async function createFrom(doc: object, args: string[]) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  await writeFile(file, stringify(doc));
  const r = await bundle(
    ['create', '--quiet', '--tls-verify=false', '--cache', cache, '-f', file, ...args],
    { cwd: dir },
  );
  return { ...r, dir, file, output: path.join(dir, 'path.bundle') };
}
const eus = (graphFile: string, extra: object = {}) => ({
  apiVersion: 'offline-bundle/v1alpha1',
  kind: 'Bundle',
  release: {
    channel: 'eus-4.16',
    version: '4.16.2',
    from: '4.14.30',
    updateGraph: graphFile,
    ...extra,
  },
});

const blobsOf = (...images: Pushed[]) =>
  new Set(images.flatMap((i) => [i.digest, i.manifests[0]!.config, ...i.manifests[0]!.layers]));

const built = await createFrom(eus(fullGraph), [
  '--release-signature',
  sig15,
  '--release-signature',
  sig16,
  '--release-keyring',
  keyring,
  '--key',
  keys.key,
  '-o',
  'path.bundle',
]);
let m: BundleJson & {
  release: BundleJson['release'] & {
    via?: any[];
    adds?: { images: number; bytes: number };
    signatures?: { digest: string }[];
    payload?: string[];
  };
};

t.test('the bundle for the path holds both payloads, what they share once', async (t) => {
  t.equal(built.code, 0, built.stderr);
  m = (await bundleJson(built.output)) as typeof m;
  t.match(
    m.release,
    { version: '4.16.2', digest: r16.digest, upgradeFrom: ['4.15.40'] },
    'the final release where older readers read it; not from 4.14.30 alone, which the graph has no edge for',
  );
  t.equal(m.release.via?.length, 1, 'one release before it');
  t.match(
    m.release.via![0],
    { version: '4.15.40', digest: r15.digest, image: r15.digestRef, upgradeFrom: ['4.14.30'] },
    'the intermediate, from the running version',
  );
  const images = [r15, r16, cvo15, cvo16, etcd, mco15, mco16];
  t.same(
    m.images.map((i) => i.digest).sort(),
    images.map((i) => i.digest).sort(),
    'each image once: etcd, in both payloads, is one entry',
  );
  t.equal(
    new Set(await refNames(built.output)).size,
    images.length,
    'one index.json name per image',
  );
  const layout = blobsOf(...images);
  const sigBlobs = m.blobs.filter((b) => !layout.has(b.digest));
  t.equal(
    m.blobs.length,
    layout.size + 2,
    `every blob once (${layout.size} of the images, of which the shared base layer is one), and two signatures`,
  );
  t.equal(sigBlobs.length, 2);
  t.equal(m.release.via![0].signatures?.length, 1, "the intermediate's signature");
  t.equal(m.release.signatures?.length, 1, "the final's signature");
  t.not(m.release.via![0].signatures[0].digest, m.release.signatures![0]!.digest, 'each its own');
  // what the second hop adds: its images not in the first, and their blobs' bytes the first lacks
  const size = new Map(m.blobs.map((b) => [b.digest, b.size]));
  const first = blobsOf(r15, cvo15, etcd, mco15);
  const adds = [...blobsOf(r16, cvo16, etcd, mco16)]
    .filter((d) => !first.has(d))
    .reduce((s, d) => s + size.get(d)!, 0);
  t.same(
    m.release.via![0].adds,
    { images: 4, bytes: [...first].reduce((s, d) => s + size.get(d)!, 0) },
    'the first hop: its whole payload',
  );
  t.same(
    m.release.adds,
    { images: 3, bytes: adds },
    '4.16.2 adds its release image, cvo and mco, not etcd or the base layer',
  );
  // which images each release's payload holds, so the cluster can pin each release apart
  const digests = (...images: Pushed[]) => images.map((i) => i.digest).sort();
  t.same(
    m.release.via![0].payload,
    digests(r15, cvo15, etcd, mco15),
    '4.15.40: its release image and the images its image-references names',
  );
  t.same(m.release.payload, digests(r16, cvo16, etcd, mco16), '4.16.2: its own, etcd in both');
  // what the cluster side hands over per hop: each release's signatures, read and checked
  const read = await withBundle(built.output, async (s) =>
    readReleaseSignatures(s, await loadTrust([keys.pub])),
  );
  t.same(
    read.path.map((h) => [h.version, h.digest]),
    [
      ['4.15.40', r15.digest],
      ['4.16.2', r16.digest],
    ],
    'readReleaseSignatures: the path in order',
  );
  t.ok(
    read.path[0]!.signatures[0]!.bytes.equals(await readFile(sig15)),
    "the intermediate's own signature bytes",
  );
  t.ok(read.path[1]!.signatures[0]!.bytes.equals(await readFile(sig16)), "the final's");
  t.same(read.signatures, read.path[1]!.signatures, "signatures stays the final release's");
  const verified = await bundle(['verify', '--quiet', '--key', keys.pub, built.output]);
  t.equal(verified.code, 0, verified.stderr);
  // the agents in the field (0.1.0's reader) read it as the final release alone: nothing refused
  const frozen = await run(process.execPath, [
    path.join(ROOT, 'test', 'fixtures', 'frozen-reader', 'reader-0b1c790.mjs'),
    'verify',
    built.output,
    keys.pub,
  ]);
  t.match(
    JSON.parse(frozen.stdout),
    { ok: true, images: images.length },
    `the previous release's reader reads it: ${frozen.stderr}`,
  );
});

t.test('inspect names the path and what the second hop adds', async (t) => {
  const text = await bundle(['inspect', built.output]);
  t.equal(text.code, 0, text.stderr);
  t.match(
    text.stdout,
    /upgrades from: 4\.14\.30 \(through the path; 4\.16\.2 alone from 4\.15\.40\)/,
  );
  t.match(
    text.stdout,
    /path: +4\.14\.30 → 4\.15\.40 → 4\.16\.2 \(2 releases carried, each payload once\)/,
  );
  t.match(
    text.stdout,
    /4\.15\.40: 4 images, [^;\n]*; 1 release signature\n/,
    'each release with its own signatures',
  );
  t.match(text.stdout, /4\.16\.2 adds 3 images, .* over 4\.15\.40/);
  const json = JSON.parse((await bundle(['inspect', '--json', built.output])).stdout);
  t.same(json.path.from, ['4.14.30']);
  t.same(
    json.path.releases.map((r: { version: string }) => r.version),
    ['4.15.40', '4.16.2'],
  );
  t.same(json.path.releases[1].adds, m.release.adds);
});

t.test('--dry-run and diff -f show the path', async (t) => {
  const dry = await createFrom(eus(fullGraph), ['--dry-run']);
  t.equal(dry.code, 0, dry.stderr);
  t.match(dry.stdout, /^path: 4\.14\.30 → 4\.15\.40 → 4\.16\.2/m);
  t.match(dry.stdout, /4\.16\.2 adds 3 images, .* over 4\.15\.40/);
  const json = JSON.parse((await createFrom(eus(fullGraph), ['--dry-run', '--json'])).stdout);
  t.same(
    json.release.path.releases.map((r: { version: string; adds: unknown }) => [r.version, r.adds]),
    [
      ['4.15.40', m.release.via![0].adds],
      ['4.16.2', m.release.adds],
    ],
    'the same figures the bundle records',
  );
  const diff = await bundle([
    'diff',
    '--quiet',
    '--tls-verify=false',
    '--cache',
    cache,
    '-f',
    dry.file,
    built.output,
  ]);
  t.equal(diff.code, 0, diff.stderr);
  t.match(diff.stdout, /path \(A\): 4\.14\.30 → 4\.15\.40 → 4\.16\.2/);
  t.match(diff.stdout, /path \(B\): 4\.14\.30 → 4\.15\.40 → 4\.16\.2/);
  t.match(diff.stdout, /images: 0 added, 0 removed, 0 changed, 7 unchanged/);
});

t.test('an ImageSetConfiguration channel with shortestPath is the same path', async (t) => {
  const isc = {
    apiVersion: 'mirror.openshift.io/v2alpha1',
    kind: 'ImageSetConfiguration',
    mirror: {
      platform: {
        channels: [
          {
            name: 'eus-4.16',
            type: 'ocp',
            minVersion: '4.14.30',
            maxVersion: '4.16.2',
            shortestPath: true,
          },
        ],
      },
    },
  };
  const r = await createFrom(isc, ['--update-graph', fullGraph, '--dry-run', '--json']);
  t.equal(r.code, 0, r.stderr);
  t.same(
    JSON.parse(r.stdout).release.path.releases.map((x: { version: string }) => x.version),
    ['4.15.40', '4.16.2'],
  );
});

t.test(
  'a path the graph does not have is refused in one line, naming the missing edge',
  async (t) => {
    const r = await createFrom(eus(noHopGraph), ['--dry-run']);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'NOT_FOUND');
    t.equal(r.stderr.trimEnd().split('\n').length, 1, r.stderr);
    t.match(
      r.stderr,
      /no path from 4\.14\.30 to 4\.16\.2 in at most 4 hops: it lacks an edge from 4\.15\.40, 4\.14\.30 \(what 4\.14\.30 reaches\) to 4\.16\.2 \(what reaches 4\.16\.2\)/,
    );
    const unknown = await createFrom(eus(fullGraph, { from: '4.13.9' }), ['--dry-run']);
    t.match(unknown.stderr, /4\.13\.9 \(the version the cluster runs\) is not in the update graph/);
    t.equal(errorCode(unknown.stderr), 'NOT_FOUND');
  },
);

t.test(
  'each hop of the path is a release of the channel, not a newer one only another channel has',
  async (t) => {
    const file = path.join(work, 'graph-candidate.json');
    const nodes = [
      [r14, '4.14.30', 'eus-4.16'],
      [r15, '4.15.40', 'eus-4.16'],
      [r16, '4.16.2', 'eus-4.16'],
      [r15, '4.15.41', 'candidate-4.15'],
    ].map(([r, version, channel]) => ({
      version,
      payload: (r as Pushed).digestRef,
      metadata: { [channels]: channel },
    }));
    await writeFile(
      file,
      JSON.stringify({
        nodes,
        edges: [
          [0, 1],
          [0, 3],
          [1, 2],
          [3, 2],
        ],
      }),
    );
    const r = await createFrom(eus(file), ['--dry-run', '--json']);
    t.equal(r.code, 0, r.stderr);
    t.same(
      JSON.parse(r.stdout).release.path.releases.map((x: { version: string }) => x.version),
      ['4.15.40', '4.16.2'],
      'through 4.15.40 (eus-4.16), not the newer 4.15.41 (candidate-4.15 only)',
    );
  },
);

t.test(
  '--release-from overrides the file; a one-hop path is a bundle of one release',
  async (t) => {
    const r = await createFrom(eus(fullGraph), [
      '--release-from',
      '4.15.40',
      '--dry-run',
      '--json',
    ]);
    t.equal(r.code, 0, r.stderr);
    const plan = JSON.parse(r.stdout);
    t.equal(plan.release.path, undefined, 'no path: 4.15.40 upgrades straight to 4.16.2');
    t.equal(plan.images.length, 4, '4.16.2 alone');
    const flagOnly = await bundle([
      'create',
      '--release',
      r16.ref,
      '--release-from',
      '4.14.30',
      '--dry-run',
    ]);
    t.match(flagOnly.stderr, /--release-from goes with -f/);
  },
);

t.test(
  'signatures for some releases of the path but not all are refused, naming the unsigned one',
  async (t) => {
    const r = await createFrom(eus(fullGraph), [
      '--release-signature',
      sig16,
      '--key',
      keys.key,
      '-o',
      'path.bundle',
    ]);
    t.equal(r.code, 1, r.stderr);
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG', r.stderr);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, r.stderr);
    t.match(
      r.stderr,
      `release 4.15.40 (${r15.digest}) of the path has no release signature, though others do`,
    );
    t.match(r.stderr, 'add --release-signature FILE for it');
  },
);

t.test('a release signature of no release on the path is refused by name', async (t) => {
  const r = await createFrom(eus(fullGraph), [
    '--release-signature',
    sig14,
    '--key',
    keys.key,
    '-o',
    'path.bundle',
  ]);
  t.equal(errorCode(r.stderr), 'BAD_RELEASE_SIGNATURE', r.stderr);
  t.match(r.stderr, `signs ${r14.digest}, none of the path's releases`);
});

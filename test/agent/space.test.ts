// The load's space check: image-store growth (shared layers once, layers the store holds not
// at all), the kubelet's image GC and eviction thresholds read from its config on the node,
// and the refusal's numbers. Filesystems of known size are real tmpfs mounts.
import { execFileSync } from 'node:child_process';
import { mkdir, symlink, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import {
  AgentError,
  KUBELET_DEFAULTS,
  MAX_KUBELET_CONFIG_BYTES,
  MAX_LAYERS_RECORD_BYTES,
  heldLayers,
  imageGrowth,
  parseConfig,
  parseQuantity,
  parseThreshold,
  partialBytes,
  planSpace,
  readKubeletThresholds,
  shortfall,
} from '@offline-bundle/agent';
import type { BundleBlob, BundleManifest } from '@offline-bundle/format';
import { tmpdir } from '../helpers/tmp.mjs';
import { smallFs } from './fixtures.js';

const MiB = 1024 * 1024;
const GZ = 'application/vnd.oci.image.layer.v1.tar+gzip';
const CONFIG = 'application/vnd.oci.image.config.v1+json';
const MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const digestOf = (c: string) => `sha256:${c.repeat(64)}`;
const layer = (c: string, size: number): BundleBlob => ({
  digest: digestOf(c),
  size,
  mediaType: GZ,
});

/** The parts of bundle.json the space check reads. */
function bundle(blobs: BundleBlob[], imageStoreBytes: number, layoutBytes: number): BundleManifest {
  return { blobs, totals: { layoutBytes, imageStoreBytes } } as unknown as BundleManifest;
}

/** Two images sharing base layer a (8 MiB compressed, 16 MiB unpacked), each with a 1 MiB layer of its own. */
const SHARED = [
  layer('a', 8 * MiB),
  layer('b', MiB),
  layer('c', MiB),
  { digest: digestOf('d'), size: 1000, mediaType: CONFIG },
  { digest: digestOf('e'), size: 500, mediaType: MANIFEST },
];
const SHARED_STORE = 2 * (8 + 1 + 1) * MiB + 1500;

function config(root: string, extra = '', upgradeDir = '/up'): ReturnType<typeof parseConfig> {
  return parseConfig(
    `root: ${root}\nruntime: crio\ntrust:\n  keys: [/k.pub]\npaths:\n  upgradeDir: ${upgradeDir}\n  imageStoreDir: /store\n${extra}`,
  );
}

t.test('quantities and thresholds as the kubelet writes them', async (t) => {
  t.equal(parseQuantity('10Gi'), 10 * 1024 ** 3);
  t.equal(parseQuantity('500M'), 500e6);
  t.equal(parseQuantity('1.5Gi'), 1.5 * 1024 ** 3);
  t.equal(parseQuantity('1e9'), 1e9);
  t.equal(parseQuantity('2048'), 2048);
  for (const bad of ['lots', '10GB', '-1Gi', '', '1 Gi x'])
    t.equal(parseQuantity(bad), undefined, `${JSON.stringify(bad)} is no quantity`);
  t.same(parseThreshold('15%'), { percent: 15 });
  t.same(parseThreshold('10Gi'), { bytes: 10 * 1024 ** 3 });
  t.equal(parseThreshold('150%'), undefined, 'over 100% is refused');
  t.equal(parseThreshold(15), undefined, 'a bare number is no threshold');
});

t.test('the kubelet config: present, absent, garbage, huge', async (t) => {
  const dir = await tmpdir(t, 'ob-space-');
  const openshift = join(dir, 'kubelet.conf');
  const kubeadm = join(dir, 'config.yaml');
  const none = await readKubeletThresholds([openshift, kubeadm]);
  t.same(
    { ...none, source: undefined },
    { ...KUBELET_DEFAULTS, source: undefined },
    'absent: the kubelet defaults',
  );
  t.match(
    none.source,
    /^the kubelet's defaults \(no kubelet config at .*kubelet\.conf or .*config\.yaml\)$/,
    'and it says why',
  );

  await writeFile(
    kubeadm,
    'kind: KubeletConfiguration\nimageGCHighThresholdPercent: 70\nevictionHard:\n  imagefs.available: 10Gi\n  nodefs.available: "5%"\n  memory.available: 100Mi\n',
  );
  const second = await readKubeletThresholds([openshift, kubeadm]);
  t.same(
    second,
    {
      gcHighPercent: 70,
      imagefsAvailable: { bytes: 10 * 1024 ** 3 },
      nodefsAvailable: { percent: 5 },
      source: kubeadm,
    },
    "the first that exists is read (kubeadm's place)",
  );

  await writeFile(
    openshift,
    JSON.stringify({ kind: 'KubeletConfiguration', evictionHard: { 'imagefs.available': '20%' } }),
  );
  const json = await readKubeletThresholds([openshift, kubeadm]);
  t.same(
    { ...json, source: undefined },
    {
      gcHighPercent: 85,
      imagefsAvailable: { percent: 20 },
      nodefsAvailable: { percent: 10 },
      source: undefined,
    },
    'JSON (as OpenShift renders a KubeletConfig); what it leaves out keeps its default',
  );
  t.equal(json.source, openshift, 'and the earlier path wins');

  await writeFile(
    openshift,
    'imageGCHighThresholdPercent: lots\nevictionHard:\n  imagefs.available: plenty\n',
  );
  const half = await readKubeletThresholds([openshift]);
  t.same(
    { ...half, source: undefined },
    { ...KUBELET_DEFAULTS, source: undefined },
    'unreadable values keep their defaults',
  );
  t.match(
    half.source,
    /defaults where imageGCHighThresholdPercent "lots" is not a whole percent; evictionHard imagefs\.available "plenty" is not a percentage or quantity/,
    'naming each',
  );

  await writeFile(openshift, 'evictionHard: [\n  {{');
  t.match(
    (await readKubeletThresholds([openshift])).source,
    /^the kubelet's defaults \(.*kubelet\.conf is not YAML or JSON: /,
    'garbage: the defaults, saying so',
  );
  await writeFile(openshift, '- a list\n');
  t.match(
    (await readKubeletThresholds([openshift])).source,
    /defaults where not a mapping/,
    'a document that is no mapping',
  );

  await writeFile(
    openshift,
    `# ${'x'.repeat(MAX_KUBELET_CONFIG_BYTES)}\nimageGCHighThresholdPercent: 99\n`,
  );
  const huge = await readKubeletThresholds([openshift, kubeadm]);
  t.equal(huge.gcHighPercent, 85, `a file over ${MAX_KUBELET_CONFIG_BYTES} bytes is not read`);
  t.match(
    huge.source,
    /^the kubelet's defaults \(.*kubelet\.conf is unreadable: .*over 262144 bytes/,
    'and the defaults say it was too large',
  );

  await mkdir(join(dir, 'adir'));
  t.match(
    (await readKubeletThresholds([join(dir, 'adir')])).source,
    /is unreadable: .*not a regular file/,
    'a directory in its place',
  );
});

t.test('image-store growth: shared layers once, held layers not at all', async (t) => {
  const nothing = { held: new Set<string>() };
  const all = imageGrowth(bundle(SHARED, SHARED_STORE, 0), nothing, 'crio');
  t.equal(all.bytes, SHARED_STORE, "nothing held: the builder's imageStoreBytes, each blob once");
  const twice = imageGrowth(
    bundle([...SHARED, layer('a', 8 * MiB)], SHARED_STORE, 0),
    nothing,
    'crio',
  );
  t.equal(twice.bytes, SHARED_STORE, 'a layer listed twice still costs once');

  const heldA = imageGrowth(
    bundle(SHARED, SHARED_STORE, 0),
    { held: new Set([digestOf('a')]) },
    'crio',
  );
  t.equal(heldA.heldLayers, 1);
  t.equal(heldA.heldBytes, 16 * MiB, 'the held base layer saves what it unpacks to');
  t.equal(heldA.bytes, SHARED_STORE - 16 * MiB, 'and only the rest is counted');

  const containerd = imageGrowth(bundle(SHARED, SHARED_STORE, 0), nothing, 'containerd');
  t.equal(containerd.bytes, SHARED_STORE + 10 * MiB, 'containerd keeps the compressed blobs too');
});

t.test('what the store holds, from its own records', async (t) => {
  const dir = await tmpdir(t, 'ob-space-');
  const layers = SHARED.slice(0, 3);
  t.same(
    await heldLayers('crio', join(dir, 'crio'), layers),
    { held: new Set() },
    'a store with no layer record yet holds nothing',
  );
  await mkdir(join(dir, 'crio/overlay-layers'), { recursive: true });
  const record = join(dir, 'crio/overlay-layers/layers.json');
  await writeFile(
    record,
    JSON.stringify([
      { id: 'x', 'compressed-diff-digest': digestOf('a'), 'diff-digest': digestOf('9') },
      { id: 'y', parent: 'x', 'diff-digest': digestOf('c') },
      { id: 'z', 'compressed-diff-digest': digestOf('f') },
    ]),
  );
  t.same(
    await heldLayers('crio', join(dir, 'crio'), layers),
    { held: new Set([digestOf('a'), digestOf('c')]) },
    'CRI-O: by compressed or uncompressed digest, bundle layers only',
  );
  await writeFile(record, '{"not": "a list"}');
  t.match(
    (await heldLayers('crio', join(dir, 'crio'), layers)).unknown,
    /layers\.json is not a list of layers/,
    'a record that is no list: nothing counted as held, and why',
  );
  await truncate(record, MAX_LAYERS_RECORD_BYTES + 1);
  t.match(
    (await heldLayers('crio', join(dir, 'crio'), layers)).unknown,
    /over 33554432 bytes/,
    `a record over ${MAX_LAYERS_RECORD_BYTES} bytes is not read`,
  );

  const blobs = join(dir, 'containerd/io.containerd.content.v1.content/blobs/sha256');
  await mkdir(blobs, { recursive: true });
  await writeFile(join(blobs, 'b'.repeat(64)), 'x');
  await mkdir(join(blobs, 'c'.repeat(64)));
  t.same(
    await heldLayers('containerd', join(dir, 'containerd'), layers),
    { held: new Set([digestOf('b')]) },
    "containerd: the content store's blob files",
  );
});

/** A root whose image store is a tmpfs of `sizeMiB` MiB with `fillMiB` of it taken; undefined where mounting is not allowed. */
async function node(
  t: any,
  sizeMiB: number,
  fillMiB: number,
): Promise<{ root: string; filler: string } | undefined> {
  const root = await tmpdir(t, 'ob-space-');
  if (!smallFs(join(root, 'store'), sizeMiB * 1024, t)) return undefined;
  const filler = join(root, 'store/filler');
  execFileSync('fallocate', ['-l', String(fillMiB * MiB), filler]);
  return { root, filler };
}

/** The filler takes exactly `bytes` (an extended file would be sparse: allocated anew). */
async function fill(filler: string, bytes: number): Promise<void> {
  await truncate(filler, 0);
  execFileSync('fallocate', ['-l', String(bytes), filler]);
}

async function kubelet(root: string, text: string): Promise<void> {
  await mkdir(join(root, 'etc/kubernetes'), { recursive: true });
  await writeFile(join(root, 'etc/kubernetes/kubelet.conf'), text);
}

const reserve = 'space:\n  reserveBytes: 1MiB\n';

t.test("planSpace on a real filesystem: the kubelet's thresholds decide", async (t) => {
  const n = await node(t, 64, 20);
  if (!n) return t.skip('mounting a tmpfs is not permitted here');
  const m = bundle(SHARED, SHARED_STORE, 12 * MiB);
  const staged = await planSpace(m, config(n.root, reserve));
  t.equal(staged.mode, 'staged', '64 MiB, 20 taken, 22 to add: fits');
  t.match(
    staged.message,
    /thresholds from the kubelet's defaults \(no kubelet config at .*etc\/kubernetes\/kubelet\.conf or .*var\/lib\/kubelet\/config\.yaml\)/,
    'the message says the defaults were used',
  );

  await fill(n.filler, 36 * MiB);
  const err = await planSpace(m, config(n.root, reserve)).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.type(err, AgentError);
  t.equal((err as AgentError).reason, 'InsufficientSpace');
  const msg = (err as Error).message;
  t.match(
    msg,
    /^not enough disk space: loading needs 2[23]\.\d MB on .*\/store \(21\.0 MB images \+ 1\.0 MB reserve\); after it the kubelet would see the filesystem (8[5-9]|9\d)% full, at or above its image GC threshold of 85% \(the kubelet would delete images\); free \d+\.\d MB on .*\/store/,
    'names need, usage after and the threshold',
  );
  t.notMatch(msg, /\n/, 'one line');
  // freeing what it says is enough
  const toFree = Number(/; free (\d+\.\d) MB on/.exec(msg)![1]) * 1e6;
  await fill(n.filler, 36 * MiB - Math.ceil(toFree) - 100_000);
  t.equal(
    (await planSpace(m, config(n.root, reserve))).mode,
    'staged',
    'freeing the bytes named is enough',
  );
  await fill(n.filler, 36 * MiB - Math.floor(toFree) + 200_000);
  await t.rejects(planSpace(m, config(n.root, reserve)), /image GC threshold/, 'and less is not');

  await kubelet(
    n.root,
    'imageGCHighThresholdPercent: 100\nevictionHard:\n  imagefs.available: 1Mi\n',
  );
  await fill(n.filler, 36 * MiB);
  t.equal(
    (await planSpace(m, config(n.root, reserve))).mode,
    'staged',
    'with GC off and a 1 MiB eviction threshold the same load fits',
  );
});

t.test(
  'planSpace: staging and images on one filesystem; the media when only the images fit',
  async (t) => {
    const n = await node(t, 64, 20);
    if (!n) return t.skip('mounting a tmpfs is not permitted here');
    const m = bundle(SHARED, SHARED_STORE, 12 * MiB);
    const c = () => config(n.root, reserve, '/store/up');
    t.equal(
      (await planSpace(m, c())).mode,
      'staged',
      '12 MiB of layout and 21 of images in 44 free stay under 85%',
    );
    await fill(n.filler, 26 * MiB);
    const media = await planSpace(m, c());
    t.equal(
      media.mode,
      'media',
      'with 6 MiB less, staging would cross the GC threshold: served from the media',
    );
    t.match(
      media.message,
      /^not enough room to copy the bundle \(12\.6 MB\); serving from the media/,
      'saying so',
    );
    // a delta's base blobs are on this node, not on the media: the same sizes as a delta are refused
    const delta = {
      ...m,
      base: { bundleJson: digestOf('f'), name: '1.0.0', version: '1.0.0' },
    } as BundleManifest;
    await t.rejects(
      planSpace(delta, c()),
      {
        reason: 'InsufficientSpace',
        message:
          /^not enough disk space: this delta is staged whole, the blobs filled from 1\.0\.0 too, and needs 3[0-9]\.\d MB on .*\/store .*; free \d+\.\d MB on /,
      },
      'a delta is staged whole or refused, never served from the media',
    );
  },
);

t.test('planSpace: an absolute imagefs.available and the nodefs one', async (t) => {
  const n = await node(t, 64, 10);
  if (!n) return t.skip('mounting a tmpfs is not permitted here');
  const m = bundle(SHARED, SHARED_STORE, 0);
  await kubelet(
    n.root,
    'imageGCHighThresholdPercent: 95\nevictionHard:\n  imagefs.available: 40Mi\n',
  );
  const err = await planSpace(m, config(n.root, reserve)).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.match(
    err?.message,
    /under the kubelet's evictionHard threshold imagefs\.available < 41\.9 MB \(the kubelet would evict pods\)/,
    'a quantity threshold, named as the kubelet counts it',
  );
  t.match(
    err?.message,
    /thresholds from .*etc\/kubernetes\/kubelet\.conf\)$/,
    'and where it was read',
  );

  await kubelet(
    n.root,
    'imageGCHighThresholdPercent: 95\nevictionHard:\n  imagefs.available: 1Mi\n  nodefs.available: 40Mi\n',
  );
  t.equal(
    (await planSpace(m, config(n.root, reserve))).mode,
    'staged',
    "nodefs.available does not watch an image store off the kubelet's filesystem",
  );
  const onNodefs = await planSpace(
    m,
    config(n.root, `${reserve}  kubeletRootDir: /store/kubelet\n`),
  ).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.match(
    onNodefs?.message,
    /under the kubelet's evictionHard threshold nodefs\.available < 41\.9 MB/,
    "but does when the kubelet's directory is on it",
  );
});

t.test('planSpace: layers the store holds are not counted', async (t) => {
  const n = await node(t, 64, 36);
  if (!n) return t.skip('mounting a tmpfs is not permitted here');
  const m = bundle(SHARED, SHARED_STORE, 0);
  await t.rejects(
    planSpace(m, config(n.root, reserve)),
    /image GC threshold/,
    'the whole store growth would cross the threshold',
  );
  await mkdir(join(n.root, 'store/overlay-layers'));
  await writeFile(
    join(n.root, 'store/overlay-layers/layers.json'),
    JSON.stringify([{ id: 'x', 'compressed-diff-digest': digestOf('a') }]),
  );
  const plan = await planSpace(m, config(n.root, reserve));
  t.equal(plan.mode, 'staged', 'with the 16 MiB base layer held, it fits');
  t.match(
    plan.message,
    /\(16\.8 MB of layers already in the store not counted\)/,
    'and the message says what was saved',
  );
});

// The kubelet's own decisions, written out here from its source (not the agent's functions):
// pkg/kubelet/images/image_gc_manager.go collects when 100 - int(available*100/capacity) >= high;
// pkg/kubelet/eviction evicts when available < int64(float64(capacity) * float64(pct32 / 100)),
// the percentage a float32 (parsePercentage).
const kubeletCollects = (available: number, capacity: number, high: number) =>
  100 - Math.floor((available * 100) / capacity) >= high;
const f32 = (x: number) => new Float32Array([x])[0]!;
const kubeletEvicts = (available: number, capacity: number, pct: number) =>
  available < Math.trunc(capacity * f32(f32(pct) / 100));

/** One image filesystem with `left` bytes available after a load of 1 GB. */
const onImageFs = (size: number, left: number) => ({
  dir: '/store',
  fs: { free: left + 1e9, size, dev: 1 },
  staging: 0,
  staged: 0,
  images: 1e9,
  imageFs: true,
  nodeFs: true,
});
const NO_EVICTION = { imagefsAvailable: { bytes: 0 }, nodefsAvailable: { bytes: 0 } };

t.test('image GC: the check refuses exactly where the kubelet would collect', async (t) => {
  const example = shortfall(onImageFs(100e9, 15.5e9), 0, {
    gcHighPercent: 85,
    ...NO_EVICTION,
    source: 's',
  });
  t.ok(
    kubeletCollects(15.5e9, 100e9, 85),
    '100 GB with 15.5% free: the kubelet sees 85% and collects',
  );
  t.match(
    example?.why,
    /the kubelet would see the filesystem 85% full, at or above its image GC threshold of 85%/,
    'and the check refuses, saying so',
  );
  t.equal(example?.free, 0.5e9, 'naming the 0.5 GB that reach 16% free');
  let checked = 0;
  for (const size of [100e9, 64 * MiB, 99_999_999_937, 1e9 + 3, 4096 * 12_345]) {
    for (const high of [85, 70, 90, 99, 50, 1]) {
      const edge = Math.floor(((101 - high) * size) / 100);
      for (let left = edge - 4; left <= edge + 4; left++) {
        const s = shortfall(onImageFs(size, left), 0, {
          gcHighPercent: high,
          ...NO_EVICTION,
          source: 's',
        });
        t.equal(
          /image GC threshold/.test(s?.why ?? ''),
          kubeletCollects(left, size, high),
          `size ${size}, high ${high}%, ${left} left`,
        );
        checked++;
      }
    }
  }
  t.equal(checked, 270);
});

t.test(
  'eviction: the check refuses exactly where the kubelet would evict, hard or soft',
  async (t) => {
    for (const size of [100e9, 64 * MiB, 99_999_999_937, 1e9 + 3]) {
      for (const pct of [15, 10, 7.5, 20, 33.3, 0.1]) {
        const edge = Math.trunc((size * pct) / 100);
        for (let left = edge - 700; left <= edge + 700; left += 50) {
          const k = {
            gcHighPercent: 100,
            imagefsAvailable: { percent: pct },
            nodefsAvailable: { bytes: 0 },
            source: 's',
          };
          const s = shortfall(onImageFs(size, left), 0, k);
          if (
            /evictionHard threshold imagefs\.available/.test(s?.why ?? '') !==
            kubeletEvicts(left, size, pct)
          )
            t.fail(`hard ${pct}% of ${size}, ${left} left`);
          const soft = shortfall(onImageFs(size, left), 0, {
            ...k,
            imagefsAvailable: { bytes: 0 },
            imagefsSoft: { percent: pct },
          });
          if (
            /evictionSoft threshold imagefs\.available/.test(soft?.why ?? '') !==
            kubeletEvicts(left, size, pct)
          )
            t.fail(`soft ${pct}% of ${size}, ${left} left`);
        }
      }
    }
    t.ok(
      kubeletEvicts(15e9 + 100, 100e9, 15),
      '15% of 100 GB is 15,000,000,596 bytes to the kubelet (a float32 15%)',
    );
    t.match(
      shortfall(onImageFs(100e9, 15e9 + 100), 0, {
        gcHighPercent: 100,
        imagefsAvailable: { percent: 15 },
        nodefsAvailable: { bytes: 0 },
        source: 's',
      })?.why,
      /evictionHard threshold imagefs\.available < 15%/,
      'so 100 bytes over 15.0 GB left is refused',
    );
  },
);

t.test(
  'evictionSoft: read from the config; the stricter of hard and soft binds, and is named',
  async (t) => {
    const dir = await tmpdir(t, 'ob-space-');
    const conf = join(dir, 'kubelet.conf');
    // as an OpenShift KubeletConfig renders it
    await writeFile(
      conf,
      JSON.stringify({
        kind: 'KubeletConfiguration',
        evictionHard: { 'imagefs.available': '15%', 'nodefs.available': '10%' },
        evictionSoft: { 'imagefs.available': '20%', 'nodefs.available': '15%' },
        evictionSoftGracePeriod: { 'imagefs.available': '1m30s' },
      }),
    );
    const k = await readKubeletThresholds([conf]);
    t.same(
      { ...k, source: undefined },
      {
        gcHighPercent: 85,
        imagefsAvailable: { percent: 15 },
        nodefsAvailable: { percent: 10 },
        imagefsSoft: { percent: 20 },
        nodefsSoft: { percent: 15 },
        source: undefined,
      },
    );
    await writeFile(conf, 'evictionSoft:\n  imagefs.available: much\n');
    t.match(
      (await readKubeletThresholds([conf])).source,
      /evictionSoft imagefs\.available "much" is not a percentage or quantity/,
      'an unreadable soft threshold is named',
    );

    const soft = shortfall(onImageFs(100e9, 18e9), 0, k);
    t.match(
      soft?.why,
      /under the kubelet's evictionSoft threshold imagefs\.available < 20% \(the kubelet would evict pods after its grace period\)/,
      "18% left: over hard 15% and GC's 16%, under soft 20%",
    );
    t.ok(
      soft && soft.free >= 2e9 && soft.free < 2e9 + 1000,
      'the bytes to free reach the soft threshold',
    );
    const nodeOnly = { ...onImageFs(100e9, 12e9), imageFs: false };
    t.match(
      shortfall(nodeOnly, 0, k)?.why,
      /evictionSoft threshold nodefs\.available < 15%/,
      'nodefs too',
    );
    const hardStricter = shortfall(onImageFs(100e9, 18e9), 0, {
      ...k,
      imagefsAvailable: { percent: 25 },
      imagefsSoft: { percent: 5 },
    });
    t.match(
      hardStricter?.why,
      /evictionHard threshold imagefs\.available < 25% \(the kubelet would evict pods\)/,
      'a stricter hard threshold is the one named',
    );
    t.equal(shortfall(onImageFs(100e9, 21e9), 0, k), undefined, '21% left clears them all');
  },
);

t.test(
  "planSpace credits the agent's own leftovers: partial staging it removes, and this bundle staged already",
  async (t) => {
    const n = await node(t, 64, 26);
    if (!n) return t.skip('mounting a tmpfs is not permitted here');
    const m = bundle(SHARED, SHARED_STORE, 12 * MiB);
    const c = () => config(n.root, reserve, '/store/up');
    t.equal(
      (await planSpace(m, c())).mode,
      'media',
      '26 MiB taken: staging 12 MiB more would cross the GC threshold',
    );
    const resumed = await planSpace(m, c(), { alreadyStagedBytes: 12 * MiB });
    t.equal(
      resumed.mode,
      'staged',
      'with the whole layout staged already, only the images are written',
    );
    t.match(
      resumed.message,
      /^room for 12\.6 MB of layout \(12\.6 MB of it already staged\) and /,
      'and it says so',
    );
    const half = await planSpace(m, c(), { alreadyStagedBytes: 2 * MiB });
    t.equal(half.mode, 'media', 'a small part staged is not enough');

    await fill(n.filler, 40 * MiB);
    await t.rejects(
      planSpace(m, c()),
      /not enough disk space/,
      '40 MiB taken: even the images do not fit',
    );
    const reclaimed = await planSpace(m, c(), { reclaimableBytes: 14 * MiB });
    t.equal(
      reclaimed.mode,
      'media',
      'with 14 MiB of other partial staging to be removed first, 26 MiB are taken again: the images fit',
    );
    t.match(
      reclaimed.message,
      /counting 14\.7 MB of partial staging the agent removes first as free/,
      'the message counts it',
    );
    const both = await planSpace(m, c(), {
      reclaimableBytes: 14 * MiB,
      alreadyStagedBytes: 12 * MiB,
    });
    t.equal(both.mode, 'staged', 'and with this bundle staged already too, it stays staged');
    const own = await planSpace(m, c(), { alreadyStagedBytes: 12 * MiB });
    t.equal(
      own.mode,
      'media',
      "served from the media, this bundle's own partial staging is removed too: its room is free for the images",
    );
    await t.rejects(
      planSpace(m, c(), { alreadyStagedBytes: 2 * MiB }),
      /not enough disk space/,
      'a small partial does not make room enough',
    );
  },
);

t.test('partialBytes: regular files by lstat, no symlink followed, bounded', async (t) => {
  const dir = await tmpdir(t, 'ob-space-');
  t.equal(await partialBytes(join(dir, 'absent')), 0, 'an absent directory holds nothing');
  const partial = join(dir, 'up/.1.2.0.partial');
  await mkdir(join(partial, 'blobs/sha256'), { recursive: true });
  await writeFile(join(partial, 'resume.json'), '{"bundle":"sha256:00"}');
  await writeFile(join(partial, 'blobs/sha256/a'), Buffer.alloc(300_000, 1));
  await writeFile(join(partial, 'blobs/sha256/b'), Buffer.alloc(50_000, 2));
  const outside = join(dir, 'outside');
  await writeFile(outside, Buffer.alloc(1_000_000, 3));
  await symlink(outside, join(partial, 'blobs/link-to-file'));
  await symlink(dir, join(partial, 'link-to-dir'));
  t.equal(
    await partialBytes(partial),
    350_000 + 22,
    'the regular files; symlinks to a file or a directory count nothing',
  );
  await symlink(partial, join(dir, 'partial-link'));
  t.equal(
    await partialBytes(join(dir, 'partial-link')),
    0,
    'a symlink given as the directory is not followed either',
  );
  await writeFile(join(partial, 'sparse'), '');
  await truncate(join(partial, 'sparse'), 100 * MiB);
  t.equal(
    await partialBytes(partial),
    350_000 + 22,
    'a sparse file counts the blocks it holds, not its size',
  );
  t.ok(
    (await partialBytes(partial, 2)) < 350_000,
    'past the entry bound the sum stops short (less credit, never more)',
  );
});

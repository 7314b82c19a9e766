#!/usr/bin/env node
// Issue #27's scale run: a generated ~190-image release (bench/lib/shape.mjs: a few shared base
// layers under most images, each image 1-3 layers of its own; incompressible bytes, as real
// gzip layers are) goes from a docker-registry on 127.0.0.1 through `bundle create
// --split-size`, onto a stick image through FUSE (`bundle write-media`), and through
// a full `bundle-agent load` (verify, serve, pre-load into a private containerd, pin) from that
// mount. Each step's wall time, bytes, and peak memory (/usr/bin/time's %M and the process
// tree's summed VmRSS, polled) go into a table and bench/results/scale-GIBgib-STICK.json.
//
//   nice -n 19 ionice -c3 node bench/scale-run.mjs [--gib 19] [--split-size 4G] [--stick exfat|fat32|ext4] [--min-free-gib 8]
//
// --gib: unique layer bytes in GiB (19 GiB ≈ 20.4 GB, an OpenShift 4.x payload; 1 for a dry run).
// --stick: the image the bundle is written to and loaded from. fat32 goes through fusefat, whose
// reads slow down with the offset in a file (it walks the cluster chain from the start: 1.6 GB
// into a file it reads under 1 MB/s), so a 4 GiB part takes hours to read back: use it with a
// small --split-size (256M); exfat (exfat-fuse, ~80 MB/s writes here) carries the full size.
// Disk: registry + cache + bundle at the peak of create (3x the release), then each is removed
// once the next step holds the bytes; the run refuses to start, or stops, when the filesystem
// of /var/tmp would keep less than --min-free-gib free. Everything (mounts, images, containerd
// state) is removed at the end, also on failure. Needs root (mounts, containerd).
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, stat, statfs, writeFile, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startRegistry } from '../test/helpers/registry.mjs';
import { startNode } from './lib/node.mjs';
import { AGENT, BUNDLE, launcherFlags } from './lib/ours.mjs';
import { generateRelease } from './lib/release.mjs';
import { STICKS, cleanup } from './lib/scale-media.mjs';
import { SHAPES, releaseShape } from './lib/shape.mjs';
import { measure, memOf } from './lib/tree-rss.mjs';

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const { values: flags } = parseArgs({
  options: {
    gib: { type: 'string', default: '19' },
    'split-size': { type: 'string', default: '4G' },
    stick: { type: 'string', default: 'exfat' },
    'min-free-gib': { type: 'string', default: '8' },
    out: { type: 'string' },
  },
});
const GIB = Number(flags.gib);
const MIN_FREE = Number(flags['min-free-gib']) * GiB;
const SPLIT = flags['split-size'];
const SPLIT_BYTES = parseSplit(SPLIT);
const STICK = STICKS[flags.stick];
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const OUT = path.resolve(
  flags.out ?? path.join(ROOT, `bench/results/scale-${GIB}gib-${flags.stick}.json`),
);
if (!(GIB > 0) || !STICK || !(MIN_FREE >= 0)) {
  console.error(
    `scale-run: --gib is a positive number of GiB, --stick one of ${Object.keys(STICKS).join(', ')}, --min-free-gib a number`,
  );
  process.exit(2);
}
if (process.getuid?.() !== 0) {
  console.error('scale-run: mounts images and starts containerd: run as root');
  process.exit(2);
}

/** "4G", "256M", bytes; 4G is FAT32's 4 GiB - 1 as `bundle` takes it. */
function parseSplit(s) {
  const m = /^(\d+)([KMG]?)$/i.exec(s);
  if (!m) throw new Error(`--split-size ${s}: give 4G, 256M or bytes`);
  const n = Number(m[1]) * { '': 1, k: 1024, m: MiB, g: GiB }[m[2].toLowerCase()];
  return n === 4 * GiB ? n - 1 : n;
}

const t0 = Date.now();
const say = (s) =>
  process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(0).padStart(5)} s] ${s}\n`);
const free = async (dir) => {
  const s = await statfs(dir);
  return s.bavail * s.bsize;
};
const du = (dir) => Number(execFileSync('du', ['-sb', dir], { encoding: 'utf8' }).split('\t')[0]);
const sizeOf = async (files) =>
  (await Promise.all(files.map((f) => stat(f)))).reduce((a, s) => a + s.size, 0);
const partsIn = async (dir, base) =>
  (await readdir(dir))
    .filter((n) => n.startsWith(`${base}.part-`))
    .sort()
    .map((n) => path.join(dir, n));

const estimate = releaseShape(SHAPES[190], GIB / 19).bytes;
const before = await free('/var/tmp');
// the peak: registry + create's cache + the bundle + one part while it is cut in place
const peak = 3 * estimate + Math.min(SPLIT_BYTES, estimate);
if (before - peak < MIN_FREE) {
  console.error(
    `scale-run: /var/tmp has ${(before / GiB).toFixed(1)} GiB free; a ${GIB} GiB run needs ${(peak / GiB).toFixed(1)} GiB at its peak and keeps ${MIN_FREE / GiB} GiB free: give a smaller --gib`,
  );
  process.exit(2);
}

const work = await mkdtemp('/var/tmp/ob-scale-');
// the helpers (registry storage, containerd roots) make their directories under os.tmpdir()
process.env.TMPDIR = work;
const ac = new AbortController();
let lowest = before;
let onAbort = () => {};
const watchdog = setInterval(async () => {
  const f = await free(work).catch(() => Infinity);
  lowest = Math.min(lowest, f);
  if (f < MIN_FREE && !ac.signal.aborted) {
    ac.abort(
      new Error(
        `disk: ${(f / GiB).toFixed(1)} GiB free on /var/tmp, under the ${MIN_FREE / GiB} GiB kept: stopped`,
      ),
    );
    onAbort();
  }
}, 2000);
// Ctrl-C or kill: the step running stops and the cleanup below still runs
for (const sig of ['SIGINT', 'SIGTERM'])
  process.once(sig, () => {
    ac.abort(new Error(`${sig}: stopped`));
    onAbort();
  });
const checkAbort = () => {
  if (ac.signal.aborted) throw ac.signal.reason;
};

const meta = {
  date: new Date().toISOString(),
  commit: execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
    cwd: ROOT,
    encoding: 'utf8',
  }).trim(),
  gib: GIB,
  splitSize: SPLIT_BYTES,
  stick: flags.stick,
  cores: os.cpus().length,
  memTotal: os.totalmem(),
  disk: execFileSync('findmnt', ['-no', 'SOURCE,FSTYPE', '-T', '/var/tmp'], {
    encoding: 'utf8',
  }).trim(),
  freeAtStart: before,
  node: process.version,
  note: "a shared 2-core machine: other engineers' tests ran alongside, under nice 19 / ionice idle, so times are upper bounds",
};
const steps = [];
const record = async ({ stdout: _, ...step }) => {
  step.loadavg = os.loadavg().map((l) => +l.toFixed(1));
  steps.push(step);
  say(
    `${step.id}: ${step.seconds.toFixed(0)} s, ${(step.bytes / 1e9).toFixed(2)} GB, peak RSS ${(step.maxRss / MiB).toFixed(0)} MiB (tree ${(step.treePeak / MiB).toFixed(0)} MiB)`,
  );
  await writeResults(true);
};
async function writeResults(partial) {
  await writeFile(
    OUT,
    JSON.stringify({ meta: { ...meta, lowestFree: lowest, partial }, steps }, null, 2) + '\n',
  );
}

/** generate: the release into a docker-registry on 127.0.0.1 (in this process: not a step of ours). */
async function generate() {
  const shape = releaseShape(SHAPES[190], GIB / 19);
  say(
    `generating ${shape.images.length} images, ${(shape.bytes / GiB).toFixed(2)} GiB of unique layers`,
  );
  const reg = await startRegistry();
  onAbort = () => reg.stop();
  const s0 = process.hrtime.bigint();
  const rel = await generateRelease(reg, shape, work, say);
  const seconds = Number(process.hrtime.bigint() - s0) / 1e9;
  checkAbort();
  const layers = [...rel.blobs.values()].reduce((a, b) => a + Math.max(0, b.size), 0);
  await record({
    id: 'generate',
    what: `generate ${rel.payload.length} images into docker-registry (the bench's generator, not ours)`,
    seconds,
    bytes: du(reg.dir),
    maxRss: process.resourceUsage().maxRSS * 1024,
    treePeak: 0,
    byName: {},
    images: rel.payload.length,
    blobs: rel.blobs.size,
    layerBytes: layers,
  });
  meta.images = rel.payload.length;
  meta.blobs = rel.blobs.size;
  return { reg, rel };
}

/** create: `bundle create --split-size` from the registry; the registry and create's cache go once it is done. */
async function create({ reg, rel }, key) {
  const cache = path.join(work, 'cache');
  const out = path.join(work, 'out');
  await mkdir(out, { recursive: true });
  const file = path.join(out, 'release.bundle');
  say(`bundle create --split-size ${SPLIT}`);
  const r = await measure(
    process.execPath,
    [
      ...launcherFlags(BUNDLE),
      path.join(ROOT, BUNDLE_REL),
      'create',
      '--quiet',
      '--release',
      rel.release,
      '--registries-conf',
      rel.conf,
      '--key',
      key,
      '--cache',
      cache,
      '--split-size',
      SPLIT,
      '-o',
      file,
    ],
    { abort: ac.signal },
  );
  const parts = await partsIn(out, 'release.bundle');
  const bytes = await sizeOf(parts);
  await record({
    id: 'create',
    what: `\`bundle create --split-size ${SPLIT}\` from docker-registry (${parts.length} parts)`,
    ...r,
    bytes,
    parts: parts.length,
  });
  meta.bundleBytes = bytes;
  meta.parts = parts.length;
  onAbort = () => {};
  await reg.stop();
  await rm(reg.dir, { recursive: true, force: true });
  await rm(cache, { recursive: true, force: true });
  return { out, file, parts };
}
const BUNDLE_REL = path.relative(ROOT, BUNDLE);

/** Onto the stick: the parts as create wrote them (write-media reads a part set in turn; no joined copy), in parts of --split-size; returns its mount. */
async function media({ parts }) {
  const size = await sizeOf(parts);
  const dir = path.join(work, 'stick');
  // the filesystem's tables and a cluster per file end: 1% and 64 MiB over the bundle
  await STICK.mount(path.join(work, 'stick.img'), dir, Math.ceil(size * 1.01) + 64 * MiB);
  await writeMedia(parts[0], dir, STICK.what, ['--part-size', SPLIT]);
  return dir;
}

async function writeMedia(file, dir, where, extra) {
  say(`bundle write-media onto the ${where}`);
  const r = await measure(
    process.execPath,
    [
      ...launcherFlags(BUNDLE),
      path.join(ROOT, BUNDLE_REL),
      'write-media',
      file,
      dir,
      '--quiet',
      '--json',
      ...extra,
    ],
    { abort: ac.signal },
  );
  const res = JSON.parse(r.stdout.trim().split('\n').pop());
  await record({
    id: 'write-media',
    what: `\`bundle write-media\` onto the ${where} (${res.filesystem}, ${res.parts || 1} files; write, sync, read back)`,
    ...r,
    bytes: res.size,
    filesystem: res.filesystem,
    files: res.files.length,
  });
}

/** A node: containerd (overlayfs where it mounts) and the agent's config, keeping MIN_FREE on the disk. */
async function node(pub) {
  const n = await startNode(work, pub);
  // the kubelet's own limits are the load's to respect: these say "keep MIN_FREE" and no image GC
  const kubelet = path.join(n.root, 'etc/kubernetes/kubelet.conf');
  await mkdir(path.dirname(kubelet), { recursive: true });
  await writeFile(
    kubelet,
    JSON.stringify({
      imageGCHighThresholdPercent: 100,
      evictionHard: {
        'imagefs.available': `${Math.ceil(MIN_FREE / MiB)}Mi`,
        'nodefs.available': `${Math.ceil(MIN_FREE / MiB)}Mi`,
      },
    }) + '\n',
  );
  const conf = (await readFile(n.config, 'utf8')).replace(
    'space:\n  reserveBytes: 0\n',
    `space:\n  reserveBytes: ${MIN_FREE}\n  kubeletConfig: [/etc/kubernetes/kubelet.conf]\n`,
  );
  await writeFile(n.config, conf);
  return n;
}

/** load: `bundle-agent load` of the parts on the mounted stick(s), into containerd. */
async function load(dir, base, n) {
  say(`bundle-agent load ${path.join(dir, base)}`);
  const before = memOf(n.ctd.pid);
  const r = await measure(
    process.execPath,
    [
      ...launcherFlags(AGENT),
      path.join(ROOT, path.relative(ROOT, AGENT)),
      'load',
      path.join(dir, base),
      '--config',
      n.config,
      '--json',
    ],
    { abort: ac.signal },
  );
  const res = JSON.parse(r.stdout.trim().split('\n').pop());
  const ctd = memOf(n.ctd.pid);
  const root = path.join(n.ctd.dir, 'root');
  const content = du(path.join(root, 'io.containerd.content.v1.content'));
  const snaps = (await readdir(root))
    .filter((d) => d.startsWith('io.containerd.snapshotter'))
    .reduce((a, d) => a + du(path.join(root, d)), 0);
  await record({
    id: 'load',
    what: `\`bundle-agent load\` from the stick (verify, serve, pre-load ${meta.images} images into containerd, pin)`,
    ...r,
    bytes: meta.bundleBytes,
    result: {
      ready: res.ready,
      mode: res.mode ?? res.staged?.mode,
      images: res.images?.length ?? res.images,
    },
    containerd: {
      hwmBefore: before?.hwm,
      hwm: ctd?.hwm,
      contentBytes: content,
      snapshotBytes: snaps,
    },
  });
}

function table() {
  const lines = [
    '| step | time | bytes | MB/s | peak RSS (largest process) | peak RSS (process tree) |',
    '|---|---|---|---|---|---|',
  ];
  for (const s of steps) {
    lines.push(
      `| ${s.what.replace(/\|/g, '\\|')} | ${s.seconds.toFixed(0)} s | ${(s.bytes / 1e9).toFixed(2)} GB | ${(s.bytes / 1e6 / s.seconds).toFixed(1)} | ${(s.maxRss / MiB).toFixed(0)} MiB | ${s.treePeak ? `${(s.treePeak / MiB).toFixed(0)} MiB` : '—'} |`,
    );
  }
  return lines.join('\n');
}

let n;
try {
  execFileSync(process.execPath, [BUNDLE, 'keygen', '--out', path.join(work, 'k')], {
    stdio: 'ignore',
  });
  const gen = await generate();
  const built = await create(gen, path.join(work, 'k.key'));
  checkAbort();
  const dir = await media(built);
  await rm(built.out, { recursive: true, force: true });
  checkAbort();
  n = await node(path.join(work, 'k.pub'));
  await load(dir, path.basename(built.file), n);
  meta.seconds = (Date.now() - t0) / 1000;
  await writeResults(false);
  console.log(
    `\n${meta.images} images, ${meta.blobs} blobs, bundle ${(meta.bundleBytes / 1e9).toFixed(2)} GB in ${meta.parts} parts; ${meta.cores} cores; lowest free ${(lowest / GiB).toFixed(1)} GiB\n`,
  );
  console.log(table());
  say(`results: ${OUT}`);
} finally {
  clearInterval(watchdog);
  await n?.stop().catch((err) => say(`containerd stop: ${err.message}`));
  await cleanup();
  await rm(work, { recursive: true, force: true });
}

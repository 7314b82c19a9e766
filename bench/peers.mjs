#!/usr/bin/env node
// The peers rows of the bench (issues #22, #42): one stick node and N others, each a network
// namespace with its own bundle-agent daemon and containerd (test/agent/peers-nodes-setup.ts),
// every link limited with tc tbf. In the same run and the same simulation, first the baseline a
// site would otherwise build (bench/lib/peers-baseline.mjs: docker-registry on the stick node,
// every other node's containerd pulling every image through CRI and pinning it), then ours (the
// stick plugged into the stick node, `bundle cluster approve`, every other node Ready from
// peers). Rows, each ours / the baseline: until all Ready vs all pulled and pinned; the transfer
// alone; the bytes the stick node sent on its cable; CPU-seconds per GiB on the first receiving
// node (every process in its namespace).
//
//   node bench/peers.mjs [--nodes 7] [--size 2G] [--image SIZE] [--rate 1gbit] [--json]
//
// Needs root. Disk: about 4× the size per node (the staging, containerd's content and its
// snapshots, and room) and 3× the size to make the bundle, checked first. The rows are printed as the bench's table, or as JSON (--json,
// how bench/run.mjs takes them).
import { spawn } from 'node:child_process';
import { statfsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const HERE = dirname(new URL(import.meta.url).pathname);

/** This file again under the TypeScript loader tap uses (the node helpers are TypeScript). */
function underTsLoader() {
  const tap = createRequire(
    createRequire(join(HERE, '..', 'package.json')).resolve('tap/package.json'),
  );
  const loader = join(
    dirname(tap.resolve('@tapjs/typescript/package.json')),
    'dist/esm/import.mjs',
  );
  const child = spawn(
    process.execPath,
    ['--import', pathToFileURL(loader).href, ...process.argv.slice(1)],
    {
      stdio: 'inherit',
      env: {
        ...process.env,
        OB_PEERS_BENCH_LOADED: '1',
        TS_NODE_PROJECT: join(HERE, '../test/tsconfig.json'),
        TS_NODE_TRANSPILE_ONLY: '1',
      },
    },
  );
  child.on('exit', (code, sig) => process.exit(code ?? (sig ? 1 : 0)));
}

export function parseSize(s) {
  const m = /^(\d+(?:\.\d+)?)([KMG]?)i?B?$/i.exec(s);
  if (!m) throw new Error(`--size ${s}: give bytes or a number with K, M or G (e.g. 256M, 2G)`);
  return Math.round(Number(m[1]) * 1024 ** ' KMG'.indexOf((m[2] || ' ').toUpperCase()));
}

/** A tc rate ('1gbit', '100mbit', '500kbit') in bytes per second. */
export function tcRateBytes(rate) {
  const m = /^(\d+(?:\.\d+)?)([kmg]?)(bit|bps)$/i.exec(rate);
  if (!m) throw new Error(`--rate ${rate}: give a tc rate such as 1gbit or 100mbit`);
  const n = Number(m[1]) * 1000 ** ' kmg'.indexOf((m[2] || ' ').toLowerCase());
  return m[3].toLowerCase() === 'bit' ? n / 8 : n;
}

/** Runs `peers` rows with the given options in a child (under the TS loader); resolves with the rows. */
export function peersRows({ nodes = 7, size = '2G', rate = '1gbit', image = undefined } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        new URL(import.meta.url).pathname,
        '--json',
        '--nodes',
        String(nodes),
        '--size',
        size,
        '--rate',
        rate,
        ...(image ? ['--image', image] : []),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`bench/peers.mjs exited ${code}`)),
    );
  });
}

/** The cluster of namespace nodes, each link shaped, no node started yet. */
async function cluster(t, opts, say) {
  const { peerCluster } = await import('../test/agent/peers-nodes-setup.js');
  const { limitLink } = await import('../test/helpers/netns.js');
  const names = Array.from({ length: opts.nodes + 1 }, (_, i) => `node-${i}`);
  say(
    `${names.length} nodes, a ${(opts.size / 2 ** 20).toFixed(0)} MiB image set in images of ${(opts.image / 2 ** 20).toFixed(1)} MiB, links ${opts.rate}: making the bundle`,
  );
  // the link is the limit measured, not the good-neighbour cap (50MiB/s by default): the cap at the link's rate
  const c = await peerCluster(t, names, opts.size, {
    peers: `  uploadRate: ${Math.round(tcRateBytes(opts.rate))}\n`,
    imageSize: opts.image,
  });
  for (const n of c.nodes) {
    limitLink(n.net, opts.rate);
    // no kubelet runs here and the bench shares this machine's disk: its image GC and eviction
    // thresholds (85% / 15% by default) would refuse loads for what other work fills
    await mkdir(join(n.root, 'var/lib/kubelet'), { recursive: true });
    await writeFile(
      join(n.root, 'var/lib/kubelet/config.yaml'),
      'imageGCHighThresholdPercent: 100\nevictionHard:\n  imagefs.available: "0%"\n  nodefs.available: "0%"\n',
    );
  }
  return c;
}

/** The registry baseline first, on the fresh containerds, which it leaves empty again for ours. */
async function baseline(c, say) {
  const { openBundle, readHeader } = await import('@offline-bundle/format');
  const { baselinePull, clearBaseline, layoutImages, stickRegistry } =
    await import('./lib/peers-baseline.mjs');
  const source = await openBundle(c.bundle);
  const { manifest } = await readHeader(source).finally(() => source.close());
  const [seed, ...others] = c.nodes;
  // the layout bundle create read (test/agent/fixtures.ts makeBundle): the bundle's images, the same digests
  const images = await layoutImages(
    join(c.work, `layout-${manifest.release.version}-${manifest.release.arch}`),
    manifest.images,
  );
  const reg = await stickRegistry(
    seed.net,
    join(c.work, `layout-${manifest.release.version}-${manifest.release.arch}`),
    images,
  );
  const upstream = manifest.images[0].repository.split('/')[0];
  let b;
  try {
    say(
      `baseline: ${images.length} images in docker-registry on the stick node; every node pulls them at once`,
    );
    b = await baselinePull({
      seed,
      nodes: others,
      registry: reg.host,
      upstream,
      refs: images.map((i) => i.ref),
      blobs: manifest.blobs,
    });
  } finally {
    await reg.stop();
  }
  await clearBaseline(others, upstream);
  const payloadBytes = manifest.blobs.reduce((sum, x) => sum + x.size, 0);
  say(
    `baseline: every node pulled and pinned after ${b.all.toFixed(2)} s (transfer ${b.transfer.toFixed(2)} s); the stick node sent ${(b.sent / 2 ** 20).toFixed(0)} MiB; ${b.cpu.toFixed(1)} CPU s on node-1`,
  );
  return { ...b, payloadBytes, layers: manifest.images.length };
}

async function measure(opts) {
  const { until } = await import('../test/helpers/until.js');
  const { oursFromApproval } = await import('./lib/peers-ours.mjs');
  const { peersRows } = await import('./lib/peers-rows.mjs');
  const say = (s) => process.stderr.write(`peers: ${s}\n`);
  const teardowns = [];
  const t = { teardown: (fn) => teardowns.push(fn) };
  try {
    const c = await cluster(t, opts, say);
    const base = await baseline(c, say);
    const [seed, ...others] = c.nodes;
    for (const n of c.nodes) n.start();
    await c.plugStick();
    await until(
      'the stick node is Ready',
      async () => {
        const s = await seed.status();
        return s?.phase === 'Ready' && !!s?.bundle;
      },
      { timeoutMs: 1_800_000, stepMs: 500 },
    );
    say('the stick node is Ready; approving');
    const ours = await oursFromApproval({ approve: c.approve, seed, nodes: others });
    say(
      `ours: every node Ready after ${ours.all.toFixed(2)} s (first ${ours.first.toFixed(2)} s, transfer ${ours.transfer.toFixed(2)} s); the stick node sent ${(ours.sent / 2 ** 20).toFixed(0)} MiB of a ${(c.bundleBytes / 2 ** 20).toFixed(0)} MiB bundle; ${ours.cpu.toFixed(1)} CPU s on node-1`,
    );
    const what = `${opts.nodes} nodes from one stick node, ${(c.bundleBytes / 2 ** 20).toFixed(0)} MiB bundle in ${base.layers} layers, links ${opts.rate}, peers.uploadRate the link's`;
    return peersRows({
      ours,
      baseline: base,
      bundleBytes: c.bundleBytes,
      payloadBytes: base.payloadBytes,
      what,
    });
  } finally {
    for (const fn of teardowns.reverse())
      await Promise.resolve()
        .then(fn)
        .catch(() => undefined);
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '7' },
      size: { type: 'string', default: '2G' },
      image: { type: 'string' },
      rate: { type: 'string', default: '1gbit' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    console.log(`Usage: node bench/peers.mjs [--nodes N] [--size SIZE] [--image SIZE] [--rate RATE] [--json]

One stick node and N others (default 7; the issue's runs: 3, 7, 12), each a network namespace
with its own bundle-agent daemon and containerd, every link limited to RATE (tc tbf; default
1gbit), a bundle of SIZE (default 2G; 256M for a quick run). First the baseline: docker-registry
on the stick node holding the bundle's images, every other node's containerd pulling them all
at once through CRI and pinning them; then ours: approval → every node Ready from peers.
Prints each against the baseline (ratio ours / baseline): until all Ready (target ≤ 1.0), the
transfer alone, the bytes the stick node sent (target ≤ 1.5× the bundle), CPU-seconds per GiB on
the first receiving node (target ≤ 1.2).
The bundle holds images of --image bytes, one layer each (default SIZE/8, at most 64M): nodes
pass blobs to each other only whole, so a bundle of one big layer could not spread between them.
Needs root and about 4× SIZE of disk per node under /tmp, and 3× SIZE more to make the bundle.`);
    return;
  }
  const size = parseSize(values.size);
  // at least 8 layers: a blob passes between nodes only once it is whole
  const opts = {
    nodes: Number(values.nodes),
    size,
    image: values.image ? parseSize(values.image) : Math.min(64 * 2 ** 20, Math.ceil(size / 8)),
    rate: values.rate,
  };
  if (!Number.isInteger(opts.nodes) || opts.nodes < 1)
    throw new Error(
      `--nodes ${values.nodes}: give the number of nodes besides the stick node (1 or more)`,
    );
  if (process.getuid?.() !== 0)
    throw new Error(
      'bench/peers.mjs makes network namespaces and starts containerd: run it as root',
    );
  const st = statfsSync('/tmp');
  // each node holds its staging, containerd's content and its snapshots (3× the size), and the
  // bundle's making 3× more; at 7 nodes and 2 GiB that bare 54 GiB passed with 56 free, and ours
  // ran the disk to 3 GiB free before its nodes were Ready (2026-12-07): 4× per node for room
  const need = (opts.nodes + 1) * 4 * opts.size + 3 * opts.size;
  if (st.bavail * st.bsize < need)
    throw new Error(
      `bench/peers.mjs needs about ${(need / 2 ** 30).toFixed(1)} GiB free under /tmp (4× the size per node, 3× more for making the bundle), ${((st.bavail * st.bsize) / 2 ** 30).toFixed(1)} GiB are: give a smaller --size or fewer --nodes`,
    );
  const rows = await measure(opts);
  if (values.json) process.stdout.write(`${JSON.stringify(rows)}\n`);
  else console.log((await import('./lib/report.mjs')).table(rows));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  if (!process.env.OB_PEERS_BENCH_LOADED) underTsLoader();
  else {
    try {
      await main();
    } catch (err) {
      console.error(`bench/peers.mjs: ${err instanceof Error ? err.message : err}`);
      process.exit(1);
    }
  }
}

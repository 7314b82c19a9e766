#!/usr/bin/env node
// The peers row of the bench (issue #22): one stick node and N others, each a network namespace
// with its own bundle-agent daemon and containerd (test/agent/peers-nodes-setup.ts), every link
// limited with tc tbf. Measured: the time from `bundle cluster approve` until every other node
// is Ready (loaded and pinned), against one node copying the bundle file from the seeder alone
// over the same link (curl from python3's http.server: a bare copy, no verification, no load);
// and the bytes the stick node's peer port sent, against the bundle's size.
//
//   node bench/peers.mjs [--nodes 7] [--size 2G] [--image SIZE] [--rate 1gbit] [--json]
//
// Needs root. Disk: about 3× the size per node (the kept layout, containerd's content and its
// snapshots), checked first. The rows are printed as the bench's table, or as JSON (--json,
// how bench/run.mjs takes them).
import { execFileSync, spawn } from 'node:child_process';
import { statfsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const HERE = dirname(new URL(import.meta.url).pathname);
const COPY_PORT = 9480;

/** This file again under the TypeScript loader tap uses (the node helpers are TypeScript). */
function underTsLoader() {
  const tap = createRequire(createRequire(join(HERE, '..', 'package.json')).resolve('tap/package.json'));
  const loader = join(dirname(tap.resolve('@tapjs/typescript/package.json')), 'dist/esm/import.mjs');
  const child = spawn(process.execPath, ['--import', pathToFileURL(loader).href, ...process.argv.slice(1)], {
    stdio: 'inherit', env: { ...process.env, OB_PEERS_BENCH_LOADED: '1', TS_NODE_PROJECT: join(HERE, '../test/tsconfig.json'), TS_NODE_TRANSPILE_ONLY: '1' },
  });
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
    const child = spawn(process.execPath, [new URL(import.meta.url).pathname, '--json', '--nodes', String(nodes), '--size', size, '--rate', rate, ...(image ? ['--image', image] : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`bench/peers.mjs exited ${code}`))));
  });
}

async function measure(opts) {
  const { peerCluster, until } = await import('../test/agent/peers-nodes-setup.js');
  const { limitLink } = await import('../test/helpers/netns.js');
  const { stats } = await import('./lib/measure.mjs');
  const say = (s) => process.stderr.write(`peers: ${s}\n`);
  const teardowns = [];
  const t = { teardown: (fn) => teardowns.push(fn) };
  try {
    const names = Array.from({ length: opts.nodes + 1 }, (_, i) => `node-${i}`);
    say(`${names.length} nodes, a ${(opts.size / 2 ** 20).toFixed(0)} MiB image set in images of ${(opts.image / 2 ** 20).toFixed(1)} MiB, links ${opts.rate}: making the bundle`);
    // the link is the limit measured, not the good-neighbour cap (50MiB/s by default): the cap at the link's rate
    const c = await peerCluster(t, names, opts.size, { peers: `  uploadRate: ${Math.round(tcRateBytes(opts.rate))}\n`, imageSize: opts.image });
    for (const n of c.nodes) {
      limitLink(n.net, opts.rate);
      // no kubelet runs here and the bench shares this machine's disk: its image GC and eviction
      // thresholds (85% / 15% by default) would refuse loads for what other work fills
      await mkdir(join(n.root, 'var/lib/kubelet'), { recursive: true });
      await writeFile(join(n.root, 'var/lib/kubelet/config.yaml'), 'imageGCHighThresholdPercent: 100\nevictionHard:\n  imagefs.available: "0%"\n  nodefs.available: "0%"\n');
    }
    const [seed, first] = c.nodes;

    // the floor: one node copies the bundle file from the seeder, alone, over the same link
    const http = spawn('ip', ['netns', 'exec', seed.net.ns, 'python3', '-m', 'http.server', String(COPY_PORT), '--bind', seed.net.address, '--directory', dirname(c.bundle)], { stdio: 'ignore' });
    t.teardown(() => http.kill());
    const url = `http://${seed.net.address}:${COPY_PORT}/${c.bundle.split('/').pop()}`;
    await until('the copy server answers', () => { try { first.net.exec(['curl', '-sfI', url]); return true; } catch { return undefined; } }, 30_000);
    const copyTo = join(first.root, 'copy.bundle');
    const started = process.hrtime.bigint();
    first.net.exec(['curl', '-sf', '-o', copyTo, url]);
    const copy = Number(process.hrtime.bigint() - started) / 1e9;
    execFileSync('rm', ['-f', copyTo]);
    http.kill();
    say(`one node copying the bundle from the seeder alone: ${copy.toFixed(2)} s`);

    for (const n of c.nodes) n.start();
    await c.plugStick();
    await until('the stick node is Ready', async () => ((await seed.status())?.phase === 'Ready' && (await seed.status())?.bundle ? true : undefined), 1_800_000);
    say('the stick node is Ready; approving');
    const uploadedBefore = seed.uploaded();
    const t0 = process.hrtime.bigint();
    await c.approve();
    const readyAt = new Map();
    await until('every node is Ready', async () => {
      for (const n of c.nodes.slice(1)) {
        if (readyAt.has(n.name)) continue;
        const s = await n.status();
        if (s?.phase === 'Ready' && s?.bundle) readyAt.set(n.name, Number(process.hrtime.bigint() - t0) / 1e9);
        if (s?.phase === 'Failed') throw new Error(`${n.name} failed: ${JSON.stringify(s.conditions ?? s).slice(0, 500)}`);
      }
      return readyAt.size === opts.nodes ? true : undefined;
    }, 1_800_000);
    const all = Math.max(...readyAt.values());
    const uploaded = seed.uploaded() - uploadedBefore;
    say(`every node Ready after ${all.toFixed(2)} s (first ${Math.min(...readyAt.values()).toFixed(2)} s); the stick node uploaded ${(uploaded / 2 ** 20).toFixed(0)} MiB of a ${(c.bundleBytes / 2 ** 20).toFixed(0)} MiB bundle`);
    const what = `${opts.nodes} nodes from one stick node, ${(c.bundleBytes / 2 ** 20).toFixed(0)} MiB bundle in ${Math.ceil(opts.size / opts.image)} layers, links ${opts.rate}, peers.uploadRate the link's`;
    return [
      { id: 'peers', step: `peers: approval → every node Ready (${what})`, unit: 's', ours: stats([all]), peer: stats([copy]), ratios: stats([all / copy]),
        peerName: 'one node copying the bundle from the seeder alone (curl, same link)', target: { max: 1.5, what: '≤ 1.5' } },
      { id: 'peers-upload', step: `peers: bytes the stick node uploaded (${what})`, unit: 'MiB', ours: stats([uploaded]), peer: stats([c.bundleBytes]),
        ratios: stats([uploaded / c.bundleBytes]), peerName: 'the bundle', target: { max: 2 * c.bundleBytes, what: '≤ 2× the bundle' } },
    ];
  } finally {
    for (const fn of teardowns.reverse()) await Promise.resolve().then(fn).catch(() => undefined);
  }
}

async function main() {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '7' }, size: { type: 'string', default: '2G' }, image: { type: 'string' }, rate: { type: 'string', default: '1gbit' }, json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } } });
  if (values.help) {
    console.log(`Usage: node bench/peers.mjs [--nodes N] [--size SIZE] [--image SIZE] [--rate RATE] [--json]

One stick node and N others (default 7), each a network namespace with its own bundle-agent
daemon and containerd, every link limited to RATE (tc tbf; default 1gbit), a bundle of SIZE
(default 2G; 256M, 64M for a quick run). Prints the time from \`bundle cluster approve\` until
every node is Ready against one node copying the bundle from the seeder alone over the same link
(target ≤ 1.5), and the bytes the stick node uploaded against the bundle's size (target ≤ 2×).
The bundle holds images of --image bytes, one layer each (default SIZE/8, at most 64M): nodes
pass blobs to each other only whole, so a bundle of one big layer could not spread between them.
Needs root and about 3× SIZE of disk per node under /tmp.`);
    return;
  }
  const size = parseSize(values.size);
  // at least 8 layers: a blob passes between nodes only once it is whole
  const opts = { nodes: Number(values.nodes), size, image: values.image ? parseSize(values.image) : Math.min(64 * 2 ** 20, Math.ceil(size / 8)), rate: values.rate };
  if (!Number.isInteger(opts.nodes) || opts.nodes < 1) throw new Error(`--nodes ${values.nodes}: give the number of nodes besides the stick node (1 or more)`);
  if (process.getuid?.() !== 0) throw new Error('bench/peers.mjs makes network namespaces and starts containerd: run it as root');
  const st = statfsSync('/tmp');
  const need = (opts.nodes + 1) * 3 * opts.size + 2 * opts.size;
  if (st.bavail * st.bsize < need) throw new Error(`bench/peers.mjs needs about ${(need / 2 ** 30).toFixed(1)} GiB free under /tmp (3× the size per node); give a smaller --size or fewer --nodes`);
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

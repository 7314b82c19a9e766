#!/usr/bin/env node
// Benchmarks against the tools users would pick instead, on an OpenShift-shaped release
// generated into a docker-registry on 127.0.0.1 (bench/lib/shape.mjs, release.mjs). Each
// ratio (ours / peer: < 1 is faster) comes from samples taken alternately in the same run.
//   build:    bundle create from the registry     vs skopeo copy into one OCI layout + tar | zstd -3 -T0
//   stage:    bundle extract (verified, durable)   vs zstd -dc | tee >(openssl dgst -sha256) | tar -x
//   stage-durable: the same against a peer that also hashes the file and every blob and fsyncs each
//   random:   the largest blob through the seek index vs zstd -dc | tar -xO BLOB
//   serve:    skopeo copy of every image from `bundle-agent serve DIR` (an extracted layout found on
//             disk: every chunk re-checked against its digest, #7) vs from docker-registry 2.8
//   serve16:  a 16-stream blob client, same two servers
//   serve-file, serve16-file: the same two clients against `bundle-agent serve FILE` (media mode: the
//             bundle file read through its seek index, every frame held to the verifying pass's digest)
//   serve-staging, serve16-staging: the same two clients against the registry `bundle-agent load`
//             pulls from: a StagingStore over its own verified staging (bench/lib/staging-server.mjs)
//   preload:  containerd's CRI pulling every image through the load's registry (StagingStore) vs straight from docker-registry
//   load:     bundle-agent load (stage + serve + pre-load + pin) of a bundle in pull order (--blob-order pull)
//             vs cat FILE > /dev/null + containerd's pull from docker-registry
//   load-order: the same load of the pull-order bundle vs of the digest-order one (the default)
//   RSS:      peak resident set of bundle create / bundle extract at BENCH_SCALE and 4x it
//   peers:    approval → every node Ready, one stick node and BENCH_PEERS_NODES others (default 7)
//             in network namespaces, a BENCH_PEERS_SIZE bundle (default 2G), links tbf 1 Gbit/s,
//             vs a docker-registry on the stick node that every node's containerd pulls from, in
//             the same run: time, transfer alone, stick node's bytes sent, receiving CPU per GiB
//             (bench/peers.mjs; about 4× the size of disk per node)
// Environment: BENCH_SCALE (1 = 40 images, ~2 GiB; default 1), BENCH_SHAPE (40 or 190 images; 8 for a smoke run),
// BENCH_RUNS (samples per side, default 3), BENCH_ONLY (comma list of the rows above),
// BENCH_RSS_X (the larger scale's factor, default 4; 0 skips it), BENCH_PROFILE (a directory:
// CPU profiles of our runs), BENCH_OUT (results file, default bench/results/latest.json), BENCH_APP
// (default: the apps as `pnpm package` ships them, packaged first, ~1 min; dev: the workspace's dist/).
// CPU columns count this process, its waited-for children and the servers a row names: for the
// load rows the node's containerd, and the peer's docker-registry.
// Needs root (containerd). Everything lives in one directory under /var/tmp, removed at the end
// (BENCH_KEEP=1 keeps it, to look into a row with the bench's own data).
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { BundleRandomReader, blobPath, readHeader, withBundleFile } from '@offline-bundle/format';
import { skopeoCopy, startRegistry } from '../test/helpers/registry.mjs';
import { fetchBlobs } from './lib/blob-client.mjs';
import { alternate, seconds, shell, stats, timedCpu } from './lib/measure.mjs';
import { breakdownTable, medianPhases, phaseEnv, readPhases } from './lib/phases.mjs';
import { peersRows } from './peers.mjs';
import {
  criPullAll,
  mirrorToBundle,
  mirrorToRegistry,
  nodeSnapshotter,
  startNode,
} from './lib/node.mjs';
import { AGENT, APP, BUNDLE, cli, serve, serveStaging, useShippedApps } from './lib/ours.mjs';
import { generateRelease } from './lib/release.mjs';
import { table, writeResults } from './lib/report.mjs';
import { SHAPES, releaseShape } from './lib/shape.mjs';

const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const SHAPE = SHAPES[process.env.BENCH_SHAPE ?? '40'];
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const RSS_X = Number(process.env.BENCH_RSS_X ?? 4);
const ONLY = new Set(
  (
    process.env.BENCH_ONLY ??
    'build,stage,stage-durable,random,serve,serve16,serve-file,serve16-file,serve-staging,serve16-staging,preload,load,load-order,rss,peers'
  ).split(','),
);
const OUT = path.resolve(
  process.env.BENCH_OUT ??
    path.join(path.dirname(new URL(import.meta.url).pathname), 'results/latest.json'),
);
const STREAMS = 16;
const RSS_TARGET = { max: 256 * 2 ** 20, what: '< 256 MiB, flat 1×→4×' };
const UPSTREAM_HOST = 'quay.io';
if (!SHAPE || !(SCALE > 0) || !(RUNS >= 1)) {
  console.error(
    'bench: BENCH_SHAPE is 40, 190 or 8, BENCH_SCALE a positive number, BENCH_RUNS at least 1',
  );
  process.exit(2);
}
if (
  process.getuid?.() !== 0 &&
  (ONLY.has('preload') || ONLY.has('load') || ONLY.has('load-order'))
) {
  console.error(
    'bench: the preload and load rows start a private containerd: run as root, or set BENCH_ONLY=build,stage,serve,serve16,rss',
  );
  process.exit(2);
}

const say = (s) => process.stderr.write(`${s}\n`);
const work = await mkdtemp('/var/tmp/ob-bench-');
// the helpers make their temp dirs (registry storage, containerd roots) under os.tmpdir()
process.env.TMPDIR = work;
const rows = [];
/** Each row is written as soon as it is measured: a long run stopped part-way keeps what it has. */
const addRow = (row) => {
  rows.push(row);
  return writeResults(OUT, { ...meta, partial: true }, rows);
};
const meta = {
  date: new Date().toISOString(),
  commit: execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim(),
  scale: SCALE,
  shape: SHAPE.images,
  runs: RUNS,
  cores: os.cpus().length,
  loadavg: os.loadavg().map((l) => +l.toFixed(2)),
  note: "a shared 2-core machine: other engineers' builds run alongside, so absolute times are noisy; ratios come from alternating samples",
};

useShippedApps();
// the staging-server rows (serve-staging, serve16-staging, pre-load) run dist/ whatever this says
meta.app = APP;

/** Generates the release at `scale` into a new registry and returns what every row needs. */
async function setUp(scale, dir) {
  await mkdir(dir, { recursive: true });
  const shape = releaseShape(SHAPE, scale);
  say(
    `generating ${shape.images.length} images, ${(shape.bytes / 2 ** 20).toFixed(0)} MiB of layers (scale ${scale})`,
  );
  const reg = await startRegistry();
  const t = await seconds(async () =>
    Object.assign(reg, { release: await generateRelease(reg, shape, dir, say) }),
  );
  say(`generated and pushed in ${t.toFixed(0)} s`);
  execFileSync(process.execPath, [BUNDLE, 'keygen', '--out', path.join(dir, 'k')], {
    stdio: 'ignore',
  });
  return { reg, rel: reg.release, key: path.join(dir, 'k.key'), pub: path.join(dir, 'k.pub'), dir };
}

/**
 * build: our bundle (cold cache) vs skopeo into one layout + tar | zstd. Leaves ours at `file`.
 * Each of our runs records its phases (BUNDLE_PHASE_TIMES) and the peer's two steps are timed
 * apart: the row's `breakdown` (bench/lib/phases.mjs).
 */
async function buildRow(env, file, runs, rss) {
  const { rel, dir } = env;
  const ourPhases = [];
  const peerSteps = [];
  const phaseFile = path.join(dir, 'phases.json');
  const r = await alternate(runs, {
    prepare: async (side, i) => ({ scratch: path.join(dir, `${side}-build-${i}`) }),
    cleanup: (c) => rm(c.scratch, { recursive: true, force: true }),
    ours: async (c) => {
      await rm(file, { force: true });
      const m = await timedCpu(async () =>
        rss.push(
          await cli(
            BUNDLE,
            [
              'create',
              '--quiet',
              '--release',
              rel.release,
              '--registries-conf',
              rel.conf,
              '--key',
              env.key,
              '--cache',
              c.scratch,
              '-o',
              file,
            ],
            path.join(dir, 'rss'),
            phaseEnv(phaseFile),
          ),
        ),
      );
      ourPhases.push(await readPhases(phaseFile, m));
    },
    peer: async (c) => {
      const copy = await timedCpu(async () => {
        for (const p of rel.payload)
          await skopeoCopy(`docker://${p.source}`, `oci:${c.scratch}:${p.name}`);
      });
      const pack = await timedCpu(() =>
        shell(`tar -C '${c.scratch}' -cf - . | zstd -q -3 -T0 -f -o '${dir}/peer.tar.zst'`),
      );
      peerSteps.push({
        [`skopeo copy of ${rel.payload.length} images into one OCI layout`]: copy,
        'tar | zstd -3 -T0 (no sidecar, no signature)': pack,
      });
    },
  });
  const sizes = { ours: (await stat(file)).size, peer: (await stat(`${dir}/peer.tar.zst`)).size };
  await rm(`${dir}/peer.tar.zst`, { force: true });
  return {
    ...r,
    sizes,
    peerName: 'skopeo copy + tar | zstd -3 -T0',
    breakdown: {
      ours: medianPhases(ourPhases),
      peer: medianPhases(peerSteps),
      loadavg: os.loadavg().map((l) => +l.toFixed(2)),
      process: ourPhases.map((p) => p.process),
    },
  };
}

/**
 * The floors a verified, durable extraction is compared with: the bare stream, and the same
 * work ours does (hash the file, unpack, hash every blob, make every file durable). The hash is
 * OpenSSL's (`openssl dgst -sha256`, SHA extensions: ~1.3 GB/s here): coreutils 9.1's sha256sum
 * runs at ~230 MB/s on this machine and was the stream peer's bottleneck (#45: 125 MB/s in the
 * bench). It reads a FIFO as a background job the script waits for, so its time and CPU are the
 * peer's (a `>(...)` process substitution is never waited for: its CPU went uncounted).
 */
const STAGE_PEERS = {
  stream: {
    name: 'zstd -dc | tee >(openssl dgst -sha256) | tar -x',
    script: (file, out) =>
      `mkdir -p '${out}' && mkfifo '${out}.hash' && { openssl dgst -sha256 < '${out}.hash' > /dev/null & } && zstd -dc '${file}' | tee '${out}.hash' | tar -x -C '${out}' && wait && rm -f '${out}.hash'`,
  },
  durable: {
    name: 'openssl dgst -sha256 FILE; zstd -dc | tar -x; hash and sync every blob',
    script: (file, out) =>
      `openssl dgst -sha256 '${file}' > /dev/null && mkdir -p '${out}' && zstd -dc '${file}' | tar -x -C '${out}' && cd '${out}' && openssl dgst -sha256 blobs/sha256/* > /dev/null && sync blobs/sha256/*`,
  },
};

/**
 * stage: verified extraction vs a floor (STAGE_PEERS). Leaves one staged layout at `staged`.
 * Each sample starts with the disk settled (`sync`, untimed): the side before leaves no
 * writeback behind for this one to pay (the peer's files are not synced, ours are).
 */
async function stageRow(env, file, staged, runs, rss, floor = STAGE_PEERS.stream) {
  const { dir, pub } = env;
  const r = await alternate(runs, {
    prepare: async (side, i) => {
      await shell('sync');
      return { out: path.join(dir, `${side}-stage-${i}`) };
    },
    cleanup: (c) => rm(c.out, { recursive: true, force: true }),
    ours: (c) =>
      cli(BUNDLE, ['extract', '--quiet', file, c.out, '--key', pub], path.join(dir, 'rss')).then(
        (b) => rss.push(b),
      ),
    peer: (c) => shell(floor.script(file, c.out)),
  });
  if (staged) await cli(BUNDLE, ['extract', '--quiet', file, staged, '--key', pub]);
  return { ...r, peerName: floor.name };
}

/** Runs `fn(ours, peer, pids)` with our server (`start()`) and the docker-registry; `pids` for their CPU. */
async function withServers(env, start, fn) {
  const srv = await start();
  try {
    return await fn(srv.address, env.reg.host, { ours: srv.pid, peer: env.reg.pid });
  } finally {
    await srv.stop();
  }
}

async function main() {
  // its own nodes and bundle: no release to generate for it
  if (ONLY.has('peers'))
    for (const row of await peersRows({
      nodes: Number(process.env.BENCH_PEERS_NODES ?? 7),
      size: process.env.BENCH_PEERS_SIZE ?? '2G',
    }))
      await addRow(row);
  if ([...ONLY].every((r) => r === 'peers')) return;
  const env = await setUp(SCALE, path.join(work, 's1'));
  const file = path.join(env.dir, 'ours.bundle');
  const staged = path.join(env.dir, 'staged');
  const createRss = [];
  const extractRss = [];
  const fileBytes = async () => (await stat(file)).size;
  try {
    if (ONLY.has('build')) {
      await addRow({
        id: 'build',
        step: `build (\`bundle create\` from docker-registry, ${env.rel.payload.length} images)`,
        unit: 's',
        target: { max: 0.8, what: '≤ 0.8' },
        ...(await buildRow(env, file, RUNS, createRss)),
      });
    } else {
      await buildRow(env, file, 1, createRss);
    }
    meta.bundleBytes = await fileBytes();
    const build = rows.find((r) => r.id === 'build');
    if (build) {
      await addRow({
        id: 'size',
        step: 'size: bundle vs the `.tar.zst` of the same layout',
        unit: 'MiB',
        ours: stats([build.sizes.ours]),
        peer: stats([build.sizes.peer]),
        ratios: stats([build.sizes.ours / build.sizes.peer]),
        peerName: '.tar.zst',
      });
    }
    meta.images = env.rel.payload.length;
    if (ONLY.has('preload') || ONLY.has('load') || ONLY.has('load-order'))
      meta.snapshotter = await nodeSnapshotter(env.dir);
    meta.blobs = env.rel.blobs.size;
    const needStaged = ['serve', 'serve16', 'serve-staging', 'serve16-staging', 'preload'].some(
      (r) => ONLY.has(r),
    );
    if (ONLY.has('stage')) {
      await addRow({
        id: 'stage',
        step: '`bundle extract`, verified',
        unit: 's',
        target: { max: 1.2, what: '≤ 1.2' },
        ...(await stageRow(env, file, needStaged ? staged : undefined, RUNS, extractRss)),
      });
    } else if (needStaged || ONLY.has('rss')) {
      await stageRow(env, file, needStaged ? staged : undefined, 1, extractRss);
    }
    if (ONLY.has('stage-durable')) {
      await addRow({
        id: 'stage-durable',
        step: '`bundle extract`, verified, every file fsynced',
        unit: 's',
        ...(await stageRow(env, file, undefined, RUNS, extractRss, STAGE_PEERS.durable)),
      });
    }
    const clientRows = async (ours, peer, ids, what, servers) => {
      const pull = path.join(env.dir, 'pull');
      if (ONLY.has(ids.serve)) {
        const r = await alternate(RUNS, {
          servers,
          cleanup: () => rm(pull, { recursive: true, force: true }),
          ours: async () => {
            for (const p of env.rel.payload)
              await skopeoCopy(`docker://${ours}/${p.ref}`, `oci:${pull}:${p.name}`);
          },
          peer: async () => {
            for (const p of env.rel.payload)
              await skopeoCopy(`docker://${p.source}`, `oci:${pull}:${p.name}`);
          },
        });
        await addRow({
          id: ids.serve,
          step: `serve: skopeo copy of ${env.rel.payload.length} images from ${what}`,
          unit: 's',
          target: { max: 1.0, what: '≤ 1.0' },
          peerName: 'docker-registry 2.8',
          ...r,
        });
      }
      if (ONLY.has(ids.serve16)) {
        const blobs = [...env.rel.blobs]
          .map(([digest, b]) => ({ digest, ...b }))
          .sort((a, b) => b.size - a.size);
        const r = await alternate(RUNS, {
          servers,
          ours: () =>
            fetchBlobs(
              `http://${ours}`,
              blobs.map((b) => ({ ...b, repo: `${UPSTREAM_HOST}/${b.repo}` })),
              STREAMS,
            ),
          peer: () => fetchBlobs(`http://${peer}`, blobs, STREAMS),
        });
        await addRow({
          id: ids.serve16,
          step: `serve: ${STREAMS}-stream blob client, ${blobs.length} blobs, from ${what}`,
          unit: 's',
          target: { max: 1.0, what: '≤ 1.0' },
          peerName: 'docker-registry 2.8',
          ...r,
        });
      }
    };
    const preloadRow = async (ours, peer, servers) => {
      const refs = env.rel.payload.map((p) => p.ref);
      const r = await alternate(RUNS, {
        servers: (side, node) => [node.ctd.pid, servers[side]],
        prepare: async (side) => {
          const node = await startNode(env.dir, env.pub);
          await (side === 'ours'
            ? mirrorToBundle(node.ctd.certsDir, UPSTREAM_HOST, ours)
            : mirrorToRegistry(node.ctd.certsDir, UPSTREAM_HOST, peer));
          return node;
        },
        cleanup: (node) => node.stop(),
        ours: (node) => criPullAll(node.ctd.socket, refs),
        peer: (node) => criPullAll(node.ctd.socket, refs),
      });
      await addRow({
        id: 'preload',
        step: "pre-load: containerd (CRI) pulls every image through the agent load's registry",
        unit: 's',
        peerName: 'straight from docker-registry',
        ...r,
      });
    };
    // the registry a load pulls from: what pre-load measures too
    if (['serve-staging', 'serve16-staging', 'preload'].some((r) => ONLY.has(r))) {
      await withServers(
        env,
        () => serveStaging(staged),
        async (ours, peer, servers) => {
          await clientRows(
            ours,
            peer,
            { serve: 'serve-staging', serve16: 'serve16-staging' },
            "the agent load's registry (StagingStore over its verified staging, trusted)",
            servers,
          );
          if (ONLY.has('preload')) await preloadRow(ours, peer, servers);
        },
      );
    }
    if (['serve', 'serve16'].some((r) => ONLY.has(r))) {
      await withServers(
        env,
        () => serve(staged, env.pub),
        (ours, peer, servers) =>
          clientRows(
            ours,
            peer,
            { serve: 'serve', serve16: 'serve16' },
            '`bundle-agent serve DIR` (every chunk re-checked)',
            servers,
          ),
      );
    }
    if (['serve-file', 'serve16-file'].some((r) => ONLY.has(r))) {
      await withServers(
        env,
        () => serve(file, env.pub),
        (ours, peer, servers) =>
          clientRows(
            ours,
            peer,
            { serve: 'serve-file', serve16: 'serve16-file' },
            '`bundle-agent serve FILE` (media mode: every frame re-checked)',
            servers,
          ),
      );
    }
    if (ONLY.has('random')) await addRow(await randomRow(env, file));
    if (ONLY.has('load') || ONLY.has('load-order')) {
      const pullFile = path.join(env.dir, 'ours-pull.bundle');
      await buildPullOrder(env, pullFile);
      if (ONLY.has('load')) await addRow(await loadRow(env, pullFile));
      if (ONLY.has('load-order')) await addRow(await loadOrderRow(env, file, pullFile));
    }
    if (ONLY.has('rss')) await rssRows(env, createRss, extractRss);
  } finally {
    await env.reg.stop();
  }
}

/** random: the largest blob through the seek index vs decompressing the archive up to it. */
async function randomRow(env, file) {
  const { manifest } = await withBundleFile(file, readHeader);
  const largest = [...manifest.blobs].sort((a, b) => b.size - a.size)[0];
  const r = await alternate(RUNS, {
    ours: () =>
      withBundleFile(file, async (source) => {
        const reader = await BundleRandomReader.open(source, manifest);
        await reader.readVerified(blobPath(largest.digest));
      }),
    peer: () => shell(`zstd -dc '${file}' | tar -xO '${blobPath(largest.digest)}' > /dev/null`),
  });
  return {
    id: 'random',
    step: 'random access: the largest blob through the seek index, verified',
    unit: 's',
    peerName: 'zstd -dc | tar -xO BLOB',
    ...r,
  };
}

/**
 * The moonshot (#11 item 3): a whole `bundle-agent load` (stage, serve, pre-load into a real
 * containerd, pin) against reading the file once plus containerd's own pull from docker-registry.
 */
async function loadRow(env, file) {
  const refs = env.rel.payload.map((p) => p.ref);
  const cat = [];
  const r = await alternate(RUNS, {
    prepare: async (side) => {
      const node = await startNode(env.dir, env.pub);
      if (side === 'peer') await mirrorToRegistry(node.ctd.certsDir, UPSTREAM_HOST, env.reg.host);
      return node;
    },
    cleanup: (node) => node.stop(),
    // the whole machine's work: containerd's on both sides, docker-registry's for the peer
    servers: (side, node) => (side === 'ours' ? [node.ctd.pid] : [node.ctd.pid, env.reg.pid]),
    ours: (node) => cli(AGENT, ['load', file, '--config', node.config]),
    peer: async (node) => {
      cat.push(await seconds(() => shell(`cat '${file}' > /dev/null`)));
      await criPullAll(node.ctd.socket, refs);
    },
  });
  meta.catSeconds = stats(cat);
  return {
    id: 'load',
    step: '`bundle-agent load` (stage + pre-load into containerd + pin), blobs in pull order',
    unit: 's',
    target: { max: 1.25, what: '≤ 1.25 (moonshot)' },
    peerName: '`cat FILE >/dev/null` + containerd pull from docker-registry',
    ...r,
  };
}

/** The same release as `file`, its blobs in pull order (format version 3): what `load` reads. */
async function buildPullOrder(env, pullFile) {
  const { rel, dir } = env;
  const cache = path.join(dir, 'pull-order-cache');
  try {
    await cli(BUNDLE, [
      'create',
      '--quiet',
      '--blob-order',
      'pull',
      '--release',
      rel.release,
      '--registries-conf',
      rel.conf,
      '--key',
      env.key,
      '--cache',
      cache,
      '-o',
      pullFile,
    ]);
  } finally {
    await rm(cache, { recursive: true, force: true });
  }
}

/**
 * load-order (#24 item 1): the whole load of the pull-order bundle against the same load of the
 * digest-order one, on fresh nodes, alternately: what writing blobs in pull order buys.
 */
async function loadOrderRow(env, file, pullFile) {
  const r = await alternate(RUNS, {
    prepare: () => startNode(env.dir, env.pub),
    cleanup: (node) => node.stop(),
    servers: (_side, node) => [node.ctd.pid],
    ours: (node) => cli(AGENT, ['load', pullFile, '--config', node.config]),
    peer: (node) => cli(AGENT, ['load', file, '--config', node.config]),
  });
  return {
    id: 'load-order',
    step: '`bundle-agent load` of the bundle in pull order (format 3) vs in digest order (format 2, the default)',
    unit: 's',
    peerName: 'the same load, blobs in digest order',
    ...r,
  };
}

/** Peak RSS at this scale (from the timed runs) and, once each, at RSS_X times it. */
async function rssRows(env, createRss, extractRss) {
  const add = async (scale, c, x) => {
    await addRow({
      id: `rss-create-${scale}`,
      step: `peak RSS \`bundle create\`, scale ${scale}`,
      unit: 'MiB',
      ours: stats(c),
      target: RSS_TARGET,
    });
    await addRow({
      id: `rss-extract-${scale}`,
      step: `peak RSS \`bundle extract\`, scale ${scale}`,
      unit: 'MiB',
      ours: stats(x),
      target: RSS_TARGET,
    });
  };
  await add(SCALE, createRss, extractRss);
  if (RSS_X <= 0) return;
  await env.reg.stop();
  await rm(env.dir, { recursive: true, force: true });
  const big = await setUp(SCALE * RSS_X, path.join(work, 'sx'));
  try {
    const bigFile = path.join(big.dir, 'ours.bundle');
    const c = [];
    const x = [];
    await addRow({
      id: `build-x${RSS_X}`,
      step: `build at scale ${SCALE * RSS_X} (1 run)`,
      unit: 's',
      target: { max: 0.8, what: '≤ 0.8' },
      ...(await buildRow(big, bigFile, 1, c)),
    });
    await addRow({
      id: `stage-x${RSS_X}`,
      step: `stage at scale ${SCALE * RSS_X} (1 run)`,
      unit: 's',
      target: { max: 1.2, what: '≤ 1.2' },
      ...(await stageRow(big, bigFile, undefined, 1, x)),
    });
    meta[`bundleBytesX${RSS_X}`] = (await stat(bigFile)).size;
    await add(SCALE * RSS_X, c, x);
  } finally {
    await big.reg.stop();
  }
}

try {
  await main();
  if (meta.images)
    console.log(
      `\n${meta.images} images, ${meta.blobs} blobs, bundle ${(meta.bundleBytes / 2 ** 20).toFixed(0)} MiB; median (min–max) of ${RUNS} alternating runs; ${meta.cores} cores, load ${meta.loadavg.join(' ')}\n`,
    );
  console.log(table(rows));
  console.log('\nratio = ours / peer, per pair of alternating runs');
  for (const row of rows.filter((r) => r.breakdown))
    console.log(
      `\n${row.step}: where the time goes (medians; load ${row.breakdown.loadavg.join(' ')})\n\n${breakdownTable(row.breakdown)}`,
    );
  await writeResults(OUT, meta, rows);
  say(`results: ${OUT}`);
} finally {
  if (process.env.BENCH_KEEP) say(`kept: ${work} (BENCH_KEEP)`);
  else await rm(work, { recursive: true, force: true });
}

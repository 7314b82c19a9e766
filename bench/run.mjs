#!/usr/bin/env node
// Benchmarks against peers, each measured in the same run on the same data, printed as ratios
// (ours / peer: < 1 means faster or smaller). Data: generated OCI images (~BENCH_MB MiB of
// layers, half random, half compressible text), so nothing depends on the network.
//   build:    `bundle create` (oci: source)       vs tar | zstd -3 (k3s-style air-gap tarball)
//   unpack:   `bundle extract` (verifies all)     vs zstd -dc | tar -x (verifies nothing)
//   random:   one blob through the seek index      vs zstd -dc | tar -xO that blob
//   serve:    skopeo copy from `bundle-agent serve` vs skopeo copy from docker-registry
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, stat, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { writeImageLayout } from '../test/helpers/images.mjs';
import { startRegistry, skopeoCopy } from '../test/helpers/registry.mjs';
import { BundleRandomReader, readHeader, blobPath } from '@offline-bundle/format';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const BUNDLE = path.join(ROOT, 'builder/bin/bundle.js');
const AGENT = path.join(ROOT, 'agent/bin/bundle-agent.js');
const MB = Number(process.env.BENCH_MB ?? 160);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);

const sh = (cmd) => execFileSync('sh', ['-c', cmd], { stdio: ['ignore', 'ignore', 'inherit'] });
async function time(fn) {
  const samples = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = process.hrtime.bigint();
    await fn(i);
    samples.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)];
}
const rows = [];
function report(name, ours, peer, unit = 's') {
  rows.push({ name, ours, peer, ratio: ours / peer, unit });
  console.log(`${name.padEnd(58)} ours ${ours.toFixed(3)}${unit}  peer ${peer.toFixed(3)}${unit}  ratio ${(ours / peer).toFixed(2)}`);
}

const tmp = await mkdtemp(path.join(os.tmpdir(), 'ob-bench-'));
try {
  const layout = path.join(tmp, 'layout');
  const perLayer = 8 * 1024 * 1024;
  const layers = Math.max(2, Math.round((MB * 1024 * 1024) / perLayer));
  const words = 'node cluster upgrade image layer registry bundle offline mirror digest '.repeat(1000);
  for (let i = 0; i < layers; i++) {
    const content = i % 2 ? Buffer.from(words.repeat(Math.ceil(perLayer / words.length)).slice(0, perLayer)) : randomBytes(perLayer);
    await writeImageLayout(layout, { tag: `img${i}`, index: false, platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ [`data/${i}.bin`]: content }] }] });
  }
  const images = Array.from({ length: layers }, (_, i) => ['--image', `oci:${layout}:img${i}=bench.example.com/app/img${i}:v1`]).flat();
  execFileSync(process.execPath, [BUNDLE, 'keygen', '--out', path.join(tmp, 'k')], { stdio: 'ignore' });
  const layoutBytes = Number(execFileSync('du', ['-sb', layout]).toString().split('\t')[0]);
  console.log(`data: ${layers} images, ${(layoutBytes / 1048576).toFixed(0)} MiB layout; median of ${RUNS} runs; ${os.cpus().length} cores\n`);

  const file = path.join(tmp, 'b.bundle');
  const ours = await time(async (i) => {
    await rm(file, { force: true });
    execFileSync(process.execPath, [BUNDLE, 'create', '--quiet', '--version', '1', ...images, '--key', path.join(tmp, 'k.key'), '--cache', path.join(tmp, `cache${i}`), '-o', file]);
  });
  const peer = await time(() => sh(`tar -C '${layout}' -cf - . | zstd -q -3 -T1 -f -o '${tmp}/p.tar.zst'`));
  report('build: bundle create vs tar|zstd -3', ours, peer);
  // The same work ours does besides compressing: hash every blob, then make the file durable.
  const peerFair = await time(() => sh(`sha256sum '${layout}'/blobs/sha256/* > /dev/null && tar -C '${layout}' -cf - . | zstd -q -3 -T1 -f -o '${tmp}/p.tar.zst' && sha256sum '${tmp}/p.tar.zst' > /dev/null && sync '${tmp}/p.tar.zst'`));
  report('build: bundle create vs sha256sum + tar|zstd -3 + sha256sum + sync', ours, peerFair);
  report('size: bundle vs tar.zst (bytes, MiB)', (await stat(file)).size / 1048576, (await stat(`${tmp}/p.tar.zst`)).size / 1048576, 'MiB');

  const oursX = await time(async () => {
    await rm(`${tmp}/x`, { recursive: true, force: true });
    execFileSync(process.execPath, [BUNDLE, 'extract', '--quiet', file, `${tmp}/x`, '--key', path.join(tmp, 'k.pub')]);
  });
  const peerX = await time(() => sh(`rm -rf '${tmp}/y' && mkdir '${tmp}/y' && zstd -dc '${file}' | tar -x -C '${tmp}/y'`));
  report('unpack: bundle extract (verified) vs zstd -dc|tar -x', oursX, peerX);
  const peerXFair = await time(() => sh(`rm -rf '${tmp}/y' && mkdir '${tmp}/y' && sha256sum '${file}' > /dev/null && zstd -dc '${file}' | tar -x -C '${tmp}/y' && (cd '${tmp}/y' && sha256sum blobs/sha256/* > /dev/null) && sync -f '${tmp}/y/index.json'`));
  report('unpack: bundle extract vs sha256sum + zstd -dc|tar -x + sha256sum + sync', oursX, peerXFair);

  const { manifest } = await readHeader(file);
  const last = [...manifest.blobs].sort((a, b) => a.digest.localeCompare(b.digest)).pop();
  const oursR = await time(async () => {
    const r = await BundleRandomReader.open(file, manifest);
    await r.readVerified(blobPath(last.digest));
    await r.close();
  });
  const peerR = await time(() => sh(`zstd -dc '${file}' | tar -xO '${blobPath(last.digest)}' > /dev/null`));
  report('random: last blob via seek index vs zstd -dc|tar -xO', oursR, peerR);

  const reg = await startRegistry();
  try {
    const srcRef = (i) => `docker://${reg.host}/app/img${i}:v1`;
    for (let i = 0; i < layers; i++) await skopeoCopy(`oci:${layout}:img${i}`, srcRef(i), ['--preserve-digests']);
    const child = spawn(process.execPath, [AGENT, 'serve', file, '--key', path.join(tmp, 'k.pub'), '--json'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const address = await new Promise((resolve) => child.stdout.once('data', (d) => resolve(JSON.parse(d.toString()).address)));
    try {
      const pull = async (ref) => {
        await rm(`${tmp}/pull`, { recursive: true, force: true });
        for (let i = 0; i < layers; i++) await skopeoCopy(ref(i), `oci:${tmp}/pull:img${i}`);
      };
      // first read through our registry hashes each blob once; measure steady state after a warm-up
      await pull((i) => `docker://${address}/bench.example.com/app/img${i}:v1`);
      const oursS = await time(() => pull((i) => `docker://${address}/bench.example.com/app/img${i}:v1`));
      const peerS = await time(() => pull(srcRef));
      report('serve: skopeo copy from bundle-agent serve vs docker-registry', oursS, peerS);
    } finally {
      child.kill('SIGTERM');
    }
  } finally {
    await reg.stop();
  }
  console.log('\nratio = ours / peer');
  if (process.argv.includes('--json')) console.log(JSON.stringify(rows));
} finally {
  await rm(tmp, { recursive: true, force: true });
}

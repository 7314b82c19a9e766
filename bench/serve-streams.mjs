#!/usr/bin/env node
// Memory and throughput of `bundle-agent serve` on a bundle FILE (media mode: every blob read
// through the seek index) with 1, 4, 16 blob streams in parallel (issue #24).
//
//   node bench/serve-streams.mjs [--dir DIR] [--layers 4] [--layer-mib 100] [--streams 1,4,16]
//                                [--agent PATH/bin/bundle-agent.js] [--json FILE]
//
// The bundle (one image of LAYERS random layers, incompressible like real layers' gzip) is
// written once into DIR by the format's writer and reused. For each stream count a fresh
// `bundle-agent serve` verifies it, then that many `curl`s fetch the layers at once (stream i
// takes layer i mod LAYERS). Reported: the serve process's VmHWM after its verifying pass and
// after the streams (its peak RSS), and the streams' bytes over their wall time.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { serve } from './lib/ours.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const { values: o } = parseArgs({
  options: {
    dir: { type: 'string', default: '/tmp/ob-serve-streams' },
    layers: { type: 'string', default: '4' },
    'layer-mib': { type: 'string', default: '100' },
    streams: { type: 'string', default: '1,4,16' },
    agent: { type: 'string', default: path.join(ROOT, 'agent/bin/bundle-agent.js') },
    json: { type: 'string' },
  },
});
const MiB = 1024 * 1024;
const sha256 = (b) => 'sha256:' + createHash('sha256').update(b).digest('hex');
const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const MT_CONFIG = 'application/vnd.oci.image.config.v1+json';
const MT_LAYER = 'application/vnd.oci.image.layer.v1.tar+gzip';

/** Writes DIR/serve.bundle and DIR/signer.pub once; returns the layers' digests. */
async function bundle(dir, layers, layerBytes) {
  const file = path.join(dir, 'serve.bundle');
  const meta = path.join(dir, 'layers.json');
  if (existsSync(file) && existsSync(meta))
    return {
      file,
      pub: path.join(dir, 'signer.pub'),
      digests: JSON.parse(await readFile(meta, 'utf8')),
    };
  const { writeBundle, generateKeyPair } = await import(
    path.join(ROOT, 'packages/format/dist/index.js')
  );
  const { createPrivateKey } = await import('node:crypto');
  await mkdir(path.join(dir, 'src'), { recursive: true });
  const blobs = [];
  const put = async (data, mediaType) => {
    const digest = sha256(data);
    const p = path.join(dir, 'src', digest.slice(7));
    await writeFile(p, data);
    blobs.push({ digest, size: data.length, mediaType, path: p });
    return { mediaType, digest, size: data.length };
  };
  const layerDescs = [];
  for (let i = 0; i < layers; i++) layerDescs.push(await put(randomBytes(layerBytes), MT_LAYER));
  const config = await put(
    Buffer.from(
      JSON.stringify({
        architecture: 'amd64',
        os: 'linux',
        config: {},
        rootfs: { type: 'layers', diff_ids: layerDescs.map((l) => l.digest) },
      }),
    ),
    MT_CONFIG,
  );
  const manifest = await put(
    Buffer.from(
      JSON.stringify({ schemaVersion: 2, mediaType: MT_MANIFEST, config, layers: layerDescs }),
    ),
    MT_MANIFEST,
  );
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        {
          ...manifest,
          platform: { os: 'linux', architecture: 'amd64' },
          annotations: { 'org.opencontainers.image.ref.name': 'example.com/bench/app:v1' },
        },
      ],
    }),
  );
  const key = generateKeyPair('ecdsa-p256');
  await writeFile(path.join(dir, 'signer.pub'), key.publicPem);
  await writeBundle({
    release: {
      name: 'bench',
      version: '1.0.0',
      arch: 'amd64',
      image: null,
      digest: null,
      upgradeFrom: [],
    },
    images: [
      {
        repository: 'example.com/bench/app',
        tag: 'v1',
        digest: manifest.digest,
        mediaType: MT_MANIFEST,
        platforms: [{ os: 'linux', architecture: 'amd64' }],
      },
    ],
    index,
    blobs,
    imageStoreBytes: layers * layerBytes,
    key: createPrivateKey(key.privatePem),
    output: file,
    createdAt: '2026-01-01T00:00:00Z',
    tool: { name: 'serve-streams-bench', version: '0' },
  });
  await rm(path.join(dir, 'src'), { recursive: true });
  const digests = layerDescs.map((l) => l.digest);
  await writeFile(meta, JSON.stringify(digests));
  return { file, pub: path.join(dir, 'signer.pub'), digests };
}

async function hwm(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)[1]) * 1024;
}

const curl = promisify(execFile);

async function run(file, pub, digests, streams) {
  // until it prints its address: the verifying pass is over then
  const s = await serve(file, pub, o.agent);
  try {
    const ready = await hwm(s.pid);
    const url = (d) => `http://${s.address}/v2/example.com/bench/app/blobs/${d}`;
    const t0 = process.hrtime.bigint();
    const got = await Promise.all(
      Array.from({ length: streams }, (_, i) =>
        curl('curl', [
          '-sf',
          '-o',
          '/dev/null',
          '-w',
          '%{size_download}',
          url(digests[i % digests.length]),
        ]).then((r) => Number(r.stdout)),
      ),
    );
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const bytes = got.reduce((a, b) => a + b, 0);
    return {
      streams,
      readyHwmMiB: +(ready / MiB).toFixed(1),
      peakHwmMiB: +((await hwm(s.pid)) / MiB).toFixed(1),
      bytes,
      seconds: +seconds.toFixed(2),
      MBps: +(bytes / seconds / 1e6).toFixed(1),
    };
  } finally {
    await s.stop();
  }
}

const { file, pub, digests } = await bundle(o.dir, Number(o.layers), Number(o['layer-mib']) * MiB);
const results = [];
for (const n of o.streams.split(',').map(Number)) {
  const r = await run(file, pub, digests, n);
  results.push(r);
  console.log(
    `${n} stream(s): ready ${r.readyHwmMiB} MiB, peak ${r.peakHwmMiB} MiB, ${r.bytes} bytes in ${r.seconds} s (${r.MBps} MB/s)`,
  );
}
if (o.json)
  await writeFile(
    o.json,
    JSON.stringify(
      { agent: o.agent, layers: Number(o.layers), layerMiB: Number(o['layer-mib']), results },
      null,
      2,
    ) + '\n',
  );

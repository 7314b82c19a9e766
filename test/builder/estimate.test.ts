// Honest sizes: bundle.json's totals.imageStoreBytes (what the agent's space check reserves in
// the image store) comes from the real unpacked size of every layer, counted while the layer is
// fetched and kept in the cache beside it. Checked against what a real containers/storage
// (podman pull, vfs driver, single-layer images) takes on disk, for a layer of random data
// (gzip cannot shrink it: the old flat 3x claimed three times too much) and a compressible one
// (text: the old 3x claimed too little). Cached runs, and caches from before sizes were kept,
// give the same figure.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { MAX_UNPACK_RATIO, UnpackedCounter } from '@offline-bundle/image-fetch';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, keygen } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-estimate-');
const keys = await keygen(work);

/** Log-like text: compresses some 4-6x with gzip, as binaries and text in real layers do. */
function text(bytes: number): Buffer {
  const words = [
    'error',
    'info',
    'request',
    'served',
    'bytes',
    'node',
    'pod',
    'image',
    'pulled',
    'layer',
  ];
  const lines: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const r = randomBytes(6);
    const line = `2026-11-23T12:${String(r[0]! % 60).padStart(2, '0')}:${String(r[1]! % 60).padStart(2, '0')}Z ${words[r[2]! % 10]} ${words[r[3]! % 10]} id=${r.readUInt16LE(4)} seq=${i}\n`;
    lines.push(line);
    size += line.length;
  }
  return Buffer.from(lines.join('')).subarray(0, bytes);
}

/** Bytes a real containers/storage takes for the image's unpacked layer (podman pull into a fresh root). */
async function storeBytes(ref: string, root: string): Promise<number> {
  // podman refuses a runroot path longer than 50 characters
  const run = await mkdtemp('/tmp/obr-');
  t.teardown(() => rm(run, { recursive: true, force: true }));
  execFileSync(
    'podman',
    [
      '--root',
      path.join(root, 'root'),
      '--runroot',
      run,
      '--storage-driver',
      'vfs',
      'pull',
      '-q',
      '--tls-verify=false',
      `docker://${ref}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  return Number(
    execFileSync('du', ['-sb', path.join(root, 'root', 'vfs', 'dir')])
      .toString()
      .split('\t')[0],
  );
}

let n = 0;
async function estimate(ref: string, cache: string): Promise<number> {
  const out = path.join(work, `e-${++n}.bundle`);
  const r = await bundle([
    'create',
    '--quiet',
    '--tls-verify=false',
    '--key',
    keys.key,
    '--version',
    '1',
    '--image',
    ref,
    '-o',
    out,
    '--cache',
    cache,
  ]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (await bundleJson(out)).totals.imageStoreBytes;
}

const cases: [string, Buffer][] = [
  ['random data', randomBytes(12 * 1000 * 1000)],
  ['compressible text', text(12 * 1000 * 1000)],
];
for (const [what, data] of cases) {
  t.test(`${what}: the estimate is within 5 % of what the image store takes`, async (t) => {
    const name = what.replace(/\W+/g, '-');
    const img = await pushImage(
      {
        tag: 'v1',
        platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'data/file': data }] }],
      },
      `${reg.host}/est/${name}:v1`,
    );
    const root = path.join(work, `store-${name}`);
    await mkdir(root);
    t.teardown(() => rm(root, { recursive: true, force: true }));
    const actual = await storeBytes(img.ref, root);
    const cache = path.join(work, `cache-${name}`);
    const first = await estimate(img.ref, cache);
    t.ok(Math.abs(first - actual) / actual < 0.05, `estimate ${first} vs ${actual} on disk`);
    t.equal(await estimate(img.ref, cache), first, 'a cached run (no download) knows it too');
    await rm(path.join(cache, 'sizes'), { recursive: true });
    t.equal(
      await estimate(img.ref, cache),
      first,
      'a cache from before sizes were kept: measured from the cached file',
    );
  });
}

t.test(
  'a gzip bomb layer is decoded only up to 100x its size (MAX_UNPACK_RATIO), and says so',
  async (t) => {
    const zeros = gzipSync(Buffer.alloc(200 * 1000 * 1000));
    t.ok(
      zeros.length * MAX_UNPACK_RATIO < 200e6,
      `fixture: ${zeros.length} bytes that unpack past the bound`,
    );
    const counter = new UnpackedCounter(zeros.length);
    for (let i = 0; i < zeros.length; i += 65536) await counter.push(zeros.subarray(i, i + 65536));
    t.equal(await counter.finish(), zeros.length * MAX_UNPACK_RATIO);
    const honest = gzipSync(text(1_000_000));
    const c2 = new UnpackedCounter(honest.length);
    await c2.push(honest);
    t.equal(await c2.finish(), 1_000_000, 'an ordinary layer: its exact size');
    const broken = new UnpackedCounter(10);
    await broken.push(Buffer.from([0x1f, 0x8b, 0x08, 0x00, 1, 2, 3, 4, 5, 6]));
    t.equal(
      await broken.finish(),
      undefined,
      'an undecodable layer: no figure (the 3x fallback applies)',
    );
  },
);

#!/usr/bin/env node
// Size of a delta against the full bundle (#27, README "Deltas"): two generated releases of the
// benchmark's shape (bench/lib/shape.mjs: shared RHEL base, runtime and oc layers, each image's
// own layers) where the second is a patch release: every shared layer and most images are the
// same, CHANGED of the images are rebuilt (their own layers new). Both are written as OCI
// layouts, then `bundle create` writes the second release in full and as a delta --base the first.
//
//   node bench/delta-size.mjs [--images 190] [--scale 0.02] [--changed 0.1] [--dir DIR]
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildLayer, writeImageLayout } from '../test/helpers/images.mjs';
import { SHAPES, releaseShape } from './lib/shape.mjs';

const { values: o } = parseArgs({
  options: {
    images: { type: 'string', default: '190' },
    scale: { type: 'string', default: '0.02' },
    changed: { type: 'string', default: '0.1' },
    dir: { type: 'string' },
  },
});
const BUNDLE = new URL('../builder/bin/bundle.js', import.meta.url).pathname;
const shape = releaseShape(SHAPES[Number(o.images)], Number(o.scale));
const dir = o.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'ob-delta-size-')));

/** Incompressible bytes as gzip layers are, the same for the same seed. */
function bytesOf(seed, n) {
  const out = Buffer.alloc(n);
  let block = createHash('sha256').update(seed).digest();
  for (let at = 0; at < n; at += block.length) {
    block.copy(out, at);
    block = createHash('sha256').update(block).digest();
  }
  return out;
}

const layer = (seed, n) => buildLayer({ 'data.bin': bytesOf(seed, Math.floor(n)) }, { level: 0 });

/** Release `v`: image i is rebuilt in it when `rebuilt(i)`; shared layers never are. */
async function release(v, rebuilt) {
  const layout = path.join(dir, `layout-${v}`);
  const shared = Object.fromEntries(
    await Promise.all(
      Object.entries(shape.shared).map(async ([k, n]) => [k, await layer(`shared ${k}`, n)]),
    ),
  );
  const specs = [];
  for (const [i, im] of shape.images.entries()) {
    const gen = rebuilt(i) ? v : 'first';
    const layers = [];
    for (const [k, l] of im.layers.entries())
      layers.push('shared' in l ? shared[l.shared] : await layer(`${im.name} ${k} ${gen}`, l.own));
    await writeImageLayout(layout, {
      tag: `i${i}`,
      platforms: [{ os: 'linux', architecture: 'amd64', layers }],
    });
    specs.push(
      '--image',
      `oci:${layout}:i${i}=quay.io/openshift-release-dev/ocp-v4.0-art-dev:${im.name}`,
    );
  }
  return specs;
}

const changedEvery = Math.max(1, Math.round(1 / Number(o.changed)));
const create = (v, out, specs, extra = []) =>
  execFileSync(
    process.execPath,
    [
      BUNDLE,
      'create',
      '--quiet',
      '--json',
      '--version',
      v,
      ...specs,
      '--key',
      path.join(dir, 'k.key'),
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      path.join(dir, out),
      ...extra,
    ],
    { encoding: 'utf8', maxBuffer: 64 << 20 },
  );
execFileSync(process.execPath, [BUNDLE, 'keygen', '--out', path.join(dir, 'k')]);
const first = await release('4.16.1', () => false);
create('4.16.1', 'first.bundle', first);
const second = await release('4.16.2', (i) => i % changedEvery === 0);
await rm(path.join(dir, 'layout-4.16.1'), { recursive: true });
const full = JSON.parse(create('4.16.2', 'full.bundle', second));
const delta = JSON.parse(
  create('4.16.2', 'delta.bundle', second, ['--base', path.join(dir, 'first.bundle')]),
);
const size = async (f) => (await stat(path.join(dir, f))).size;
const fullBytes = await size('full.bundle');
const deltaBytes = await size('delta.bundle');
const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
console.log(
  JSON.stringify({
    images: shape.images.length,
    rebuiltImages: shape.images.filter((_, i) => i % changedEvery === 0).length,
    scale: Number(o.scale),
    full: { bytes: fullBytes, blobs: full.blobs },
    delta: {
      bytes: deltaBytes,
      carriedBlobs: delta.delta.carriedBlobs,
      totalBlobs: delta.delta.totalBlobs,
    },
    ratio: Number((deltaBytes / fullBytes).toFixed(4)),
  }),
);
console.error(
  `full ${mb(fullBytes)}, delta ${mb(deltaBytes)} (${((100 * deltaBytes) / fullBytes).toFixed(1)} %), ${delta.delta.carriedBlobs} of ${delta.delta.totalBlobs} blobs carried`,
);
if (!o.dir) await rm(dir, { recursive: true, force: true });

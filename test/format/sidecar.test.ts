// tier: unit
// NAME.bundle.sha256 is written before the bundle is renamed into place: when the sidecar cannot
// be written, no new bundle appears (a failed run must not leave a bundle that looks finished).
import t from 'tap';
import { mkdir, readdir, writeFile, readFile } from 'node:fs/promises';
import path from 'node:path';
import { writeBundle, type WriteBundleInput } from '@offline-bundle/format';
import { makeBundle, type MadeBundle } from './craft.js';

let b: MadeBundle;
t.before(async () => {
  b = await makeBundle(t);
});

const input = (output: string): WriteBundleInput => ({
  release: b.written.manifest.release,
  images: b.images,
  index: b.index,
  blobs: b.blobs,
  imageStoreBytes: 0,
  key: b.key.privateKey,
  output,
  createdAt: '2026-01-01T00:00:00Z',
  tool: { name: 't', version: '0' },
});

t.test('a sidecar that cannot be written: no new bundle, the old pair untouched', async (t) => {
  const dir = path.join(b.dir, 'sidecar-fails');
  await mkdir(dir);
  const out = path.join(dir, 'x.bundle');
  await writeFile(out, 'old bundle');
  // NAME.bundle.sha256 and its temp name are directories: neither can become the sidecar
  await mkdir(`${out}.sha256`);
  await writeFile(path.join(`${out}.sha256`, 'keep'), '');
  await mkdir(`${out}.sha256.${process.pid}.tmp`);
  const err = await writeBundle(input(out)).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err, 'the write fails');
  t.equal(await readFile(out, 'utf8'), 'old bundle', 'the old bundle is still there, not replaced');
  t.same(
    (await readdir(dir)).sort(),
    ['x.bundle', 'x.bundle.sha256', `x.bundle.sha256.${process.pid}.tmp`],
    'no temp bundle left',
  );
});

t.test('the sidecar is replaced together with the bundle', async (t) => {
  const dir = path.join(b.dir, 'sidecar-ok');
  await mkdir(dir);
  const out = path.join(dir, 'x.bundle');
  await writeFile(`${out}.sha256`, 'stale\n');
  const w = await writeBundle(input(out));
  t.equal(await readFile(`${out}.sha256`, 'utf8'), `${w.fileDigest.slice(7)}  x.bundle\n`);
  t.same((await readdir(dir)).sort(), ['x.bundle', 'x.bundle.sha256'], 'no temp files');
});

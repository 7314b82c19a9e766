// tier: unit
// Same inputs, same bytes: with Ed25519 (deterministic signatures) the whole file; with ECDSA
// everything but the signature.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import {
  readHeader,
  readSeekIndex,
  verifyBundle,
  writeBundle,
  withBundleFile,
} from '@offline-bundle/format';
import { makeBundle, makeKey, readFrames, tmpdir, type TestKey } from './craft.js';

const layers = [randomBytes(5 * 1024 * 1024), randomBytes(2000), randomBytes(40_000)];

async function twice(t: Test, key: TestKey): Promise<[string, string]> {
  const dir = await tmpdir(t, 'ob-repro-');
  const a = await makeBundle(t, { key, layers, dir, name: 'a.bundle' });
  const b = await makeBundle(t, { key, layers, dir, name: 'b.bundle' });
  await withBundleFile(a.path, (s) => verifyBundle(s, { trust: a.trust }));
  await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }));
  return [a.path, b.path];
}

t.test('Ed25519 and the same createdAt: identical bytes', async (t) => {
  const [a, b] = await twice(t, makeKey('ed25519'));
  t.ok((await readFile(a)).equals(await readFile(b)), 'byte-identical files');
  t.equal(
    (await readFile(`${a}.sha256`, 'utf8')).split(' ')[0],
    (await readFile(`${b}.sha256`, 'utf8')).split(' ')[0],
    'same digest',
  );
});

t.test('blob order given to writeBundle does not matter', async (t) => {
  const key = makeKey('ed25519');
  const made = await makeBundle(t, { key, layers });
  const again = path.join(made.dir, 'reversed.bundle');
  await writeBundle({
    release: made.written.manifest.release,
    images: made.images,
    index: made.index,
    blobs: [...made.blobs].reverse(),
    imageStoreBytes: 1000,
    key: key.privateKey,
    output: again,
    createdAt: made.written.manifest.creator.createdAt,
    tool: {
      name: made.written.manifest.creator.tool,
      version: made.written.manifest.creator.version,
    },
  });
  t.ok((await readFile(again)).equals(await readFile(made.path)));
});

t.test('a different createdAt changes bundle.json', async (t) => {
  const key = makeKey('ed25519');
  const dir = await tmpdir(t, 'ob-repro-');
  const a = await makeBundle(t, {
    key,
    layers,
    dir,
    name: 'a.bundle',
    createdAt: '2026-01-01T00:00:00Z',
  });
  const b = await makeBundle(t, {
    key,
    layers,
    dir,
    name: 'b.bundle',
    createdAt: '2026-01-01T00:00:01Z',
  });
  t.notOk((await readFile(a.path)).equals(await readFile(b.path)));
});

t.test('ECDSA: the files differ only inside the signature', async (t) => {
  const [a, b] = await twice(t, makeKey('ecdsa-p256'));
  const ha = await withBundleFile(a, readHeader);
  const hb = await withBundleFile(b, readHeader);
  t.ok(ha.manifestBytes.equals(hb.manifestBytes), 'bundle.json bytes identical');
  t.notOk(ha.signature.equals(hb.signature), 'ECDSA signatures differ (random nonce)');

  const fa = await readFrames(a);
  const fb = await readFrames(b);
  t.equal(fa.length, fb.length, 'same frame count');
  // frames 0-1: bundle.json's header and data; 2-3: the signature's header and data (its
  // size, in the header, varies with the DER encoding); 4..: the layout
  for (const i of [0, 1])
    t.ok(fa[i]!.bytes.equals(fb[i]!.bytes), `frame ${i} (bundle.json) identical`);
  const layoutA = (await readFile(a)).subarray(
    fa[4]!.compressedOffset,
    fa[fa.length - 1]!.compressedOffset + fa[fa.length - 1]!.bytes.length,
  );
  const layoutB = (await readFile(b)).subarray(
    fb[4]!.compressedOffset,
    fb[fb.length - 1]!.compressedOffset + fb[fb.length - 1]!.bytes.length,
  );
  t.ok(layoutA.equals(layoutB), 'every layout frame identical');
  const ia = await withBundleFile(a, readSeekIndex);
  const ib = await withBundleFile(b, readSeekIndex);
  t.same(
    ia.frames.slice(4).map((f) => [f.compressedSize, f.decompressedSize]),
    ib.frames.slice(4).map((f) => [f.compressedSize, f.decompressedSize]),
    'seek table entries identical past the signature',
  );
  t.same(ia.frames.slice(0, 2), ib.frames.slice(0, 2));
});

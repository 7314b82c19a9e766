// tier: unit
// The fixtures themselves: crafting a valid bundle's entries gives back its exact bytes,
// so every bad archive the rejection tests build differs from a good one only where intended.
import t from 'tap';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { BUNDLE_JSON, SIGNATURE, verifyBundle, withBundleFile } from '@offline-bundle/format';
import { craft, makeBundle, readEntries, readFrames, resign } from './craft.js';

t.test('craft(readEntries(bundle)) reproduces writeBundle byte for byte', async (t) => {
  const b = await makeBundle(t);
  const entries = await readEntries(b.path);
  t.same(
    entries.slice(0, 2).map((e) => e.header.name),
    [BUNDLE_JSON, SIGNATURE],
  );
  const out = path.join(b.dir, 'copy.bundle');
  const crafted = await craft(out, entries);
  t.equal(crafted.frames.length, (await readFrames(b.path)).length, 'same frame count');
  t.ok((await readFile(out)).equals(await readFile(b.path)), 'identical bytes');
  await withBundleFile(out, (s) => verifyBundle(s, { trust: b.trust }));
});

t.test('resign keeps the signature valid for an edited bundle.json', async (t) => {
  const b = await makeBundle(t);
  const entries = resign(await readEntries(b.path), b.key.privateKey, {
    json: (m) => ({ ...m, release: { ...m.release, name: 'edited' } }),
  });
  const out = path.join(b.dir, 'edited.bundle');
  await craft(out, entries);
  const v = await withBundleFile(out, (s) => verifyBundle(s, { trust: b.trust }));
  t.equal(v.manifest.release.name, 'edited');
});

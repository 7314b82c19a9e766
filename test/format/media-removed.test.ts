// tier: unit
// The stick pulled out mid-copy, as the reader sees it: the file stops delivering bytes after
// bundle.json was trusted and staging began. Extraction must fail with TRUNCATED (or IO_ERROR
// when the device errors) and leave nothing of the bundle behind.
import t from 'tap';
import { readdir, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { extractBundle, FormatError, withBundleFile } from '@offline-bundle/format';
import { makeBundle } from './craft.js';

t.test('a bundle that shrinks while it is being extracted', async (t) => {
  const b = await makeBundle(t, { layerSizes: [12 * 1024 * 1024, 6 * 1024 * 1024] });
  const target = join(b.dir, 'out');
  let cut = false;
  const err = await withBundleFile(b.path, (s) =>
    extractBundle(s, target, {
      trust: b.trust,
      // bundle.json is verified; the layout entries have not been read yet: the media goes away now
      onManifest: async () => {
        await truncate(b.path, Math.floor(b.written.fileSize / 3));
        cut = true;
      },
    }),
  ).catch((e: unknown) => e);
  t.ok(cut, 'the file was cut after the signature was checked');
  t.type(err, FormatError);
  t.equal((err as FormatError).code, 'TRUNCATED');
  t.notMatch((err as Error).message, /\n/, 'one line');
  const left = await readdir(b.dir);
  t.notOk(left.includes('out'), 'no target directory');
  t.notOk(
    left.some((n) => n.endsWith('.partial')),
    'no partial directory',
  );
});

t.test('a bundle that disappears while it is being extracted', async (t) => {
  const b = await makeBundle(t, { layerSizes: [12 * 1024 * 1024] });
  const target = join(b.dir, 'out');
  const err = await withBundleFile(b.path, (s) =>
    extractBundle(s, target, {
      trust: b.trust,
      onManifest: async () => {
        await truncate(b.path, 0);
      },
    }),
  ).catch((e: unknown) => e);
  t.type(err, FormatError);
  t.ok(
    ['TRUNCATED', 'IO_ERROR'].includes((err as FormatError).code),
    `a media error (${(err as FormatError).code})`,
  );
  t.notOk(
    (await readdir(b.dir)).some((n) => n === 'out' || n.endsWith('.partial')),
    'nothing left',
  );
});

// Untrusted names quoted into errors are bounded: a GNU long-name entry of 3 MB makes a
// one-line error under 1 KB (verify, extract, and `bundle verify`'s line). And the writer's
// temp file (NAME.bundle.PID.tmp, a predictable name) is never written through a planted link.
import t from 'tap';
import { lstat, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { blobPath, extractBundle, verifyBundle, withBundleFile } from '@offline-bundle/format';
import {
  craftTar,
  fileEntry,
  makeBundle,
  packTar,
  patchHeader,
  readEntries,
  rejectsWith,
  tmpdir,
  writeKeyFiles,
} from './craft.js';
import { bundle } from '../builder/lib.js';

const LONG = 3 * 1024 * 1024;

t.test('a 3 MB GNU long name: every error line quoting it is under 1 KB', async (t) => {
  // a layer as large as the long name: the archive may run as long as bundle.json lists, and
  // the name takes the place of most of the layer's bytes, so it is read before that end
  const layerSize = LONG + 64 * 1024;
  const base = await makeBundle(t, { layerSizes: [layerSize] });
  const entries = await readEntries(base.path);
  const layer = blobPath(base.blobs.find((b) => b.size === layerSize)!.digest);
  const i = entries.findIndex((e) => e.header.name === layer);
  const name = `${'a'.repeat(LONG)}\x1b[2J`;
  const longName = fileEntry('././@LongLink', Buffer.from(`${name}\0`));
  const took = 512 + Math.ceil((name.length + 1) / 512) * 512;
  const shortened = {
    header: { ...entries[i]!.header, name: 'short', size: layerSize - took },
    data: entries[i]!.data.subarray(0, layerSize - took),
  };
  const list = [...entries.slice(0, i), longName, shortened, ...entries.slice(i + 1)];
  const f = path.join(base.dir, 'long.bundle');
  await craftTar(
    f,
    patchHeader(await packTar(list), '././@LongLink', (b) => (b[156] = 0x4c)),
  );
  const errors = [
    await rejectsWith(
      t,
      withBundleFile(f, (s) => verifyBundle(s, { trust: base.trust })),
      'UNEXPECTED_ENTRY',
      'verifyBundle',
    ),
    await rejectsWith(
      t,
      withBundleFile(f, (s) =>
        extractBundle(s, path.join(base.dir, 'x'), { trust: base.trust, fsync: false }),
      ),
      'UNEXPECTED_ENTRY',
      'extractBundle',
    ),
  ];
  for (const err of errors) {
    t.ok(err!.message.length < 1024, `${err!.message.length} characters`);
    t.match(
      err!.message,
      /^entry "a{200}…" \(3145732 characters\) carries pax or GNU extension headers/,
    );
  }
  const { pubPath } = await writeKeyFiles(base.dir, base.key);
  const r = await bundle(['verify', f, '--key', pubPath]);
  t.equal(r.code, 1);
  const lines = r.stderr
    .trimEnd()
    .split('\n')
    .filter((l) => l.startsWith('bundle: '));
  t.equal(lines.length, 1, r.stderr.slice(0, 400));
  t.ok(lines[0]!.length < 1024, `bundle verify's error line: ${lines[0]!.length} bytes`);
  t.ok(r.stderr.length < 2048, `all of its stderr: ${r.stderr.length} bytes`);
});

t.test('writeBundle replaces links at its temp names, never writes through them', async (t) => {
  const dir = await tmpdir(t, 'ob-temp-link-');
  const outside = path.join(dir, 'outside');
  await writeFile(outside, 'precious', { mode: 0o600 });
  for (const n of [`w.bundle.${process.pid}.tmp`, `w.bundle.sha256.${process.pid}.tmp`])
    await symlink(outside, path.join(dir, n));
  const b = await makeBundle(t, { dir, name: 'w.bundle' });
  t.equal(await readFile(outside, 'utf8'), 'precious', 'the file outside is unchanged');
  for (const n of ['w.bundle', 'w.bundle.sha256'])
    t.ok((await lstat(path.join(dir, n))).isFile(), `${n} is a file, not a link`);
  await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }));
});

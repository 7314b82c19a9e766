// Temp files are created anew, never written through a link planted at their (predictable)
// name; untrusted names quoted into errors are bounded.
import t from 'tap';
import { mkdir, readFile, lstat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  MAX_QUOTED_CHARS,
  createExclusive,
  quoteName,
  writeFileAtomic,
  writeSynced,
} from '@offline-bundle/host';
// @ts-expect-error: a JavaScript helper without type declarations
import { tmpdir } from '../helpers/tmp.mjs';

t.test(
  'createExclusive and writeSynced replace a link at the name, never write through it',
  async (t) => {
    const dir = (await tmpdir(t, 'ob-excl-')) as string;
    const outside = path.join(dir, 'outside');
    await writeFile(outside, 'precious', { mode: 0o600 });
    const tmp = path.join(dir, '.x.tmp');
    await symlink(outside, tmp);
    await writeSynced(tmp, 'mine');
    t.equal(
      await readFile(outside, 'utf8'),
      'precious',
      'the file the link pointed at is unchanged',
    );
    t.ok((await lstat(tmp)).isFile(), 'the temp name is a file of its own now');
    t.equal(await readFile(tmp, 'utf8'), 'mine');

    const dangling = path.join(dir, '.y.tmp');
    await symlink(path.join(dir, 'made-through-link'), dangling);
    const fh = await createExclusive(dangling, 0o644, { read: true });
    await fh.close();
    await t.rejects(
      readFile(path.join(dir, 'made-through-link')),
      { code: 'ENOENT' },
      'a dangling link does not create its target',
    );

    const busy = path.join(dir, '.z.tmp');
    await mkdir(busy);
    await t.rejects(
      writeSynced(busy, 'x'),
      { code: /EISDIR|EPERM/ },
      'a directory at the name: refused, not written into',
    );
  },
);

t.test("writeFileAtomic still replaces the file itself, not a link's target", async (t) => {
  const dir = (await tmpdir(t, 'ob-excl-')) as string;
  const outside = path.join(dir, 'outside');
  await writeFile(outside, 'precious');
  const file = path.join(dir, 'state.json');
  await symlink(outside, file);
  await writeFileAtomic(file, '{}\n');
  t.equal(await readFile(outside, 'utf8'), 'precious');
  t.equal(await readFile(file, 'utf8'), '{}\n');
});

t.test('quoteName bounds a 3 MB name and escapes its controls', async (t) => {
  const huge = `\x1b[2J${'a'.repeat(3 * 1024 * 1024)}`;
  const q = quoteName(huge);
  t.ok(q.length < MAX_QUOTED_CHARS + 100, `${q.length} characters`);
  t.match(q, /^"\\x1b\[2Jaaa.*…" \(3145732 characters\)$/);
  t.equal(quoteName('blobs/sha256/ab'), '"blobs/sha256/ab"', 'a short name is quoted as it is');
  t.notMatch(
    quoteName(`${'a'.repeat(MAX_QUOTED_CHARS - 1)}😀z`),
    /[\ud800-\udbff]…/,
    'no half surrogate pair at the cut',
  );
});

// `bundle create --split-size` and `bundle split`: parts whose concatenation is byte for byte
// the bundle that one file would have been (ed25519 and SOURCE_DATE_EPOCH make the build
// reproducible, so the two are compared), NAME.bundle.sha256 of the whole, and verify, inspect
// and extract giving through a part (or the base name) what they give for the file. A split that
// cannot be made leaves nothing behind.
import t from 'tap';
import { mkdir, readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen, q, sh } from './lib.js';

const work = await tmpdir(t, 'ob-split-');
const layout = path.join(work, 'layout');
await writeImageLayout(layout, {
  tag: 'v1',
  platforms: [
    {
      os: 'linux',
      architecture: 'amd64',
      layers: [{ 'srv/a': 'split test '.repeat(5000) }, { 'srv/b': 'another layer' }],
    },
  ],
});
const imageSpec = `oci:${layout}:v1=registry.example.com/split/app:v1`;
const keys = await keygen(work, 'factory', 'ed25519');
const env = { SOURCE_DATE_EPOCH: '1767225600' };
const PART = 1500;

const create = (out: string, extra: string[] = []) =>
  bundle(
    [
      'create',
      '--json',
      '--quiet',
      '--version',
      '3.1',
      '--image',
      imageSpec,
      '--key',
      keys.key,
      '-o',
      out,
      '--cache',
      path.join(work, 'cache'),
      ...extra,
    ],
    { env },
  );
const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const partsIn = async (dir: string, base: string) =>
  (await readdir(dir)).filter((n) => n.startsWith(`${base}.part-`)).sort();
const concat = async (dir: string, names: string[]) =>
  Buffer.concat(await Promise.all(names.map((n) => readFile(path.join(dir, n)))));

const wholeDir = path.join(work, 'whole');
const splitDir = path.join(work, 'split');
await mkdir(wholeDir);
await mkdir(splitDir);
const whole = path.join(wholeDir, 'r.bundle');
const c = await create(whole);
if (c.code !== 0) throw new Error(c.stderr);
const wholeBytes = await readFile(whole);
const wholeDigest = JSON.parse(c.stdout).digest as string;

t.test('create --split-size writes parts whose concatenation is the one-file bundle', async (t) => {
  const out = path.join(splitDir, 'r.bundle');
  const r = await create(out, ['--split-size', String(PART)]);
  t.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  const names = await partsIn(splitDir, 'r.bundle');
  const count = Math.ceil(wholeBytes.length / PART);
  t.equal(names.length, count, `${count} parts`);
  t.same(
    names,
    Array.from(
      { length: count },
      (_, i) =>
        `r.bundle.part-${String(i + 1).padStart(3, '0')}-of-${String(count).padStart(3, '0')}`,
    ),
    'named part-NNN-of-NNN',
  );
  t.same(
    j.parts,
    names.map((n) => path.join(splitDir, n)),
    '--json lists them',
  );
  for (const n of names.slice(0, -1))
    t.equal((await stat(path.join(splitDir, n))).size, PART, `${n}: the split size`);
  t.ok(
    (await concat(splitDir, names)).equals(wholeBytes),
    'concatenated: byte for byte the one-file bundle',
  );
  t.equal(j.digest, wholeDigest, 'the same whole-file digest');
  t.equal(
    `sha256:${(await readFile(path.join(splitDir, 'r.bundle.sha256'), 'utf8')).split(' ')[0]}`,
    wholeDigest,
    'NAME.bundle.sha256 of the whole',
  );
  t.same(
    (await readdir(splitDir)).filter((n) => !n.startsWith('r.bundle.part-')),
    ['r.bundle.sha256'],
    'no whole file, no temp file left',
  );
  const forceDir = path.join(work, 'force');
  await mkdir(forceDir);
  const first = await create(path.join(forceDir, 'r.bundle'), ['--split-size', String(PART)]);
  t.equal(first.code, 0, first.stderr);
  const again = await create(path.join(forceDir, 'r.bundle'), ['--split-size', String(PART)]);
  t.equal(errorCode(again.stderr), 'OUTPUT_EXISTS', 'its parts are not replaced without --force');
  t.equal(
    (await create(path.join(forceDir, 'r.bundle'), ['--split-size', String(PART * 2), '--force']))
      .code,
    0,
    '--force replaces them',
  );
  t.equal(
    (await partsIn(forceDir, 'r.bundle')).length,
    Math.ceil(wholeBytes.length / (PART * 2)),
    'only the new split is there',
  );
});

t.test(
  'bundle split says the part size in the binary units --size reads, and one part as the whole bundle',
  async (t) => {
    const { partsLine } = await import('../../builder/dist/commands/split.js');
    t.equal(
      partsLine(3, 20 * 2 ** 20, 50_000_000),
      '3 parts of 20 MiB (20971520 bytes; the last 8.1 MB)',
    );
    t.equal(
      partsLine(5, 4 * 2 ** 30 - 1, 18_400_000_000),
      '5 parts of 4.0 GiB (4294967295 bytes; the last 1.2 GB)',
    );
    t.equal(
      partsLine(1, 4 * 2 ** 30 - 1, 54_000_000),
      '1 part, the whole bundle (54.0 MB: under --size, nothing to split)',
    );
    const out = path.join(work, 'split-one');
    await mkdir(out);
    const r = await bundle(['split', whole, '--size', '4G', '--out', out]);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /^wrote 1 part, the whole bundle \(/);
  },
);

t.test('bundle split gives the same parts; the bundle stays', async (t) => {
  const out = path.join(work, 'split-out');
  await mkdir(out);
  const r = await bundle(['split', whole, '--size', String(PART), '--out', out, '--json']);
  t.equal(r.code, 0, r.stderr);
  const names = await partsIn(out, 'r.bundle');
  t.same(names, await partsIn(splitDir, 'r.bundle'), 'the names create wrote');
  for (const n of names)
    t.ok(
      (await readFile(path.join(out, n))).equals(await readFile(path.join(splitDir, n))),
      `${n}: the same bytes`,
    );
  t.equal(JSON.parse(r.stdout).digest, wholeDigest);
  t.equal(sha(await concat(out, names)), wholeDigest);
  t.ok((await readFile(whole)).equals(wholeBytes), 'the bundle itself unchanged');
  // split again coarser into the same place: the old set goes, only the new one stays
  const again = await bundle(['split', whole, '--size', String(PART * 4), '--out', out]);
  t.equal(again.code, 0, again.stderr);
  t.equal(
    (await partsIn(out, 'r.bundle')).length,
    Math.ceil(wholeBytes.length / (PART * 4)),
    'only the new split is there',
  );
});

t.test(
  'verify, inspect, diff and extract read a part, or the base name, as the file',
  async (t) => {
    const names = await partsIn(splitDir, 'r.bundle');
    const paths = [path.join(splitDir, names[1]!), path.join(splitDir, 'r.bundle')];
    const v0 = await bundle(['verify', whole, '--key', keys.pub, '--json']);
    const i0 = await bundle(['inspect', whole, '--json']);
    const it0 = await bundle(['inspect', whole]);
    for (const p of paths) {
      const v = await bundle(['verify', p, '--key', keys.pub, '--json']);
      t.equal(v.code, 0, v.stderr);
      t.same(
        JSON.parse(v.stdout),
        JSON.parse(v0.stdout),
        `verify ${path.basename(p)}: the file's result`,
      );
      const d = await bundle(['verify', p, '--digest', wholeDigest, '--json']);
      t.equal(d.code, 0, `the pinned whole-file digest holds: ${d.stderr}`);
      const i = await bundle(['inspect', p, '--json']);
      t.same(JSON.parse(i.stdout), JSON.parse(i0.stdout), `inspect --json ${path.basename(p)}`);
      t.equal(
        (await bundle(['inspect', p])).stdout,
        it0.stdout,
        'inspect: the same text, the file size too',
      );
      const diff = await bundle(['diff', whole, p, '--json']);
      t.equal(diff.code, 0, `diff against the parts reads them: ${diff.stderr}`);
    }
    const [a, b] = [path.join(work, 'x-file'), path.join(work, 'x-parts')];
    const e0 = await bundle(['extract', whole, a, '--key', keys.pub, '--json']);
    const e1 = await bundle(['extract', paths[0]!, b, '--key', keys.pub, '--json']);
    t.equal(e1.code, 0, e1.stderr);
    t.same(
      { ...JSON.parse(e1.stdout), extracted: '' },
      { ...JSON.parse(e0.stdout), extracted: '' },
      'extract: the same result',
    );
    const blobs = (await readdir(path.join(a, 'blobs/sha256'))).sort();
    t.same((await readdir(path.join(b, 'blobs/sha256'))).sort(), blobs);
    for (const x of blobs)
      t.ok(
        (await readFile(path.join(a, 'blobs/sha256', x))).equals(
          await readFile(path.join(b, 'blobs/sha256', x)),
        ),
      );
  },
);

t.test('a damaged part set: one coded line from verify', async (t) => {
  const dir = path.join(work, 'damaged');
  await mkdir(dir);
  t.equal((await bundle(['split', whole, '--size', String(PART), '--out', dir])).code, 0);
  const names = await partsIn(dir, 'r.bundle');
  const { rm } = await import('node:fs/promises');
  await rm(path.join(dir, names[2]!));
  const v = await bundle(['verify', path.join(dir, names[0]!), '--key', keys.pub]);
  t.equal(v.code, 1);
  t.equal(errorCode(v.stderr), 'BAD_PARTS');
  t.equal(v.stderr.trimEnd().split('\n').length, 1, 'one line');
  t.match(
    v.stderr,
    new RegExp(
      `part 3 of ${names.length} \\(${names[2]!.replace(/\./g, '\\.')}\\) is missing from`,
    ),
  );
});

t.test('sizes: 4G, 4GiB, 3999M, bytes; nonsense is a usage error', async (t) => {
  const { parseSize, FAT32_MAX_FILE } = await import('../../builder/dist/split.js');
  t.equal(parseSize('4G'), FAT32_MAX_FILE, "4G: FAT32's 4 GiB - 1 byte");
  t.equal(parseSize('4GiB'), 4 * 1024 ** 3 - 1);
  t.equal(parseSize('3999M'), 3999 * 1024 ** 2);
  t.equal(parseSize('2k'), 2048);
  t.equal(parseSize('123456'), 123456);
  for (const bad of ['', '0', '4X', '-1', '1.5G', 'GiB'])
    t.throws(() => parseSize(bad), `refused: '${bad}'`);
  const r = await bundle(['split', whole, '--size', '4Q']);
  t.equal(r.code, 2, 'usage error');
  const help = await bundle(['create', '--help']);
  t.match(help.stdout, /--split-size/);
  t.match(help.stdout.replace(/\s+/g, ' '), /FAT32 holds at most 4 GiB - 1 byte per file/);
});

t.test('a split that cannot be made leaves nothing behind', async (t) => {
  const many = await bundle(['split', whole, '--size', '2', '--out', path.join(work, 'many')]);
  t.equal(errorCode(many.stderr), 'BAD_PARTS', 'more than 999 parts: refused');
  t.match(many.stderr, /more than the 999/);
  const manyDir = path.join(work, 'many-create');
  await mkdir(manyDir);
  const manyCreate = await create(path.join(manyDir, 'r.bundle'), ['--split-size', '2']);
  t.equal(errorCode(manyCreate.stderr), 'BAD_PARTS', 'create: more than 999 parts refused');
  t.match(manyCreate.stderr, /r\.bundle is left whole/, 'saying what is left');
  t.same(
    (await readdir(manyDir)).sort(),
    ['r.bundle', 'r.bundle.sha256'],
    'the bundle whole, no part, no temp file',
  );
  // a filesystem with room for two parts (tmpfs: a page each), not for all of them
  const small = path.join(work, 'small');
  await mkdir(small);
  const m = await sh(`mount -t tmpfs -o size=8k tmpfs ${q(small)}`);
  t.equal(m.code, 0, m.stderr);
  t.teardown(() => sh(`umount ${q(small)}`));
  const full = await bundle(['split', whole, '--size', String(PART), '--out', small]);
  t.equal(full.code, 1);
  t.equal(errorCode(full.stderr), 'NO_SPACE', full.stderr);
  t.equal(full.stderr.trimEnd().split('\n').length, 1, 'one line');
  t.same(await readdir(small), [], 'nothing written');
});

t.test(
  'copyRange: a source that ends before the range does is an error (TRUNCATED), never a short part',
  async (t) => {
    const { copyRange } = await import('../../builder/dist/split.js');
    const { writeFile } = await import('node:fs/promises');
    const src = path.join(work, 'short.bin');
    await writeFile(src, Buffer.alloc(1000, 1));
    await t.rejects(copyRange(src, path.join(work, 'short.out'), 500, 2000), {
      code: 'TRUNCATED',
      message: /ended 500 bytes into bytes 500-2000 while being read/,
    });
    await copyRange(src, path.join(work, 'whole.out'), 0, 1000);
    t.equal((await stat(path.join(work, 'whole.out'))).size, 1000, 'a whole range is copied');
  },
);

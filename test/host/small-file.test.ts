// Files named by people or configs may be FIFOs, devices, huge, or writable by others; and
// a directory may be impossible to create (/proc) without Node's recursive mkdir noticing.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  assertRegularFile,
  makeDirs,
  readSmallFile,
  unsafePermissions,
} from '@offline-bundle/host';
import { tmpdir } from '../helpers/tmp.mjs';

const code = async (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: { code?: string }) => e.code,
  );

t.test('readSmallFile refuses what is not a small regular file, before reading it', async (t) => {
  const dir = await tmpdir(t);
  const fifo = join(dir, 'fifo');
  execFileSync('mkfifo', [fifo]);
  t.equal(
    await code(readSmallFile(fifo, 1024)),
    'NOT_A_REGULAR_FILE',
    'a FIFO with no writer: refused, not waited on',
  );
  t.equal(await code(assertRegularFile(fifo)), 'NOT_A_REGULAR_FILE', 'assertRegularFile: the same');
  t.equal(
    await code(readSmallFile('/dev/urandom', 1024)),
    'NOT_A_REGULAR_FILE',
    'a device that never ends',
  );
  t.equal(await code(readSmallFile(dir, 1024)), 'NOT_A_REGULAR_FILE', 'a directory');
  t.equal(
    await code(readSmallFile(join(dir, 'none'), 1024)),
    'ENOENT',
    'system errors pass through',
  );
  const big = join(dir, 'big');
  await writeFile(big, Buffer.alloc(1025));
  t.equal(await code(readSmallFile(big, 1024)), 'FILE_TOO_LARGE', 'one byte over the limit');
  await writeFile(big, Buffer.alloc(1024, 1));
  const r = await readSmallFile(big, 1024);
  t.equal(r.bytes.length, 1024, 'at the limit: read whole');
  t.ok(r.stats.isFile());
  t.equal((await assertRegularFile(big))?.size, 1024);
  t.equal(
    await assertRegularFile(join(dir, 'none')),
    undefined,
    'a missing file is left to the reader',
  );
});

t.test('unsafePermissions names what lets others change a file, and the fix', async (t) => {
  const dir = await tmpdir(t);
  await chmod(dir, 0o755);
  const f = join(dir, 'k.pub');
  await writeFile(f, 'x');
  const check = async (mode: number) => {
    await chmod(f, mode);
    return unsafePermissions(f, (await readSmallFile(f, 10)).stats);
  };
  t.equal(await check(0o644), undefined, '0644 under safe directories: fine');
  t.equal(await check(0o600), undefined, '0600: fine');
  t.match(await check(0o666), new RegExp(`writable by anyone.*chmod go-w ${f}$`), 'world-writable');
  t.match(await check(0o664), /writable by its group.*chmod go-w/, 'group-writable');
  await chmod(f, 0o644);
  const sub = join(dir, 'open');
  await mkdir(sub);
  await chmod(sub, 0o777);
  const g = join(sub, 'k.pub');
  await writeFile(g, 'x', { mode: 0o644 });
  t.match(
    await unsafePermissions(g, (await readSmallFile(g, 10)).stats),
    new RegExp(`is in ${sub}, which is writable by anyone.*chmod go-w ${sub}$`),
    'a world-writable directory above it',
  );
  await chmod(sub, 0o1777);
  t.equal(
    await unsafePermissions(g, (await readSmallFile(g, 10)).stats),
    undefined,
    'a sticky directory (as /tmp) is fine',
  );
  if (process.getuid?.() === 0) {
    execFileSync('chown', ['4321', f]);
    t.match(
      await unsafePermissions(f, (await readSmallFile(f, 10)).stats),
      /owned by uid 4321.*chown root/,
      'owned by another user',
    );
  }
});

t.test("makeDirs fails at once where Node's recursive mkdir spins (/proc)", async (t) => {
  const started = Date.now();
  t.equal(await code(makeDirs('/proc/ob-test-x.partial/blobs/sha256')), 'CANNOT_CREATE_DIR');
  t.ok(Date.now() - started < 2000, `at once (${Date.now() - started} ms)`);
  const dir = await tmpdir(t);
  await makeDirs(join(dir, 'a/b/c'));
  await makeDirs(join(dir, 'a/b/c'));
  t.ok(
    (await assertRegularFile(join(dir, 'a/b/c')).catch((e: { code?: string }) => e.code)) ===
      'NOT_A_REGULAR_FILE',
    'nested directories made, twice is fine',
  );
  await writeFile(join(dir, 'file'), '');
  t.equal(await code(makeDirs(join(dir, 'file'))), 'EEXIST', 'a file in the way');
  t.equal(await code(makeDirs(join(dir, 'file/x'))), 'ENOTDIR', 'a file as a parent');
});

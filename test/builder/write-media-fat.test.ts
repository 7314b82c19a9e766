// `bundle write-media` onto FAT32 through FUSE (fusefat: this kernel has no vfat). What is on the
// stick after it ends is looked at after unmounting and mounting the image again read-only, so it
// is what reached the image. Bad input (no room, read-only, files already there) is one line and
// writes nothing; a stick that loses writes or goes away mid-write keeps nothing under the
// bundle's names.
import t from 'tap';
import { spawn, execFileSync } from 'node:child_process';
import { mkdir, open, readFile, readdir, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { tmpdir } from '../helpers/tmp.mjs';
import { BUNDLE_BIN, bundle, errorCode } from './lib.js';
import { fat32, oneLine, sha, skipReason, testBundle, unmount } from './write-media-lib.js';
import { until } from '../helpers/until.js';

const PART = 512 * 1024;
const partNames = (count: number) =>
  Array.from(
    { length: count },
    (_, i) =>
      `r.bundle.part-${String(i + 1).padStart(3, '0')}-of-${String(count).padStart(3, '0')}`,
  );

if (skipReason) t.plan(0, skipReason);
else await main();

async function main(): Promise<void> {
  const work = await tmpdir(t, 'ob-media-fat-');
  const b = await testBundle(work);

  t.test(
    'FAT32 (fusefat): parts of --part-size and the .sha256 of the whole; after a remount they verify',
    async (t) => {
      const img = path.join(work, 'fat.img');
      const mnt = path.join(work, 'fat');
      let daemon = await fat32(t, img, mnt);
      const r = await b.write(mnt, ['--part-size', '512K']);
      t.equal(r.code, 0, r.stderr);
      const j = JSON.parse(r.stdout);
      const count = Math.ceil(b.bytes.length / PART);
      t.ok(count > 1, `${count} parts`);
      t.equal(j.filesystem, 'FAT32', 'told FAT32 from fuse.fusefat');
      t.equal(j.parts, count);
      t.equal(j.digest, b.digest, 'the digest of what was read');
      t.match(
        r.stderr,
        /^Done: \d+ files on .*; safe to remove the stick\.$/m,
        'ends "safe to remove"',
      );
      t.match(r.stderr, /writing \d+ parts to .*\nreading back from/, 'progress on stderr');
      await unmount(mnt, daemon);
      daemon = await fat32(t, img, mnt, { mode: 'ro', mkfs: false });
      t.same(
        (await readdir(mnt)).sort(),
        [...partNames(count), 'r.bundle.sha256'],
        'the parts and the .sha256, no temp file',
      );
      const joined = Buffer.concat(
        await Promise.all(partNames(count).map((p) => readFile(path.join(mnt, p)))),
      );
      t.equal(sha(joined), b.digest, 'the concatenation is the bundle');
      t.equal(
        await readFile(path.join(mnt, 'r.bundle.sha256'), 'utf8'),
        `${b.digest.slice(7)}  r.bundle\n`,
        "sha256sum -c format, the bundle's name",
      );
      const v = await bundle([
        'verify',
        path.join(mnt, partNames(count)[0]!),
        '--key',
        b.pub,
        '--digest',
        b.digest,
        '--json',
        '--quiet',
      ]);
      t.equal(v.code, 0, `bundle verify on the first part: ${v.stderr}`);
      t.equal(JSON.parse(v.stdout).valid, true);
      const again = await b.write(mnt);
      t.equal(errorCode(again.stderr), 'READ_ONLY', 'a read-only mount is refused');
      t.ok(oneLine(again.stderr), 'in one line');
      t.match(again.stderr, /mounted read-only/);
      await unmount(mnt, daemon);
      execFileSync('fsck.vfat', ['-n', img], { stdio: 'ignore' });
      t.pass('fsck.vfat -n finds the filesystem clean');
    },
  );

  t.test(
    'FAT32: files of the bundle already there are refused without --force, replaced with it',
    async (t) => {
      const mnt = path.join(work, 'fat2');
      await fat32(t, path.join(work, 'fat2.img'), mnt);
      t.equal((await b.write(mnt, ['--part-size', '512K', '--quiet'])).code, 0);
      const before = (await readdir(mnt)).sort();
      const r = await b.write(mnt, ['--part-size', '1M']);
      t.equal(r.code, 1);
      t.equal(errorCode(r.stderr), 'OUTPUT_EXISTS');
      t.ok(oneLine(r.stderr), 'one line');
      t.match(
        r.stderr,
        /already holds r\.bundle\.sha256, r\.bundle\.part-001-of-005.*pass --force/,
      );
      t.same((await readdir(mnt)).sort(), before, 'nothing changed');
      const f = await b.write(mnt, ['--part-size', '1M', '--force', '--quiet']);
      t.equal(f.code, 0, f.stderr);
      t.same(
        (await readdir(mnt)).sort(),
        [...partNames(Math.ceil(b.bytes.length / (2 * PART))), 'r.bundle.sha256'],
        'only the new split is there',
      );
    },
  );

  t.test(
    'FAT32 too small for the bundle: one line naming the numbers, nothing written',
    async (t) => {
      const mnt = path.join(work, 'tiny');
      await fat32(t, path.join(work, 'tiny.img'), mnt, { sizeMiB: 2 });
      t.ok(b.bytes.length > 2 * 1024 * 1024, 'the bundle is larger than the stick');
      const r = await b.write(mnt, ['--part-size', '512K']);
      t.equal(r.code, 1);
      t.equal(errorCode(r.stderr), 'NO_SPACE');
      t.ok(oneLine(r.stderr), 'one line');
      t.match(
        r.stderr,
        /the stick at .* has [\d.]+ [kKMG]?B free, the bundle needs [\d.]+ [kKMG]?B .*use a bigger stick .*nothing was written/,
      );
      t.same(await readdir(mnt), [], 'nothing written, not even a temp file');
    },
  );

  t.test(
    "FAT32 whose FSInfo claims more room than there is: fusefat takes writes it does not keep; the read-back finds it, nothing left under the bundle's names",
    async (t) => {
      const img = path.join(work, 'stale.img');
      const mnt = path.join(work, 'stale');
      const first = await fat32(t, img, mnt, { sizeMiB: 4 });
      const filler = randomBytes(2 * 1024 * 1024);
      await writeFile(path.join(mnt, 'filler'), filler);
      await unmount(mnt, first);
      // FSInfo's free count is only a hint (the FAT specification): make it claim the volume free
      const fh = await open(img, 'r+');
      const boot = Buffer.alloc(1024);
      await fh.read(boot, 0, 1024, 0);
      const clusters = Math.floor(
        ((boot.readUInt32LE(32) || boot.readUInt16LE(19)) -
          boot.readUInt16LE(14) -
          boot.readUInt8(16) * boot.readUInt32LE(36)) /
          boot.readUInt8(13),
      );
      const claim = Buffer.alloc(4);
      claim.writeUInt32LE(clusters - 1);
      await fh.write(claim, 0, 4, boot.readUInt16LE(48) * boot.readUInt16LE(11) + 488);
      await fh.close();
      await fat32(t, img, mnt, { mkfs: false });
      const r = await b.write(mnt, ['--part-size', '512K']);
      t.equal(r.code, 1, 'fails');
      t.ok(oneLine(r.stderr), `one line: ${r.stderr}`);
      t.equal(
        errorCode(r.stderr),
        'READ_BACK_FAILED',
        'the room check passed on the claim; what fusefat lost, the read-back found',
      );
      t.match(
        r.stderr,
        /r\.bundle\.part-\d+-of-\d+ reads back .* other than it was written: .*use another stick/,
      );
      t.same(await readdir(mnt), ['filler'], 'no part, no .sha256, no temp file');
      t.equal(
        sha(await readFile(path.join(mnt, 'filler'))),
        sha(filler),
        'what was on the stick is untouched',
      );
    },
  );

  t.test(
    "FAT32 pulled mid-write (the FUSE daemon killed: ENOTCONN): one line; nothing under the bundle's names once it is back, and the next write removes the temp files",
    async (t) => {
      const img = path.join(work, 'pulled.img');
      const mnt = path.join(work, 'pulled');
      const daemon = await fat32(t, img, mnt);
      const child = spawn(
        process.execPath,
        [BUNDLE_BIN, 'write-media', b.src, mnt, '--part-size', '512K', '--quiet'],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
      });
      const exited = new Promise<number | null>((r) => child.once('exit', r));
      // generous: on a loaded machine the CLI alone takes seconds to start
      await until(
        'a temp part',
        async () =>
          child.exitCode !== null ||
          (await readdir(mnt).catch(() => [])).some((n) => n.startsWith('.r.bundle.part-')),
        { timeoutMs: 90_000, stepMs: 50 },
      );
      t.equal(child.exitCode, null, 'still writing when the stick goes');
      daemon.kill('SIGKILL');
      t.equal(await exited, 1, stderr);
      t.equal(errorCode(stderr), 'MEDIA_GONE', 'the stick went away');
      t.ok(oneLine(stderr), `one line: ${stderr}`);
      t.match(stderr, /went away or failed while writing r\.bundle\.part-.*plug it in again/);
      t.match(
        stderr,
        /its temp files \(\.r\.bundle\.part-\d+-of-\d+\.[0-9a-f]{8}-\d+\.tmp.*\) stay until the next write-media/,
        'names the temp files it could not remove',
      );
      try {
        execFileSync('umount', ['-l', mnt]);
      } catch {
        /* gone */
      }
      await fat32(t, img, mnt, { mkfs: false });
      const names = await readdir(mnt);
      t.notOk(
        names.some((n) => n.startsWith('r.bundle')),
        `no file under the bundle's names: ${names.join(', ')}`,
      );
      const again = await b.write(mnt, ['--part-size', '512K', '--quiet']);
      t.equal(again.code, 0, `written once the stick is back: ${again.stderr}`);
      t.notOk(
        (await readdir(mnt)).some((n) => n.endsWith('.tmp')),
        'the temp files the pulled run left are gone',
      );
    },
  );

  t.test(
    'FAT32 (fusefat) with a copy on it, --force with room for both: the bundle cut mid-write (SOURCE_CHANGED) keeps the old copy; Ctrl-C twice ends a write hung on a stopped FUSE daemon; Ctrl-C during the read-back exits 130 and keeps nothing',
    async (t) => {
      const img = path.join(work, 'sig.img');
      const mnt = path.join(work, 'sig');
      const daemon = await fat32(t, img, mnt, { sizeMiB: 64 });
      t.teardown(() => {
        if (daemon.exitCode === null) daemon.kill('SIGCONT');
      });
      t.equal((await b.write(mnt, ['--part-size', '512K', '--quiet'])).code, 0, 'the old copy');
      const oldNames = [...partNames(Math.ceil(b.bytes.length / PART)), 'r.bundle.sha256'];
      // a whole bundle (write-media checks its ends before writing) large enough that fusefat is still writing or reading when the test acts
      const big = path.join(work, 'big', 'r.bundle');
      await mkdir(path.join(work, 'big-src'), { recursive: true });
      await mkdir(path.dirname(big));
      const bigBytes = (await testBundle(path.join(work, 'big-src'), 20)).bytes;
      const start = (extra: string[] = []) => {
        const child = spawn(
          process.execPath,
          [BUNDLE_BIN, 'write-media', big, mnt, '--force', '--part-size', '1M', ...extra],
          { stdio: ['ignore', 'ignore', 'pipe'] },
        );
        const out = { stderr: '' };
        child.stderr.on('data', (d: Buffer) => {
          out.stderr += d;
        });
        const exited = new Promise<[number | null, NodeJS.Signals | null]>((r) =>
          child.once('exit', (code, signal) => r([code, signal])),
        );
        return { child, out, exited };
      };
      const tempPart = async () =>
        (await readdir(mnt)).some((n) => n.startsWith('.r.bundle.part-'));
      const oldIntact = async (what: string) => {
        t.same(
          (await readdir(mnt)).filter((n) => n.includes('r.bundle')).sort(),
          oldNames.slice().sort(),
          `${what}: the old copy's files, no temp file`,
        );
        t.equal(
          sha(
            Buffer.concat(
              await Promise.all(oldNames.slice(0, -1).map((n) => readFile(path.join(mnt, n)))),
            ),
          ),
          b.digest,
          `${what}: the old copy reads as the bundle`,
        );
      };

      await writeFile(big, bigBytes);
      const cut = start(['--quiet']);
      await until('a temp part', async () => cut.child.exitCode !== null || (await tempPart()), {
        timeoutMs: 90_000,
        stepMs: 50,
      });
      daemon.kill('SIGSTOP');
      await truncate(big, 1024 * 1024);
      daemon.kill('SIGCONT');
      t.equal((await cut.exited)[0], 1, cut.out.stderr);
      t.equal(errorCode(cut.out.stderr), 'SOURCE_CHANGED', 'the bundle was cut while being read');
      t.ok(oneLine(cut.out.stderr), `one line: ${cut.out.stderr}`);
      t.match(
        cut.out.stderr,
        /big\/r\.bundle changed while being written \(.*\).*nothing it wrote is left on it; the copy that was there is kept: rerun/,
      );
      await oldIntact('after SOURCE_CHANGED');

      await writeFile(big, bigBytes);
      const hung = start(['--quiet']);
      await until('a temp part', async () => hung.child.exitCode !== null || (await tempPart()), {
        timeoutMs: 90_000,
        stepMs: 50,
      });
      daemon.kill('SIGSTOP');
      hung.child.kill('SIGINT');
      await new Promise((r) => setTimeout(r, 500));
      t.equal(
        hung.child.exitCode,
        null,
        'the first Ctrl-C waits for the stick (stopped) to clean up',
      );
      hung.child.kill('SIGINT');
      await new Promise((r) => setTimeout(r, 300));
      // a thread in a FUSE request the daemon took holds the exit until the daemon answers; then it
      // is ended by the signal, not by the first Ctrl-C's clean-up (that would exit 130)
      daemon.kill('SIGCONT');
      t.same(await hung.exited, [null, 'SIGINT'], 'the second Ctrl-C ends it: killed by SIGINT');

      const rb = start();
      let stopped = false;
      await until(
        'the read-back',
        async () =>
          rb.child.exitCode !== null || (stopped = /reading back from/.test(rb.out.stderr)),
        { timeoutMs: 90_000, stepMs: 50 },
      );
      if (stopped) daemon.kill('SIGSTOP');
      rb.child.kill('SIGINT');
      await new Promise((r) => setTimeout(r, 200));
      daemon.kill('SIGCONT');
      const [code] = await rb.exited;
      t.equal(
        code,
        130,
        `Ctrl-C during the read-back: exit 130, not "safe to remove": ${rb.out.stderr}`,
      );
      t.equal(errorCode(rb.out.stderr), 'INTERRUPTED');
      t.notMatch(rb.out.stderr, /safe to remove/);
      t.match(
        rb.out.stderr,
        /interrupted: nothing of the bundle is left on it; the copy that was there was removed \(it holds no copy now\): rerun/,
      );
      t.same(
        (await readdir(mnt)).filter((n) => n.includes('r.bundle')),
        [],
        'an unchecked copy is removed, and the temp files of the killed run too',
      );
    },
  );
}

// `bundle write-media` onto exFAT through FUSE (exfat-fuse on a loop device: this kernel has no
// exfat) and a real ext4 loop image: one whole file each; the refusals made before anything is
// written (not a mount point, a system filesystem, read-only), and ext4 running out of room
// (inodes) between parts: nothing left under the bundle's names. FAT32: write-media-fat.test.ts.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { link, mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode } from './lib.js';
import { mounted, oneLine, sha, skipReason, testBundle, unmountLater } from './write-media-lib.js';

// the real filesystems first: their bundle is made before any test runs (the temp dir belongs to the file)
if (skipReason) t.skip(`real filesystems: ${skipReason}`);
else await main();

t.test(
  'mountinfo: octal escapes undone, ro from either option list; a path is on its longest mount point',
  async (t) => {
    const { parseMountinfo, mountOf } = await import('../../builder/dist/write-media-target.js');
    const mounts = parseMountinfo(
      [
        '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
        '98 22 8:17 / /media/my\\040stick rw,nosuid master:2 - vfat /dev/sdb1 ro,utf8',
        '99 22 0:38 / /media/fuse rw,nosuid,nodev - fuse.fusefat /tmp/fat.img rw,user_id=0',
        'garbage',
      ].join('\n'),
    );
    t.same(
      mounts.map((m) => [m.mountPoint, m.fsType, m.source, m.readOnly]),
      [
        ['/', 'ext4', '/dev/sda1', false],
        ['/media/my stick', 'vfat', '/dev/sdb1', true],
        ['/media/fuse', 'fuse.fusefat', '/tmp/fat.img', false],
      ],
    );
    t.equal(mountOf('/media/my stick/sub', mounts)?.mountPoint, '/media/my stick');
    t.equal(
      mountOf('/media/fuse2', mounts)?.mountPoint,
      '/',
      'a name that only starts like a mount point is not in it',
    );
  },
);

t.test(
  'a stick\'s boot sector (untrusted, 8 KiB read): FAT32 fields checked; an FSInfo free count beyond the volume or "unknown" gives no room',
  async (t) => {
    const { parseFat32 } = await import('../../builder/dist/write-media-target.js');
    const sector = (free: number) => {
      const b = Buffer.alloc(8192);
      b.write('FAT32   ', 82, 'latin1');
      b.writeUInt16LE(512, 11);
      b.writeUInt8(8, 13);
      b.writeUInt16LE(32, 14);
      b.writeUInt8(2, 16);
      b.writeUInt32LE(65536 * 8 + 32 + 2 * 512, 32);
      b.writeUInt32LE(512, 36);
      b.writeUInt16LE(1, 48);
      b.writeUInt32LE(0x41615252, 512);
      b.writeUInt32LE(0x61417272, 512 + 484);
      b.writeUInt32LE(free, 512 + 488);
      return b;
    };
    t.same(parseFat32(sector(1000)), {
      clusterBytes: 4096,
      totalClusters: 65536,
      freeClusters: 1000,
    });
    t.same(
      parseFat32(sector(65537)),
      { clusterBytes: 4096, totalClusters: 65536 },
      'more free than there are clusters: unknown',
    );
    t.same(
      parseFat32(sector(0xffffffff)),
      { clusterBytes: 4096, totalClusters: 65536 },
      '0xFFFFFFFF: unknown',
    );
    const odd = sector(1000);
    odd.writeUInt8(3, 13);
    t.equal(parseFat32(odd), undefined, 'sectors per cluster not a power of two: not FAT32');
    t.equal(parseFat32(Buffer.alloc(8192)), undefined, 'zeros');
    t.equal(parseFat32(sector(1000).subarray(0, 600)), undefined, 'too short');
  },
);

function ext4(
  t: Tap.Test,
  img: string,
  mnt: string,
  mkfsArgs: string[] = [],
  sizeMiB = 32,
): Promise<void> {
  execFileSync('truncate', ['-s', `${sizeMiB}M`, img]);
  execFileSync('mkfs.ext4', ['-q', '-F', ...mkfsArgs, img]);
  unmountLater(t, mnt);
  return mkdir(mnt).then(() => {
    execFileSync('mount', ['-o', 'loop', img, mnt]);
  });
}

async function main(): Promise<void> {
  const work = await tmpdir(t, 'ob-media-');
  const b = await testBundle(work);

  t.test(
    'exFAT (exfat-fuse on a loop device, fuseblk): one whole file, told exFAT by its boot sector',
    async (t) => {
      const img = path.join(work, 'ex.img');
      const mnt = path.join(work, 'ex');
      execFileSync('truncate', ['-s', '32M', img]);
      execFileSync('mkfs.exfat', [img], { stdio: 'ignore' });
      const loop = execFileSync('losetup', ['-f', '--show', img], { encoding: 'utf8' }).trim();
      await mkdir(mnt);
      unmountLater(t, mnt, undefined, loop);
      execFileSync('mount.exfat-fuse', [loop, mnt], { stdio: 'ignore' });
      const r = await b.write(mnt, ['--quiet']);
      t.equal(r.code, 0, r.stderr);
      const j = JSON.parse(r.stdout);
      t.equal(j.filesystem, 'exFAT');
      t.equal(j.parts, 0, 'not split');
      t.equal(j.digest, b.digest);
      execFileSync('umount', [mnt]);
      execFileSync('mount.exfat-fuse', ['-o', 'ro', loop, mnt], { stdio: 'ignore' });
      t.same(
        (await readdir(mnt)).sort(),
        ['r.bundle', 'r.bundle.sha256'],
        'after a remount: the bundle and its .sha256',
      );
      t.ok(
        (await readFile(path.join(mnt, 'r.bundle'))).equals(b.bytes),
        'byte for byte the bundle',
      );
    },
  );

  t.test(
    "ext4 (loop): one whole file, its pages dropped before the read-back; a directory that is no stick's mount point, or read-only, is refused",
    async (t) => {
      const mnt = path.join(work, 'e4');
      await ext4(t, path.join(work, 'e4.img'), mnt);
      const r = await b.write(mnt);
      t.equal(r.code, 0, r.stderr);
      const j = JSON.parse(r.stdout);
      t.equal(j.filesystem, 'ext4');
      t.equal(j.cacheDropped, true, 'dd iflag=nocache dropped the written pages');
      t.same(j.files, [path.join(mnt, 'r.bundle'), path.join(mnt, 'r.bundle.sha256')]);
      t.ok((await readFile(path.join(mnt, 'r.bundle'))).equals(b.bytes));
      await mkdir(path.join(mnt, 'sub'));
      const sub = await b.write(path.join(mnt, 'sub'));
      t.equal(errorCode(sub.stderr), 'NOT_A_MOUNT');
      t.ok(oneLine(sub.stderr), 'one line');
      t.match(sub.stderr, /is not the mount point of removable media .*--any-directory/);
      const any = await b.write(path.join(mnt, 'sub'), ['--any-directory', '--quiet']);
      t.equal(any.code, 0, `--any-directory writes there: ${any.stderr}`);
      const part = path.join(work, 'lone', 'r.bundle.part-001-of-002');
      await mkdir(path.dirname(part));
      await writeFile(part, 'x');
      const p = await bundle(['write-media', part, mnt]);
      t.equal(
        errorCode(p.stderr),
        'BAD_PARTS',
        'a part set with a part missing is refused before writing',
      );
      t.ok(oneLine(p.stderr), `one line: ${p.stderr}`);
      t.match(p.stderr, /part 2 of 2/);
      const junk = path.join(work, 'junk.bundle');
      await writeFile(junk, Buffer.alloc(64 * 1024, 7));
      const nb = await bundle(['write-media', junk, mnt, '--json']);
      t.equal(
        errorCode(nb.stderr),
        'NOT_A_BUNDLE',
        'a file that does not start as a bundle is refused before writing',
      );
      t.match(
        nb.stderr,
        /junk\.bundle is not a bundle \(.*\): give a file "bundle create" wrote, whole, or all of its parts/,
      );
      t.same(
        JSON.parse(nb.stdout),
        {
          error: {
            code: 'NOT_A_BUNDLE',
            message: nb.stderr.trim().replace(/^bundle: NOT_A_BUNDLE: /, ''),
          },
        },
        '--json: the error as JSON on stdout',
      );
      t.notOk((await readdir(mnt)).includes('junk.bundle'), 'nothing written');
      if (await mounted('/dev/shm')) {
        const shm = await b.write('/dev/shm');
        t.equal(errorCode(shm.stderr), 'NOT_A_MOUNT', 'a tmpfs mount point is no stick');
        t.match(shm.stderr, /tmpfs mounted at \/dev\/shm, a system filesystem/);
      }
      execFileSync('mount', ['-o', 'remount,ro', mnt]);
      const ro = await b.write(mnt, ['--force']);
      t.equal(errorCode(ro.stderr), 'READ_ONLY');
      t.ok(oneLine(ro.stderr), 'one line');
      t.match(ro.stderr, /mounted read-only .*mount -o remount,rw/);
    },
  );

  t.test(
    'a split bundle is written from its parts (any one named, or NAME.bundle), never joined on disk: byte for byte the bundle on the stick',
    async (t) => {
      const dir = path.join(work, 'split');
      await mkdir(dir);
      const b = await testBundle(
        await mkdir(path.join(work, 'framed')).then(() => path.join(work, 'framed')),
        4,
      );
      const s = await bundle(['split', b.src, '--size', '1M', '--out', dir]);
      t.equal(s.code, 0, s.stderr);
      const parts = (await readdir(dir)).filter((n) => n.includes('.part-')).sort();
      t.equal(parts.length, 3, 'three parts of 1 MiB');
      const mnt = path.join(work, 'fromparts');
      await ext4(t, path.join(work, 'fromparts.img'), mnt);
      const r = await bundle(['write-media', path.join(dir, parts[1]!), mnt, '--json', '--quiet']);
      t.equal(r.code, 0, r.stderr);
      const j = JSON.parse(r.stdout);
      t.equal(j.digest, b.digest, "the whole bundle's digest");
      t.equal(j.parts, 0, 'ext4 takes it whole');
      t.ok(
        (await readFile(path.join(mnt, 'r.bundle'))).equals(b.bytes),
        'one file, byte for byte the bundle',
      );
      const fat = await bundle([
        'write-media',
        path.join(dir, 'r.bundle'),
        mnt,
        '--json',
        '--quiet',
        '--force',
        '--part-size',
        '1500K',
      ]);
      t.equal(fat.code, 0, fat.stderr);
      t.equal(
        JSON.parse(fat.stdout).parts,
        2,
        'NAME.bundle (only its parts there) cut again as the stick needs: 2 parts of 1500 KiB',
      );
      t.notOk((await readdir(mnt)).includes('r.bundle'), 'the whole copy it replaced is gone');
      const before = (await readdir(mnt)).sort();

      const missing = await bundle([
        'write-media',
        path.join(dir, 'r.bundle.part-007-of-009'),
        mnt,
        '--force',
      ]);
      t.equal(
        errorCode(missing.stderr),
        'NOT_A_BUNDLE',
        `a part named that is not there: ${missing.stderr}`,
      );
      t.match(missing.stderr, /part-007-of-009 cannot be read \(no such part\?\)/);
      // the last part cut (a copy that stopped), then a middle part replaced by one of the same size from elsewhere
      const last = path.join(dir, parts[2]!);
      const lastBytes = await readFile(last);
      await writeFile(last, lastBytes.subarray(0, lastBytes.length - 100));
      const cut = await bundle(['write-media', last, mnt, '--force']);
      t.equal(errorCode(cut.stderr), 'NOT_A_BUNDLE', `a cut last part: ${cut.stderr}`);
      t.ok(oneLine(cut.stderr), 'one line');
      t.match(
        cut.stderr,
        /the parts of r\.bundle in .*: the bundle does not end with its seek table/,
      );
      await writeFile(last, lastBytes);
      await writeFile(path.join(dir, parts[1]!), await readFile(path.join(dir, parts[0]!)));
      const mixed = await bundle(['write-media', last, mnt, '--force']);
      t.equal(
        errorCode(mixed.stderr),
        'NOT_A_BUNDLE',
        `a part of the same size from elsewhere: ${mixed.stderr}`,
      );
      t.match(
        mixed.stderr,
        /no zstd frame at byte \d+, where the bundle's seek table says one starts/,
      );
      t.same(
        (await readdir(mnt)).sort(),
        before,
        'the stick as it was: nothing written, the copy there kept',
      );
    },
  );

  t.test(
    '--force on a stick that holds one copy: the copy it replaces counts as room',
    async (t) => {
      const mnt = path.join(work, 'one');
      await ext4(t, path.join(work, 'one.img'), mnt, ['-m', '0'], 6);
      const first = await b.write(mnt, ['--quiet']);
      t.equal(first.code, 0, first.stderr);
      const free = JSON.parse(first.stdout).free as number;
      t.ok(
        free - b.bytes.length < b.bytes.length + 1024 * 1024,
        'not room for a second copy beside the first',
      );
      // the copy on the stick given as the bundle: replacing it would delete the source before it is read
      const onStick = path.join(mnt, 'r.bundle');
      const same = await bundle(['write-media', onStick, mnt, '--force', '--json']);
      t.equal(same.code, 1);
      t.equal(errorCode(same.stderr), 'SAME_FILE');
      t.ok(oneLine(same.stderr), `one line: ${same.stderr}`);
      t.match(
        same.stderr,
        /r\.bundle is already on the stick at .*\/one\/r\.bundle: nothing to write; to check it, run bundle verify /,
      );
      t.equal(JSON.parse(same.stdout).error.code, 'SAME_FILE', '--json: the error on stdout');
      t.equal(sha(await readFile(onStick)), b.digest, 'the copy on the stick is untouched');
      await mkdir(path.join(mnt, 'hard'));
      await link(onStick, path.join(mnt, 'hard', 'r.bundle'));
      const viaLink = await bundle([
        'write-media',
        path.join(mnt, 'hard', 'r.bundle'),
        `${mnt}/../one`,
        '--force',
      ]);
      t.equal(
        errorCode(viaLink.stderr),
        'SAME_FILE',
        'a hard link to it, to a mount point spelt otherwise, too (same device and inode)',
      );
      await rm(path.join(mnt, 'hard'), { recursive: true });
      // a temp file another machine left (PID 1 runs here too): removed by the next write
      const foreign = path.join(mnt, '.r.bundle.sha256.00000000-1.tmp');
      await writeFile(foreign, 'x');
      const again = await b.write(mnt, ['--force']);
      t.equal(again.code, 0, again.stderr);
      t.match(
        again.stderr,
        /warning: no room on .* for the new copy beside the one there: removing r\.bundle, r\.bundle\.sha256 first; if this write fails or is interrupted, the stick holds no copy/,
        'said before writing',
      );
      t.same(
        (await readdir(mnt))
          .filter((n) => n.startsWith('r.bundle') || n.startsWith('.r.bundle'))
          .sort(),
        ['r.bundle', 'r.bundle.sha256'],
        'the foreign temp file is gone',
      );
    },
  );

  t.test(
    'ext4 out of room between parts (no inode left for part 3: ENOSPC): one line, no part, no temp file left',
    async (t) => {
      const mnt = path.join(work, 'full');
      await ext4(t, path.join(work, 'full.img'), mnt, ['-N', '16']);
      // every inode taken but two: parts 1 and 2 are created and written, part 3 is not
      let n = 0;
      for (; ; n++) {
        try {
          await writeFile(path.join(mnt, `f${n}`), '');
        } catch {
          break;
        }
      }
      execFileSync('rm', [path.join(mnt, 'f0'), path.join(mnt, 'f1')]);
      const before = (await readdir(mnt)).sort();
      const r = await b.write(mnt, ['--part-size', '512K']);
      t.equal(r.code, 1);
      t.equal(errorCode(r.stderr), 'NO_SPACE');
      t.ok(oneLine(r.stderr), `one line: ${r.stderr}`);
      t.match(
        r.stderr,
        /filled up while writing r\.bundle\.part-003-of-005 \(ENOSPC\); nothing of the bundle is left on it: use a bigger stick/,
      );
      t.same((await readdir(mnt)).sort(), before, 'the stick as it was');
    },
  );
}

t.test(
  'the split a filesystem needs: a 20 GB release is 5 FAT32 parts of 4 GiB - 1; a bundle that fits one FAT32 file, and any on exFAT, stays whole',
  async (t) => {
    const { planFiles } = await import('../../builder/dist/write-media.js');
    const { FAT32_MAX_FILE } = await import('../../builder/dist/split.js');
    const size = 20 * 1000 ** 3;
    const fat = planFiles('/m', 'r.bundle', size, FAT32_MAX_FILE);
    t.same(
      fat.files.map((f: { final: string }) => f.final),
      [1, 2, 3, 4, 5].map((n) => `/m/r.bundle.part-00${n}-of-005`),
    );
    t.same(
      fat.files.map((f: { start: number; end: number }) => f.end - f.start),
      [FAT32_MAX_FILE, FAT32_MAX_FILE, FAT32_MAX_FILE, FAT32_MAX_FILE, size - 4 * FAT32_MAX_FILE],
    );
    t.ok(
      fat.files.every((f: { temp: string }) =>
        /^\/m\/\.r\.bundle\.part-\d{3}-of-005\.[0-9a-f]{8}-\d+\.tmp$/.test(f.temp),
      ),
      'temp names start with a dot: no watcher takes them for a part',
    );
    const { parsePartName } = await import('../../packages/format/dist/index.js');
    t.ok(
      fat.files.every(
        (f: { temp: string }) => parsePartName(f.temp) === undefined && !f.temp.endsWith('.bundle'),
      ),
      "nor the agent's part-name parser",
    );
    t.same(
      planFiles('/m', 'r.bundle', FAT32_MAX_FILE, FAT32_MAX_FILE).files.map(
        (f: { final: string }) => f.final,
      ),
      ['/m/r.bundle'],
      'exactly 4 GiB - 1: one file',
    );
    t.same(
      planFiles('/m', 'r.bundle', size, undefined).files.map((f: { final: string }) => f.final),
      ['/m/r.bundle'],
      'no limit: one file',
    );
    t.equal(planFiles('/m', 'r.bundle', size, undefined).sidecar.final, '/m/r.bundle.sha256');
  },
);

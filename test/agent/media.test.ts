import t from 'tap';
import { copyFile, mkdir, open, readFile, rename, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  MediaWatcher,
  parseMountinfo,
  createLogger,
  type FoundBundle,
} from '@offline-bundle/agent';
import { makeBundle } from '../format/craft.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { Writable } from 'node:stream';

const quiet = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));

t.test('parseMountinfo reads mount points and undoes octal escapes', async (t) => {
  const text = [
    '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
    '98 22 8:17 / /media/USB\\040STICK rw,nosuid - vfat /dev/sdb1 rw',
  ].join('\n');
  t.same(parseMountinfo(text), ['/', '/media/USB STICK']);
});

/** A watcher over one media root and one drop directory, with a clock the test moves. */
async function setup(t: any, quietSeconds = 0) {
  const root = await tmpdir(t);
  const media = join(root, 'media');
  const usb = join(media, 'usb');
  const drop = join(root, 'drop');
  await mkdir(usb, { recursive: true });
  await mkdir(drop, { recursive: true });
  const mountinfo = join(root, 'mountinfo');
  const base = '22 1 8:1 / / rw - ext4 /dev/sda1 rw\n';
  await writeFile(mountinfo, base);
  let clock = 1_000_000;
  const w = new MediaWatcher({
    roots: [media],
    watchDirs: [drop],
    pollSeconds: 3600,
    log: quiet,
    mountinfo,
    quietSeconds,
    now: () => clock,
  });
  const found: FoundBundle[] = [];
  w.on('bundle', (b) => found.push(b));
  const b = await makeBundle(t);
  return {
    root,
    usb,
    drop,
    w,
    found,
    bundle: await readFile(b.path),
    bundlePath: b.path,
    mount: () => writeFile(mountinfo, `${base}98 22 8:17 / ${usb} rw - ext4 /dev/loop0 rw\n`),
    unmount: () => writeFile(mountinfo, base),
    tick: (ms: number) => {
      clock += ms;
    },
    scans: async (n: number) => {
      for (let i = 0; i < n; i++) await w.scan();
    },
  };
}

t.test(
  "a file is offered once its identity held over three looks and its head is a bundle's, once per change",
  async (t) => {
    const s = await setup(t);
    await writeFile(join(s.usb, 'a.bundle'), s.bundle);
    await writeFile(join(s.usb, 'notes.txt'), 'x');
    await s.scans(3);
    t.same(s.found, [], 'nothing before the media is mounted');
    await s.mount();
    await s.scans(2);
    t.same(
      s.found,
      [],
      'a bundle on a stick just mounted: not on first sight (it may still be copying)',
    );
    await s.w.scan();
    t.same(
      s.found.map((f) => f.file),
      [join(s.usb, 'a.bundle')],
      'offered on the third unchanged look',
    );
    t.same(
      s.found[0]!.release,
      { version: '1.2.3', arch: 'amd64' },
      'with the release its bundle.json names',
    );
    await s.scans(3);
    t.equal(s.found.length, 1, 'offered once');

    await s.unmount();
    await s.w.scan();
    await s.mount();
    await s.scans(3);
    t.equal(s.found.length, 2, 'plugged in again, its bundle is offered again');
  },
);

t.test(
  "a stick mounted below a media root that is itself a mount (the agent container's /run/media bind) is offered",
  async (t) => {
    const s = await setup(t);
    await writeFile(join(s.usb, 'a.bundle'), s.bundle);
    const media = join(s.root, 'media');
    // the root listed after the stick, so its scan comes last in each poll
    await writeFile(
      join(s.root, 'mountinfo'),
      `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n98 22 8:17 / ${s.usb} rw - ext4 /dev/loop0 rw\n99 22 0:50 / ${media} ro - tmpfs tmpfs ro\n`,
    );
    await s.scans(3);
    t.same(
      s.found.map((f) => f.file),
      [join(s.usb, 'a.bundle')],
      'the scan of the root does not forget what was seen on the stick below it',
    );
  },
);

t.test(
  'a file that grows between looks (a slow writer) is offered only after it stopped, and once',
  async (t) => {
    const s = await setup(t);
    await s.mount();
    const file = join(s.usb, 'slow.bundle');
    const fh = await open(file, 'w');
    const step = Math.ceil(s.bundle.length / 10);
    for (let off = 0; off < s.bundle.length; off += step) {
      await fh.write(s.bundle.subarray(off, off + step), 0, undefined, off);
      await s.w.scan();
    }
    await fh.close();
    t.same(s.found, [], 'never offered while it grew (each look saw a new size)');
    await s.scans(5);
    t.equal(s.found.length, 1, 'offered once when the copy was complete and stable');
  },
);

t.test(
  "a copier that writes the end first and pauses: the head is read, not a bundle's yet, the file waits",
  async (t) => {
    const s = await setup(t);
    const file = join(s.drop, 'endfirst.bundle');
    const fh = await open(file, 'w');
    const tail = Math.floor(s.bundle.length / 2);
    await fh.write(s.bundle.subarray(tail), 0, undefined, tail); // the end, with the seek table; zeros before it
    await s.scans(6);
    t.same(
      s.found,
      [],
      'size and mtime stable, the seek table at its end, but no zstd frame at its start: not offered',
    );
    t.equal(s.w.work.heads, 1, 'its head was read once for this identity, not on every poll');
    await fh.write(s.bundle.subarray(0, tail), 0, undefined, 0);
    await fh.close();
    await s.scans(3);
    t.equal(s.found.length, 1, 'written completely, it is offered (once)');
  },
);

t.test(
  'a stable copy cut short (no seek table at its end) is said while it is there, not offered; completed, it is offered and the note goes',
  async (t) => {
    const s = await setup(t);
    const said: string[][] = [];
    s.w.on('incomplete', (files) => said.push(files));
    await s.mount();
    const file = join(s.usb, 'cut.bundle');
    await writeFile(file, s.bundle.subarray(0, Math.floor(s.bundle.length * 0.6)));
    await s.scans(2);
    t.same(
      said,
      [[]],
      'the first scan says there is none (a note kept from before a restart goes); not before it is stable (it may still be copying)',
    );
    await s.scans(4);
    t.same(said, [[], [file]], 'said once, naming the file');
    t.same(s.found, [], 'not offered');
    await writeFile(file, s.bundle);
    await s.scans(3);
    t.same(said, [[], [file], []], 'the note goes once the file changed');
    t.equal(s.found.length, 1, 'and the whole copy is offered');
    await writeFile(join(s.usb, 'cut2.bundle'), s.bundle.subarray(0, 1000));
    await s.scans(3);
    await s.unmount();
    await s.scans(1);
    t.same(
      said.slice(3),
      [[join(s.usb, 'cut2.bundle')], []],
      'a stick pulled takes its note with it',
    );
  },
);

t.test(
  'a stable file that starts and ends as a bundle but whose head is damaged is offered, for the load to report',
  async (t) => {
    const s = await setup(t);
    const damaged = Buffer.from(s.bundle);
    for (let i = 8; i < 64; i++) damaged[i]! ^= 0xff;
    await writeFile(join(s.drop, 'damaged.bundle'), damaged);
    await writeFile(join(s.drop, 'other.bundle'), 'PK\x03\x04 a zip, renamed');
    await s.scans(5);
    t.same(
      s.found.map((f) => [f.file, f.release]),
      [[join(s.drop, 'damaged.bundle'), undefined]],
      'the damaged bundle is offered, with no release; a file of another kind is not',
    );
  },
);

t.test(
  'a copy that paused after writing its head and end waits for the quiet time before it is read',
  async (t) => {
    const s = await setup(t, 5);
    const file = join(s.drop, 'paused.bundle');
    const fh = await open(file, 'w');
    const cut = Math.floor(s.bundle.length / 2);
    await fh.write(s.bundle.subarray(0, 4096), 0, undefined, 0);
    await fh.write(s.bundle.subarray(cut), 0, undefined, cut);
    await s.scans(5);
    t.same(
      s.found,
      [],
      'head and end in place, a hole in the middle, written just now: not offered within the quiet time',
    );
    t.equal(s.w.work.heads, 0, 'and not even read');
    await fh.write(s.bundle.subarray(4096, cut), 0, undefined, 4096);
    await fh.close();
    await s.scans(3);
    t.same(s.found, [], 'complete now, but just written');
    s.tick(5000);
    await s.w.scan();
    t.equal(s.found.length, 1, 'offered once quiet for 5 s');
  },
);

t.test(
  'temp names are never looked at; a renamed or symlinked bundle is the same copy',
  async (t) => {
    const s = await setup(t);
    for (const n of [
      '.a.bundle',
      'a.bundle.part',
      '.a.bundle.Xy12Ab',
      'a.bundle.tmp',
      'a.bundle~',
      'a.bundle.partial',
    ])
      await writeFile(join(s.drop, n), s.bundle);
    await s.scans(4);
    t.same(
      s.found,
      [],
      'dot files, .part, rsync temp names, .tmp, editor backups, .partial: never offered',
    );
    t.equal(s.w.work.stats, 0, "and never even stat'ed");

    await copyFile(s.bundlePath, join(s.drop, 'update.bundle'));
    await s.scans(3);
    t.equal(s.found.length, 1, 'the bundle is offered');
    await rename(join(s.drop, 'update.bundle'), join(s.drop, 'renamed.bundle'));
    await symlink(join(s.drop, 'renamed.bundle'), join(s.drop, 'link.bundle'));
    await s.scans(5);
    t.equal(s.found.length, 1, 'renamed, and reached through a symlink: no second offer');
    await copyFile(s.bundlePath, join(s.drop, 'copy.bundle'));
    await s.scans(3);
    t.equal(
      s.found.length,
      2,
      'a real copy (another file) is offered: the daemon and its records decide whether to load it',
    );
    await writeFile(join(s.drop, 'moved.bundle'), s.bundle);
    await s.scans(3);
    t.equal(
      s.found.length,
      3,
      'written again in place, it is a new copy: offered once more (once, through one of its two names)',
    );
    t.not(s.found[2]!.key, s.found[0]!.key, 'under a new identity');
  },
);

t.test(
  '5,000 junk *.bundle files: bounded stats per poll, each head read once, nothing re-read',
  async (t) => {
    const s = await setup(t);
    await copyFile(s.bundlePath, join(s.drop, '0000-update.bundle'));
    for (let i = 0; i < 5000; i++)
      await writeFile(
        join(s.drop, `junk-${String(i).padStart(4, '0')}.bundle`),
        `not a bundle ${i}`,
      );
    await s.scans(4);
    t.equal(s.found.length, 1, 'the bundle among them is offered');
    const before = { ...s.w.work };
    await s.scans(10);
    const stats = s.w.work.stats - before.stats;
    const heads = s.w.work.heads - before.heads;
    t.ok(stats <= 10 * 64, `at most 64 stats per poll per directory (${stats / 10} per poll)`);
    t.equal(heads, 0, 'no file read again once judged, while it does not change');
  },
);

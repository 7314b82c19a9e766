import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MediaWatcher, parseMountinfo, createLogger, type FoundBundle } from '@offline-bundle/agent';
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

t.test('MediaWatcher', async (t) => {
  const root = await tmpdir(t);
  const media = join(root, 'media');
  const usb = join(media, 'usb');
  const drop = join(root, 'drop');
  await mkdir(usb, { recursive: true });
  await mkdir(drop, { recursive: true });
  await writeFile(join(usb, 'a.bundle'), 'x');
  await writeFile(join(usb, 'notes.txt'), 'x');
  const mountinfo = join(root, 'mountinfo');
  await writeFile(mountinfo, `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n`);
  const w = new MediaWatcher({ roots: [media], watchDirs: [drop], pollSeconds: 3600, log: quiet, mountinfo });
  const found: FoundBundle[] = [];
  w.on('bundle', (b) => found.push(b));
  await w.scan();
  t.same(found, [], 'nothing before the media is mounted');

  await writeFile(mountinfo, `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n98 22 8:17 / ${usb} rw - ext4 /dev/loop0 rw\n`);
  await w.scan();
  t.same(found.map((f) => f.file), [join(usb, 'a.bundle')], 'a bundle at the top of a new mount');
  await w.scan();
  t.equal(found.length, 1, 'offered once');

  // a bundle's last 9 bytes: frame count, descriptor, the seekable format's magic
  const footer = Buffer.alloc(9);
  footer.writeUInt32LE(0x8f92eab1, 5);
  await writeFile(join(drop, 'b.bundle'), 'partial, the writer paused');
  await writeFile(join(drop, '.c.bundle'), Buffer.concat([Buffer.from('a copy tool\'s temp file'), footer]));
  await writeFile(join(drop, 'd.bundle.partial'), Buffer.concat([Buffer.from('copy in progress'), footer]));
  for (let i = 0; i < 3; i++) await w.scan();
  t.equal(found.length, 1, 'a paused copy (stable size, no footer), a dot file and a .partial are never taken');
  await writeFile(join(drop, 'b.bundle'), Buffer.concat([Buffer.from('partial, the writer paused, then finished'), footer]));
  await w.scan();
  t.equal(found.length, 1, 'a complete drop-dir file is not taken on first sight (it may still be copying)');
  await w.scan();
  t.same(found.map((f) => f.file).slice(1), [join(drop, 'b.bundle')], 'taken once it is complete and stable');

  await writeFile(mountinfo, `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n`);
  await w.scan();
  await writeFile(mountinfo, `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n98 22 8:17 / ${usb} rw - ext4 /dev/loop0 rw\n`);
  await w.scan();
  t.equal(found.filter((f) => f.file === join(usb, 'a.bundle')).length, 2, 'replugging the media offers its bundle again');
  w.stop();
});

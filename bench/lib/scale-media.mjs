// The "sticks" of the scale run: sparse image files with a filesystem, mounted as a technician's
// laptop would (FAT32 through fusefat, as the kernel here has no vfat; ext4 on a loop device).
// Each mount is recorded so a failure anywhere unmounts and removes it (cleanup()).
import { execFileSync } from 'node:child_process';
import { mkdir, rm } from 'node:fs/promises';

/** Undo steps, last first. */
const undo = [];

const sh = (cmd, args) =>
  execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });

/** A sparse `bytes`-sized FAT32 image mounted read-write through fusefat at `dir`. */
export async function mountFat32(image, dir, bytes) {
  await mkdir(dir, { recursive: true });
  sh('truncate', ['-s', String(bytes), image]);
  undo.push(() => rm(image, { force: true }));
  sh('mkfs.vfat', ['-F', '32', '-n', 'STICK', image]);
  // fusefat forks into the background once mounted; rw+ is its read-write mode
  sh('fusefat', ['-o', 'rw+', image, dir]);
  undo.push(() => unmount(dir, true));
}

/** A sparse `bytes`-sized ext4 image on a loop device at `dir`; discard gives deleted files' room back to the disk. */
export async function mountExt4(image, dir, bytes) {
  await mkdir(dir, { recursive: true });
  sh('truncate', ['-s', String(bytes), image]);
  undo.push(() => rm(image, { force: true }));
  sh('mkfs.ext4', [
    '-q',
    '-F',
    '-m',
    '0',
    '-E',
    'lazy_itable_init=1,lazy_journal_init=1,nodiscard',
    image,
  ]);
  sh('mount', ['-o', 'loop,discard', image, dir]);
  undo.push(() => unmount(dir, false));
}

/** A sparse `bytes`-sized exFAT image on a loop device mounted through exfat-fuse (it takes only block devices). */
export async function mountExfat(image, dir, bytes) {
  await mkdir(dir, { recursive: true });
  sh('truncate', ['-s', String(bytes), image]);
  undo.push(() => rm(image, { force: true }));
  sh('mkfs.exfat', [image]);
  const loop = sh('losetup', ['-f', '--show', image]).trim();
  undo.push(() => sh('losetup', ['-d', loop]));
  sh('mount.exfat-fuse', [loop, dir]);
  undo.push(() => unmount(dir, true));
}

/** The stick kinds: FAT32 through fusefat, exFAT through exfat-fuse, ext4 on a loop device. */
export const STICKS = {
  fat32: { mount: mountFat32, what: 'FAT32 image through fusefat' },
  exfat: { mount: mountExfat, what: 'exFAT image through exfat-fuse (loop device)' },
  ext4: { mount: mountExt4, what: 'ext4 image on a loop device' },
};

function unmount(dir, fuse) {
  try {
    sh(fuse ? 'fusermount' : 'umount', fuse ? ['-u', dir] : [dir]);
  } catch {
    try {
      sh('umount', ['-l', dir]);
    } catch {
      /* not mounted any more */
    }
  }
}

/** Unmounts and removes everything mounted or created here, last first; never throws. */
export async function cleanup() {
  while (undo.length) {
    try {
      await undo.pop()();
    } catch {
      // keep undoing the rest
    }
  }
}

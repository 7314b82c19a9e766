// Shared pieces of the write-media tests: a small real bundle, FUSE FAT32 images (fusefat, run in
// the foreground so the test holds its daemon) and unmounting in teardown, even on failure.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { writeImageLayout } from '../helpers/images.mjs';
import { until } from '../helpers/until.js';
import { bundle, keygen, type RunResult } from './lib.js';

/** Why these tests cannot run here, or undefined. */
export const skipReason = !existsSync('/dev/fuse')
  ? '/dev/fuse is absent: FUSE mounts cannot be made here'
  : process.getuid?.() !== 0
    ? 'not root: loop devices and FUSE mounts of images need root'
    : undefined;

export const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
export const mounted = async (dir: string) =>
  (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').some((l) => l.split(' ')[4] === dir);
export const oneLine = (stderr: string) =>
  stderr
    .trimEnd()
    .split('\n')
    .filter((l) => l.startsWith('bundle: ')).length === 1;

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** Teardown: unmount (lazily: a killed FUSE daemon leaves a dead mount), end the daemon, free the loop device. */
export function unmountLater(t: Teardown, mnt: string, daemon?: ChildProcess, loop?: string): void {
  t.teardown(() => {
    try {
      execFileSync('umount', ['-l', mnt], { stdio: 'ignore' });
    } catch {
      /* not mounted */
    }
    if (daemon && daemon.exitCode === null) daemon.kill();
    if (loop)
      try {
        execFileSync('losetup', ['-d', loop], { stdio: 'ignore' });
      } catch {
        /* gone */
      }
  });
}

/** A FAT32 image mounted through fusefat (rw+: its writes are "experimental"; ro to look at what reached the image). */
export async function fat32(
  t: Teardown,
  img: string,
  mnt: string,
  opts: { sizeMiB?: number; mode?: 'rw+' | 'ro'; mkfs?: boolean } = {},
): Promise<ChildProcess> {
  if (opts.mkfs !== false) {
    execFileSync('truncate', ['-s', `${opts.sizeMiB ?? 32}M`, img]);
    execFileSync('mkfs.vfat', ['-F', '32', img], { stdio: 'ignore' });
  }
  await mkdir(mnt, { recursive: true });
  // fsname: the mount's source is the image (its FSInfo gives the free space fusefat does not report)
  const daemon = spawn(
    'fusefat',
    ['-f', '-o', `${opts.mode ?? 'rw+'},fsname=${img},subtype=fusefat`, img, mnt],
    { stdio: 'ignore' },
  );
  unmountLater(t, mnt, daemon);
  await until(`fusefat on ${mnt}`, () => mounted(mnt), { timeoutMs: 10_000, stepMs: 50 });
  return daemon;
}

export async function unmount(mnt: string, daemon?: ChildProcess): Promise<void> {
  execFileSync('umount', [mnt]);
  if (daemon && daemon.exitCode === null) await new Promise((r) => daemon.once('exit', r));
}

export interface TestBundle {
  src: string;
  bytes: Buffer;
  digest: string;
  pub: string;
  write: (mnt: string, extra?: string[]) => Promise<RunResult>;
}

/**
 * A real bundle of some 2.4 MB (random bytes do not compress): larger than a 2 MiB stick, several
 * 512 KiB parts. `layers`: that many layers of 600 KiB instead, so zstd frames start all along it.
 */
export async function testBundle(work: string, layers = 0): Promise<TestBundle> {
  const layout = path.join(work, 'layout');
  const noise = layers
    ? Array.from({ length: layers }, (_, i) => ({ [`srv/noise${i}`]: randomBytes(600 * 1024) }))
    : [{ 'srv/noise': randomBytes(2 * 1024 * 1024 + 300 * 1024) }];
  await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: noise }],
  });
  const keys = await keygen(work, 'factory', 'ed25519');
  const src = path.join(work, 'r.bundle');
  const c = await bundle([
    'create',
    '--json',
    '--quiet',
    '--version',
    '3.1',
    '--image',
    `oci:${layout}:v1=registry.example.com/media/app:v1`,
    '--key',
    keys.key,
    '-o',
    src,
    '--cache',
    path.join(work, 'cache'),
  ]);
  if (c.code !== 0) throw new Error(c.stderr);
  return {
    src,
    bytes: await readFile(src),
    digest: JSON.parse(c.stdout).digest as string,
    pub: keys.pub,
    write: (mnt, extra = []) => bundle(['write-media', src, mnt, '--json', ...extra]),
  };
}

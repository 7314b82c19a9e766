// `bundle write-media`: a bundle onto a mounted stick, split as its filesystem needs, written
// under dot names (no media watcher takes them for a bundle) and renamed into place once all is
// synced, then read back and checked against what was read from the bundle. A failure leaves no
// file of the bundle under its own name, and what it wrote under temp names is removed.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, readdir, realpath, rename, rm, stat } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { basename, join } from 'node:path';
import { digestLine, isPartName, parsePartName, partName, partNamesIn } from '@offline-bundle/format';
import { assertRegularFile, pidExists, syncDirBestEffort, writeSynced } from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/status';
import type { Progress } from './progress.js';
import { copyRange, partCount } from './split.js';
import { MediaError, assertWritable, describeTarget, looksLikeMedia, mountOf, readMounts, type Mount, type Target } from './write-media-target.js';

/**
 * Room kept free beyond the bundle and its .sha256: directory entries, and the last cluster of
 * each file (counted per file on top of this).
 */
export const ROOM_MARGIN_BYTES = 1024 * 1024;

export interface WriteMediaOptions {
  bundle: string;
  target: string;
  /** Parts no larger than this (the filesystem's own limit lowers it further). */
  partSize?: number;
  force?: boolean;
  /** Write into a directory that is not a stick's mount point. */
  anyDirectory?: boolean;
  progress: Progress;
  signal?: AbortSignal;
  mountinfo?: string;
}

interface MediaFile {
  final: string;
  temp: string;
  start: number;
  end: number;
  /** sha256 of the bytes written to it, as they were read from the bundle. */
  digest?: string;
}

interface MediaPlan {
  dir: string;
  base: string;
  size: number;
  files: MediaFile[];
  sidecar: { final: string; temp: string };
}

export interface WriteMediaResult {
  target: string;
  mountPoint: string;
  filesystem: string;
  files: string[];
  parts: number;
  digest: string;
  size: number;
  free?: number;
  /** The page cache of the written files was dropped before the read-back (dd iflag=nocache). */
  cacheDropped: boolean;
}

const tempOf = (dir: string, name: string) => join(dir, `.${name}.${process.pid}.tmp`);
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Temp files an earlier run for this bundle left when the stick went away under it (it could not
 * remove them then): removed when the process that wrote them is gone.
 */
async function removeStaleTemps(dir: string, base: string): Promise<void> {
  const ours = new RegExp(`^\\.${escapeRe(base)}(?:\\.part-\\d+-of-\\d+|\\.sha256)?\\.(\\d+)\\.tmp$`);
  for (const n of await readdir(dir)) {
    const pid = Number(ours.exec(n)?.[1]);
    if (pid && !pidExists(pid)) await rm(join(dir, n), { force: true });
  }
}

/** One whole file when it fits the filesystem and --part-size; parts of the smaller of the two otherwise. */
export function planFiles(dir: string, base: string, size: number, limit: number | undefined): MediaPlan {
  const sidecarName = `${base}.sha256`;
  const sidecar = { final: join(dir, sidecarName), temp: tempOf(dir, sidecarName) };
  if (limit === undefined || size <= limit) return { dir, base, size, sidecar, files: [{ final: join(dir, base), temp: tempOf(dir, base), start: 0, end: size }] };
  const count = partCount(size, limit, base);
  const files = Array.from({ length: count }, (_, i) => {
    const name = partName(base, i + 1, count);
    return { final: join(dir, name), temp: tempOf(dir, name), start: i * limit, end: Math.min(size, (i + 1) * limit) };
  });
  return { dir, base, size, sidecar, files };
}

/** The stick's directory (a real path) and its mount, refused when it is not one a stick would be. */
async function resolveTarget(o: WriteMediaOptions): Promise<{ dir: string; mount: Mount }> {
  const dir = await realpath(o.target).catch((cause: NodeJS.ErrnoException) => {
    throw new MediaError('NOT_A_MOUNT', `${o.target} does not exist (${cause.code}): plug in the stick and give its mount point ("findmnt -l" or "lsblk -f" shows it)`, { cause });
  });
  if (!(await stat(dir)).isDirectory()) throw new MediaError('NOT_A_MOUNT', `${o.target} is not a directory: give the stick's mount point`);
  const mount = mountOf(dir, await readMounts(o.mountinfo));
  if (!mount) throw new MediaError('NOT_A_MOUNT', `no mount holds ${dir} in ${o.mountinfo ?? '/proc/self/mountinfo'}: give the stick's mount point`);
  if (!o.anyDirectory && mount.mountPoint !== dir) {
    throw new MediaError('NOT_A_MOUNT', `${dir} is not the mount point of removable media (it is a directory on ${mount.mountPoint}, ${mount.fsType}): give the stick's mount point ("findmnt -l" shows them), or pass --any-directory to write there anyway`);
  }
  if (!o.anyDirectory && !looksLikeMedia(mount)) {
    throw new MediaError('NOT_A_MOUNT', `${dir} is ${mount.fsType} mounted at ${mount.mountPoint}, a system filesystem, not removable media: give the stick's mount point, or pass --any-directory to write there anyway`);
  }
  await assertWritable(dir, mount);
  return { dir, mount };
}

/** Files of this bundle already on the stick, with their sizes: refused without --force. */
async function oldCopies(dir: string, base: string, force: boolean | undefined): Promise<Array<{ path: string; size: number }>> {
  await removeStaleTemps(dir, base);
  const names = [base, `${base}.sha256`, ...(await partNamesIn(dir, base)).map((p) => p.name)];
  const there: Array<{ path: string; size: number }> = [];
  for (const n of names) {
    const st = await stat(join(dir, n)).catch(() => undefined);
    if (st) there.push({ path: join(dir, n), size: st.size });
  }
  const them = there.length > 1 ? 'them' : 'it';
  if (there.length > 0 && !force) throw new MediaError('OUTPUT_EXISTS', `${dir} already holds ${there.map((f) => basename(f.path)).join(', ')}: pass --force to replace ${them}, or remove ${them} first`);
  return there;
}

/** Refuses before anything is written when the bundle, its .sha256 and the margin do not fit. */
function checkRoom(plan: MediaPlan, t: Target, replaced: Array<{ size: number }>, progress: Progress): void {
  const sidecarBytes = Buffer.byteLength(digestLine(`sha256:${'0'.repeat(64)}`, plan.base));
  const need = plan.size + sidecarBytes + ROOM_MARGIN_BYTES + (plan.files.length + 1) * t.blockBytes;
  // what --force replaces is free once removed (each file's clusters, rounded down to be safe)
  const free = t.free === undefined ? undefined : t.free + replaced.reduce((n, f) => n + Math.floor(f.size / t.blockBytes) * t.blockBytes, 0);
  if (free === undefined) {
    progress.log(`warning: ${t.mount.mountPoint} (${t.mount.fsType}) does not say how much room it has: writing anyway (${formatBytes(need)} needed); a full stick is reported and what was written removed`);
    return;
  }
  if (free < need) {
    const mine = replaced.length ? ` (with the ${formatBytes(free - t.free!)} of the copy --force replaces)` : '';
    throw new MediaError('NO_SPACE', `the stick at ${t.mount.mountPoint} has ${formatBytes(free)} free${mine}, the bundle needs ${formatBytes(need)} (${formatBytes(plan.size)}, its .sha256 and ${formatBytes(need - plan.size - sidecarBytes)} to spare): use a bigger stick or free ${formatBytes(need - free)} on it; nothing was written`);
  }
}

/** The one line for a write or read that failed on the stick, saying what to do. */
export function mediaFailure(err: unknown, file: string, plan: MediaPlan, leftovers: string[], doing = 'writing'): Error {
  if (err instanceof MediaError) return err;
  const e = err as NodeJS.ErrnoException;
  const name = basename(file);
  const left = leftovers.length ? `its temp files (.${plan.base}*.${process.pid}.tmp) stay until the next write-media of ${plan.base} removes them` : 'nothing of the bundle is left on it';
  const line = (code: 'NO_SPACE' | 'IO_ERROR' | 'MEDIA_GONE', what: string, fix: string) => new MediaError(code, `${what}; ${left}: ${fix}`, { cause: err });
  switch (e?.code) {
    case 'ENOSPC': case 'EDQUOT':
      return line('NO_SPACE', `the stick at ${plan.dir} filled up while writing ${name} (${e.code})`, `use a bigger stick (the bundle is ${formatBytes(plan.size)}) or free space on it`);
    case 'EFBIG':
      return line('IO_ERROR', `${name} is larger than the filesystem at ${plan.dir} holds in one file (EFBIG)`, 'pass a smaller --part-size (e.g. 4G)');
    case 'EIO': case 'ENOTCONN': case 'ENODEV': case 'ENXIO': case 'ESHUTDOWN': case 'EROFS': case 'ESTALE':
      return line('MEDIA_GONE', `the stick at ${plan.dir} went away or failed while ${doing} ${name} (${e.code})`, 'plug it in again (check it with fsck if it was pulled) and rerun');
    case 'EPERM':
      return line('IO_ERROR', `the filesystem at ${plan.dir} refused to write more of ${name} (EPERM; FUSE FAT drivers say so when the stick is full)`, 'use a bigger stick or free space on it');
    default:
      return line('IO_ERROR', `cannot ${doing === 'writing' ? 'write' : 'read back'} ${name} on ${plan.dir}: ${e?.message ?? String(err)}`, 'check the stick and rerun');
  }
}

/** Removes every temp file; returns the ones that could not be (the stick went away). */
async function discard(plan: MediaPlan): Promise<string[]> {
  const left: string[] = [];
  for (const f of [...plan.files.map((x) => x.temp), plan.sidecar.temp]) {
    await rm(f, { force: true }).catch(() => left.push(f));
  }
  return left;
}

/** The bundle's bytes into the temp files, streamed, each synced; returns the whole file's digest. */
async function writeTemps(bundle: string, plan: MediaPlan, at: { file: string }, progress: Progress, signal?: AbortSignal): Promise<string> {
  const whole = createHash('sha256');
  let done = 0;
  progress.start(`writing ${plan.files.length > 1 ? `${plan.files.length} parts` : basename(plan.files[0]!.final)} to ${plan.dir}`, plan.size);
  for (const f of plan.files) {
    const part = createHash('sha256');
    at.file = f.final;
    await copyRange(bundle, f.temp, f.start, f.end, (c) => {
      whole.update(c);
      part.update(c);
      done += c.length;
      progress.update(done);
    }, signal);
    f.digest = `sha256:${part.digest('hex')}`;
  }
  progress.phaseNote('syncing');
  const digest = `sha256:${whole.digest('hex')}`;
  await assertMatchesSidecar(bundle, digest);
  at.file = plan.sidecar.final;
  await writeSynced(plan.sidecar.temp, digestLine(digest, plan.base));
  return digest;
}

/** The bundle's own NAME.bundle.sha256, when there is one, must name what was read: else the bundle changed or is another. */
async function assertMatchesSidecar(bundle: string, digest: string): Promise<void> {
  const line = await readFile(`${bundle}.sha256`, 'utf8').catch(() => undefined);
  const said = line ? /^([0-9a-f]{64})\s/.exec(line)?.[1] : undefined;
  if (said && `sha256:${said}` !== digest) {
    throw new MediaError('READ_BACK_FAILED', `${bundle} reads as ${digest} but ${basename(bundle)}.sha256 beside it says sha256:${said}: the bundle was damaged or changed since it was written; copy it again from the factory`);
  }
}

/** Temp names to final names, the .sha256 last; on failure the ones already moved go again. */
async function commit(plan: MediaPlan): Promise<void> {
  const moves = [...plan.files, plan.sidecar];
  let moved = 0;
  try {
    for (; moved < moves.length; moved++) await rename(moves[moved]!.temp, moves[moved]!.final);
  } catch (err) {
    for (const m of moves.slice(0, moved)) await rm(m.final, { force: true }).catch(() => undefined);
    throw err;
  }
  await syncDirBestEffort(plan.dir);
}

/**
 * Drops the written files' clean pages (posix_fadvise DONTNEED through GNU dd's iflag=nocache,
 * which Node lacks) so the read-back comes from the stick, not from memory. A FUSE driver reads
 * its device (or image) through that device's own cache: that is dropped too. Best effort: false
 * when a file's could not be.
 */
async function dropCache(files: string[], mount: Mount): Promise<boolean> {
  const drop = (f: string) => new Promise<boolean>((resolve) => {
    execFile('dd', [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none'], (err) => resolve(!err));
  });
  const dropped = (await Promise.all(files.map(drop))).every(Boolean);
  const device = mount.fsType.startsWith('fuse') && mount.source.startsWith('/') ? await stat(mount.source).catch(() => undefined) : undefined;
  if (device?.isFile() || device?.isBlockDevice()) await drop(mount.source);
  return dropped;
}

async function hashFile(file: string, hashes: Hash[], onBytes: (n: number) => void): Promise<void> {
  for await (const c of createReadStream(file, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) {
    for (const h of hashes) h.update(c);
    onBytes(c.length);
  }
}

/** Every written file read back from the stick and checked against what was read from the bundle, and the whole across parts. */
async function readBack(plan: MediaPlan, digest: string, at: { file: string }, progress: Progress): Promise<void> {
  const whole = createHash('sha256');
  let done = 0;
  progress.start(`reading back from ${plan.dir}`, plan.size);
  for (const f of plan.files) {
    const part = createHash('sha256');
    at.file = f.final;
    await hashFile(f.final, [whole, part], (n) => progress.update(done += n));
    if (`sha256:${part.digest('hex')}` !== f.digest) {
      throw new MediaError('READ_BACK_FAILED', `${basename(f.final)} reads back from ${plan.dir} other than it was written: the stick does not keep what it is given (faulty, fake capacity, or its driver lost the write); what was written is removed: use another stick`);
    }
  }
  if (`sha256:${whole.digest('hex')}` !== digest) throw new MediaError('READ_BACK_FAILED', `the parts on ${plan.dir} do not read back as the bundle: use another stick`);
  at.file = plan.sidecar.final;
  const sidecar = await readFile(plan.sidecar.final, 'utf8');
  if (sidecar !== digestLine(digest, plan.base)) throw new MediaError('READ_BACK_FAILED', `${basename(plan.sidecar.final)} reads back from ${plan.dir} other than it was written: use another stick`);
}

/** The filesystem's limit per file, lowered to --part-size. */
function partLimit(t: Target, partSize: number | undefined): number | undefined {
  if (t.kind.maxFile === undefined) return partSize;
  return Math.min(t.kind.maxFile, partSize ?? Infinity);
}

/** The one-file bundle's size; a part, or a name the agent would not look at, is refused. */
async function bundleSize(bundle: string): Promise<number> {
  if (isPartName(bundle)) {
    const base = parsePartName(bundle)!.base;
    throw new MediaError('NOT_A_BUNDLE', `${bundle} is one part of ${base}: give the one-file bundle (join the parts: cat ${base}.part-* > ${base}); write-media splits it as the stick needs`);
  }
  if (!basename(bundle).endsWith('.bundle') || basename(bundle).startsWith('.')) {
    throw new MediaError('NOT_A_BUNDLE', `${bundle} is not named NAME.bundle: bundle-agent looks only for *.bundle files on a stick; rename it`);
  }
  const st = await assertRegularFile(bundle);
  return st?.size ?? (await stat(bundle)).size;
}

export async function writeMedia(o: WriteMediaOptions): Promise<WriteMediaResult> {
  const size = await bundleSize(o.bundle);
  const { dir, mount } = await resolveTarget(o);
  const replaced = await oldCopies(dir, basename(o.bundle), o.force);
  const target = await describeTarget(dir, mount);
  const plan = planFiles(dir, basename(o.bundle), size, partLimit(target, o.partSize));
  checkRoom(plan, target, replaced, o.progress);
  // replaced, not kept beside: the room counted on them
  for (const f of replaced) await rm(f.path, { force: true });
  if (replaced.length) await syncDirBestEffort(dir);
  let digest: string;
  const at = { file: plan.files[0]!.final };
  try {
    digest = await writeTemps(o.bundle, plan, at, o.progress, o.signal);
    await commit(plan);
  } catch (err) {
    o.progress.finish();
    const left = await discard(plan);
    if (o.signal?.aborted) throw o.signal.reason;
    throw mediaFailure(err, at.file, plan, left);
  }
  const written = [...plan.files.map((f) => f.final), plan.sidecar.final];
  const cacheDropped = await dropCache(written, mount);
  try {
    await readBack(plan, digest, at, o.progress);
  } catch (err) {
    // what does not read back as written is no copy of the bundle
    for (const f of written) await rm(f, { force: true }).catch(() => undefined);
    throw mediaFailure(err, at.file, plan, [], 'reading back');
  } finally {
    o.progress.finish();
  }
  return {
    target: dir, mountPoint: mount.mountPoint, filesystem: target.kind.name, files: written, parts: plan.files.length > 1 ? plan.files.length : 0,
    digest, size, ...(target.free !== undefined ? { free: target.free } : {}), cacheDropped,
  };
}

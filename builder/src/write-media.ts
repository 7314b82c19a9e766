// `bundle write-media`: a bundle onto a mounted stick, split as its filesystem needs, written
// under dot names (no media watcher takes them for a bundle) and renamed into place once all is
// synced, then read back and checked against what was read from the bundle. A failure leaves no
// file of the bundle under its own name, and what it wrote under temp names is removed.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, readFileSync, type Stats } from 'node:fs';
import { readFile, readdir, realpath, rename, rm, stat } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { hostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import {
  FormatError,
  digestLine,
  endsWithSeekTable,
  findParts,
  isPartName,
  misplacedFrame,
  namesSplitBundle,
  openBundle,
  parsePartName,
  partName,
  partNamesIn,
  readHeader,
  withBundle,
  type BundleSource,
} from '@offline-bundle/format';
import { assertRegularFile, pidExists, syncDirBestEffort, writeSynced } from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/cli';
import type { Progress } from './progress.js';
import { copyRange, partCount } from './split.js';
import {
  MediaError,
  assertWritable,
  describeTarget,
  looksLikeMedia,
  mountOf,
  readMounts,
  type Mount,
  type Target,
} from './write-media-target.js';
import {
  agentNeeds,
  agentResult,
  findAgentImage,
  planAgent,
  readBackAgent,
  removeStaleAgentTemps,
  writeAgentTemps,
  type AgentCopy,
} from './write-media-agent.js';

/**
 * Room kept free beyond the bundle and its .sha256: directory entries, and the last cluster of
 * each file (counted per file on top of this).
 */
export const ROOM_MARGIN_BYTES = 1024 * 1024;

export interface WriteMediaOptions {
  /** NAME.bundle, or one of its parts (or NAME.bundle when only its parts are there): the parts are read in turn, never joined on disk. */
  bundle: string;
  target: string;
  /** Parts no larger than this (the filesystem's own limit lowers it further). */
  partSize?: number;
  force?: boolean;
  /** Write into a directory that is not a stick's mount point. */
  anyDirectory?: boolean;
  /**
   * The agent image pair (bundle-agent-VERSION-ARCH.oci.tar and its .sig) to take along: a path
   * to either; undefined: the one the bundle's agent field names, when it is beside the bundle;
   * false: none.
   */
  agentImage?: string | boolean;
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
  /** Its temp file was created: only those are removed (and named) after a failure. */
  started?: boolean;
}

interface MediaPlan {
  dir: string;
  base: string;
  size: number;
  files: MediaFile[];
  sidecar: { final: string; temp: string; started?: boolean };
  /** The agent image pair written beside the bundle, for nodes with no agent yet. */
  agent?: AgentCopy;
  /** The copy of this bundle that was on the stick: none, still there, or removed (up front for room, or replaced by the commit). */
  old?: 'kept' | 'removed';
}

interface OldFile {
  path: string;
  size: number;
  dev: number;
  ino: number;
}

/** The files the bundle is read from (the one file, or its parts in order), as they were at the start. */
interface SourceFiles {
  base: string;
  files: Array<{ path: string; st: Stats }>;
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
  /** The agent image pair taken along (written, or found there already), read back and checked. */
  agentImage?: ReturnType<typeof agentResult>;
}

function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return String(Date.now() - process.uptime() * 1000);
  }
}

/**
 * Which boot of which machine wrote a temp file: a PID alone says nothing about a temp file left
 * by another machine (or before a reboot), whose PID may well run here now.
 */
const BOOT_TAG = createHash('sha256')
  .update(bootId() + hostname())
  .digest('hex')
  .slice(0, 8);
const TEMP_TAG = `${BOOT_TAG}-${process.pid}`;
const tempOf = (dir: string, name: string) => join(dir, `.${name}.${TEMP_TAG}.tmp`);
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Temp files an earlier run for this bundle left when the stick went away under it (it could not
 * remove them then): removed when another machine or boot wrote them, or a process gone.
 */
async function removeStaleTemps(dir: string, base: string): Promise<void> {
  const ours = new RegExp(
    `^\\.${escapeRe(base)}(?:\\.part-\\d+-of-\\d+|\\.sha256)?\\.([0-9a-f]{8})-(\\d+)\\.tmp$`,
  );
  for (const n of await readdir(dir)) {
    const m = ours.exec(n);
    if (m && (m[1] !== BOOT_TAG || !pidExists(Number(m[2]))))
      await rm(join(dir, n), { force: true });
  }
}

/** One whole file when it fits the filesystem and --part-size; parts of the smaller of the two otherwise. */
export function planFiles(
  dir: string,
  base: string,
  size: number,
  limit: number | undefined,
): MediaPlan {
  const sidecarName = `${base}.sha256`;
  const sidecar = { final: join(dir, sidecarName), temp: tempOf(dir, sidecarName) };
  if (limit === undefined || size <= limit)
    return {
      dir,
      base,
      size,
      sidecar,
      files: [{ final: join(dir, base), temp: tempOf(dir, base), start: 0, end: size }],
    };
  const count = partCount(size, limit, base);
  const files = Array.from({ length: count }, (_, i) => {
    const name = partName(base, i + 1, count);
    return {
      final: join(dir, name),
      temp: tempOf(dir, name),
      start: i * limit,
      end: Math.min(size, (i + 1) * limit),
    };
  });
  return { dir, base, size, sidecar, files };
}

/** The stick's directory (a real path) and its mount, refused when it is not one a stick would be. */
async function resolveTarget(o: WriteMediaOptions): Promise<{ dir: string; mount: Mount }> {
  const dir = await realpath(o.target).catch((cause: NodeJS.ErrnoException) => {
    throw new MediaError(
      'NOT_A_MOUNT',
      `${o.target} does not exist (${cause.code}): plug in the stick and give its mount point ("findmnt -l" or "lsblk -f" shows it)`,
      { cause },
    );
  });
  if (!(await stat(dir)).isDirectory())
    throw new MediaError(
      'NOT_A_MOUNT',
      `${o.target} is not a directory: give the stick's mount point`,
    );
  const mount = mountOf(dir, await readMounts(o.mountinfo));
  if (!mount)
    throw new MediaError(
      'NOT_A_MOUNT',
      `no mount holds ${dir} in ${o.mountinfo ?? '/proc/self/mountinfo'}: give the stick's mount point`,
    );
  if (!o.anyDirectory && mount.mountPoint !== dir) {
    throw new MediaError(
      'NOT_A_MOUNT',
      `${dir} is not the mount point of removable media (it is a directory on ${mount.mountPoint}, ${mount.fsType}): give the stick's mount point ("findmnt -l" shows them), or pass --any-directory to write there anyway`,
    );
  }
  if (!o.anyDirectory && !looksLikeMedia(mount)) {
    throw new MediaError(
      'NOT_A_MOUNT',
      `${dir} is ${mount.fsType} mounted at ${mount.mountPoint}, a system filesystem, not removable media: give the stick's mount point, or pass --any-directory to write there anyway`,
    );
  }
  await assertWritable(dir, mount);
  return { dir, mount };
}

/**
 * Files of this bundle already on the stick, with their sizes: refused without --force, and
 * refused whatever the flags when one of them is the bundle being written (replacing it would
 * delete the source before it is read).
 */
async function oldCopies(
  dir: string,
  base: string,
  source: SourceFiles,
  force: boolean | undefined,
): Promise<OldFile[]> {
  await removeStaleTemps(dir, base);
  const names = [base, `${base}.sha256`, ...(await partNamesIn(dir, base)).map((p) => p.name)];
  const there: OldFile[] = [];
  for (const n of names) {
    const st = await stat(join(dir, n)).catch(() => undefined);
    if (st) there.push({ path: join(dir, n), size: st.size, dev: st.dev, ino: st.ino });
  }
  for (const s of source.files) {
    const real = await realpath(s.path);
    const same = there.find((f) => f.path === real || (f.dev === s.st.dev && f.ino === s.st.ino));
    if (same)
      throw new MediaError(
        'SAME_FILE',
        `${s.path} is already on the stick at ${same.path}: nothing to write; to check it, run bundle verify ${same.path} --key FACTORY.pub`,
      );
  }
  const them = there.length > 1 ? 'them' : 'it';
  if (there.length > 0 && !force)
    throw new MediaError(
      'OUTPUT_EXISTS',
      `${dir} already holds ${there.map((f) => basename(f.path)).join(', ')}: pass --force to replace ${them}, or remove ${them} first`,
    );
  return there;
}

/**
 * Refuses before anything is written when the bundle, its .sha256 and the margin do not fit.
 * True when they fit beside the copy --force replaces (kept until the new one is in place).
 */
function checkRoom(
  plan: MediaPlan,
  t: Target,
  replaced: Array<{ size: number }>,
  progress: Progress,
): boolean {
  const sidecarBytes = Buffer.byteLength(digestLine(`sha256:${'0'.repeat(64)}`, plan.base));
  const agent = agentNeeds(plan.agent);
  const need =
    plan.size +
    sidecarBytes +
    agent.bytes +
    ROOM_MARGIN_BYTES +
    (plan.files.length + 1 + agent.files) * t.blockBytes;
  if (t.free === undefined) {
    progress.log(
      `warning: ${t.mount.mountPoint} (${t.mount.fsType}) does not say how much room it has: writing anyway (${formatBytes(need)} needed); a full stick is reported and what was written removed`,
    );
    return true;
  }
  if (t.free >= need) return true;
  // what --force replaces is free once removed (each file's clusters, rounded down to be safe)
  const free =
    t.free + replaced.reduce((n, f) => n + Math.floor(f.size / t.blockBytes) * t.blockBytes, 0);
  if (free < need) {
    const mine = replaced.length
      ? ` (with the ${formatBytes(free - t.free)} of the copy --force replaces)`
      : '';
    const withAgent = agent.files
      ? `, the agent image and its .sig (${formatBytes(agent.bytes)})`
      : '';
    throw new MediaError(
      'NO_SPACE',
      `the stick at ${t.mount.mountPoint} has ${formatBytes(free)} free${mine}, the bundle${agent.files ? ' and its agent image need' : ' needs'} ${formatBytes(need)} (${formatBytes(plan.size)}, its .sha256${withAgent} and ${formatBytes(need - plan.size - sidecarBytes - agent.bytes)} to spare): use a bigger stick or free ${formatBytes(need - free)} on it; nothing was written`,
    );
  }
  return false;
}

/** Up to three names, then how many more: a line stays readable with dozens of parts. */
const someNames = (files: string[]) =>
  files
    .slice(0, 3)
    .map((f) => basename(f))
    .join(', ') + (files.length > 3 ? ` and ${files.length - 3} more` : '');

/** What a failed or interrupted run leaves on the stick, for its one line. */
function leftOnStick(plan: MediaPlan, left: string[]): string {
  const temps = left.filter((f) => basename(f).startsWith('.'));
  const finals = left.filter((f) => !basename(f).startsWith('.'));
  const said = [
    ...(finals.length
      ? [`${someNames(finals)} could not be removed from it (remove them by hand)`]
      : []),
    ...(temps.length
      ? [
          `its temp files (${someNames(temps)}) stay until the next write-media of ${plan.base} removes them`,
        ]
      : []),
  ];
  if (!said.length)
    said.push(
      plan.old === 'kept'
        ? 'nothing it wrote is left on it'
        : 'nothing of the bundle is left on it',
    );
  if (plan.old === 'kept') said.push('the copy that was there is kept');
  if (plan.old === 'removed')
    said.push('the copy that was there was removed (it holds no copy now)');
  return said.join('; ');
}

/** The one line for a write or read that failed on the stick, saying what to do. */
export function mediaFailure(
  err: unknown,
  file: string,
  plan: MediaPlan,
  leftovers: string[],
  doing = 'writing',
): Error {
  if (err instanceof MediaError && !leftovers.length && !plan.old) return err;
  if (err instanceof MediaError) {
    const said = /; what was written is removed/.test(err.message)
      ? err.message.replace(/; what was written is removed/, `; ${leftOnStick(plan, leftovers)}`)
      : `${err.message} (${leftOnStick(plan, leftovers)})`;
    return new MediaError(err.code, said, { cause: err });
  }
  const e = err as NodeJS.ErrnoException;
  const name = basename(file);
  const left = leftOnStick(plan, leftovers);
  const line = (code: 'NO_SPACE' | 'IO_ERROR' | 'MEDIA_GONE', what: string, fix: string) =>
    new MediaError(code, `${what}; ${left}: ${fix}`, { cause: err });
  switch (e?.code) {
    case 'ENOSPC':
    case 'EDQUOT':
      return line(
        'NO_SPACE',
        `the stick at ${plan.dir} filled up while writing ${name} (${e.code})`,
        `use a bigger stick (the bundle is ${formatBytes(plan.size)}) or free space on it`,
      );
    case 'EFBIG':
      return line(
        'IO_ERROR',
        `${name} is larger than the filesystem at ${plan.dir} holds in one file (EFBIG)`,
        'pass a smaller --part-size (e.g. 4G)',
      );
    case 'EIO':
    case 'ENOTCONN':
    case 'ECONNABORTED':
    case 'ENODEV':
    case 'ENXIO':
    case 'ESHUTDOWN':
    case 'EROFS':
    case 'ESTALE':
      return line(
        'MEDIA_GONE',
        `the stick at ${plan.dir} went away or failed while ${doing} ${name} (${e.code})`,
        'plug it in again (check it with fsck if it was pulled) and rerun',
      );
    case 'EPERM':
      return line(
        'IO_ERROR',
        `the filesystem at ${plan.dir} refused to write more of ${name} (EPERM; FUSE FAT drivers say so when the stick is full)`,
        'use a bigger stick or free space on it',
      );
    default:
      return line(
        'IO_ERROR',
        `cannot ${doing === 'writing' ? 'write' : 'read back'} ${name} on ${plan.dir}: ${e?.message ?? String(err)}`,
        'check the stick and rerun',
      );
  }
}

/** Removes `files`; returns the ones that could not be (the stick went away). */
async function removeAll(files: string[]): Promise<string[]> {
  const left: string[] = [];
  for (const f of files) await rm(f, { force: true }).catch(() => left.push(f));
  return left;
}

const sourceChanged = (bundle: string, what: string) =>
  new MediaError(
    'SOURCE_CHANGED',
    `${bundle} changed while being written (${what}): the copy would not be the bundle; what was written is removed: rerun once nothing else writes the bundle`,
  );

/**
 * The bundle's bytes, all through one handle, into the temp files, streamed, each synced;
 * returns the whole file's digest. The bundle's size and mtime must be as at the start.
 */
async function writeTemps(
  bundle: string,
  src: BundleSource,
  source: SourceFiles,
  plan: MediaPlan,
  at: { file: string },
  progress: Progress,
  signal?: AbortSignal,
): Promise<string> {
  const whole = createHash('sha256');
  let done = 0;
  progress.start(
    `writing ${plan.files.length > 1 ? `${plan.files.length} parts` : basename(plan.files[0]!.final)} to ${plan.dir}`,
    plan.size,
  );
  for (const f of plan.files) {
    const part = createHash('sha256');
    at.file = f.final;
    f.started = true;
    await copyRange(
      src,
      f.temp,
      f.start,
      f.end,
      (c) => {
        whole.update(c);
        part.update(c);
        done += c.length;
        progress.update(done);
      },
      signal,
    ).catch((err: unknown) => {
      throw err instanceof FormatError && err.code === 'TRUNCATED'
        ? sourceChanged(bundle, `it ended before byte ${f.end} of ${plan.size}`)
        : err;
    });
    f.digest = `sha256:${part.digest('hex')}`;
  }
  await assertUnchanged(source);
  progress.phaseNote('syncing');
  const digest = `sha256:${whole.digest('hex')}`;
  await assertMatchesSidecar(bundle, source.base, digest);
  at.file = plan.sidecar.final;
  plan.sidecar.started = true;
  await writeSynced(plan.sidecar.temp, digestLine(digest, plan.base));
  return digest;
}

/** Each file read (the bundle, or every part) is as long and as old as at the start: else the copy is of no one bundle. */
async function assertUnchanged(source: SourceFiles): Promise<void> {
  for (const { path, st: before } of source.files) {
    const after = await stat(path).catch(() => undefined);
    if (!after) throw sourceChanged(path, 'it is gone');
    if (after.size !== before.size)
      throw sourceChanged(path, `${before.size} bytes at the start, ${after.size} at the end`);
    if (after.mtimeMs !== before.mtimeMs)
      throw sourceChanged(path, `modified at ${after.mtime.toISOString()}, after the write began`);
  }
}

/** The bundle's own NAME.bundle.sha256 beside it (or its parts), when there is one, must name what was read: else the bundle changed or is another. */
async function assertMatchesSidecar(bundle: string, base: string, digest: string): Promise<void> {
  const sidecar = join(dirname(bundle), `${base}.sha256`);
  const line = await readFile(sidecar, 'utf8').catch(() => undefined);
  const said = line ? /^([0-9a-f]{64})\s/.exec(line)?.[1] : undefined;
  if (said && `sha256:${said}` !== digest) {
    throw new MediaError(
      'READ_BACK_FAILED',
      `${bundle} reads as ${digest} but ${base}.sha256 beside it says sha256:${said}: the bundle was damaged or changed since it was written, or that .sha256 is another bundle's of the same name (a whole ${base} beside parts of another split?); copy it again from the factory`,
    );
  }
}

/**
 * Temp names renamed over the final names (an old copy's files are replaced only here), the
 * .sha256 last, then the old copy's files the new one does not replace are removed. On failure
 * the ones already moved go again (the error's `left` names those that would not); returns the
 * old files that could not be removed.
 */
async function commit(plan: MediaPlan, old: OldFile[]): Promise<string[]> {
  // the agent image first, its .sig after it: a bootstrap that sees the statement sees the whole archive
  const agent = plan.agent && !plan.agent.present ? [plan.agent.archive, plan.agent.statement] : [];
  const moves = [...agent, ...plan.files, plan.sidecar];
  let moved = 0;
  try {
    for (; moved < moves.length; moved++) await rename(moves[moved]!.temp, moves[moved]!.final);
  } catch (err) {
    if (moved && plan.old) plan.old = 'removed';
    throw Object.assign(err as object, {
      left: await removeAll(moves.slice(0, moved).map((m) => m.final)),
    });
  }
  if (plan.old) plan.old = 'removed';
  const finals = new Set(moves.map((m) => m.final));
  const stale = await removeAll(old.map((f) => f.path).filter((f) => !finals.has(f)));
  await syncDirBestEffort(plan.dir);
  return stale;
}

/**
 * Drops the written files' clean pages (posix_fadvise DONTNEED through GNU dd's iflag=nocache,
 * which Node lacks) so the read-back comes from the stick, not from memory. A FUSE driver reads
 * its device (or image) through that device's own cache: that is dropped too. Best effort: false
 * when a file's could not be.
 */
async function dropCache(files: string[], mount: Mount, signal?: AbortSignal): Promise<boolean> {
  const drop = (f: string) =>
    new Promise<boolean>((resolve) => {
      execFile(
        'dd',
        [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none'],
        { ...(signal ? { signal } : {}) },
        (err) => resolve(!err),
      );
    });
  let dropped = true;
  // one at a time: a dd per part at once would be dozens of processes (and abort listeners)
  for (const f of files) dropped = (await drop(f)) && dropped;
  const device =
    mount.fsType.startsWith('fuse') && mount.source.startsWith('/')
      ? await stat(mount.source).catch(() => undefined)
      : undefined;
  if (device?.isFile() || device?.isBlockDevice()) await drop(mount.source);
  signal?.throwIfAborted();
  return dropped;
}

async function hashFile(
  file: string,
  hashes: Hash[],
  onBytes: (n: number) => void,
  signal?: AbortSignal,
): Promise<void> {
  for await (const c of createReadStream(file, {
    highWaterMark: 1024 * 1024,
    ...(signal ? { signal } : {}),
  }) as AsyncIterable<Buffer>) {
    for (const h of hashes) h.update(c);
    onBytes(c.length);
  }
}

/** A file's sha256 (hex), read from where it is. */
async function sha256Of(
  file: string,
  onBytes: (n: number) => void,
  signal?: AbortSignal,
): Promise<string> {
  const h = createHash('sha256');
  await hashFile(file, [h], onBytes, signal);
  return h.digest('hex');
}

/** Every written file read back from the stick and checked against what was read from the bundle, and the whole across parts. */
async function readBack(
  plan: MediaPlan,
  digest: string,
  at: { file: string },
  progress: Progress,
  signal?: AbortSignal,
): Promise<void> {
  const whole = createHash('sha256');
  let done = 0;
  progress.start(`reading back from ${plan.dir}`, plan.size);
  for (const f of plan.files) {
    const part = createHash('sha256');
    at.file = f.final;
    await hashFile(f.final, [whole, part], (n) => progress.update((done += n)), signal);
    if (`sha256:${part.digest('hex')}` !== f.digest) {
      throw new MediaError(
        'READ_BACK_FAILED',
        `${basename(f.final)} reads back from ${plan.dir} other than it was written: the stick does not keep what it is given (faulty, fake capacity, or its driver lost the write); what was written is removed: use another stick`,
      );
    }
  }
  if (`sha256:${whole.digest('hex')}` !== digest)
    throw new MediaError(
      'READ_BACK_FAILED',
      `the parts on ${plan.dir} do not read back as the bundle: use another stick`,
    );
  at.file = plan.sidecar.final;
  const sidecar = await readFile(plan.sidecar.final, {
    encoding: 'utf8',
    ...(signal ? { signal } : {}),
  });
  if (sidecar !== digestLine(digest, plan.base))
    throw new MediaError(
      'READ_BACK_FAILED',
      `${basename(plan.sidecar.final)} reads back from ${plan.dir} other than it was written: use another stick`,
    );
}

/** The filesystem's limit per file, lowered to --part-size. */
function partLimit(t: Target, partSize: number | undefined): number | undefined {
  if (t.kind.maxFile === undefined) return partSize;
  return Math.min(t.kind.maxFile, partSize ?? Infinity);
}

/**
 * Its head reads, its end is a seek table, and every frame that table lists starts where it
 * says: a copy cut short, or parts of two splits of one name, are refused before a byte is
 * written (the copy would read back as written, and the stick's .sha256 vouch for it).
 */
async function checkEnds(source: BundleSource, name: string): Promise<void> {
  await readHeader(source);
  if (!(await endsWithSeekTable(source)))
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${name}: the bundle does not end with its seek table (cut short, or its last part is another bundle's): copy it again whole from where it was made`,
    );
  const bad = await misplacedFrame(source);
  if (bad !== undefined)
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${name}: no zstd frame at byte ${bad}, where the bundle's seek table says one starts (parts of two bundles of one name, or a damaged copy): copy all the parts again from one split`,
    );
}

/**
 * The bundle (one file, or the complete part set one part or NAME.bundle names), checked by its
 * name and its head (bundle.json and its signature: a few KiB read); the files it is read from.
 */
async function checkBundle(bundle: string): Promise<SourceFiles> {
  const base = parsePartName(bundle)?.base ?? basename(bundle);
  if (!base.endsWith('.bundle') || base.startsWith('.')) {
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${bundle} is not named NAME.bundle: bundle-agent looks only for *.bundle files on a stick; rename it`,
    );
  }
  if (isPartName(bundle) && !(await assertRegularFile(bundle))) {
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${bundle} cannot be read (no such part?): give the path of a part that is there, or ${join(dirname(bundle), base)}`,
    );
  }
  const split = await namesSplitBundle(bundle);
  const paths = split ? (await findParts(dirname(bundle), base)).map((p) => p.path) : [bundle];
  for (const p of paths) await assertRegularFile(p);
  const name = split ? `the parts of ${base} in ${dirname(bundle)}` : bundle;
  await withBundle(bundle, (source) => checkEnds(source, name)).catch((err: unknown) => {
    const what = split ? `${name} do not make a bundle` : `${bundle} is not a bundle`;
    if (err instanceof FormatError && err.code !== 'IO_ERROR')
      throw new MediaError(
        'NOT_A_BUNDLE',
        `${what} (${err.message}): give a file "bundle create" wrote, whole, or all of its parts`,
        { cause: err },
      );
    throw err;
  });
  return {
    base,
    files: await Promise.all(paths.map(async (path) => ({ path, st: await stat(path) }))),
  };
}

/** The interrupt's one line, saying what it left on the stick. */
function interrupted(signal: AbortSignal, plan: MediaPlan, left: string[]): unknown {
  const reason: unknown = signal.reason;
  if (reason instanceof Error)
    reason.message = `interrupted: ${leftOnStick(plan, left)}: rerun to write the bundle`;
  return reason;
}

/** No room for the new copy beside the old: the old goes first, and the user is told so before anything is written. */
async function removeOldFirst(plan: MediaPlan, old: OldFile[], progress: Progress): Promise<void> {
  const names = (files: string[]) => files.map((f) => basename(f)).join(', ');
  progress.log(
    `warning: no room on ${plan.dir} for the new copy beside the one there: removing ${names(old.map((f) => f.path))} first; if this write fails or is interrupted, the stick holds no copy of ${plan.base}`,
  );
  const left = await removeAll(old.map((f) => f.path));
  if (left.length)
    throw new MediaError(
      'IO_ERROR',
      `cannot remove ${names(left)} from ${plan.dir} to make room for the new copy; nothing was written: check the stick and rerun`,
    );
  await syncDirBestEffort(plan.dir);
}

export async function writeMedia(o: WriteMediaOptions): Promise<WriteMediaResult> {
  const source = await checkBundle(o.bundle);
  // one handle per file for the whole run: sizes and mtimes at the end are compared with the start
  const src = await openBundle(o.bundle);
  try {
    return await writeFrom(src, source, o);
  } finally {
    await src.close();
  }
}

/** The agent image pair to take along, checked before anything is written; stale temps of it removed. */
async function agentCopy(
  src: BundleSource,
  dir: string,
  o: WriteMediaOptions,
): Promise<AgentCopy | undefined> {
  const { manifest } = await readHeader(src);
  const found = await findAgentImage(o.bundle, manifest, o.agentImage, o.progress);
  if (!found) return undefined;
  const copy = await planAgent(dir, found, manifest, {
    ...(o.force !== undefined ? { force: o.force } : {}),
    temp: tempOf,
  });
  await removeStaleAgentTemps(dir, copy, BOOT_TAG);
  return copy;
}

/** The temp files this run created (bundle, .sha256, agent image pair): removed after a failure. */
const startedTemps = (plan: MediaPlan) =>
  [...plan.files, plan.sidecar, ...(plan.agent ? [plan.agent.archive, plan.agent.statement] : [])]
    .filter((x) => x.started)
    .map((x) => x.temp);

async function writeFrom(
  src: BundleSource,
  source: SourceFiles,
  o: WriteMediaOptions,
): Promise<WriteMediaResult> {
  const { dir, mount } = await resolveTarget(o);
  const old = await oldCopies(dir, source.base, source, o.force);
  const agent = await agentCopy(src, dir, o);
  const target = await describeTarget(dir, mount);
  const plan: MediaPlan = {
    ...planFiles(dir, source.base, src.size, partLimit(target, o.partSize)),
    ...(agent ? { agent } : {}),
  };
  const both = checkRoom(plan, target, old, o.progress);
  if (old.length) plan.old = both ? 'kept' : 'removed';
  if (plan.old === 'removed') await removeOldFirst(plan, old, o.progress);
  const at = { file: plan.files[0]!.final };
  let digest: string;
  let stale: string[];
  try {
    digest = await writeTemps(o.bundle, src, source, plan, at, o.progress, o.signal);
    if (agent) await writeAgentTemps(agent, at, o.progress, o.signal);
    o.signal?.throwIfAborted();
    stale = await commit(plan, old);
  } catch (err) {
    o.progress.finish();
    const left = [
      ...((err as { left?: string[] }).left ?? []),
      ...(await removeAll(startedTemps(plan))),
    ];
    if (o.signal?.aborted) throw interrupted(o.signal, plan, left);
    throw mediaFailure(err, at.file, plan, left);
  }
  const agentFiles = agent ? [agent.archive.final, agent.statement.final] : [];
  const written = [
    ...plan.files.map((f) => f.final),
    plan.sidecar.final,
    ...(agent?.present ? [] : agentFiles),
  ];
  let cacheDropped: boolean;
  try {
    cacheDropped = await dropCache(
      [...written, ...(agent?.present ? agentFiles : [])],
      mount,
      o.signal,
    );
    await readBack(plan, digest, at, o.progress, o.signal);
    if (agent)
      await readBackAgent(agent, at, (f, onBytes) => sha256Of(f, onBytes, o.signal), o.progress);
  } catch (err) {
    // what does not read back as written is no copy of the bundle, nor is one whose check was cut short
    const left = await removeAll(written);
    if (o.signal?.aborted) throw interrupted(o.signal, plan, left);
    throw mediaFailure(err, at.file, plan, left, 'reading back');
  } finally {
    o.progress.finish();
  }
  if (stale.length)
    throw new MediaError(
      'IO_ERROR',
      `wrote and checked the bundle on ${dir}, but could not remove ${stale.map((f) => basename(f)).join(', ')} of the copy it replaced: remove them by hand`,
    );
  return {
    target: dir,
    mountPoint: mount.mountPoint,
    filesystem: target.kind.name,
    files: [...written, ...(agent?.present ? agentFiles : [])],
    parts: plan.files.length > 1 ? plan.files.length : 0,
    digest,
    size: src.size,
    ...(target.free !== undefined ? { free: target.free } : {}),
    cacheDropped,
    ...(agent ? { agentImage: agentResult(agent) } : {}),
  };
}

import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import {
  bundleIdentity,
  endsWithSeekTable,
  isPartName,
  namesSplitBundle,
  parsePartName,
  readHeader,
  withBundle,
  withBundleFile,
  type BundleSource,
} from '@offline-bundle/format';
import { formatBytes } from '@offline-bundle/cli';
import { assertRegularFile } from '@offline-bundle/host';
import { AgentError } from '../errors.js';

/**
 * The bundle path must be a regular file before anything reads it: a FIFO (or a device)
 * would block the first read forever, and with it the thread pool, so that even SIGTERM
 * could not finish the load. The media watcher only offers regular files; this covers
 * `bundle-agent load FILE` and a file swapped after the scan.
 */
export async function assertBundleFile(file: string): Promise<void> {
  // parts are checked one by one as they are opened (PartsSource opens each as a regular file)
  if (await namesSplitBundle(file)) return;
  await assertRegularFile(file);
}

/** A zstd frame's magic number, little-endian: every bundle starts with one. */
const ZSTD_FRAME = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);

/**
 * Why `file` cannot be a bundle, judged from its first four bytes, or undefined when it starts
 * as one does. Opened O_NONBLOCK and refused unless regular, so a FIFO named `*.bundle` blocks
 * nothing. Throws the system error when the file cannot be opened at all (ENOENT, EACCES).
 */
export async function notABundle(file: string): Promise<string | undefined> {
  const fh = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = await fh.stat();
    if (!st.isFile()) return `${basename(file)} is not a regular file`;
    const head = Buffer.alloc(ZSTD_FRAME.length);
    const { bytesRead } = await fh.read(head, 0, head.length, 0);
    if (bytesRead < head.length || !head.equals(ZSTD_FRAME))
      return `${basename(file)} is not a bundle (it does not start with a zstd frame)`;
    return undefined;
  } finally {
    await fh.close();
  }
}

const FIX = 'give the path of a NAME.bundle file';

/**
 * Why `bundle-agent load PATH` is the caller's mistake: no such file, not a regular file, or a
 * file of another kind (text, another archive). Undefined when it may be a bundle: the load
 * checks the rest and reports a damaged or cut one as such.
 */
export async function notLoadable(path: string): Promise<string | undefined> {
  // a part set is checked as a whole (a missing or cut part is named) and the load reads it
  if (await namesSplitBundle(path))
    return withBundle(path, async () => undefined).catch((err: Error) => err.message);
  const missing = await stat(path).then(
    () => false,
    (err: NodeJS.ErrnoException) => err.code === 'ENOENT' || err.code === 'ENOTDIR',
  );
  if (missing) return `${path} does not exist: ${FIX}`;
  const irregular = await assertRegularFile(path).then(
    () => undefined,
    (err: Error) => err.message,
  );
  if (irregular) return irregular;
  const why = await notABundle(path).catch(() => undefined);
  if (why) return `${why}: ${FIX}`;
  // zstd data holding something else (a .tar.zst): no bundle.json first, and no seek table last.
  // Undecodable bytes are left to the load, which reports a damaged bundle as Corrupt.
  const otherZstd = await withBundleFile(path, async (source) => {
    const order = await readHeader(source).then(
      () => false,
      (err: { code?: string }) => err.code === 'BAD_ORDER',
    );
    return order && !(await endsWithSeekTable(source).catch(() => false));
  }).catch(() => false);
  if (otherZstd) {
    return `${basename(path)} is not a bundle (zstd data, but not an archive starting with bundle.json, and no seek table at its end): ${FIX}`;
  }
  return undefined;
}

/** What the first and last bytes of a file say it is, before any load reads the rest. */
export type HeadVerdict =
  /** `identity`: its bundle.json's digest; `base`: the one of the base a delta names. */
  | { kind: 'bundle'; version: string; arch: string; identity: string; base?: string }
  /** Starts as a bundle does but has no seek table at its end yet: a copy in progress, or cut short. */
  | { kind: 'incomplete'; why: string }
  /** Starts and ends as a bundle does but its head does not read: a damaged bundle, for the load to report. */
  | { kind: 'damaged'; why: string }
  | { kind: 'notABundle'; why: string };

/**
 * Reads a bundle's head (bundle.json and its signature, bounded by the format reader) and its
 * footer: what the media watcher checks once per stable copy before offering it. The signature
 * is the load's job: this only tells a bundle from a copy in progress or a file of another kind.
 */
export async function inspectHead(file: string): Promise<HeadVerdict> {
  const not = isPartName(file) ? undefined : await notABundle(file);
  if (not) return { kind: 'notABundle', why: not };
  // an incomplete or mixed part set: offered, so that the load's failure names the part on the status
  const bad = (err: { code?: string; message: string }): HeadVerdict => {
    if (err.code === 'BAD_PARTS') return { kind: 'damaged', why: err.message };
    throw err;
  };
  return withBundle(file, async (source): Promise<HeadVerdict> => {
    if (!(await endsWithSeekTable(source)))
      return {
        kind: 'incomplete',
        why: `${basename(file)} has no seek table at its end (still being copied, or cut short)`,
      };
    try {
      const { manifest, manifestBytes } = await readHeader(source);
      const base = manifest.base?.bundleJson;
      return {
        kind: 'bundle',
        version: manifest.release.version,
        arch: manifest.release.arch,
        identity: bundleIdentity(manifestBytes),
        ...(base ? { base } : {}),
      };
    } catch (err) {
      return { kind: 'damaged', why: (err as Error).message };
    }
  }).catch(bad);
}

/**
 * A bundle ends with its seek table: a file without one was cut short (a copy that did not
 * finish, a stick pulled early). Said before any byte is copied, rather than after a pass that
 * showed the cut file's size as the bundle's.
 */
export async function assertWhole(source: BundleSource): Promise<void> {
  if (await endsWithSeekTable(source)) return;
  // a part set's identity names the set ("DIR/NAME.bundle (3 parts)"), not the part given
  throw new AgentError(
    'Truncated',
    `${basename(source.identity)} is cut short: ${formatBytes(source.size)} with no seek table at its end (the copy did not finish, the stick was pulled early, or the file was altered); copy the bundle again and wait until the copy has finished`,
  );
}

// The file itself vanishing (its stick pulled, or deleted) while the load reads it
const GONE = new Set(['ENOENT', 'ESTALE', 'ENODEV', 'ENXIO', 'EIO', 'ENOTCONN', 'ECONNABORTED']);

/**
 * A system error about the bundle file itself, raised by whatever step read it last, is the
 * media going away, not an internal fault: reported as MediaRemoved with what to do.
 */
export function mediaGone(err: unknown, file: string): unknown {
  // the format library wraps what the system said as IO_ERROR, keeping it as the cause
  let e = err as NodeJS.ErrnoException | undefined;
  for (let depth = 0; e && typeof e.syscall !== 'string' && depth < 3; depth++)
    e = e.cause as NodeJS.ErrnoException | undefined;
  const samePart =
    isPartName(file) &&
    typeof e?.path === 'string' &&
    parsePartName(e.path)?.base === parsePartName(file)?.base;
  if (typeof e?.syscall !== 'string' || (e.path !== file && !samePart) || !GONE.has(e.code ?? ''))
    return err;
  return new AgentError(
    'MediaRemoved',
    `${file} disappeared or cannot be read (${e.code}): was the USB stick removed or the file deleted? Plug it in again, check the path and retry`,
    { cause: err },
  );
}

/**
 * Files named on a command line or in a config (keys, configs, bundles) may be anything: a
 * FIFO that blocks open() and read() forever (and with it the process's thread pool, so even
 * SIGTERM handling never completes), a device that never ends (/dev/urandom), a huge file.
 */
import { constants, type Stats } from 'node:fs';
import { open, realpath, stat, type FileHandle } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { dirname } from 'node:path';
import { HostError } from './errors.js';

function kind(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/** O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking. */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;

/**
 * Refuses a `path` that is not a regular file, without blocking on it (a FIFO is opened
 * non-blocking and never read). A path that cannot be opened at all (ENOENT, EACCES) is left
 * to the reader that follows, which names that failure in its own terms.
 */
export async function assertRegularFile(path: string): Promise<Stats | undefined> {
  const fh = await open(path, OPEN_FLAGS).catch(() => undefined);
  if (!fh) return undefined;
  try {
    const st = await fh.stat();
    if (!st.isFile())
      throw new HostError(
        'NOT_A_REGULAR_FILE',
        `${path} is ${kind(st)}, not a regular file: give the path of the file itself`,
      );
    return st;
  } finally {
    await fh.close();
  }
}

/**
 * Opens `path` for reading only if it is a regular file reached without a symlink: a file that
 * stays open to be read a piece at a time (a blob being served). O_NONBLOCK as above: a FIFO put
 * in its place would hold one of libuv's four pool threads until a writer came, and with four
 * of them every file read and the shutdown stall.
 */
export async function openRegularFile(path: string): Promise<FileHandle> {
  const fh = await open(path, OPEN_FLAGS | constants.O_NOFOLLOW);
  try {
    const st = await fh.stat();
    if (!st.isFile())
      throw new HostError('NOT_A_REGULAR_FILE', `${path} is ${kind(st)}, not a regular file`);
    return fh;
  } catch (err) {
    await fh.close();
    throw err;
  }
}

interface SmallFileOptions {
  /** Refuse a symlink as the last component (O_NOFOLLOW: ELOOP) instead of reading what it points to. */
  noFollow?: boolean;
  /**
   * Also a pipe (`<(pass show key)`, /dev/stdin fed by a pipe, a FIFO): read as it arrives,
   * still never more than maxBytes, and for at most `timeoutMs` (a writer that never writes
   * or never ends must not hang the run). Non-blocking throughout: no thread waits on it.
   */
  pipe?: {
    timeoutMs: number;
    /** Ends the wait at once (SIGTERM, Ctrl-C), throwing its reason. */
    signal?: AbortSignal;
  };
}

/** Default time bound for a pipe read by readSmallFile: secrets and lists come from a command that answers at once. */
export const PIPE_READ_TIMEOUT_MS = 10_000;

const ANONYMOUS_PIPE = /^(\/dev\/fd\/\d+|\/proc\/(self|\d+)\/fd\/\d+|\/dev\/stdin)$/;

/**
 * A pipe opened O_NONBLOCK, read to its end: EAGAIN (a writer, no data yet) and an end before
 * any byte (a FIFO whose writer has not opened it yet) are waited out until `timeoutMs`, then
 * refused (INPUT_TIMEOUT): a FIFO nobody wrote is no input, never an empty one.
 */
async function readPipe(
  fh: FileHandle,
  path: string,
  maxBytes: number,
  { timeoutMs, signal }: NonNullable<SmallFileOptions['pipe']>,
): Promise<Buffer> {
  const deadline = Date.now() + timeoutMs;
  const buf = Buffer.alloc(maxBytes + 1);
  let n = 0;
  for (;;) {
    let bytesRead: number;
    try {
      ({ bytesRead } = await fh.read(buf, n, buf.length - n, null));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
      bytesRead = -1;
    }
    if (bytesRead > 0) {
      n += bytesRead;
      if (n > maxBytes)
        throw new HostError(
          'FILE_TOO_LARGE',
          `${path} gave over ${maxBytes} bytes, the most this kind of input may have: is it the right command?`,
        );
      continue;
    }
    // the end, once something arrived; at once for a shell's pipe (its writer is there from the
    // start), while a named FIFO's writer may not have opened it yet
    if (bytesRead === 0 && (n > 0 || ANONYMOUS_PIPE.test(path))) return buf.subarray(0, n);
    if (Date.now() >= deadline) {
      const s = Math.round(timeoutMs / 1000);
      if (bytesRead === 0)
        throw new HostError(
          'INPUT_TIMEOUT',
          `${path} is a pipe nothing wrote to within ${s} s: start the command that writes it first, or give a file`,
        );
      throw new HostError(
        'INPUT_TIMEOUT',
        `${path} is a pipe that gave no end within ${s} s: does the command writing it finish?`,
      );
    }
    signal?.throwIfAborted();
    await sleep(20, undefined, signal ? { signal } : {}).catch(() => signal?.throwIfAborted());
  }
}

/**
 * Reads a small regular file whole, never more than `maxBytes`: a FIFO, device or directory
 * is refused before any read, and a file over the limit after reading at most one byte past it
 * (it may grow while read). The stats are those of the file read (the descriptor's), so a
 * check made on them holds for these bytes.
 */
export async function readSmallFile(
  path: string,
  maxBytes: number,
  opts: SmallFileOptions = {},
): Promise<{ bytes: Buffer; stats: Stats }> {
  const fh = await open(path, OPEN_FLAGS | (opts.noFollow ? constants.O_NOFOLLOW : 0));
  try {
    const stats = await fh.stat();
    if (opts.pipe && stats.isFIFO())
      return { bytes: await readPipe(fh, path, maxBytes, opts.pipe), stats };
    if (!stats.isFile())
      throw new HostError(
        'NOT_A_REGULAR_FILE',
        `${path} is ${kind(stats)}, not a regular file: give the path of the file itself`,
      );
    const tooLarge = () =>
      new HostError(
        'FILE_TOO_LARGE',
        `${path} is over ${maxBytes} bytes, the most this kind of file may have: is it the right file?`,
      );
    if (stats.size > maxBytes) throw tooLarge();
    const buf = Buffer.alloc(maxBytes + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, n);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > maxBytes) throw tooLarge();
    }
    return { bytes: buf.subarray(0, n), stats };
  } finally {
    await fh.close();
  }
}

const STICKY = 0o1000;

/** What lets someone other than root or this process's user change `path`, and the fix; undefined if nothing. */
function unsafeOwnerOrMode(
  path: string,
  st: Stats,
  uid: number,
): { why: string; fix: string } | undefined {
  if (st.uid !== 0 && st.uid !== uid)
    return {
      why: `is owned by uid ${st.uid}, neither root nor this process's user`,
      fix: `chown root ${path}`,
    };
  // A sticky directory (such as /tmp) lets others add entries, never replace ours.
  if ((st.mode & 0o022) === 0 || (st.isDirectory() && st.mode & STICKY)) return undefined;
  const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
  return {
    why: `is writable by ${st.mode & 0o002 ? 'anyone' : 'its group'} (mode ${mode})`,
    fix: `chmod go-w ${path}`,
  };
}

/**
 * Why a file that decides trust (a public key, the agent's config) could be changed by someone
 * other than root or this process's user, as one line naming the fix; undefined when it is
 * safe. The file is judged by `stats` (those of the descriptor it was read from), its
 * directories up to / by their current state: whoever may write one of them can swap the file.
 */
export async function unsafePermissions(path: string, stats: Stats): Promise<string | undefined> {
  const uid = process.getuid?.() ?? 0;
  const own = unsafeOwnerOrMode(path, stats, uid);
  if (own) return `${path} ${own.why}: ${own.fix}`;
  for (let dir = dirname(await realpath(path)); ; dir = dirname(dir)) {
    const bad = unsafeOwnerOrMode(dir, await stat(dir), uid);
    if (bad) return `${path} is in ${dir}, which ${bad.why}: ${bad.fix}`;
    if (dirname(dir) === dir) return undefined;
  }
}

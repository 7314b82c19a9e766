/**
 * Files named on a command line or in a config (keys, configs, bundles) may be anything: a
 * FIFO that blocks open() and read() forever (and with it the process's thread pool, so even
 * SIGTERM handling never completes), a device that never ends (/dev/urandom), a huge file.
 */
import { constants, type Stats } from 'node:fs';
import { open, realpath, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { OciError } from './errors.js';

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
    if (!st.isFile()) throw new OciError('NOT_A_REGULAR_FILE', `${path} is ${kind(st)}, not a regular file: give the path of the file itself`);
    return st;
  } finally {
    await fh.close();
  }
}

/**
 * Reads a small regular file whole, never more than `maxBytes`: a FIFO, device or directory
 * is refused before any read, and a file over the limit after reading at most one byte past it
 * (it may grow while read). The stats are those of the file read (the descriptor's), so a
 * check made on them holds for these bytes.
 */
export async function readSmallFile(path: string, maxBytes: number): Promise<{ bytes: Buffer; stats: Stats }> {
  const fh = await open(path, OPEN_FLAGS);
  try {
    const stats = await fh.stat();
    if (!stats.isFile()) throw new OciError('NOT_A_REGULAR_FILE', `${path} is ${kind(stats)}, not a regular file: give the path of the file itself`);
    const tooLarge = () => new OciError('FILE_TOO_LARGE', `${path} is over ${maxBytes} bytes, the most this kind of file may have: is it the right file?`);
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
function unsafeOwnerOrMode(path: string, st: Stats, uid: number): { why: string; fix: string } | undefined {
  if (st.uid !== 0 && st.uid !== uid) return { why: `is owned by uid ${st.uid}, neither root nor this process's user`, fix: `chown root ${path}` };
  // A sticky directory (such as /tmp) lets others add entries, never replace ours.
  if ((st.mode & 0o022) === 0 || (st.isDirectory() && st.mode & STICKY)) return undefined;
  const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
  return { why: `is writable by ${st.mode & 0o002 ? 'anyone' : 'its group'} (mode ${mode})`, fix: `chmod go-w ${path}` };
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

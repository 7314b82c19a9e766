import { constants } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { assertRegularFile } from '@offline-bundle/host';
import { FormatError } from '../errors.js';
import { READ_CHUNK } from '../layout.js';
import type { BundleSource, StreamOptions } from '../source.js';

const cannotRead = (path: string, cause: unknown) =>
  new FormatError('IO_ERROR', `cannot read ${path}: ${(cause as Error).message}`, { cause });

/** O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking (and a pool thread with it). */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;

/** A bundle in one regular file, opened once: every read is of that file for as long as the source is open. */
export class FileSource implements BundleSource {
  private constructor(
    readonly identity: string,
    readonly size: number,
    private readonly fh: FileHandle,
    private readonly inode: { dev: number; ino: number },
  ) {}

  /**
   * A FIFO or a device as the bundle would block the first read forever (a FIFO with no
   * writer) or never end: refused before any read (opened non-blocking, so a FIFO cannot hold
   * the open either). A path that cannot be opened at all is IO_ERROR too, with the system's
   * reason.
   */
  static async open(path: string): Promise<FileSource> {
    const fh = await open(path, OPEN_FLAGS).catch(async (cause: unknown) => {
      // named as the stat the readers always began with names it (ENOENT ... stat 'PATH')
      await stat(path).catch((err: unknown) => {
        throw cannotRead(path, err);
      });
      throw cannotRead(path, cause);
    });
    try {
      const st = await fh.stat();
      if (!st.isFile()) {
        // the shared check says what it is instead ("a FIFO (named pipe)", "a directory")
        await assertRegularFile(path).catch((cause: unknown) => {
          throw cannotRead(path, cause);
        });
        throw cannotRead(
          path,
          new Error(`${path} is not a regular file: give the path of the file itself`),
        );
      }
      return new FileSource(path, st.size, fh, { dev: st.dev, ino: st.ino });
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  async read(offset: number, length: number, into?: Buffer): Promise<Buffer> {
    const buf = into && into.length >= length ? into.subarray(0, length) : Buffer.alloc(length);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await this.fh.read(buf, got, length - got, offset + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    return got === length ? buf : buf.subarray(0, got);
  }

  /**
   * Read here rather than by fs.createReadStream: destroying one of those (a reader that has
   * what it needs, an abort) closes the descriptor, which the source's other readers still use.
   * The verifying pass (`pass`) reads sequentially through a description of its own, opened on the
   * same file (deleted or not) through /proc: its offset in /proc/PID/fdinfo shows how far the
   * pass has read, as with the plain file read it replaces. Elsewhere, reads are positional.
   */
  stream(start: number, end: number, opts: StreamOptions = {}): Readable {
    const main = this.fh;
    let own: FileHandle | undefined;
    let at = start;
    return new Readable({
      highWaterMark: READ_CHUNK,
      construct(cb) {
        if (start !== 0 || !opts.pass) return cb();
        open(`/proc/self/fd/${main.fd}`, 'r')
          .then(
            (fh) => {
              own = fh;
            },
            () => undefined,
          )
          .finally(() => cb());
      },
      read() {
        const n = Math.min(READ_CHUNK, end - at);
        if (n <= 0) return void this.push(null);
        const buf = Buffer.allocUnsafe(n);
        (own ? own.read(buf, 0, n, null) : main.read(buf, 0, n, at)).then(
          ({ bytesRead }) => {
            at += bytesRead;
            // the file ends before `end`: it shrank since it was opened
            this.push(bytesRead === 0 ? null : buf.subarray(0, bytesRead));
          },
          (err: unknown) => this.destroy(err as Error),
        );
      },
      destroy(err, cb) {
        if (!own) return cb(err);
        own.close().then(
          () => cb(err),
          () => cb(err),
        );
      },
    });
  }

  /**
   * By the path, not the descriptor: a file deleted while open (its stick pulled) is gone,
   * though still readable here, and one renamed over it is another file than the one read.
   */
  async currentSize(): Promise<number> {
    const st = await stat(this.identity).catch((cause: unknown) => {
      throw cannotRead(this.identity, cause);
    });
    if (st.dev !== this.inode.dev || st.ino !== this.inode.ino) {
      throw new FormatError(
        'CORRUPT',
        `${this.identity} was replaced by another file while being read: the media was changed; plug it in again`,
      );
    }
    return st.size;
  }

  close(): Promise<void> {
    return this.fh.close();
  }
}

/** Opens the bundle file at `path` (regular files only); the caller closes it. */
export function openBundleFile(path: string): Promise<FileSource> {
  return FileSource.open(path);
}

/**
 * `use(source)` over the bundle file at `path`, closed after: for a caller that reads a bundle
 * once. One that reads it in several steps opens it once and passes the source on.
 */
export function withBundleFile<T>(
  path: string,
  use: (source: BundleSource) => Promise<T>,
): Promise<T> {
  return withSource(openBundleFile(path), use);
}

/** `use(source)` over the source `opening` gives, closed after whatever `use` did. */
export async function withSource<T>(
  opening: Promise<BundleSource>,
  use: (source: BundleSource) => Promise<T>,
): Promise<T> {
  const source = await opening;
  try {
    return await use(source);
  } finally {
    await source.close();
  }
}

import type { FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { readBuffers } from '@offline-bundle/host';

interface FileRangeOptions {
  /** Read unit; with `check`, the grid (from byte 0) the check's pieces are cut on. */
  unit: number;
  /** Units being read (and checked) ahead of the one being sent. */
  ahead: number;
  /**
   * Resolves when piece `index` (bytes [index*unit, +unit) of the file) may be sent;
   * rejects to end the stream before any byte of it is passed on.
   */
  check?: (index: number, piece: Buffer) => Promise<void>;
  /** The error for a file that ends at `at`, before `end`. */
  shrank: (at: number) => Error;
}

/**
 * Bytes [start, end) of `fh` (`size` bytes) as a stream that reads and checks the next units
 * while the current one is written: a client waits on the disk or the hash only when it is
 * faster than both. Closes `fh` when it ends or is destroyed.
 */
export function fileRange(
  fh: FileHandle,
  size: number,
  start: number,
  end: number,
  opts: FileRangeOptions,
): Readable {
  const { unit, ahead, check, shrank } = opts;
  const buffers = readBuffers(unit);
  // unchecked reads need no grid: they start where the client asked
  const base = check ? Math.floor(start / unit) * unit : start;
  let nextAt = base;
  const queue: { at: number; piece: Promise<Buffer> }[] = [];
  let pumping = false;
  let again = false;

  const fill = () => {
    while (queue.length < ahead + 1 && nextAt < end) {
      const at = nextAt;
      const length = check ? Math.min(unit, size - at) : Math.min(unit, end - at);
      nextAt += unit;
      // whole units come from the pool (a consumer hands them back: giveBack); a blob's short tail does not hold a whole one
      const buf = length === unit ? buffers.take() : Buffer.allocUnsafeSlow(length);
      const piece = readFully(fh, buf, at, length, shrank).then(async (buf) => {
        if (check) await check(at / unit, buf);
        return buf;
      });
      // settled by the pump, or dropped when the stream is destroyed first: never unhandled
      piece.catch(() => undefined);
      queue.push({ at, piece });
    }
  };

  const stream = new Readable({
    // one unit queued in the stream: a slow client holds about `ahead + 2` units here
    highWaterMark: unit,
    read() {
      if (pumping) {
        again = true;
        return;
      }
      pumping = true;
      again = false;
      void (async () => {
        try {
          fill();
          while (queue.length > 0) {
            const { at, piece } = queue.shift()!;
            const buf = await piece;
            if (stream.destroyed) return;
            fill();
            const out = buf.subarray(Math.max(0, start - at), Math.min(buf.length, end - at));
            if (!stream.push(out)) return;
          }
          stream.push(null);
        } catch (err) {
          stream.destroy(err as Error);
        } finally {
          pumping = false;
        }
        // asked again while the last push was under way
        if (again && !stream.destroyed) stream.read(0);
      })();
    },
    destroy(err, cb) {
      // FileHandle.close waits for the reads still in flight
      fh.close().then(
        () => cb(err),
        (e: unknown) => cb((err ?? e) as Error | null),
      );
    },
  });
  return stream;
}

/** `length` bytes at `position`, or `shrank(at)` when the file ends first. */
export async function readFully(
  fh: FileHandle,
  buf: Buffer,
  position: number,
  length: number,
  shrank: (at: number) => Error,
): Promise<Buffer> {
  let got = 0;
  while (got < length) {
    const { bytesRead } = await fh.read(buf, got, length - got, position + got);
    if (bytesRead === 0) throw shrank(position + got);
    got += bytesRead;
  }
  return buf.subarray(0, length);
}

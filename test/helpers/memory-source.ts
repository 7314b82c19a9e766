// A test double for BundleSource (packages/format/src/source.ts): a bundle's bytes served from
// memory with faults injected at chosen bytes, so every reader above the seam can be shown to
// report a failing source as it reports the same fault in a file. Kept here rather than in the
// format package: nothing shipped needs fault injection, and the coming sources (parts, delta,
// peer) test against the same double.
import { Readable } from 'node:stream';
import { FormatError, type BundleSource } from '@offline-bundle/format';

export interface MemoryFaults {
  /** The bytes end here though `size` says more and currentSize agrees: reads and streams come short. */
  shortAt?: number;
  /** A read or stream reaching this byte fails there with EIO (the bytes before it are delivered). */
  errorAt?: number;
  /** This byte reads flipped from the `fromRead`-th read or stream covering it on (1: the first). */
  flip?: { at: number; fromRead: number };
  /** The bundle shrank to this many bytes once opened: currentSize says so and reads past it come short. */
  shrinkTo?: number;
  /** The bundle cannot be reached any more (a file deleted): currentSize rejects as FileSource does. */
  gone?: boolean;
  /** Stream chunks of this many bytes (default 1 MiB): a reader's verdict must not depend on them. */
  chunk?: number;
}

/** What a failing disk gives read(2): a system error, as node's fs raises it. */
export function eio(): NodeJS.ErrnoException {
  return Object.assign(new Error('EIO: i/o error, read'), {
    errno: -5,
    code: 'EIO',
    syscall: 'read',
  });
}

export class MemorySource implements BundleSource {
  readonly size: number;
  /** read() and stream() calls so far, and how many of them covered the flipped byte. */
  reads = 0;
  /** Bytes handed to readers so far (what a stick would have had to deliver): read() results and stream chunks consumed. */
  bytesRead = 0;
  private flipReads = 0;
  closed = false;

  /** `faults` may be changed between reads: a fault that comes after the source was opened. */
  constructor(
    private readonly bytes: Buffer,
    readonly identity: string,
    public faults: MemoryFaults = {},
  ) {
    this.size = bytes.length;
  }

  /** Where the bytes end for a reader now. */
  private get end(): number {
    return Math.min(this.size, this.faults.shortAt ?? Infinity, this.faults.shrinkTo ?? Infinity);
  }

  /** Bytes [start, end) as this read sees them, and the EIO it meets, if any. */
  private slice(start: number, end: number): { data: Buffer; error?: NodeJS.ErrnoException } {
    if (this.closed) throw new Error(`${this.identity}: read after close`);
    this.reads++;
    const { flip, errorAt } = this.faults;
    let stop = Math.min(end, this.end);
    let error: NodeJS.ErrnoException | undefined;
    if (errorAt !== undefined && errorAt >= start && errorAt < stop) {
      stop = errorAt;
      error = eio();
    }
    const data = Buffer.from(this.bytes.subarray(start, Math.max(start, stop)));
    if (
      flip &&
      flip.at >= start &&
      flip.at < end &&
      ++this.flipReads >= flip.fromRead &&
      flip.at < stop
    )
      data[flip.at - start]! ^= 0x01;
    return error ? { data, error } : { data };
  }

  async read(offset: number, length: number): Promise<Buffer> {
    const { data, error } = this.slice(offset, offset + length);
    if (error) throw error;
    this.bytesRead += data.length;
    return data;
  }

  /** In chunks as a file's stream gives them; an EIO fails the stream after the bytes before it. */
  stream(start: number, end: number): Readable {
    const { data, error } = this.slice(start, end);
    const CHUNK = this.faults.chunk ?? 1024 * 1024;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    return Readable.from(
      (async function* () {
        for (let at = 0; at < data.length; at += CHUNK) {
          const piece = data.subarray(at, at + CHUNK);
          self.bytesRead += piece.length;
          yield piece;
        }
        if (error) throw error;
      })(),
      { objectMode: false },
    );
  }

  async currentSize(): Promise<number> {
    if (this.faults.gone) {
      const cause = Object.assign(
        new Error(`ENOENT: no such file or directory, stat '${this.identity}'`),
        { errno: -2, code: 'ENOENT', syscall: 'stat', path: this.identity },
      );
      throw new FormatError('IO_ERROR', `cannot read ${this.identity}: ${cause.message}`, {
        cause,
      });
    }
    return Math.min(this.size, this.faults.shrinkTo ?? Infinity);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

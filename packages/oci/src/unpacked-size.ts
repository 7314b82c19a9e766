import { once } from 'node:events';
import { open } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { DecompressStream } from 'zstd-napi';
import { addPhase, timedAsync } from './phase-times.js';

/**
 * A layer is measured up to this many times its compressed size: a gzip bomb from a registry
 * must not keep the build decompressing for hours. Real layers stay far below (text-heavy
 * ones reach some 10×); past it the estimate says "at least" this much.
 */
export const MAX_UNPACK_RATIO = 100;

const GZIP = [0x1f, 0x8b];
/** gzip's only compression method, deflate (RFC 1952 CM). */
const GZIP_DEFLATE = 8;
const ZSTD_MAGIC = 0xfd2fb528;
/** A gzip member ends with CRC32 and ISIZE, 4 bytes each (RFC 1952 §2.3.1). */
const GZIP_TRAILER = 8;
const ISIZE_MODULUS = 2 ** 32;
/**
 * Deflate cannot expand its input by more than its stored blocks' 5-byte headers (at most one
 * per 16 KiB in common encoders, far under 1 %), and a gzip member's header and trailer take a
 * few dozen bytes: a whole stream's ISIZE is never below this share of it, less that slack.
 */
const STORED_FLOOR = 0.99;
const HEADER_SLACK = 1024;
/**
 * ISIZE is the size mod 2^32: a layer that unpacked to 4 GiB more than it says would have to
 * unpack to more than this many times its compressed size. Layers that large do not (text-heavy
 * ones reach some 10x, and a layer past 500 MiB compressed is mostly binaries); past it the
 * layer is decompressed.
 */
const WRAP_RATIO = 8;

/**
 * What a gzip layer unpacks to, read from its last member's trailer (ISIZE), when that figure
 * can only be the whole stream's: undefined when it may not be, for the caller to decompress.
 * ISIZE covers the last member alone and wraps at 4 GiB, so it is refused when it is smaller
 * than the stream itself could unpack to (another member before it: estargz's many members end
 * with a tiny footer), when the stream is 4 GiB or more, when a wrapped figure is plausible
 * (WRAP_RATIO), and past MAX_UNPACK_RATIO (the decompression's own bound says what it says).
 */
export function gzipTrailerSize(compressedSize: number, head: Buffer, tail: Buffer): number | undefined {
  if (head.length < 3 || head[0] !== GZIP[0] || head[1] !== GZIP[1] || head[2] !== GZIP_DEFLATE) return undefined;
  if (tail.length < GZIP_TRAILER || compressedSize >= ISIZE_MODULUS) return undefined;
  const isize = tail.readUInt32LE(tail.length - 4);
  if (isize < compressedSize * STORED_FLOOR - HEADER_SLACK) return undefined;
  if (isize > compressedSize * MAX_UNPACK_RATIO) return undefined;
  if (ISIZE_MODULUS + isize <= compressedSize * WRAP_RATIO) return undefined;
  return isize;
}

/** Where to read a blob again when its trailer cannot be trusted (the cache's file, once stored). */
export interface CounterOptions { reread?: () => AsyncIterable<Buffer | string> }

/**
 * Counts the bytes a compressed layer unpacks to while it streams past (fed the same chunks
 * the cache writes: no second read). gzip runs in zlib's thread pool; the output is counted
 * and dropped. The compression is recognised by its magic, as the runtimes do, not by the
 * media type. An undecodable stream gives no figure (the caller falls back to an estimate).
 */
export class UnpackedCounter {
  private decoder: Writable | undefined;
  private head: Buffer[] = [];
  private headBytes = 0;
  private compressed = 0;
  private unpacked = 0;
  private plain = false;
  private failed = false;
  private capped = false;
  private ended: Promise<unknown> | undefined;

  /** A gzip stream's first and last bytes, when its trailer may give the size (no decoding as it streams). */
  private gzipHead: Buffer | undefined;
  private tail: Buffer = Buffer.alloc(0);

  /**
   * `size`: the compressed size the blob is listed with (bounds the work). With `reread`, a gzip
   * stream is not decoded as it streams: its trailer gives the size, and only a stream whose
   * trailer cannot be trusted (gzipTrailerSize) is read again and decoded.
   */
  constructor(private readonly size: number, private readonly opts: CounterOptions = {}) {}

  async push(chunk: Buffer): Promise<void> {
    this.compressed += chunk.length;
    if (this.failed || this.capped) return;
    if (this.gzipHead) {
      this.keepTail(chunk);
      return;
    }
    if (!this.decoder && !this.plain) {
      // the magic may straddle chunks
      this.head.push(chunk);
      this.headBytes += chunk.length;
      if (this.headBytes < 4) return;
      const head = Buffer.concat(this.head);
      this.head = [];
      this.start(head);
      chunk = head;
    }
    if (this.plain) {
      this.unpacked += chunk.length;
      return;
    }
    if (this.gzipHead) {
      this.keepTail(chunk);
      return;
    }
    const decoder = this.decoder!;
    if (!decoder.write(chunk)) await timedAsync('estimate: waits on decompression', () => Promise.race([once(decoder, 'drain'), this.ended]));
  }

  private keepTail(chunk: Buffer): void {
    this.tail = chunk.length >= GZIP_TRAILER ? chunk.subarray(chunk.length - GZIP_TRAILER) : Buffer.concat([this.tail, chunk]).subarray(-GZIP_TRAILER);
  }

  private start(head: Buffer): void {
    const gzip = head[0] === GZIP[0] && head[1] === GZIP[1];
    const zstd = head.readUInt32LE(0) === ZSTD_MAGIC;
    if (!gzip && !zstd) {
      this.plain = true;
      return;
    }
    if (gzip && this.opts.reread) {
      this.gzipHead = Buffer.from(head.subarray(0, 3));
      return;
    }
    addPhase('estimate: layers decompressed', undefined, { bytes: this.size });
    // large output chunks: fewer thread-pool round trips and 'data' events for output that is only counted
    const decoder = gzip ? createGunzip({ chunkSize: 1024 * 1024 }) : (new DecompressStream() as unknown as Writable & NodeJS.ReadableStream);
    decoder.on('data', (out: Buffer) => {
      this.unpacked += out.length;
      if (this.unpacked > this.size * MAX_UNPACK_RATIO) {
        this.capped = true;
        decoder.destroy();
      }
    });
    this.ended = new Promise<void>((resolve) => {
      decoder.once('end', resolve);
      decoder.once('close', resolve);
      // `on`, not `once`: a write racing the first error may raise a second one
      decoder.on('error', () => {
        this.failed = true;
        resolve();
      });
    });
    this.decoder = decoder;
  }

  /** The unpacked size, once every chunk was pushed; undefined when the stream did not decode. */
  async finish(): Promise<number | undefined> {
    if (this.gzipHead) return this.fromTrailer();
    if (!this.decoder && !this.plain && this.headBytes > 0) {
      const head = Buffer.concat(this.head);
      this.head = [];
      if (head.length >= 2 && head[0] === GZIP[0] && head[1] === GZIP[1]) this.failed = true;
      else this.unpacked += head.length;
    }
    if (this.decoder && !this.capped && !this.failed) {
      this.decoder.end();
      await this.ended;
    }
    if (this.failed) return undefined;
    return this.capped ? this.size * MAX_UNPACK_RATIO : this.unpacked;
  }

  /** The trailer's figure, or the stream read again and decoded when it cannot be trusted. */
  private async fromTrailer(): Promise<number | undefined> {
    const n = gzipTrailerSize(this.compressed, this.gzipHead!, this.tail);
    if (n !== undefined) {
      addPhase('estimate: layers sized by their gzip trailer', undefined, { bytes: this.compressed });
      return n;
    }
    const again = new UnpackedCounter(this.size);
    for await (const chunk of this.opts.reread!()) await again.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    return again.finish();
  }

  /** What a stored blob unpacks to: its gzip trailer read from the file's ends, else the whole file decoded. */
  static async ofFile(path: string, size: number, reread: () => AsyncIterable<Buffer | string>): Promise<number | undefined> {
    const fh = await open(path, 'r');
    try {
      const head = Buffer.alloc(Math.min(3, size));
      const tail = Buffer.alloc(Math.min(GZIP_TRAILER, size));
      await fh.read(head, 0, head.length, 0);
      await fh.read(tail, 0, tail.length, size - tail.length);
      const n = gzipTrailerSize(size, head, tail);
      if (n !== undefined) return n;
    } finally {
      await fh.close();
    }
    const counter = new UnpackedCounter(size);
    for await (const chunk of reread()) await counter.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    return counter.finish();
  }

  /** Stops decoding (the download failed). */
  abandon(): void {
    this.decoder?.destroy();
  }
}

import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { DecompressStream } from 'zstd-napi';
import { addPhase, timedAsync } from '@offline-bundle/oci';
import { countGzip, type GzipCount } from './gzip-count-thread.js';

/**
 * A layer is measured up to this many times its compressed size: a gzip bomb from a registry
 * must not keep the build decompressing for hours. Real layers stay far below (text-heavy
 * ones reach some 10×); past it the estimate says "at least" this much.
 */
export const MAX_UNPACK_RATIO = 100;

const GZIP = [0x1f, 0x8b];
const ZSTD_MAGIC = 0xfd2fb528;

/**
 * Counts the bytes a compressed layer unpacks to while it streams past (fed the same chunks
 * the cache writes: no second read). gzip is counted on a thread of its own (gzip-count-thread.ts),
 * zstd (rare in layers) here. The compression is recognised by its magic, as the runtimes do, not by the
 * media type. An undecodable stream gives no figure (the caller falls back to an estimate).
 */
export class UnpackedCounter {
  private decoder: Writable | undefined;
  private gzip: GzipCount | undefined;
  private head: Buffer[] = [];
  private headBytes = 0;
  private compressed = 0;
  private unpacked = 0;
  private plain = false;
  private failed = false;
  private capped = false;
  private ended: Promise<unknown> | undefined;

  /** `size`: the compressed size the blob is listed with (bounds the work). */
  constructor(private readonly size: number) {}

  /** Counts `chunk`; its buffer is the caller's to reuse once this resolves. */
  async push(chunk: Buffer): Promise<void> {
    this.compressed += chunk.length;
    if (this.failed || this.capped) return;
    if (!this.decoder && !this.gzip && !this.plain) {
      // the magic may straddle chunks; a copy: the caller reuses its buffer once this resolves
      this.head.push(Buffer.from(chunk));
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
    if (this.gzip) return this.gzip.push(chunk);
    // the decoder holds what it is written until it decodes it: a copy, as the caller reuses its buffer
    if (!this.decoder!.write(Buffer.from(chunk)))
      await timedAsync('estimate: waits on decompression', () =>
        Promise.race([once(this.decoder!, 'drain'), this.ended]),
      );
  }

  private start(head: Buffer): void {
    const gzip = head[0] === GZIP[0] && head[1] === GZIP[1];
    const zstd = head.readUInt32LE(0) === ZSTD_MAGIC;
    if (!gzip && !zstd) {
      this.plain = true;
      return;
    }
    if (gzip) {
      this.gzip = countGzip(this.size * MAX_UNPACK_RATIO);
      return;
    }
    const decoder = new DecompressStream() as unknown as Writable & NodeJS.ReadableStream;
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
    if (!this.decoder && !this.gzip && !this.plain && this.headBytes > 0) {
      const head = Buffer.concat(this.head);
      this.head = [];
      if (head.length >= 2 && head[0] === GZIP[0] && head[1] === GZIP[1]) this.failed = true;
      else this.unpacked += head.length;
    }
    if (this.gzip) {
      addPhase('estimate: layers decompressed', undefined, { bytes: this.compressed });
      return this.gzip.finish();
    }
    if (this.decoder && !this.capped && !this.failed) {
      this.decoder.end();
      await this.ended;
    }
    if (this.decoder)
      addPhase('estimate: layers decompressed', undefined, { bytes: this.compressed });
    if (this.failed) return undefined;
    return this.capped ? this.size * MAX_UNPACK_RATIO : this.unpacked;
  }

  /** Stops decoding (the download failed). */
  abandon(): void {
    this.gzip?.abandon();
    this.decoder?.destroy();
  }
}

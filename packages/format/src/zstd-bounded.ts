import { Transform, type TransformCallback } from 'node:stream';
import { createRequire } from 'node:module';
import type * as ZstdBinding from 'zstd-napi/binding.js';
import { FormatError } from './errors.js';
import { FRAME_BYTES } from './layout.js';

// zstd-napi's own decompressors give no way to cap output: DecompressStream turns a whole
// input chunk into as many bytes as it expands to, and decompress() allocates what a frame
// header claims. The binding's streaming call takes an output buffer we size ourselves.
const binding = createRequire(import.meta.url)('zstd-napi/binding.js') as typeof ZstdBinding;

const OUT_CHUNK = binding.dStreamOutSize();
/** A bundle frame holds at most FRAME_BYTES, so no frame needs a larger window; this caps the decoder's own allocation too. */
export const WINDOW_LOG_MAX = 23;

function newDctx(): ZstdBinding.DCtx {
  const dctx = new binding.DCtx();
  dctx.setParameter(binding.DParameter.windowLogMax, WINDOW_LOG_MAX);
  return dctx;
}

export const frameTooLarge = (limit: number) =>
  new FormatError('CORRUPT', `a zstd frame expands past the ${limit}-byte frame limit: not a bundle, or built to exhaust memory`);

export interface BoundedDecompressOptions {
  /** Most bytes one frame may expand to. */
  frameLimit?: number;
  /**
   * Keep the first error instead of failing the stream, and end the output as if the input
   * had ended: the reader sees everything decoded before the damage (see `failed`).
   */
  tolerant?: boolean;
}

/**
 * Streaming zstd decompression with bounded memory and work: output is made in small
 * pieces only as fast as the next stream takes them, no frame may expand past
 * `frameLimit`, and `stopAfter(n)` stops decoding once n bytes came out (the rest of the
 * input is still consumed, undecoded, so a caller hashing the raw file sees all of it).
 */
export class BoundedDecompress extends Transform {
  failed: Error | undefined;
  /** Set when output went past the `stopAfter` limit and decoding stopped there. */
  overLimit = false;
  private readonly dctx = newDctx();
  private readonly frameLimit: number;
  private readonly tolerant: boolean;
  private frameOut = 0;
  private totalOut = 0;
  private limit = Infinity;
  private inFrame = false;
  private done = false;
  private pending: { src: Buffer; cb: TransformCallback } | undefined;
  private awaitingRead = false;

  constructor(opts: BoundedDecompressOptions = {}) {
    super();
    this.frameLimit = opts.frameLimit ?? FRAME_BYTES;
    this.tolerant = opts.tolerant ?? false;
  }

  /** Stop decoding once more than `n` bytes have come out in all. */
  stopAfter(n: number): void {
    this.limit = n;
    if (this.totalOut > n) this.finish();
  }

  get bytesOut(): number {
    return this.totalOut;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (this.done) return cb();
    this.pending = { src: chunk, cb };
    this.pump();
  }

  override _read(size: number): void {
    if (this.awaitingRead) {
      this.awaitingRead = false;
      this.pump();
      // A resumed pump that finished its chunk may have pushed nothing (a frame cut at the end
      // of the input): the stream then still waits on this read, and Transform may have parked
      // the write callback for a later _read that would never come. Release it here.
      if (!this.awaitingRead) super._read(size);
    } else {
      super._read(size);
    }
  }

  override _flush(cb: TransformCallback): void {
    if (!this.done && this.inFrame) return this.fail(new Error('Stream ended in middle of compressed data frame'), cb);
    cb();
  }

  private pump(): void {
    const p = this.pending!;
    try {
      while (!this.done) {
        const out = Buffer.allocUnsafe(OUT_CHUNK);
        const [ret, produced, consumed] = this.dctx.decompressStream(out, p.src);
        if (produced === 0 && consumed === 0 && p.src.length > 0) throw new Error('the zstd decoder made no progress');
        p.src = p.src.subarray(consumed);
        this.frameOut += produced;
        this.totalOut += produced;
        if (this.frameOut > this.frameLimit) throw frameTooLarge(this.frameLimit);
        if (ret === 0) this.frameOut = 0;
        this.inFrame = ret !== 0;
        const room = produced > 0 ? this.push(out.subarray(0, produced)) : true;
        if (this.totalOut > this.limit) {
          this.finish();
          break;
        }
        if (p.src.length === 0 && (produced < out.length || ret === 0)) break;
        if (!room) {
          this.awaitingRead = true;
          return;
        }
      }
    } catch (err) {
      this.pending = undefined;
      return this.fail(err as Error, p.cb);
    }
    this.pending = undefined;
    p.cb();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.overLimit = this.totalOut > this.limit;
    this.push(null);
  }

  private fail(err: Error, cb: TransformCallback): void {
    if (!this.tolerant) return cb(err);
    this.failed ??= err;
    this.finish();
    cb();
  }
}

/**
 * Decompresses one frame that must expand to exactly `size` bytes (at most the frame limit),
 * allocating no more than that whatever its header claims.
 */
export function decompressFrame(src: Buffer, size: number, into?: Buffer): Buffer {
  if (size > FRAME_BYTES) throw frameTooLarge(FRAME_BYTES);
  const dctx = newDctx();
  // one spare byte tells "more than promised" from "exactly as promised"
  const out = into && into.length > size ? into.subarray(0, size + 1) : Buffer.allocUnsafe(size + 1);
  let produced = 0;
  let rest = src;
  let ret = 1;
  while (rest.length > 0 || ret !== 0) {
    const [r, n, consumed] = dctx.decompressStream(out.subarray(produced), rest);
    ret = r;
    produced += n;
    rest = rest.subarray(consumed);
    if (produced > size) throw new FormatError('BAD_SEEK_TABLE', `a frame holds more than the ${size} bytes the seek index says`);
    if (ret === 0 && rest.length > 0) throw new FormatError('BAD_SEEK_TABLE', 'a seek-index frame holds more than one zstd frame');
    if (n === 0 && consumed === 0) break;
  }
  if (ret !== 0) throw new FormatError('TRUNCATED', 'a zstd frame is cut short');
  if (produced !== size) throw new FormatError('BAD_SEEK_TABLE', `a frame holds ${produced} bytes; the seek index says ${size}`);
  return out.subarray(0, size);
}

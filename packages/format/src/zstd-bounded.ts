import type { TransformCallback } from 'node:stream';
import type * as ZstdBinding from 'zstd-napi/binding.js';
import { ZstdDecompressStream, zstdBinding as binding } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { FRAME_BYTES } from './layout.js';

// zstd-napi's own decompressors give no way to cap output: DecompressStream turns a whole
// input chunk into as many bytes as it expands to, and decompress() allocates what a frame
// header claims. The binding's streaming call takes an output buffer we size ourselves.
/** A bundle frame holds at most FRAME_BYTES, so no frame needs a larger window; this caps the decoder's own allocation too. */
const WINDOW_LOG_MAX = 23;

function newDctx(): ZstdBinding.DCtx {
  const dctx = new binding.DCtx();
  dctx.setParameter(binding.DParameter.windowLogMax, WINDOW_LOG_MAX);
  return dctx;
}

const frameTooLarge = (limit: number) =>
  new FormatError(
    'CORRUPT',
    `a zstd frame expands past the ${limit}-byte frame limit: not a bundle, or built to exhaust memory`,
  );

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
export class BoundedDecompress extends ZstdDecompressStream {
  failed: Error | undefined;
  /** Set when output went past the `stopAfter` limit and decoding stopped there. */
  overLimit = false;
  private readonly frameLimit: number;
  private readonly tolerant: boolean;
  private frameOut = 0;
  private totalOut = 0;
  private limit = Infinity;

  constructor(opts: BoundedDecompressOptions = {}) {
    super();
    this.dctx.setParameter(binding.DParameter.windowLogMax, WINDOW_LOG_MAX);
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

  protected override account(produced: number, ret: number): void {
    this.frameOut += produced;
    this.totalOut += produced;
    if (this.frameOut > this.frameLimit) throw frameTooLarge(this.frameLimit);
    if (ret === 0) this.frameOut = 0;
  }

  protected override enough(): boolean {
    return this.totalOut > this.limit;
  }

  protected override finish(): void {
    if (this.done) return;
    this.overLimit = this.totalOut > this.limit;
    super.finish();
  }

  protected override fail(err: Error, cb: TransformCallback): void {
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
  const out =
    into && into.length > size ? into.subarray(0, size + 1) : Buffer.allocUnsafe(size + 1);
  let produced = 0;
  let rest = src;
  let ret = 1;
  while (rest.length > 0 || ret !== 0) {
    const [r, n, consumed] = dctx.decompressStream(out.subarray(produced), rest);
    ret = r;
    produced += n;
    rest = rest.subarray(consumed);
    if (produced > size)
      throw new FormatError(
        'BAD_SEEK_TABLE',
        `a frame holds more than the ${size} bytes the seek index says`,
      );
    if (ret === 0 && rest.length > 0)
      throw new FormatError('BAD_SEEK_TABLE', 'a seek-index frame holds more than one zstd frame');
    if (n === 0 && consumed === 0) break;
  }
  if (ret !== 0) throw new FormatError('TRUNCATED', 'a zstd frame is cut short');
  if (produced !== size)
    throw new FormatError(
      'BAD_SEEK_TABLE',
      `a frame holds ${produced} bytes; the seek index says ${size}`,
    );
  return out.subarray(0, size);
}

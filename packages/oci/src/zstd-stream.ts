import { Transform, type TransformCallback } from 'node:stream';
import { createRequire } from 'node:module';
import type * as ZstdBinding from 'zstd-napi/binding.js';

// zstd-napi's DecompressStream turns a whole input chunk into as many bytes as it expands to,
// whatever the next stream takes: 64 KiB of a layer's RLE blocks is 2 GiB of zeros pushed at
// once. The binding's streaming call fills an output buffer we size; we stop when the reader
// is full and go on when it reads. The one decoder for image layers here and, with a bundle's
// frame limits added (format's BoundedDecompress), for bundles.
export const zstdBinding = createRequire(import.meta.url)(
  'zstd-napi/binding.js',
) as typeof ZstdBinding;
const OUT_CHUNK = zstdBinding.dStreamOutSize();

/** Streaming zstd decompression that makes output only as fast as the next stream reads it. */
export class ZstdDecompressStream extends Transform {
  protected readonly dctx = new zstdBinding.DCtx();
  /** Decoding stopped (a limit reached, or a tolerated failure): the rest of the input is taken undecoded. */
  protected done = false;
  private inFrame = false;
  private pending: { src: Buffer; cb: TransformCallback } | undefined;
  private awaitingRead = false;

  /** Each piece decoded, before it is passed on (`ret` 0: a frame ended with it); throws to fail the stream. */
  protected account(_produced: number, _ret: number): void {}

  /** After a piece was passed on: whether decoding stops here. */
  protected enough(): boolean {
    return false;
  }

  /** A failure of the input or the decoder: the stream's error (a subclass may tolerate it). */
  protected fail(err: Error, cb: TransformCallback): void {
    cb(err);
  }

  /** Stops decoding and ends the output. */
  protected finish(): void {
    if (this.done) return;
    this.done = true;
    this.push(null);
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (this.done) return cb();
    this.pending = { src: chunk, cb };
    this.pump();
  }

  override _read(size: number): void {
    if (!this.awaitingRead) return super._read(size);
    this.awaitingRead = false;
    this.pump();
    // A resumed pump that finished its chunk may have pushed nothing (a frame cut at the end of
    // the input): Transform may have parked the write callback for a _read that would never come.
    if (!this.awaitingRead) super._read(size);
  }

  override _flush(cb: TransformCallback): void {
    if (!this.done && this.inFrame)
      return this.fail(new Error('Stream ended in middle of compressed data frame'), cb);
    cb();
  }

  private pump(): void {
    const p = this.pending!;
    try {
      while (!this.done) {
        const out = Buffer.allocUnsafe(OUT_CHUNK);
        const [ret, produced, consumed] = this.dctx.decompressStream(out, p.src);
        if (produced === 0 && consumed === 0 && p.src.length > 0)
          throw new Error('the zstd decoder made no progress');
        p.src = p.src.subarray(consumed);
        this.account(produced, ret);
        this.inFrame = ret !== 0;
        const room = produced > 0 ? this.push(out.subarray(0, produced)) : true;
        if (this.enough()) {
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
}

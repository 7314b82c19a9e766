import { Transform, type TransformCallback } from 'node:stream';

/**
 * Gathers a stream's small chunks (undici hands over some 16-64 KiB at a time) into chunks of
 * `bytes`: hashing, gunzip-counting and writing each then cost one call per MiB instead of
 * dozens, with less garbage. One copy per byte; a chunk as large as `bytes` passes as it is.
 */
export class Coalesce extends Transform {
  private buf: Buffer | undefined;
  private used = 0;

  constructor(private readonly bytes = 1024 * 1024) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (this.used === 0 && chunk.length >= this.bytes) return cb(null, chunk);
    let at = 0;
    while (at < chunk.length) {
      this.buf ??= Buffer.allocUnsafe(this.bytes);
      const n = chunk.copy(this.buf, this.used, at);
      this.used += n;
      at += n;
      if (this.used === this.bytes) {
        // a new buffer each time: the one pushed is still being hashed and written downstream
        this.push(this.buf);
        this.buf = undefined;
        this.used = 0;
      }
    }
    cb();
  }

  override _flush(cb: TransformCallback): void {
    if (this.used > 0) this.push(this.buf!.subarray(0, this.used));
    this.buf = undefined;
    this.used = 0;
    cb();
  }
}

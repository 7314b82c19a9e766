import { Writable } from 'node:stream';
import { Compressor } from 'zstd-napi';
import { FRAME_BYTES } from './layout.js';
import type { FrameEntry } from './seekable.js';

/**
 * Turns an uncompressed stream into independent zstd frames: a new frame starts at every
 * cut point (the writer puts one at each tar header and each entry's data) and after at
 * most FRAME_BYTES, so a reader can find any entry through the seek index and decompress
 * frames in parallel. Each frame records its content size and an XXH64 checksum.
 */
export class FrameWriter extends Writable {
  readonly frames: FrameEntry[] = [];
  private readonly compressor = new Compressor();
  private parts: Buffer[] = [];
  private partBytes = 0;
  private position = 0;
  private cutIndex = 0;

  constructor(
    private readonly sink: (frame: Buffer) => Promise<void>,
    private readonly cuts: number[],
    level = 3,
  ) {
    super({ highWaterMark: FRAME_BYTES });
    this.compressor.setParameters({ compressionLevel: level, checksumFlag: true, contentSizeFlag: true });
  }

  private nextBoundary(): number {
    while (this.cutIndex < this.cuts.length && this.cuts[this.cutIndex]! <= this.position - this.partBytes) this.cutIndex++;
    const frameLimit = this.position - this.partBytes + FRAME_BYTES;
    const cut = this.cuts[this.cutIndex];
    return cut !== undefined && cut < frameLimit ? cut : frameLimit;
  }

  private async flushFrame(): Promise<void> {
    if (this.partBytes === 0) return;
    const data = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.partBytes);
    const frame = this.compressor.compress(data);
    this.frames.push({ compressedSize: frame.length, decompressedSize: data.length });
    this.parts = [];
    this.partBytes = 0;
    await this.sink(frame);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    (async () => {
      let rest = chunk;
      while (rest.length > 0) {
        const boundary = this.nextBoundary();
        if (this.position === boundary) {
          await this.flushFrame();
          continue;
        }
        const take = Math.min(rest.length, boundary - this.position);
        this.parts.push(rest.subarray(0, take));
        this.partBytes += take;
        this.position += take;
        rest = rest.subarray(take);
        if (this.position === boundary) await this.flushFrame();
      }
    })().then(() => cb(), cb);
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.flushFrame().then(() => cb(), cb);
  }

  get bytesIn(): number {
    return this.position;
  }
}

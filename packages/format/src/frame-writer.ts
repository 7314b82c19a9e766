import { Writable } from 'node:stream';
import type * as ZstdBinding from 'zstd-napi/binding.js';
import { readBuffers } from '@offline-bundle/host';
import { timedSync, zstdBinding as binding } from '@offline-bundle/oci';
import { FRAME_BYTES } from './layout.js';
import { rawFrame } from './raw-frame.js';
import type { FrameEntry } from './seekable.js';

/**
 * zstd's fastest setting: on data that does not shrink it only confirms that and stores raw
 * blocks, some 10 times faster than level 3, which gives the same bytes there.
 */
const FAST_LEVEL = -1000;
/** A frame whose output is above this share of its input did not shrink worth the effort. */
const INCOMPRESSIBLE = 0.97;
/** The sample compressed to judge an entry's data; frames shorter than it say little (a tar header, a config). */
const PROBE_BYTES = 64 * 1024;

/**
 * Compressed frames are made in these: a fresh buffer per frame was another GiB of garbage per
 * GiB packed. Whoever writes a frame out gives it back (frameWritten), or leaves it to the GC.
 */
const frameBuffers = readBuffers(binding.compressBound(FRAME_BYTES));

/** A frame the sink was handed is written: its buffer may take the next frame. */
export function frameWritten(frame: Buffer): void {
  frameBuffers.give(frame);
}

/** A compression context with every bundle frame's settings (the seek index needs both fields). */
function frameContext(level: number): ZstdBinding.CCtx {
  const cctx = new binding.CCtx();
  cctx.setParameter(binding.CParameter.compressionLevel, level);
  cctx.setParameter(binding.CParameter.checksumFlag, 1);
  cctx.setParameter(binding.CParameter.contentSizeFlag, 1);
  return cctx;
}

/**
 * Turns an uncompressed stream into independent zstd frames: a new frame starts at every
 * cut point (the writer puts one at each tar header and each entry's data) and after at
 * most FRAME_BYTES, so a reader can find any entry through the seek index and decompress
 * frames in parallel. Each frame records its content size and an XXH64 checksum.
 *
 * Layers are gzip already: when a sample of an entry's data (or a frame of it) does not shrink,
 * its frames go at FAST_LEVEL until one shrinks after all. Compressed frames come from a pool: the
 * sink gives each back through frameWritten once it is written.
 */
export class FrameWriter extends Writable {
  readonly frames: FrameEntry[] = [];
  private readonly compressor: ZstdBinding.CCtx;
  private readonly fast = frameContext(FAST_LEVEL);
  /** The probe's output, only measured. */
  private readonly probeOut = Buffer.allocUnsafe(binding.compressBound(PROBE_BYTES));
  /** The current run of frames (since the last cut) did not shrink. */
  private incompressible = false;
  private parts: Buffer[] = [];
  private partBytes = 0;
  private position = 0;
  private cutIndex = 0;
  /** Chunks written whose last bytes wait in `parts`: released once their frame is compressed. */
  private held: Buffer[] = [];

  constructor(
    private readonly sink: (frame: Buffer) => Promise<void>,
    private readonly cuts: number[],
    level = 3,
    /** Raw blocks only: each frame's size then depends on its content length alone. */
    private readonly raw = false,
    /**
     * Called with each written chunk once the writer holds none of its bytes (every frame they
     * went into is compressed; a chunk can straddle frames): its buffer may be read into again.
     */
    private readonly release?: (chunk: Buffer) => void,
  ) {
    super({ highWaterMark: FRAME_BYTES });
    this.compressor = frameContext(level);
  }

  private nextBoundary(): number {
    while (
      this.cutIndex < this.cuts.length &&
      this.cuts[this.cutIndex]! <= this.position - this.partBytes
    )
      this.cutIndex++;
    const frameLimit = this.position - this.partBytes + FRAME_BYTES;
    const cut = this.cuts[this.cutIndex];
    return cut !== undefined && cut < frameLimit ? cut : frameLimit;
  }

  /**
   * Whether an entry's data does not shrink at `level`: a small sample decides for its first
   * frame. Taken from the frame's end: a layer's first bytes hold its tar headers, mostly zeros.
   */
  private probe(data: Buffer): boolean {
    if (data.length < 2 * PROBE_BYTES) return false;
    return (
      timedSync(
        'compression: probe',
        () => this.compressor.compress2(this.probeOut, data.subarray(data.length - PROBE_BYTES)),
        PROBE_BYTES,
      ) >
      PROBE_BYTES * INCOMPRESSIBLE
    );
  }

  private async flushFrame(): Promise<void> {
    if (this.partBytes === 0) return;
    // compress() is synchronous and copies what it keeps: one assembly buffer serves every frame
    // (a fresh 4 MiB one per frame is a GiB of garbage per GiB packed)
    const data = this.parts.length === 1 ? this.parts[0]! : this.assemble();
    const start = this.position - data.length;
    // nextBoundary left cutIndex past every cut up to this frame's start
    if (!this.raw && this.cuts[this.cutIndex - 1] === start) this.incompressible = this.probe(data);
    const kind = this.raw
      ? 'compression: raw head frames'
      : this.incompressible
        ? 'compression: frames stored (incompressible)'
        : 'compression: frames at the level';
    const frame = timedSync(
      kind,
      () =>
        this.raw
          ? rawFrame(data)
          : compressed(this.incompressible ? this.fast : this.compressor, data),
      data.length,
    );
    if (data.length >= PROBE_BYTES)
      this.incompressible = frame.length > data.length * INCOMPRESSIBLE;
    this.frames.push({ compressedSize: frame.length, decompressedSize: data.length });
    this.parts = [];
    this.partBytes = 0;
    const done = this.held;
    this.held = [];
    for (const chunk of done) this.release?.(chunk);
    await this.sink(frame);
  }

  private assembly: Buffer | undefined;

  private assemble(): Buffer {
    if (!this.assembly || this.assembly.length < this.partBytes)
      this.assembly = Buffer.allocUnsafe(Math.max(this.partBytes, FRAME_BYTES));
    let at = 0;
    for (const p of this.parts) at += p.copy(this.assembly, at);
    return this.assembly.subarray(0, at);
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
      // its tail waits in the frame being gathered: released with that frame
      if (this.partBytes > 0) this.held.push(chunk);
      else this.release?.(chunk);
    })().then(() => cb(), cb);
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.flushFrame().then(() => cb(), cb);
  }

  get bytesIn(): number {
    return this.position;
  }
}

/** One frame of `data` (at most FRAME_BYTES) in a pooled buffer. */
function compressed(cctx: ZstdBinding.CCtx, data: Buffer): Buffer {
  const out = frameBuffers.take();
  return out.subarray(0, cctx.compress2(out, data));
}

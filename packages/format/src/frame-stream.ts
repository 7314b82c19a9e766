import { Readable } from 'node:stream';
import { readBuffers } from '@offline-bundle/host';
import type { ByteBudget } from './frame-budget.js';
import { FRAME_BYTES } from './layout.js';

/**
 * The most of a frame handed on in one chunk. A view into a frame would keep the whole frame
 * alive in a socket's buffer after its budget was released; a copy this size keeps only itself,
 * so a stream holds at most about two of these beyond its budgeted frame.
 */
export const FRAME_SLICE_BYTES = 256 * 1024;

/** Decoded bytes [from, to) of frame `frame` (`size` bytes decoded), which costs `weight` bytes of budget while held. */
export interface FramePiece { frame: number; from: number; to: number; size: number; weight: number }

export interface FrameStreamOptions {
  budget: ByteBudget;
  /** Reads, checks and decodes one frame (into `into` when given: a pooled buffer of FRAME_BYTES + 1). */
  load: (frame: number, into?: Buffer) => Promise<Buffer>;
  /** Copies of at most FRAME_SLICE_BYTES (for any consumer), or the frame's own bytes (for one that keeps none). */
  copy: boolean;
}

interface Hold { budget: ByteBudget; bytes: number }

// a stream dropped unread and never destroyed cannot give its share back itself: once it is
// collected its frame is gone too, so the share is returned then
const collected = new FinalizationRegistry<Hold>(release);

function release(hold: Hold): void {
  const n = hold.bytes;
  hold.bytes = 0;
  hold.budget.release(n);
}

/**
 * An entry's bytes, one frame at a time, each frame's budget acquired before it is read and
 * released once its last byte is handed on. Destroyed while waiting for budget, it leaves the
 * queue; destroyed while a frame is being read, it closes once that read is over and released.
 */
export class FrameStream extends Readable {
  private current: { data: Buffer; at: number; end: number } | undefined;
  private loading: Promise<void> | undefined;
  private readonly hold: Hold;
  private readonly stop = new AbortController();

  constructor(private readonly pieces: Iterator<FramePiece>, private readonly opts: FrameStreamOptions) {
    super();
    this.hold = { budget: opts.budget, bytes: 0 };
    collected.register(this, this.hold, this);
  }

  override _read(): void {
    if (this.current) return this.pushSlice();
    if (this.loading) return;
    let next: IteratorResult<FramePiece>;
    try {
      next = this.pieces.next();
    } catch (err) {
      this.destroy(err as Error);
      return;
    }
    if (next.done) {
      this.push(null);
      return;
    }
    this.loading = this.load(next.value).then(
      () => {
        this.loading = undefined;
        if (this.destroyed) return;
        // push() runs a flowing consumer's 'data' handler: what it throws fails this stream, not the process
        try {
          this.pushSlice();
        } catch (err) {
          this.destroy(err as Error);
        }
      },
      (err: unknown) => {
        this.loading = undefined;
        this.destroy(err as Error);
      },
    );
  }

  private async load(p: FramePiece): Promise<void> {
    await this.opts.budget.acquire(p.weight, this.stop.signal);
    this.hold.bytes += p.weight;
    if (this.destroyed) return;
    // a full frame leaves this stream only as copies (a slice is shorter than a frame): its buffer
    // is decoded into again once it is copied out. Only a full one: the budget charges the frame's
    // size, and a shorter frame in a 4 MiB buffer would hold more than it is charged (a stalled
    // client's, until it is cut), or go out whole as a view of it
    const into = this.opts.copy && p.size === FRAME_BYTES ? frameBuffers.take() : undefined;
    let data: Buffer;
    try {
      data = await this.opts.load(p.frame, into);
    } catch (err) {
      if (into) frameBuffers.give(into);
      throw err;
    }
    // a loader that decoded elsewhere left `into` unread
    if (into && data.buffer !== into.buffer) frameBuffers.give(into);
    this.current = { data, at: p.from, end: Math.min(p.to, data.length) };
  }

  private pushSlice(): void {
    const c = this.current!;
    const n = this.opts.copy ? Math.min(FRAME_SLICE_BYTES, c.end - c.at) : c.end - c.at;
    const chunk = this.opts.copy && n < c.data.length ? copyOf(c.data, c.at, n) : c.data.subarray(c.at, c.at + n);
    c.at += n;
    if (c.at >= c.end) this.dropFrame();
    this.push(chunk);
  }

  /** Done with the current frame: its budget back, and its buffer when it is a pooled one (given out only as copies). */
  private dropFrame(): void {
    const c = this.current;
    this.current = undefined;
    if (c) frameBuffers.give(c.data);
    release(this.hold);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.stop.abort();
    const done = () => {
      this.dropFrame();
      collected.unregister(this);
      cb(err);
    };
    if (this.loading) void this.loading.then(done, done);
    else done();
  }
}

/** Decoded frames (one spare byte: decompressFrame's check) and whole slices, reused (see ReadBuffers). */
const frameBuffers = readBuffers(FRAME_BYTES + 1);
const sliceBuffers = readBuffers(FRAME_SLICE_BYTES);

// Buffer.from(view) takes the generic array-like path here, ten times slower than a plain copy
function copyOf(data: Buffer, at: number, n: number): Buffer {
  // a whole slice's buffer comes back from whoever sends it (giveBack); a short one is not worth keeping
  const out = n === FRAME_SLICE_BYTES ? sliceBuffers.take() : Buffer.allocUnsafe(n);
  data.copy(out, 0, at, at + n);
  return out;
}

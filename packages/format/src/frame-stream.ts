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
export interface FramePiece {
  frame: number;
  from: number;
  to: number;
  size: number;
  weight: number;
}

interface FrameStreamOptions {
  budget: ByteBudget;
  /**
   * Reads, checks and decodes one frame (into `into` when given: a pooled buffer of FRAME_BYTES + 1).
   * `signal` aborts once the stream is destroyed: a loader may then skip the hash and the decode.
   */
  load: (frame: number, into: Buffer | undefined, signal: AbortSignal) => Promise<Buffer>;
  /** Copies of at most FRAME_SLICE_BYTES (for any consumer), or the frame's own bytes (for one that keeps none). */
  copy: boolean;
}

interface Hold {
  budget: ByteBudget;
  bytes: number;
}

// a stream dropped unread and never destroyed cannot give its share back itself: once it is
// collected its frame is gone too, so the share is returned then
const collected = new FinalizationRegistry<Hold>(release);

function release(hold: Hold): void {
  const n = hold.bytes;
  hold.bytes = 0;
  hold.budget.release(n);
}

interface Frame {
  data: Buffer;
  at: number;
  end: number;
  weight: number;
}

const NOTHING = Buffer.alloc(0);

/**
 * An entry's bytes, one frame at a time, each frame's budget acquired before it is read and
 * released once its last byte is handed on. While one frame is handed on, the next is read
 * and decoded if the budget is at most half used and nobody waits for it, so a disk's latency
 * overlaps the socket (a stick or a cold cache: a frame read took as long as sending one).
 * Destroyed while waiting for budget, it leaves the queue; destroyed while a frame is being read,
 * it closes once that read is over and released.
 */
export class FrameStream extends Readable {
  private current: Frame | undefined;
  private loading: Promise<void> | undefined;
  /** The next frame, read while the current one is handed on. */
  private ahead: Promise<Frame> | undefined;
  /** A piece taken from `pieces` to read ahead for which the budget had no room: read next. */
  private pending: FramePiece | undefined;
  /** What `pieces` threw while looking ahead. */
  private failed: Error | undefined;
  private readonly hold: Hold;
  private readonly stop = new AbortController();

  constructor(
    private readonly pieces: Iterator<FramePiece>,
    private readonly opts: FrameStreamOptions,
  ) {
    super();
    this.hold = { budget: opts.budget, bytes: 0 };
    collected.register(this, this.hold, this);
  }

  override _read(): void {
    if (this.current) return this.pushSlice();
    if (this.loading) return;
    let next = this.ahead;
    this.ahead = undefined;
    if (!next) {
      const p = this.nextPiece();
      if (p === null) return;
      if (p === undefined) {
        this.push(null);
        return;
      }
      next = this.fetch(p, false);
    }
    this.loading = next.then(
      (f) => {
        this.loading = undefined;
        this.current = f;
        if (this.destroyed) return;
        this.readAhead();
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

  /** The next piece to read; undefined past the last, null when the iterator failed (the stream is destroyed). */
  private nextPiece(): FramePiece | undefined | null {
    const p = this.pending;
    if (p) {
      this.pending = undefined;
      return p;
    }
    try {
      if (this.failed) throw this.failed;
      const next = this.pieces.next();
      return next.done ? undefined : next.value;
    } catch (err) {
      this.destroy(err as Error);
      return null;
    }
  }

  private readAhead(): void {
    if (this.ahead || this.pending || this.failed) return;
    let p: FramePiece | undefined;
    try {
      const next = this.pieces.next();
      p = next.done ? undefined : next.value;
    } catch (err) {
      // fails the stream when it asks for the next frame, not while this one is handed on
      this.failed = err as Error;
      return;
    }
    if (!p) return;
    const budget = this.opts.budget;
    if (!budget.tryAcquire(p.weight, budget.capacity / 2)) {
      this.pending = p;
      return;
    }
    this.hold.bytes += p.weight;
    const ahead = this.fetch(p, true);
    // a failure surfaces when the stream comes to this frame (or not at all, destroyed before)
    ahead.catch(() => undefined);
    this.ahead = ahead;
  }

  /** Reads and decodes piece `p`, its budget acquired first unless `granted`. */
  private async fetch(p: FramePiece, granted: boolean): Promise<Frame> {
    if (!granted) {
      await this.opts.budget.acquire(p.weight, this.stop.signal);
      this.hold.bytes += p.weight;
    }
    if (this.destroyed) return { data: NOTHING, at: 0, end: 0, weight: p.weight };
    // a full frame leaves this stream only as copies (a slice is shorter than a frame): its buffer
    // is decoded into again once it is copied out. Only a full one: the budget charges the frame's
    // size, and a shorter frame in a 4 MiB buffer would hold more than it is charged (a stalled
    // client's, until it is cut), or go out whole as a view of it
    const into = this.opts.copy && p.size === FRAME_BYTES ? frameBuffers.take() : undefined;
    let data: Buffer;
    try {
      data = await this.opts.load(p.frame, into, this.stop.signal);
    } catch (err) {
      if (into) frameBuffers.give(into);
      throw err;
    }
    // a loader that decoded elsewhere left `into` unread
    if (into && data.buffer !== into.buffer) frameBuffers.give(into);
    return { data, at: p.from, end: Math.min(p.to, data.length), weight: p.weight };
  }

  private pushSlice(): void {
    const c = this.current!;
    const n = this.opts.copy ? Math.min(FRAME_SLICE_BYTES, c.end - c.at) : c.end - c.at;
    const chunk =
      this.opts.copy && n < c.data.length
        ? copyOf(c.data, c.at, n)
        : c.data.subarray(c.at, c.at + n);
    c.at += n;
    if (c.at >= c.end) this.dropFrame();
    this.push(chunk);
  }

  /** Done with the current frame: its budget back, and its buffer when it is a pooled one (given out only as copies). */
  private dropFrame(): void {
    const c = this.current;
    this.current = undefined;
    if (!c) return;
    frameBuffers.give(c.data);
    this.hold.bytes -= c.weight;
    this.hold.budget.release(c.weight);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.stop.abort();
    const ahead = this.ahead?.then((f) => frameBuffers.give(f.data));
    this.ahead = undefined;
    // what a read under way or ahead holds comes back once that read is over
    void Promise.allSettled([this.loading, ahead]).then(() => {
      this.dropFrame();
      release(this.hold);
      collected.unregister(this);
      cb(err);
    });
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

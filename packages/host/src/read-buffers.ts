/**
 * Read buffers of one size, used again once their consumer says it is done with them.
 *
 * A fresh buffer per read is external memory V8 frees only when it finds the buffer dead. At 16
 * parallel streams a buffer lives through two scavenges (queued in the stream, then the socket),
 * is promoted, and only a mark-compact frees it: one every 64 MiB served, which cost `serve DIR`
 * as much CPU as re-hashing every chunk (~2 CPU-s per 2 GiB). A buffer goes back to the pool
 * only through `give`, called once nothing reads it any more (the socket took its bytes): a
 * consumer that never says so leaves it to the GC, as before, and nothing is reused early.
 */
export class ReadBuffers {
  private readonly free: Buffer[] = [];
  /** Out on loan: only these are taken back, each once. */
  private readonly lent = new WeakSet<ArrayBufferLike>();

  private lastTake = 0;
  private trim: NodeJS.Timeout | undefined;

  /** Buffers allocated so far (the rest of the takes were reuses). */
  allocated = 0;
  /** Takes so far. */
  taken = 0;
  /** Lent and not given back yet (a consumer that never gives one back keeps it counted). */
  onLoan = 0;

  /** `idleMs`: idle buffers are dropped once no take came for that long (a daemon serves rarely). */
  constructor(
    readonly size: number,
    private readonly keep: number,
    private readonly idleMs = IDLE_MS,
  ) {}

  /** Buffers waiting to be taken again. */
  get idle(): number {
    return this.free.length;
  }

  take(): Buffer {
    // a monotonic clock: a node's wall clock set back would hold the trim off
    this.lastTake = performance.now();
    this.taken++;
    let buf = this.free.pop();
    if (!buf) {
      buf = Buffer.allocUnsafeSlow(this.size);
      this.allocated++;
    }
    this.lent.add(buf.buffer);
    this.onLoan++;
    return buf;
  }

  /** `chunk`, or a part of a buffer `take` lent, is read by no one any more. */
  give(chunk: Buffer): void {
    const ab = chunk.buffer;
    if (!this.lent.has(ab)) return;
    this.lent.delete(ab);
    this.onLoan--;
    if (this.free.length < this.keep) this.free.push(Buffer.from(ab, 0, this.size));
    this.trimLater();
  }

  /** Drops the idle buffers `idleMs` after the last take (a take meanwhile moves the drop on). */
  private trimLater(): void {
    if (this.trim || this.free.length === 0) return;
    const wait = Math.max(0, this.lastTake + this.idleMs - performance.now());
    this.trim = setTimeout(() => {
      this.trim = undefined;
      if (performance.now() - this.lastTake >= this.idleMs) this.free.length = 0;
      else this.trimLater();
    }, wait);
    this.trim.unref();
  }
}

/** How long idle buffers outlive the last take: past a burst of requests, not through a quiet day. */
const IDLE_MS = 30_000;

/** Idle buffers kept per size: enough for 16 streams to circulate theirs, a bounded amount after. */
const KEEP_BYTES = 16 * 1024 * 1024;
const pools = new Map<number, ReadBuffers>();

/** The process's pool of `size`-byte read buffers. */
export function readBuffers(size: number): ReadBuffers {
  let pool = pools.get(size);
  if (!pool)
    pools.set(size, (pool = new ReadBuffers(size, Math.max(1, Math.floor(KEEP_BYTES / size)))));
  return pool;
}

/**
 * A chunk a pooled read produced is no longer read by anyone: its buffer may be read into again.
 * Sound only because each lent buffer becomes one chunk of one stream with one consumer (the
 * registry's sendBody, or the frame stream for a frame it copied out in full): a stream split,
 * teed or piped twice must not call it.
 */
export function giveBack(chunk: Buffer): void {
  for (const pool of pools.values()) pool.give(chunk);
}

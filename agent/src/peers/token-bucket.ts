// The upload rate cap of a node's peer server: one bucket for every response it sends, so a
// node that serves many downloaders still leaves its own link (and disk) to its own work.
import { setTimeout as sleep } from 'node:timers/promises';

/** Time as the bucket sees it: injectable, so a test proves the cap without timing a transfer. */
export interface BucketClock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const REAL_CLOCK: BucketClock = {
  now: () => performance.now(),
  sleep: (ms, signal) => sleep(ms, undefined, signal ? { signal } : {}),
};

/**
 * `rate` bytes per second on average, at most `burst` at once. Waiting callers are served in
 * the order they asked (a queue), so one large response cannot starve the others.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;
  private queue: Promise<void> = Promise.resolve();
  /** Bytes granted so far: what a test holds against rate × elapsed + burst. */
  granted = 0;

  constructor(
    readonly rate: number,
    readonly burst: number,
    private readonly clock: BucketClock = REAL_CLOCK,
  ) {
    if (!(rate > 0) || !(burst > 0))
      throw new RangeError('a token bucket needs a positive rate and burst');
    this.tokens = burst;
    this.last = clock.now();
  }

  private refill(): void {
    const now = this.clock.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.rate);
    this.last = now;
  }

  /** Resolves once `n` bytes (at most `burst`) may be sent. */
  take(n: number, signal?: AbortSignal): Promise<void> {
    const want = Math.min(n, this.burst);
    const turn = this.queue.then(async () => {
      this.refill();
      while (this.tokens < want) {
        await this.clock.sleep(Math.ceil(((want - this.tokens) / this.rate) * 1000), signal);
        this.refill();
      }
      this.tokens -= want;
      this.granted += want;
    });
    // one failed wait (an aborted response) must not stop the queue behind it
    this.queue = turn.catch(() => undefined);
    return turn;
  }
}

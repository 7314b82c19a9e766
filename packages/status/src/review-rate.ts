// How fast the metrics listener may ask the API server about credentials it has not seen: a
// flood of made-up tokens must cost the API server a bounded trickle, all sources together and
// per source, while an answer already cached costs nothing (metrics-auth.ts).

/** A bucket that refuses instead of waiting: `rate` per second on average, `burst` at once. */
class Bucket {
  private tokens: number;
  private last: number;
  constructor(
    private readonly rate: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  full(now: number): boolean {
    this.refill(now);
    return this.tokens >= this.burst;
  }

  has(now: number): boolean {
    this.refill(now);
    return this.tokens >= 1;
  }

  take(): void {
    this.tokens -= 1;
  }

  private refill(now: number): void {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.rate);
    this.last = now;
  }
}

export interface RateLimits {
  perSecond: number;
  burst: number;
  perAddressPerSecond: number;
  perAddressBurst: number;
  /** Source addresses tracked at most; beyond, full buckets are forgotten first, then the oldest. */
  maxAddresses: number;
}

/** A global bucket and one per source address; a review is allowed only when both have a token. */
export class ReviewRate {
  private readonly all: Bucket;
  private readonly byAddress = new Map<string, Bucket>();

  constructor(
    private readonly limits: RateLimits,
    private readonly now: () => number,
  ) {
    this.all = new Bucket(limits.perSecond, limits.burst, now());
  }

  /** Takes a token of both buckets, or neither and returns false. */
  take(address: string): boolean {
    const now = this.now();
    let mine = this.byAddress.get(address);
    if (!mine) {
      this.makeRoom(now);
      mine = new Bucket(this.limits.perAddressPerSecond, this.limits.perAddressBurst, now);
      this.byAddress.set(address, mine);
    }
    if (!mine.has(now) || !this.all.has(now)) return false;
    mine.take();
    this.all.take();
    return true;
  }

  private makeRoom(now: number): void {
    if (this.byAddress.size < this.limits.maxAddresses) return;
    for (const [k, b] of this.byAddress) if (b.full(now)) this.byAddress.delete(k);
    if (this.byAddress.size >= this.limits.maxAddresses)
      this.byAddress.delete(this.byAddress.keys().next().value!);
  }
}

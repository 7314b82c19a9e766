/**
 * Bytes of frames (read and decoded) that the random readers of one process may hold at once.
 * Memory served from a bundle file then grows with this, not with the streams in flight (issue #24):
 * a frame costs up to 4 MiB read plus 4 MiB decoded, so 64 MiB keeps seven in flight, more
 * than two cores can decode at once.
 */
export const FRAME_BUDGET_BYTES = 64 * 1024 * 1024;

interface Waiter {
  bytes: number;
  grant: () => void;
  refuse: (err: Error) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/**
 * A byte-weighted semaphore, strictly first come first served: a large request at the head
 * is not overtaken by small ones behind it, so none starves. A request larger than the whole
 * budget is granted once nothing else is held, so it proceeds alone instead of never.
 */
export class ByteBudget {
  private held = 0;
  private most = 0;
  private readonly queue: Waiter[] = [];

  constructor(readonly capacity: number) {
    if (!(capacity > 0))
      throw new RangeError(`a byte budget needs a positive capacity, not ${capacity}`);
  }

  /** Bytes granted and not yet released. */
  get inUse(): number {
    return this.held;
  }

  /** The most bytes ever held at once (tests, measurements). */
  get peak(): number {
    return this.most;
  }

  /** Requests waiting for a grant. */
  get waiting(): number {
    return this.queue.length;
  }

  /**
   * Resolves once `bytes` are granted; the caller owes `release(bytes)` from then on. Aborted
   * while waiting: leaves the queue and rejects with the signal's reason, owing nothing.
   */
  acquire(bytes: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if (this.queue.length === 0 && this.fits(bytes)) {
      this.take(bytes);
      return Promise.resolve();
    }
    return new Promise<void>((grant, refuse) => {
      const w: Waiter = { bytes, grant, refuse, signal };
      if (signal) {
        w.onAbort = () => this.leave(w);
        signal.addEventListener('abort', w.onAbort, { once: true });
      }
      this.queue.push(w);
    });
  }

  /**
   * Takes `bytes` only if that can be done at once, with no request waiting and at most `upTo`
   * bytes held after it: for work that is worth doing only with memory to spare (a read ahead).
   */
  tryAcquire(bytes: number, upTo = this.capacity): boolean {
    if (this.queue.length > 0 || this.held + bytes > upTo) return false;
    this.take(bytes);
    return true;
  }

  release(bytes: number): void {
    if (bytes <= 0) return;
    if (bytes > this.held)
      throw new RangeError(`releasing ${bytes} bytes of a budget holding ${this.held}`);
    this.held -= bytes;
    this.pump();
  }

  private fits(bytes: number): boolean {
    return this.held === 0 || this.held + bytes <= this.capacity;
  }

  private take(bytes: number): void {
    this.held += bytes;
    this.most = Math.max(this.most, this.held);
  }

  /** Grants from the head while the head fits: order is kept even when a later one would fit. */
  private pump(): void {
    while (this.queue.length > 0 && this.fits(this.queue[0]!.bytes)) {
      const w = this.queue.shift()!;
      if (w.onAbort) w.signal!.removeEventListener('abort', w.onAbort);
      this.take(w.bytes);
      w.grant();
    }
  }

  private leave(w: Waiter): void {
    const at = this.queue.indexOf(w);
    if (at < 0) return;
    this.queue.splice(at, 1);
    w.refuse(abortReason(w.signal!));
    // the one that left may have stood before requests that fit now
    if (at === 0) this.pump();
  }
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('aborted');
}

/** The one budget all bundle readers of this process share unless given their own. */
export const processFrameBudget = new ByteBudget(FRAME_BUDGET_BYTES);

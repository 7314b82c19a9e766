import { setTimeout as sleep } from 'node:timers/promises';

interface RetryOptions {
  attempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Whether an error may succeed on a later try. */
  retryable: (err: unknown) => boolean;
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
  /** Ctrl-C: no further attempt, and the wait between two ends at once (with the signal's reason). */
  signal?: AbortSignal | undefined;
}

/** Exponential backoff with full jitter. */
export async function withRetry<T>(
  fn: (attempt: number) => Promise<T>,
  opts: RetryOptions,
): Promise<T> {
  const attempts = opts.attempts ?? 5;
  const base = opts.baseDelayMs ?? 250;
  const max = opts.maxDelayMs ?? 8000;
  const signal = opts.signal;
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    try {
      return await fn(attempt);
    } catch (err) {
      // an aborted request is not a network failure to try again
      signal?.throwIfAborted();
      if (attempt >= attempts || !opts.retryable(err)) throw err;
      const delay = Math.round(Math.random() * Math.min(max, base * 2 ** (attempt - 1)));
      opts.onRetry?.(err, attempt, delay);
      await sleep(delay, undefined, signal ? { signal } : {}).catch(() => signal!.throwIfAborted());
    }
  }
}

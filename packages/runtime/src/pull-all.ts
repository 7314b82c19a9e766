// Pre-load a list of images through the CRI, a few at a time.
import type { ImagePuller } from './cri-client.js';
import { RuntimeError, type RuntimeErrorCode } from './errors.js';

export interface PullProgress {
  /** The image that just finished (successfully). */
  ref: string;
  /** What the runtime answered (its image ID). */
  imageRef: string;
  /** Images finished so far, this one included. */
  done: number;
  total: number;
}

export interface PullAllOptions {
  /** Pulls at once. Default 3. */
  concurrency?: number;
  /** Further attempts after a transient failure. Default 3. */
  retries?: number;
  /** First backoff delay; doubles per attempt, capped at 30 s, with jitter. Default 1000 ms. */
  backoffMs?: number;
  /** Deadline of each PullImage call. */
  timeoutMs?: number;
  onProgress?: (p: PullProgress) => void;
  /** Called before each retry (logging). */
  onRetry?: (ref: string, attempt: number, error: RuntimeError) => void;
  signal?: AbortSignal;
}

export interface PullResult {
  ref: string;
  imageRef: string;
}

/** Failures worth another attempt: the runtime restarting, a slow, flaky or stalled pull. */
const TRANSIENT: ReadonlySet<RuntimeErrorCode> = new Set([
  'RUNTIME_UNAVAILABLE',
  'TIMEOUT',
  'PULL_FAILED',
  'STALLED',
]);

function asRuntimeError(e: unknown, ref: string): RuntimeError {
  if (e instanceof RuntimeError) return e;
  return new RuntimeError(
    'PULL_FAILED',
    `pull ${ref}: ${e instanceof Error ? e.message : String(e)}`,
    { cause: e },
  );
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/** What the workers of one pullAll share: its settings, and what they found so far. */
interface PullRun {
  client: ImagePuller;
  opts: PullAllOptions;
  retries: number;
  backoffMs: number;
  total: number;
  stop: AbortController;
  results: Map<string, string>;
  failures: { ref: string; error: RuntimeError }[];
  fatal?: RuntimeError;
  done: number;
}

/** Pulls one image, retrying transient failures with backoff; the outcome goes into `run`. */
async function pullOne(run: PullRun, ref: string): Promise<void> {
  const { opts, stop } = run;
  for (let attempt = 0; ; attempt++) {
    try {
      const imageRef = await run.client.pullImage(ref, {
        ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
        signal: stop.signal,
      });
      run.results.set(ref, imageRef);
      run.done++;
      opts.onProgress?.({ ref, imageRef, done: run.done, total: run.total });
      return;
    } catch (e) {
      const err = asRuntimeError(e, ref);
      if (stop.signal.aborted) return; // stopping: the reason is recorded elsewhere
      if (err.code === 'NO_SPACE') {
        run.fatal ??= err;
        stop.abort(err);
        return;
      }
      if (!TRANSIENT.has(err.code) || attempt >= run.retries) {
        run.failures.push({
          ref,
          error:
            attempt > 0
              ? new RuntimeError(err.code, `${err.message} (${attempt + 1} attempts)`, {
                  cause: err,
                })
              : err,
        });
        return;
      }
      opts.onRetry?.(ref, attempt + 1, err);
      const delay = Math.min(30_000, run.backoffMs * 2 ** attempt);
      await sleep(delay / 2 + Math.random() * (delay / 2), stop.signal);
      if (stop.signal.aborted) return;
    }
  }
}

/** The rejection once pulls failed: the first failure's code, how many failed, and all of them as `cause`. */
function failuresError(failures: PullRun['failures'], total: number): RuntimeError {
  const first = failures[0] as { ref: string; error: RuntimeError };
  const more = failures.length > 1 ? ` (and ${failures.length - 1} more)` : '';
  return new RuntimeError(
    first.error.code,
    `${failures.length} of ${total} images failed to pull; first: ${first.error.message}${more}`,
    {
      cause: new AggregateError(
        failures.map((f) => f.error),
        'image pull failures',
      ),
    },
  );
}

/**
 * Pull every reference (duplicates once) with at most `concurrency` pulls in flight.
 * Transient failures (RUNTIME_UNAVAILABLE, TIMEOUT, PULL_FAILED, STALLED) are retried with
 * exponential backoff. NO_SPACE stops everything at once: no new pull starts, pulls in
 * flight are cancelled, and the promise rejects with that NO_SPACE error. Other failures
 * (IMAGE_NOT_FOUND, or retries exhausted) let the remaining images finish; then the promise
 * rejects with the first failure's code, a message naming how many failed, and an
 * AggregateError of all failures as `cause`. Resolves, in input order, when every image
 * was pulled.
 */
export async function pullAll(
  client: ImagePuller,
  refs: string[],
  opts: PullAllOptions = {},
): Promise<PullResult[]> {
  const unique = [...new Set(refs)];
  const total = unique.length;
  const concurrency = Math.max(1, Math.floor(opts.concurrency ?? 3));
  const stop = new AbortController();
  const onOuterAbort = (): void => stop.abort(opts.signal?.reason);
  opts.signal?.addEventListener('abort', onOuterAbort, { once: true });
  if (opts.signal?.aborted) stop.abort(opts.signal.reason);

  const run: PullRun = {
    client,
    opts,
    retries: Math.max(0, Math.floor(opts.retries ?? 3)),
    backoffMs: Math.max(0, opts.backoffMs ?? 1000),
    total,
    stop,
    results: new Map(),
    failures: [],
    done: 0,
  };
  let next = 0;
  const worker = async (): Promise<void> => {
    while (!stop.signal.aborted && next < unique.length) {
      const ref = unique[next++] as string;
      await pullOne(run, ref);
    }
  };

  try {
    await Promise.all(Array.from({ length: Math.min(concurrency, total) }, worker));
  } finally {
    opts.signal?.removeEventListener('abort', onOuterAbort);
  }

  if (run.fatal) throw run.fatal;
  // Stopped from outside: the caller's own reason (an AbortError), as any abortable call does.
  if (opts.signal?.aborted) throw opts.signal.reason;
  if (run.failures.length > 0) throw failuresError(run.failures, total);
  return unique.map((ref) => ({ ref, imageRef: run.results.get(ref) as string }));
}

// A pull that moves no bytes is cancelled, not waited on for the whole of its deadline: the
// runtime may sit idle on a pull (a connection it never reads from again, a fetch it lost
// track of) while its call stays open, and a load then hangs at "34 of 41 images" with
// nothing said. Bytes moving is what the caller observes (the load's registry counts what it
// sends for each image), not the runtime's own word.
import type { ImagePuller, PullImageOptions } from './cri-client.js';
import { RuntimeError } from './errors.js';

/** When bytes of `ref`'s image last moved (a performance.now() time), or undefined when none yet. */
export type PullActivity = (ref: string) => Promise<number | undefined> | number | undefined;

export interface StallWatchOptions {
  /** How long a pull may move no bytes before it is cancelled. */
  stallMs: number;
  lastMoved: PullActivity;
  /** How often to look: by default a tenth of stallMs, from 100 ms to 5 s. */
  checkMs?: number;
  /** The clock lastMoved speaks in (tests). */
  now?: () => number;
}

/**
 * `inner`, whose pulls are cancelled with a STALLED error (a transient one: pullAll retries it)
 * once neither the call's start nor the last byte of its image is within `stallMs`.
 */
export function watchStalls(inner: ImagePuller, opts: StallWatchOptions): ImagePuller {
  const now = opts.now ?? (() => performance.now());
  const checkMs = opts.checkMs ?? Math.min(5_000, Math.max(100, opts.stallMs / 10));
  const seconds = Math.round(opts.stallMs / 1000);
  return {
    async pullImage(ref: string, pullOpts: PullImageOptions = {}): Promise<string> {
      const outer = pullOpts.signal;
      const attempt = new AbortController();
      const onOuter = () => attempt.abort(outer!.reason);
      if (outer?.aborted) attempt.abort(outer.reason);
      else outer?.addEventListener('abort', onOuter, { once: true });
      const started = now();
      let stalled: RuntimeError | undefined;
      let looking = false;
      const look = async () => {
        if (looking || attempt.signal.aborted) return;
        looking = true;
        try {
          const since = Math.max(started, (await opts.lastMoved(ref)) ?? started);
          if (now() - since < opts.stallMs || attempt.signal.aborted) return;
          stalled = new RuntimeError(
            'STALLED',
            `pull ${ref}: no bytes moved for ${seconds} s (preload.stallSeconds), so the pull was cancelled`,
          );
          attempt.abort(stalled);
        } finally {
          looking = false;
        }
      };
      const timer = setInterval(() => void look().catch(() => undefined), checkMs);
      try {
        return await inner.pullImage(ref, { ...pullOpts, signal: attempt.signal });
      } catch (err) {
        throw stalled ?? err;
      } finally {
        clearInterval(timer);
        outer?.removeEventListener('abort', onOuter);
      }
    },
  };
}

// A load that failed in the runtime after the stick's copy was whole (pipeline.ts keepForRetry)
// is loaded again from that copy, with no stick: once the copy is whole the technician is told
// the stick may go, and this keeps that promise. Each copy is hashed again before its load.
import { rm } from 'node:fs/promises';
import { timeLeft, type StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { AgentError, failureOf, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { runLayoutLoad } from '../load/pipeline.js';
import { forgetFetched, readFetched, type FetchedLayoutRecord } from '../releases/fetched-layouts.js';
import { runtimeTarget } from '../runtime/runtime-target.js';

/** Tries of one kept copy before it is dropped and the stick is asked for again. */
export const RETRY_LIMIT = 10;
/** The longest wait between two tries. */
export const MAX_RETRY_DELAY_S = 3600;

export interface RetryDeps {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  signal: AbortSignal;
  agentVersion: string;
  serves: boolean;
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
}

export class RetryKept {
  private timer: NodeJS.Timeout | undefined;
  private readonly tries = new Map<string, number>();

  /** `after`: what the daemon does after any load (kept serving, peers). */
  constructor(private readonly d: RetryDeps, private readonly after: () => Promise<void>) {}

  /** Plans the next try of the copies kept (after a failed load, and at start); said in the status. */
  async schedule(): Promise<void> {
    if (this.timer || this.d.signal.aborted) return;
    const kept = await readFetched(this.d.config.paths.stateDir, 'retry');
    if (kept.length === 0) return;
    const n = Math.min(...kept.map((r) => this.tries.get(r.layout) ?? 0));
    const seconds = Math.min(this.d.config.staging.retrySeconds * 2 ** n, MAX_RETRY_DELAY_S);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.tryAll().catch((err) => this.d.log.warn('retry', `cannot try the kept copies again: ${oneLine(err)}`));
    }, seconds * 1000);
    this.timer.unref();
    this.d.tracker.condition('Staged', 'True', 'KeptForRetry', `the verified copy in ${kept.map((r) => r.layout).join(', ')} is kept: the load is tried again from it in ${timeLeft(seconds).replace(/ left$/, '')} (try ${n + 1} of ${RETRY_LIMIT}), no USB stick needed`);
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
  }

  private async tryAll(): Promise<void> {
    for (const rec of await readFetched(this.d.config.paths.stateDir, 'retry')) {
      if (this.d.signal.aborted) return;
      await this.tryOne(rec);
    }
    await this.after();
    await this.schedule();
  }

  private async tryOne(rec: FetchedLayoutRecord): Promise<void> {
    const { config, log, tracker, signal, agentVersion, serves } = this.d;
    const tries = (this.tries.get(rec.layout) ?? 0) + 1;
    log.info('retry', `loading ${rec.layout} again (try ${tries} of ${RETRY_LIMIT}): its copy was kept after the load failed`, { layout: rec.layout });
    const runtime = runtimeTarget(config, log);
    try {
      await this.d.exclusive(() => runLayoutLoad(rec.layout, { config, log, tracker, runtime, media: config.paths.upgradeDir, signal, agentVersion, servesAfter: serves }, { manifestDigest: rec.manifestDigest, foundStaged: true }));
      this.tries.delete(rec.layout);
    } catch (err) {
      // another load holds the lock, or the agent stops: not a try
      const { reason } = failureOf(err, config.paths.upgradeDir);
      if (reason === 'Busy' || signal.aborted) return;
      this.tries.set(rec.layout, tries);
      const still = (await readFetched(config.paths.stateDir, 'retry')).some((r) => r.layout === rec.layout);
      if (still && tries < RETRY_LIMIT) return;
      // not kept by this failure (the copy itself is bad), or out of tries: the stick is needed again
      await rm(rec.layout, { recursive: true, force: true });
      await forgetFetched(config.paths.stateDir, rec.layout, 'retry');
      this.tries.delete(rec.layout);
      const why = still ? `it failed ${tries} times` : `the copy cannot be used (${reason})`;
      tracker.condition('Staged', 'False', 'RetriesExhausted', `the copy in ${rec.layout} was removed: ${why}; plug the USB stick in again`);
      log.error('retry', `${rec.layout} removed: ${why}: ${err instanceof AgentError ? err.message : oneLine(err)}`, { layout: rec.layout });
    } finally {
      await runtime.close();
    }
  }
}

// A load that failed in the runtime after the stick's copy was whole (keep-for-retry.ts)
// is loaded again from that copy, with no stick: once the copy is whole the technician is told
// the stick may go, and this keeps that promise. Each copy is hashed again before its load.
import { rm } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { KEPT_COPY_MEDIA, type StatusTracker } from '@offline-bundle/status';
import { timeLeft } from '@offline-bundle/cli';
import type { AgentConfig } from '../config.js';
import { AgentError, failureOf, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { withLoadLock } from '../state/lock.js';
import { RETRYABLE, runLoad } from '../load/pipeline.js';
import {
  forgetKeptCopy,
  readKeptCopies,
  recordKeptCopy,
  type KeptCopyRecord,
} from '../state/kept-copies.js';
import { readServing } from '../state/serving-state.js';
import { readReleases } from '../state/release-records.js';
import { runtimeTarget } from '../runtime/runtime-target.js';

/** Tries of one kept copy before it is dropped and the stick is asked for again. */
const RETRY_LIMIT = 10;
/** The longest wait between two tries. */
const MAX_RETRY_DELAY_S = 3600;

/** Staged layouts are UPGRADE/<version>-<arch>: a record naming anything else is not ours to load or remove. */
const LAYOUT_NAME = /^[0-9A-Za-z][0-9A-Za-z.+_-]{0,127}-[0-9a-z]{1,32}$/;

interface RetryDeps {
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

  /** `after`: what the daemon does after any load (kept serving, peers). */
  constructor(
    private readonly d: RetryDeps,
    private readonly after: () => Promise<void>,
  ) {}

  /** Plans the next try of the copies kept (after a failed load, and at start); said in the status. */
  async schedule(): Promise<void> {
    if (this.timer || this.d.signal.aborted) return;
    const kept = await this.kept();
    if (kept.length === 0) return;
    const n = Math.min(...kept.map((r) => r.tries ?? 0));
    const seconds = Math.min(this.d.config.staging.retrySeconds * 2 ** n, MAX_RETRY_DELAY_S);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.tryAll().catch((err) =>
        this.d.log.warn('retry', `cannot try the kept copies again: ${oneLine(err)}`),
      );
    }, seconds * 1000);
    this.timer.unref();
    // said only beside the failure it follows, not over a later load's state
    if (this.d.tracker.current.phase === 'Failed') {
      this.d.tracker.condition(
        'Staged',
        'True',
        'KeptForRetry',
        `the verified copy in ${kept.map((r) => r.layout).join(', ')} is kept: the load is tried again from it in ${timeLeft(seconds).replace(/ left$/, '')} (try ${n + 1} of ${RETRY_LIMIT}), no USB stick needed`,
      );
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
  }

  /** The retry records that name a staged layout of this agent's upgrade directory; others are dropped, their directories left alone. */
  private async kept(): Promise<KeptCopyRecord[]> {
    const { config, log } = this.d;
    const out: KeptCopyRecord[] = [];
    for (const r of await readKeptCopies(config.paths.stateDir)) {
      if (
        resolve(dirname(r.layout)) === resolve(config.paths.upgradeDir) &&
        LAYOUT_NAME.test(basename(r.layout))
      )
        out.push(r);
      else {
        log.warn(
          'retry',
          `a retry record names ${r.layout}, which is not a staged layout of ${config.paths.upgradeDir}: the record is dropped, the directory left alone`,
        );
        await forgetKeptCopy(config.paths.stateDir, r.layout);
      }
    }
    return out;
  }

  private async tryAll(): Promise<void> {
    for (const rec of await this.kept()) {
      if (this.d.signal.aborted) return;
      await this.tryOne(rec);
    }
    if (this.d.signal.aborted) return;
    await this.after();
    await this.schedule();
  }

  private async tryOne(rec: KeptCopyRecord): Promise<void> {
    const { config, log, tracker, signal, agentVersion, serves } = this.d;
    const tries = (rec.tries ?? 0) + 1;
    log.info(
      'retry',
      `loading ${rec.layout} again (try ${tries} of ${RETRY_LIMIT}): its copy was kept after the load failed`,
      { layout: rec.layout },
    );
    const runtime = runtimeTarget(config, log);
    try {
      await this.d.exclusive(() =>
        runLoad(
          { target: rec.layout, manifestDigest: rec.manifestDigest },
          {
            config,
            log,
            tracker,
            runtime,
            media: KEPT_COPY_MEDIA,
            signal,
            agentVersion,
            servesAfter: serves,
          },
        ),
      );
    } catch (err) {
      // another load holds the lock, or the agent stops: not a try
      const { reason } = failureOf(err, config.paths.upgradeDir);
      if (reason === 'Busy' || signal.aborted) return;
      const still = (await readKeptCopies(config.paths.stateDir)).some(
        (r) => r.layout === rec.layout,
      );
      if (still && RETRYABLE.has(reason) && tries < RETRY_LIMIT)
        return void (await recordKeptCopy(config.paths.stateDir, { ...rec, tries }));
      // the copy itself cannot be used, or out of tries: the stick is needed again
      const why = RETRYABLE.has(reason)
        ? `it failed ${tries} times`
        : `the copy cannot be used (${reason})`;
      await this.d
        .exclusive(() => withLoadLock(config.paths.stateDir, () => this.drop(rec.layout)))
        .catch((e) => log.warn('retry', `cannot remove ${rec.layout}: ${oneLine(e)}`));
      tracker.condition(
        'Staged',
        'False',
        'RetriesExhausted',
        `the copy in ${rec.layout} was given up: ${why}; plug the USB stick in again`,
      );
      log.error(
        'retry',
        `${rec.layout} given up: ${why}: ${err instanceof AgentError ? err.message : oneLine(err)}`,
        { layout: rec.layout },
      );
    } finally {
      await runtime.close();
    }
  }

  /** The record goes; the directory too unless a release or the serving keeps it (it is theirs then). */
  private async drop(layout: string): Promise<void> {
    const { config } = this.d;
    await forgetKeptCopy(config.paths.stateDir, layout);
    const named =
      (await readReleases(config.paths.stateDir)).some((r) => r.layout === layout) ||
      (await readServing(config.paths.stateDir))?.layout === layout;
    if (!named) await rm(layout, { recursive: true, force: true });
  }
}

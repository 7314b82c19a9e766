// A load from its origin to Ready, in one turn of the load lock: admit, stage, load the images,
// record; and an attempt's outcome, for the file and for the status.
import { rm } from 'node:fs/promises';
import { openBundle, type BundleSource } from '@offline-bundle/format';
import { loadImages } from './load-images.js';
import type { PipelineContext } from './pipeline-context.js';
import type { EntrySource } from './entry-staging.js';
import { missingImages } from '../runtime/runtime-checks.js';
import type { AgentConfig } from '../config.js';
import { failureOf, oneLine } from '../errors.js';
import type { RuntimeTarget } from '../runtime/runtime-target.js';
import { neededOfBundle, readReleases } from '../state/release-records.js';
import { withLoadLock } from '../state/lock.js';
import { contentOf, keyOf, recordBundle } from '../state/bundle-records.js';
import { switchAgentIfNewer } from '../self-upgrade/self-upgrade.js';
import { TOOL_VERSION } from '../version.js';
import { pathReleases, type PathRelease } from './path-releases.js';
import {
  type LoadResult,
  type Admitted,
  type HeadOrigin,
  type EntryAttempt,
  step,
  stoppedBy,
  type StagedLayout,
  type Staged,
} from './load-attempt.js';
import { layoutKeptHere, backToPartial, removeLeftovers } from './leftovers.js';
import { fromFile, fromStaged, fromEntries, admit } from './admit.js';
import { stageFromEntries, openStaged } from './stage-layout.js';
import { stageFile } from './stage-file.js';
import { keepForRetry } from './keep-for-retry.js';
import { dropWithdrawn, failAttempt } from './attempt-status.js';
import { recordLoad } from './record-load.js';

export type { LoadStep, PipelineContext } from './pipeline-context.js';
export { removeStalePartials } from './resume.js';
export type { LoadResult, StagedLayout } from './load-attempt.js';
export { runningVersion } from './running-version.js';
export { removeLeftovers } from './leftovers.js';
export { RETRYABLE } from './keep-for-retry.js';
export { showLoadedBefore } from './attempt-status.js';

/** Whether every image the agent recorded for a release (that bundle's, by digest) is still in the runtime (true where it cannot ask). */
export async function releaseImagesPresent(
  config: AgentConfig,
  runtime: RuntimeTarget,
  version: string,
  arch: string,
  digest?: string,
  running: readonly string[] = [],
): Promise<boolean> {
  // the record of that very bundle when there are several of one release (else any of them)
  const all = await readReleases(config.paths.stateDir);
  const recs = all.filter((r) => r.version === version && r.arch === arch);
  const rec = recs.find((r) => digest !== undefined && r.digest === digest) ?? recs[0];
  if (!rec) return false;
  const inspector = await runtime.inspector().catch(() => undefined);
  if (!inspector) return true;
  // an update path's releases the node has not gone past (#43) too: a stick brings back theirs as well
  return (
    (
      await missingImages(inspector, [
        ...new Set(neededOfBundle(rec, all, running).flatMap((r) => r.refs)),
      ])
    ).length === 0
  );
}

/** Steps 4 and 5: a bundle file staged (or served from the media); a layout staged before the load, opened. */
function stage(ctx: PipelineContext, a: Admitted): Promise<Staged> {
  if (a.source) return stageFile(ctx, { ...a, source: a.source });
  return a.entries ? stageFromEntries(ctx, a, a.entries) : openStaged(ctx, a, a.layout!);
}

/**
 * Steps 3 to 10 of the data flow for one bundle file. Throws AgentError (or a library error)
 * on refusal; the caller records the failure. Whatever fails, the registry is stopped, the
 * mirror drop-ins are removed and no partial layout stays behind.
 */
export async function loadBundle(file: string, ctx: PipelineContext): Promise<LoadResult> {
  let source: BundleSource | undefined;
  const open = async () => (source = await (ctx.openBundle ?? openBundle)(file));
  try {
    return await loadFrom(file, ctx, fromFile(file, open));
  } finally {
    await source?.close();
  }
}

/** Admit, stage, load the images, record: one load from its origin; the layout dropped unless kept. */
async function loadFrom(
  file: string,
  ctx: PipelineContext,
  origin: HeadOrigin,
): Promise<LoadResult> {
  const { config, log } = ctx;
  const a = await admit(file, ctx, origin);
  const m = a.head.manifest;
  let keepLayout = false;
  let staged: Staged | undefined;
  let ok = false;
  let retry = false;
  let stopped = false;
  let hops: PathRelease[] | undefined;
  try {
    staged = await stage(ctx, a);
    // after admitRelease (an origin's comes with its staging), which remembered the ClusterVersion it read: whether this load's layout outlives it
    keepLayout = (await layoutKeptHere(config, ctx.servesAfter === true)) !== false;
    const staging = staged.staging;
    try {
      step(ctx, 'load-images');
      await loadImages(staging ? { ...ctx, signal: staging.signal } : ctx, {
        manifest: m,
        store: staged.store,
        releases: a.releases,
        ...(a.running ? { running: a.running } : {}),
        ...(staging ? { staging: { gate: staging.gate, done: staging.done } } : {}),
        ...(a.entries
          ? {
              onPinning: () => {
                a.entries!.committed = true;
              },
            }
          : {}),
      });
    } catch (caught) {
      const err = stoppedBy(origin.attempt, caught);
      // the pulls failed: stop the staging too, and let it remove its partial layout
      staging?.stop(err);
      await staging?.done.catch(() => undefined);
      retry = await keepForRetry(ctx, a, staged, err);
      stopped = failureOf(err, config.paths.upgradeDir).reason === 'Interrupted';
      throw err;
    }
    // read from the store while it is open: which images are each release's of the path
    hops = await pathReleases(m, staged.store, log);
    ok = true;
  } finally {
    staged?.staging?.release();
    await staged?.store.close().catch(() => undefined);
    // A layout the config does not keep goes, Ready or not; a failed one is never trusted later (unless kept to be tried again, hashed anew).
    // A stop (SIGTERM) says nothing against a whole signed layout: the next staging of its bundle re-hashes it instead of reading it again.
    const drop =
      staged?.target !== undefined && ((!ok && !staged.reused && !retry) || (ok && !keepLayout));
    if (
      drop &&
      !(stopped && staged!.whole && a.signer && (await backToPartial(staged!.target!, log)))
    )
      await rm(staged!.target!, { recursive: true, force: true });
  }
  return recordLoad(ctx, a, staged, { keepLayout, ...(hops ? { hops } : {}) });
}

/**
 * Loads a bundle file (loadBundle), a layout staged before the load (checked against the
 * trusted keys and the policy again, then served, pulled and pinned as from a stick; no
 * bundle-file record is kept for it), or a bundle from an origin with no file (an EntrySource:
 * peers), staged by this load as a stick's is, in one turn of the load lock; and turns any failure
 * into the Failed condition, leaving nothing half-done (an origin's withdrawals leave the status
 * as it was before the attempt).
 */
export async function runLoad(
  origin: string | StagedLayout | EntrySource,
  ctx: PipelineContext,
): Promise<LoadResult> {
  if (typeof origin === 'string')
    return runAttempt(origin, ctx, (c) => loadBundle(origin, c), 'file');
  if ('target' in origin)
    return runAttempt(
      origin.target,
      ctx,
      (c) => loadFrom(origin.target, c, fromStaged(origin)),
      'layout',
    );
  const stop = new AbortController();
  const attempt: EntryAttempt = {
    source: origin,
    stop: stop.signal,
    shown: false,
    filled: false,
    committed: false,
  };
  // the origin's watch (a withdrawn approval) stops the whole attempt, its load too, until the pins
  // begin: a stop there would leave pins no release record names, so the load completes
  const unwatch = origin.watch?.((reason) => {
    if (!attempt.committed) stop.abort(reason);
    else
      ctx.log.warn(
        'peers',
        `approval withdrawn after pinning began: the load completes; revoke takes effect for the next bundle (${reason.message})`,
        { reason: reason.reason },
      );
  });
  const signal = ctx.signal ? AbortSignal.any([ctx.signal, stop.signal]) : stop.signal;
  try {
    return await runAttempt(
      origin.media,
      { ...ctx, media: origin.media, signal },
      (c) => loadFrom(origin.media, c, fromEntries(attempt)),
      'entries',
      attempt,
    );
  } finally {
    unwatch?.();
    origin.close?.();
  }
}

/** One turn of the load lock around `load`, the file's outcome recorded either way (a failure by failAttempt). */
async function runAttempt(
  file: string,
  ctx: PipelineContext,
  load: (ctx: PipelineContext) => Promise<LoadResult>,
  from: 'file' | 'layout' | 'entries',
  attempt?: EntryAttempt,
): Promise<LoadResult> {
  // taken before the load: the outcome belongs to the copy that was read
  const key = from === 'file' ? await keyOf(file) : undefined;
  const content = from === 'file' ? await contentOf(file) : undefined;
  const stateDir = ctx.config.paths.stateDir;
  // what the history said before this attempt: a release loaded before stays so when a repeat load fails
  const before = ctx.tracker.current.history;
  try {
    const r = await withLoadLock(stateDir, async () => {
      // an origin's after its head (admit)
      if (!attempt)
        await removeLeftovers(
          ctx.config,
          ctx.runtime,
          ctx.log,
          ctx.tracker.current.history,
          from === 'layout' ? file : undefined,
        );
      // a load killed mid-way leaves this, so the next daemon start tries the file again
      if (key)
        await recordBundle(stateDir, {
          key,
          file,
          outcome: 'loading',
          at: new Date().toISOString(),
        });
      return attempt
        ? load(ctx).catch(async (err: unknown) => {
            await dropWithdrawn(ctx, attempt, err);
            throw err;
          })
        : load(ctx);
    });
    if (key)
      await recordBundle(stateDir, {
        key,
        ...(content ? { content } : {}),
        file,
        outcome: 'ready',
        version: r.version,
        arch: r.arch,
        ...(r.fileDigest ? { digest: r.fileDigest } : {}),
        at: new Date().toISOString(),
      });
    // only once Ready and recorded: the restart it may ask for stops this process
    // never throws (it reports in AgentUpgraded); the catch only guards the bundle's Ready
    await switchAgentIfNewer(
      { ...ctx, agentVersion: ctx.agentVersion ?? TOOL_VERSION },
      r.agent,
    ).catch((e) => ctx.log.error('agent', oneLine(e)));
    return r;
  } catch (caught) {
    throw await failAttempt(ctx, caught, {
      file,
      from,
      before,
      ...(key ? { key } : {}),
      ...(attempt ? { attempt } : {}),
    });
  }
}

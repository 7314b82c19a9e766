// How a staging shows itself: its progress, its space plan, its layout verified and staged.
import { rm } from 'node:fs/promises';
import type { BundleManifest } from '@offline-bundle/format';
import { LayoutStore, catalogOf } from '@offline-bundle/registry';
import type { StatusTracker } from '@offline-bundle/status';
import type { PipelineContext } from './pipeline-context.js';
import { AgentError, oneLine } from '../errors.js';
import type { SpacePlan } from './space.js';
import { step } from './load-attempt.js';

/** Progress with its rate and time left, at most once a second (what a stick's staging and a fetch from peers show). */
export function rateTracker(tracker: StatusTracker) {
  const started = Date.now();
  let last = 0;
  // what a resume kept counts as done, not as read at this load's rate
  let base: number | undefined;
  return (done: number, total: number) => {
    base ??= done;
    const now = Date.now();
    if (now - last < 1000 && done < total) return;
    last = now;
    const secs = (now - started) / 1000;
    const rate = secs > 0 ? (done - base) / secs : 0;
    tracker.progress({
      bytesDone: done,
      bytesTotal: total,
      rate: Math.round(rate),
      ...(rate > 0 ? { etaSeconds: Math.round((total - done) / rate) } : {}),
    });
  };
}

/** The plan in the status and the log (SpaceAvailable). */
export function showPlan(ctx: PipelineContext, plan: SpacePlan): void {
  ctx.tracker.condition(
    'SpaceAvailable',
    'True',
    plan.mode === 'staged' ? 'FitsOnDisk' : 'ServeFromMedia',
    plan.message,
  );
  ctx.tracker.update((s) => {
    s.bundle = { ...s.bundle!, mode: plan.mode };
  });
  ctx.log.info('space', plan.message, { mode: plan.mode });
}

/**
 * A staged layout in `target` as the load's store, said in Verified and Staged: the one step
 * after the bytes are staged, whoever staged them. `verified`: this turn of the lock wrote and
 * hashed every blob against the signed bundle.json (a second full read would double the load's
 * IO), and a layout that does not open is removed; else every blob is hashed again here.
 */
export async function openStagedStore(
  ctx: PipelineContext,
  target: string,
  m: BundleManifest,
  verified: boolean,
  verifiedBy: { reason: string; message: string },
): Promise<LayoutStore> {
  step(ctx, 'open-store');
  const store = await LayoutStore.open(target, catalogOf(m), { verified }).catch(
    async (err: unknown) => {
      if (verified) await rm(target, { recursive: true, force: true });
      throw new AgentError('StagingFailed', oneLine(err), { cause: err });
    },
  );
  showStaged(ctx, target, verifiedBy);
  return store;
}

export function showStaged(
  ctx: PipelineContext,
  target: string,
  verifiedBy: { reason: string; message: string },
): void {
  ctx.tracker.condition('Verified', 'True', verifiedBy.reason, verifiedBy.message);
  ctx.tracker.condition('Staged', 'True', 'Staged', `layout in ${target}`);
}

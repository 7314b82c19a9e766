// A copy kept after a failed load, so the daemon loads it again with no stick.
import { bundleIdentity } from '@offline-bundle/format';
import { KEPT_COPY_MEDIA } from '@offline-bundle/status';
import type { PipelineContext } from './pipeline-context.js';
import { failureOf } from '../errors.js';
import { readKeptCopies, recordKeptCopy } from '../state/kept-copies.js';
import type { Admitted, Staged } from './load-attempt.js';

/** Failures after the copy was whole that a later try from the same copy may get past (the runtime's, not the bundle's). */
export const RETRYABLE: ReadonlySet<string> = new Set([
  'PullFailed',
  'PullStalled',
  'PinFailed',
  'ReloadFailed',
  'RuntimeUnavailable',
  'Interrupted',
]);

/**
 * The technician was told the stick may go once the copy was whole: a failure after that keeps
 * the copy and the daemon loads it again from there (daemon/retry-kept.ts), so the promise holds.
 * Only a load of the daemon (it sets `servesAfter`), not from peers; returns whether it was kept.
 */
export async function keepForRetry(
  ctx: PipelineContext,
  a: Pick<Admitted, 'head' | 'source' | 'signer'>,
  staged: Staged,
  err: unknown,
): Promise<boolean> {
  const { config, tracker, log } = ctx;
  // a stick's (or file's) copy, or one kept before and tried again; a fetch from peers is fetched again (its partial resumes).
  // Signed only: a copy is loaded again as a layout, which only a signature can vouch for.
  const stickCopy = a.source !== undefined || ctx.media === KEPT_COPY_MEDIA;
  if (!stickCopy || !a.signer || !staged.target || !staged.whole || ctx.servesAfter === undefined)
    return false;
  const { reason } = failureOf(err, config.paths.upgradeDir);
  if (!RETRYABLE.has(reason)) return false;
  const before = (await readKeptCopies(config.paths.stateDir)).find(
    (r) => r.layout === staged.target,
  );
  await recordKeptCopy(config.paths.stateDir, {
    layout: staged.target,
    manifestDigest: bundleIdentity(a.head.manifestBytes),
    at: new Date().toISOString(),
    ...(before?.tries ? { tries: before.tries } : {}),
  });
  tracker.condition(
    'Staged',
    'True',
    'KeptForRetry',
    `the verified copy in ${staged.target} is kept: the load is tried again from it, no USB stick needed`,
  );
  log.warn(
    'staging',
    `the load of ${a.head.manifest.release.version} failed (${reason}) after its copy was whole: ${staged.target} is kept and loaded again from there`,
    { reason },
  );
  return true;
}

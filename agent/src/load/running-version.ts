// The release the node runs, as the version policy and the pins read it, and the wait for the
// cluster to say it.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  clusterReadFailure,
  forbiddenMessage,
  observeRunning,
  readClusterRelease,
  runningReleases,
  type ClusterReadFailure,
  type ClusterRelease,
  type HistoryEntry,
} from '@offline-bundle/status';
import type { PipelineContext } from './pipeline-context.js';
import { AgentError, oneLine } from '../errors.js';
import { compareVersions } from './policy.js';
import { rememberClusterRelease, rememberedClusterRelease } from './running-release.js';

/** The running release, if known, and why the cluster did not say it when it did not. */
interface Running {
  release?: ClusterRelease;
  failure?: ClusterReadFailure;
}

/**
 * The release the node runs, for the version policy and the pins: from the config, else from
 * OpenShift's ClusterVersion (remembered in the state directory, and recorded in the history
 * so a completed upgrade releases older pins); when the cluster does not answer, the last one
 * seen there (the remembered file, else the status history's running entries: the node's own
 * records of what it ran).
 */
export async function runningVersion(
  ctx: Pick<PipelineContext, 'config' | 'tracker' | 'log'>,
): Promise<string | undefined> {
  return (await runningRelease(ctx)).release?.version;
}

export async function runningRelease(
  ctx: Pick<PipelineContext, 'config' | 'tracker' | 'log'>,
): Promise<Running> {
  const { config, tracker, log } = ctx;
  if (config.version.current) return { release: { version: config.version.current } };
  if (!config.version.fromCluster || !config.status.kubeconfig) return {};
  let failure: ClusterReadFailure | undefined;
  try {
    const r = await readClusterRelease(config.status.kubeconfig, { timeoutMs: 10_000 });
    if (r) {
      tracker.update((s) => {
        s.history = observeRunning(s.history, r.version);
      });
      await rememberClusterRelease(config.paths.stateDir, r).catch((err) =>
        log.warn('version', `cannot remember the running version ${r.version}: ${oneLine(err)}`),
      );
      return { release: r };
    }
  } catch (err) {
    failure = clusterReadFailure(err);
  }
  const remembered = await rememberedClusterRelease(config.paths.stateDir);
  // the newest of the two: either may lag (a file not rewritten, a history pruned), and an older one lets a downgrade through
  const seen = runningReleases(tracker.current.history).reduce<HistoryEntry | undefined>(
    (a, e) => (!a || compareVersions(e.version, a.version) > 0 ? e : a),
    undefined,
  );
  const fromFile =
    remembered !== undefined && (!seen || compareVersions(remembered.version, seen.version) >= 0);
  const last = fromFile ? remembered : seen;
  if (last && failure) {
    const why = failure.kind === 'forbidden' ? forbiddenMessage(failure) : failure.detail;
    log.warn(
      'version',
      `cannot read the running version from the cluster (${why}); using the last one seen there, ${last.version}${fromFile ? ` at ${remembered!.seenAt}` : ''}`,
      { reason: failure.kind === 'forbidden' ? 'ClusterForbidden' : 'WaitingForCluster' },
    );
  }
  if (fromFile)
    return {
      release: {
        version: remembered!.version,
        ...(remembered!.image ? { image: remembered!.image } : {}),
      },
      ...(failure ? { failure } : {}),
    };
  if (last) return { release: { version: last.version }, ...(failure ? { failure } : {}) };
  return failure ? { failure } : {};
}

const CLUSTER_RETRY_FIRST_MS = 1000;
const CLUSTER_RETRY_MAX_MS = 30_000;

/**
 * A node that never saw its running version and cannot read it now waits: the load stays in
 * Verifying with Ready False (WaitingForCluster, or ClusterForbidden naming the missing rule),
 * logged once per cause, and the read is tried again with exponential backoff until it
 * answers or version.clusterWaitMinutes have passed (then a failure with the same cause).
 * SIGTERM (ctx.signal) ends the wait as any step.
 */
export async function waitForCluster(ctx: PipelineContext, first: Running): Promise<Running> {
  const { config, log, tracker, signal } = ctx;
  const limitMs = config.version.clusterWaitMinutes * 60_000;
  const started = Date.now();
  let r = first;
  let delay = CLUSTER_RETRY_FIRST_MS;
  let logged: string | undefined;
  while (!r.release && r.failure) {
    const f = r.failure;
    const forbidden = f.kind === 'forbidden';
    const cause = forbidden
      ? forbiddenMessage(f)
      : `the cluster's API server did not answer (${f.detail})`;
    const fix = forbidden
      ? ''
      : `; or set version.current in the agent's config to load without the cluster`;
    if (Date.now() - started + delay > limitMs) {
      throw new AgentError(
        forbidden ? 'ClusterForbidden' : 'ClusterUnreachable',
        `${cause}; this node never saw its running version, so the update was not loaded (waited ${config.version.clusterWaitMinutes} min)${fix || ': plug the stick in again once it is fixed'}`,
      );
    }
    const reason = forbidden ? 'ClusterForbidden' : 'WaitingForCluster';
    // the same words on every try: the condition (and the cluster object) changes only with the cause
    const message = `${cause}; this node never saw its running version, so the update waits for the cluster (trying again for up to ${config.version.clusterWaitMinutes} min)${fix}`;
    tracker.condition('Ready', 'False', reason, message);
    if (logged !== reason) log.warn('version', message, { reason });
    logged = reason;
    await sleep(delay, undefined, signal ? { signal } : {}).catch((err: unknown) => {
      if (!signal?.aborted) throw err;
      throw new AgentError(
        'Interrupted',
        'stopped while waiting for the cluster to say which version it runs: nothing was loaded; the bundle is tried again at the next start (or run bundle-agent load again)',
      );
    });
    delay = Math.min(delay * 2, CLUSTER_RETRY_MAX_MS);
    r = await runningRelease(ctx);
  }
  if (logged) {
    tracker.update((s) => {
      s.conditions = s.conditions.filter((c) => c.type !== 'Ready');
    });
    log.info(
      'version',
      r.release
        ? `the cluster answered: it runs ${r.release.version}; the load goes on`
        : 'the cluster answered; the load goes on',
    );
  }
  return r;
}

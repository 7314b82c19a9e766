import { compareVersions } from '@offline-bundle/format';
import type { HistoryEntry } from '@offline-bundle/status';

/**
 * The releases loaded on this node that the cluster has not run yet: 'loaded' entries newer
 * than the newest running or complete one. An older 'loaded' entry was passed by (the cluster
 * went past it) and is not waited for: its layout is not kept nor its images restored for it.
 */
export function loadedAhead(history: readonly HistoryEntry[]): string[] {
  const newest = newestRun(history);
  return history
    .filter(
      (e) =>
        e.state === 'loaded' && (newest === undefined || compareVersions(e.version, newest) > 0),
    )
    .map((e) => e.version);
}

/** The newest release the history says the cluster runs or ran to completion. */
export function newestRun(history: readonly HistoryEntry[]): string | undefined {
  return history
    .filter((e) => e.state === 'running' || e.state === 'complete')
    .map((e) => e.version)
    .sort(compareVersions)
    .at(-1);
}

/**
 * The version history a node reports: it appends the incoming release and keeps the outgoing
 * one (the release the cluster still runs) until the incoming one is complete, so the status
 * never loses the version that is still running.
 *
 * Every function is pure: it returns a new list and leaves its argument alone, so it fits in
 * `tracker.update((s) => { s.history = recordIncoming(s.history, ...); })`.
 *
 * Lifecycle of two successive bundles, with 4.14.38 running:
 *   recordIncoming(h, {version: '4.15.1'}, {running: '4.14.38'})  4.14.38 running, 4.15.1 installing
 *   markLoaded(h, '4.15.1')                                        4.14.38 running, 4.15.1 loaded
 *   markComplete(h, '4.15.1')  (the cluster now runs 4.15.1)       4.15.1 complete
 *   recordIncoming(h, {version: '4.15.2'}, {running: '4.15.1'})   4.15.1 complete, 4.15.2 installing
 *   ...
 */
import type { HistoryEntry, HistoryState } from './model.js';

/** Entries kept at most; in-use entries (running, complete, installing) are never pruned. */
export const HISTORY_LIMIT = 10;

/** States of a release the node still needs: its images must stay pinned. */
const IN_USE: ReadonlySet<HistoryState> = new Set(['running', 'complete']);

export interface ReleaseRef {
  version: string;
  digest?: string;
}

function iso(now: Date | undefined): string {
  return (now ?? new Date()).toISOString();
}

function copy(history: readonly HistoryEntry[]): HistoryEntry[] {
  return history.map((e) => ({ ...e }));
}

/** Sets `version`'s entry to `state` (appending it if missing) and moves it to the end. */
function put(
  h: HistoryEntry[],
  version: string,
  state: HistoryState,
  at: string,
  digest?: string,
): HistoryEntry[] {
  const i = h.findIndex((e) => e.version === version);
  const prev = i >= 0 ? h.splice(i, 1)[0] : undefined;
  const d = digest ?? prev?.digest;
  h.push({ version, state, ...(d ? { digest: d } : {}), at });
  return h;
}

/** Drops the oldest failed, then the oldest superseded loaded entries beyond HISTORY_LIMIT. */
function prune(h: HistoryEntry[]): HistoryEntry[] {
  for (const state of ['failed', 'loaded'] as const) {
    while (h.length > HISTORY_LIMIT) {
      // never the newest entry: it is the one just recorded
      const i = h.findIndex((e, j) => e.state === state && j < h.length - 1);
      if (i < 0) break;
      h.splice(i, 1);
    }
  }
  return h;
}

/**
 * The cluster runs `running`: makes sure the history says so. Without an entry for it, it is
 * added as `running` (the baseline the node started from); an entry the agent loaded earlier
 * becomes `complete` (see markComplete). Already running or complete: unchanged. Safe to call
 * at every start with the configured current version.
 */
export function observeRunning(
  history: readonly HistoryEntry[],
  running: string,
  now?: Date,
): HistoryEntry[] {
  const h = copy(history);
  const e = h.find((x) => x.version === running);
  if (e && IN_USE.has(e.state)) return h;
  if (e) return markComplete(h, running, now);
  const others = h.filter((x) => !IN_USE.has(x.state));
  return prune([...others, { version: running, state: 'running', at: iso(now) }]);
}

/**
 * A bundle starts loading: appends the incoming release as `installing` and keeps every
 * release still in use (the outgoing `running`/`complete` one). With `opts.running`, the
 * running release is recorded first when the history does not know it yet. An `installing`
 * entry of another version (a load that never finished, e.g. a crash) becomes `failed`.
 * Re-inserting the release that already runs leaves its state alone.
 */
export function recordIncoming(
  history: readonly HistoryEntry[],
  incoming: ReleaseRef,
  opts: { running?: string; now?: Date } = {},
): HistoryEntry[] {
  let h = copy(history);
  if (opts.running && opts.running !== incoming.version)
    h = observeRunning(h, opts.running, opts.now);
  const at = iso(opts.now);
  for (const e of h) {
    if (e.state === 'installing' && e.version !== incoming.version)
      Object.assign(e, { state: 'failed', at });
  }
  const e = h.find((x) => x.version === incoming.version);
  if (e && IN_USE.has(e.state)) {
    if (incoming.digest) e.digest = incoming.digest;
    return h;
  }
  return prune(put(h, incoming.version, 'installing', at, incoming.digest));
}

/** Every image of `version` is pulled and pinned; the outgoing release stays (it still runs). */
export function markLoaded(
  history: readonly HistoryEntry[],
  version: string,
  opts: { digest?: string; now?: Date } = {},
): HistoryEntry[] {
  const h = copy(history);
  const e = h.find((x) => x.version === version);
  if (e && IN_USE.has(e.state)) return h;
  return prune(put(h, version, 'loaded', iso(opts.now), opts.digest));
}

/** Loading `version` failed. An entry that runs (running/complete) is left as it is. */
export function markFailed(
  history: readonly HistoryEntry[],
  version: string,
  now?: Date,
): HistoryEntry[] {
  const h = copy(history);
  const e = h.find((x) => x.version === version);
  if (e && IN_USE.has(e.state)) return h;
  return prune(put(h, version, 'failed', iso(now)));
}

/**
 * The cluster's upgrade to `version` is complete: it becomes `complete`, and only now are the
 * releases it replaces (running or complete entries of other versions) and failed attempts
 * dropped. Installing and loaded entries of other versions stay.
 */
export function markComplete(
  history: readonly HistoryEntry[],
  version: string,
  now?: Date,
): HistoryEntry[] {
  const h = copy(history).filter(
    (e) => e.version === version || !(IN_USE.has(e.state) || e.state === 'failed'),
  );
  return prune(put(h, version, 'complete', iso(now)));
}

/**
 * The release the cluster already runs was loaded onto this node (a node that joined after the
 * upgrade, or a replaced one): complete, with the bundle's digest, as after an upgrade.
 */
export function markRunningLoaded(
  history: readonly HistoryEntry[],
  version: string,
  opts: { digest?: string; now?: Date } = {},
): HistoryEntry[] {
  const h = markComplete(history, version, opts.now);
  const e = h.find((x) => x.version === version)!;
  if (opts.digest) e.digest = opts.digest;
  return h;
}

/** Whether this node holds `version`'s images: loaded by a bundle (and possibly complete), not only seen running. */
export function holdsRelease(
  history: readonly { version?: string; state?: string }[] | undefined,
  version: string,
): boolean {
  return (history ?? []).some(
    (e) => e.version === version && (e.state === 'loaded' || e.state === 'complete'),
  );
}

/** The release(s) the cluster runs now: the outgoing ones while another is installing or loaded. */
export function runningReleases(history: readonly HistoryEntry[]): HistoryEntry[] {
  return history.filter((e) => IN_USE.has(e.state)).map((e) => ({ ...e }));
}

/** Versions whose images must stay pinned: what runs, and what is loaded or loading. */
export function versionsInUse(history: readonly HistoryEntry[]): string[] {
  return [...new Set(history.filter((e) => e.state !== 'failed').map((e) => e.version))];
}

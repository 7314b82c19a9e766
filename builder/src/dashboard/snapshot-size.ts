/**
 * The snapshot's size in bytes, bounded: rows are cut by count (MAX_DASHBOARD_ROWS), but 5,000
 * rows of the longest strings the CRD lets through, escaped as JSON, made a snapshot of about
 * 200 MB. Over MAX_SNAPSHOT_BYTES the rows (and warnings) that fit are kept and the rest are
 * counted, with a warning the page shows, instead of the process growing with them.
 */
import type { DashboardWarning, Snapshot } from './snapshot.js';

/** A snapshot's JSON at most: 5,000 rows of ordinary length (about 1.5 KB each) fit well within. */
export const MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024;

/** The share of the bound warnings may take: one per not-Ready node, so they grow with the rows. */
const WARNINGS_SHARE = 1 / 4;
/** Room kept for the counts and the note the cut adds. */
const NOTE_ROOM = 1024;

const jsonBytes = (v: unknown): number => Buffer.byteLength(JSON.stringify(v));

/** Snapshots already held to the bound: the feed cuts, the server serializes, each measures once. */
const within = new WeakSet<Snapshot>();

/** How many of `items`, from the first, fit in `budget` bytes as JSON array members. */
function fitting(items: readonly unknown[], budget: number): number {
  let used = 0;
  for (let i = 0; i < items.length; i++) {
    used += jsonBytes(items[i]) + 1;
    if (used > budget) return i;
  }
  return items.length;
}

/** `s` itself when its JSON fits `maxBytes`; else the rows and warnings that fit, the rest counted in `omitted` and named in a warning. */
export function cutSnapshot(s: Snapshot, maxBytes = MAX_SNAPSHOT_BYTES): Snapshot {
  if (maxBytes === MAX_SNAPSHOT_BYTES && within.has(s)) return s;
  const frame = jsonBytes({ ...s, rows: [], warnings: [] }) + NOTE_ROOM;
  const warnings = fitting(s.warnings, maxBytes * WARNINGS_SHARE);
  // what is cut must not be the nodes that need the admin: those not ready are kept first
  const byNeed = [...s.rows.filter((r) => !r.ready), ...s.rows.filter((r) => r.ready)];
  const rows = fitting(byNeed, maxBytes - frame - jsonBytes(s.warnings.slice(0, warnings)));
  if (rows === s.rows.length && warnings === s.warnings.length) {
    if (maxBytes === MAX_SNAPSHOT_BYTES) within.add(s);
    return s;
  }
  const note: DashboardWarning = {
    kind: 'SnapshotCut',
    object: 'dashboard',
    message: `the cluster's state is over ${maxBytes / 1024 / 1024} MiB as the page gets it: ${s.rows.length - rows} nodes and ${s.warnings.length - warnings} warnings are not shown; narrow with --selector`,
  };
  const kept = byNeed
    .slice(0, rows)
    .sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  const hiddenNotReady =
    s.rows.filter((r) => !r.ready).length - kept.filter((r) => !r.ready).length;
  if (hiddenNotReady > 0) note.message += ` (${hiddenNotReady} of them not ready)`;
  const cut = {
    ...s,
    rows: kept,
    omitted: s.omitted + s.rows.length - rows,
    warnings: [note, ...s.warnings.slice(0, warnings)],
  };
  if (maxBytes === MAX_SNAPSHOT_BYTES) within.add(cut);
  return cut;
}

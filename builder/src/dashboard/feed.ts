/**
 * Keeps the dashboard's snapshot current by polling the API: the shared client
 * (packages/status cluster-http.ts) reads each answer whole within a deadline, so it has no
 * watch; a list of Nodes and NodeBundleStatuses every `intervalMs` is what `oc get -w` would
 * cost on a 50-node cluster anyway. A failed read keeps the last rows and marks the contact
 * lost (since when, why): the page never shows them as live.
 */
import { EventEmitter } from 'node:events';
import { firstLine } from '@offline-bundle/host';
import { bundleImageNames, type AdminBundle } from '@offline-bundle/cluster';
import type { AdminApis } from '@offline-bundle/kube';
import { readDashboard, type DashboardWarning, type Snapshot } from './snapshot.js';
import { cutSnapshot } from './snapshot-size.js';
import { prepareWarnings, statusWarnings } from './warnings.js';

/** Poll interval bounds: often enough to see a copy move, never a busy loop on the API server. */
export const MIN_INTERVAL_MS = 1000;
export const MAX_INTERVAL_MS = 60_000;
/** prepare's checks list every Pod: at most this often. */
const PREPARE_INTERVAL_MS = 30_000;

interface FeedOptions {
  apis: AdminApis;
  intervalMs: number;
  selector?: string;
  /** The bundle file named on the command line: prepare's warnings, and the digest nodes must be Ready for. */
  bundle?: { file: string; b: AdminBundle };
  now?: () => Date;
}

/** How often a snapshot whose only news is heartbeats is pushed: the page ages them itself between. */
const HEARTBEAT_PUSH_MS = 30_000;

/** What the page shows, for telling a change: without the time of the read, and without heartbeats unless `beats`. */
function shown(s: Snapshot, beats: boolean): unknown {
  return {
    ...s,
    api: { ...s.api, lastOk: undefined },
    rows: beats ? s.rows : s.rows.map(({ heartbeat: _beat, ...r }) => r),
  };
}

/** Emits 'change' (snapshot) when what the page shows changed, 'poll' (iso time) after every read. */
export class DashboardFeed extends EventEmitter {
  snapshot: Snapshot;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private prepared: { at: number; warnings: DashboardWarning[] } | undefined;
  private readonly now: () => Date;
  private pushedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly o: FeedOptions) {
    super();
    this.now = o.now ?? (() => new Date());
    this.snapshot = {
      rows: [],
      omitted: 0,
      warnings: [],
      intervalMs: o.intervalMs,
      target: {
        ready: false,
        summary: 'not read yet',
        ...(o.bundle ? { file: o.bundle.file } : {}),
      },
      api: { ok: false },
    };
  }

  /** Reads once now, then every intervalMs until stop(). */
  async start(): Promise<void> {
    await this.poll();
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(
      () => void this.poll().finally(() => this.schedule()),
      this.o.intervalMs,
    );
    this.timer.unref();
  }

  /** One read; never throws (a failure is the snapshot's lost contact). */
  async poll(): Promise<void> {
    const at = this.now().toISOString();
    let next: Snapshot;
    try {
      const r = await readDashboard(this.o.apis, {
        ...(this.o.selector ? { selector: this.o.selector } : {}),
        ...(this.o.bundle
          ? { digest: this.o.bundle.b.fileDigest, names: bundleImageNames(this.o.bundle.b.images) }
          : {}),
      });
      const prepare = await this.prepareWarnings(); // never throws: its failure is a warning
      next = {
        ...r,
        intervalMs: this.o.intervalMs,
        target: {
          ...r.target,
          ...(this.o.bundle ? { file: this.o.bundle.file, version: this.o.bundle.b.version } : {}),
        },
        warnings: [...statusWarnings(r.rows, r.target), ...prepare],
        api: { ok: true, lastOk: at },
      };
    } catch (err) {
      const prev = this.snapshot.api;
      next = {
        ...this.snapshot,
        api: {
          ok: false,
          ...(prev.lastOk ? { lastOk: prev.lastOk } : {}),
          lostSince: prev.ok || !prev.lostSince ? at : prev.lostSince,
          error: firstLine(err),
        },
      };
    }
    if (this.stopped) return;
    // cut here, not only on the wire: what is compared and kept is what the page gets
    next = cutSnapshot(next);
    const same = (beats: boolean) =>
      JSON.stringify(shown(next, beats)) === JSON.stringify(shown(this.snapshot, beats));
    // every agent's heartbeat moves its row each minute: alone, that is pushed at most every HEARTBEAT_PUSH_MS
    // (the whole comparison first: a quiet read, the common one, costs one pair of serializations)
    const now = this.now().getTime();
    const changed = !same(true) && (!same(false) || now - this.pushedAt >= HEARTBEAT_PUSH_MS);
    this.snapshot = next;
    if (changed) {
      this.pushedAt = now;
      this.emit('change', next);
    }
    this.emit('poll', at);
  }

  /**
   * prepare's warnings, at most every PREPARE_INTERVAL_MS whatever the outcome. Its reads are
   * not the rows' (every Pod, ConfigMaps, ClusterVersion): a kubeconfig refused those, or a slow
   * all-Pod list, is one warning beside rows that are still live, not a lost API.
   */
  private async prepareWarnings(): Promise<DashboardWarning[]> {
    if (!this.o.bundle) return [];
    const t = this.now().getTime();
    if (this.prepared && t - this.prepared.at < PREPARE_INTERVAL_MS) return this.prepared.warnings;
    let warnings: DashboardWarning[];
    try {
      warnings = await prepareWarnings(this.o.apis, this.o.bundle.b);
    } catch (err) {
      warnings = [
        {
          kind: 'PrepareFailed',
          object: 'bundle cluster prepare',
          message: `could not run prepare's checks: ${firstLine(err)}`,
        },
      ];
    }
    this.prepared = { at: t, warnings };
    return warnings;
  }
}

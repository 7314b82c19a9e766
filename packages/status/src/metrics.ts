/**
 * Prometheus metrics derived from the status stream: feed every NodeStatus a StatusTracker
 * emits to `observe()` (`tracker.onChange(metrics.sink)`), and serve `render()` (text
 * exposition format 0.0.4). The process's own metrics (CPU, memory, file descriptors, event
 * loop lag, heap: prom-client's standard process_* and nodejs_* set) and a build_info gauge
 * come from prom-client.
 */
import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { PHASES, type NodeStatus, type PeersStatus, type Phase } from './model.js';
import type { ReporterStats } from './reporter.js';

export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** Label values: backslash, double quote and line feed escaped. */
export function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/** HELP text: backslash and line feed escaped. */
function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function num(n: number): string {
  if (Number.isNaN(n)) return 'NaN';
  if (n === Number.POSITIVE_INFINITY) return '+Inf';
  if (n === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(n);
}

type Labels = Record<string, string>;

class Family {
  readonly samples: { labels: Labels; value: number }[] = [];
  constructor(
    readonly name: string,
    readonly type: 'counter' | 'gauge',
    readonly help: string,
  ) {}
  add(value: number, labels: Labels = {}): this {
    this.samples.push({ labels, value });
    return this;
  }
  render(): string {
    const lines = [
      `# HELP ${this.name} ${escapeHelp(this.help)}`,
      `# TYPE ${this.name} ${this.type}`,
    ];
    for (const s of this.samples) {
      const ls = Object.entries(s.labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
      lines.push(`${this.name}${ls.length ? `{${ls.join(',')}}` : ''} ${num(s.value)}`);
    }
    return lines.join('\n') + '\n';
  }
}

function time(iso: string | undefined, fallback: number): number {
  const t = iso ? Date.parse(iso) : Number.NaN;
  return Number.isFinite(t) ? t : fallback;
}

/** What build of the agent runs: the labels of bundle_agent_build_info. */
export interface BuildInfo {
  version: string;
}

// One per process: the process metrics describe the process, however many Metrics exist
// (tests make many), and collectDefaultMetrics starts its own event-loop monitor.
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/**
 * Bundles between nodes (issue #22), from status.peers: the daemon publishes it every few
 * seconds while peers are enabled, so these lag the transfer by that much at most.
 */
function peerFamilies(p: PeersStatus): Family[] {
  const t = p.transfer;
  const fetched = new Family(
    'bundle_agent_peer_bytes_fetched_total',
    'counter',
    'Verified bytes of bundles fetched from other nodes, by the node they came from.',
  );
  for (const f of t.fetchedFrom) fetched.add(f.bytes, { peer: f.node });
  const suspect = new Family(
    'bundle_agent_peer_suspect',
    'gauge',
    'Other nodes caught serving bytes that do not match the signed bundle.json (1 each).',
  );
  for (const n of t.suspect) suspect.add(1, { peer: n });
  const fams = [
    new Family(
      'bundle_agent_peer_up',
      'gauge',
      'Whether the peer server runs (0: it could not start; the agent tries again).',
    ).add(p.up ? 1 : 0),
    new Family(
      'bundle_agent_peer_bytes_served_total',
      'counter',
      'Bytes of bundles this node sent to other nodes.',
    ).add(t.bytesServed),
    fetched,
    suspect,
  ];
  if (p.copies)
    fams.push(
      new Family(
        'bundle_agent_peer_copies',
        'gauge',
        'Other nodes holding a complete copy of the bundle this node loaded.',
      ).add(p.copies.nodes, { version: p.copies.version }),
    );
  return fams;
}

export class Metrics {
  private bytesStaged = 0;
  private bytesVerified = 0;
  private imagesPulled = 0;
  private readonly failures = new Map<string, number>();
  private readonly bundlesReady = { count: 0 };
  /** Seconds spent in each phase the last time the node went through it (current one: so far). */
  private readonly durations = new Map<Phase, number>();
  private current: NodeStatus | undefined;
  private phaseSince = 0;
  private lastBytes = 0;
  private lastImages = 0;
  private reporter: { stats: ReporterStats } | undefined;
  private listener: { stats: { answers: Record<string, number> } } | undefined;

  private readonly build: Registry | undefined;

  /** With `opts.build`: also the process metrics and bundle_agent_build_info. */
  constructor(
    private readonly clock: () => number = Date.now,
    opts: { build?: BuildInfo } = {},
  ) {
    if (opts.build) {
      this.build = new Registry();
      new Gauge({
        name: 'bundle_agent_build_info',
        help: "The agent's build: always 1, its version and runtime as labels.",
        labelNames: ['version', 'nodejs', 'arch'],
        registers: [this.build],
      }).set({ version: opts.build.version, nodejs: process.version, arch: process.arch }, 1);
    }
  }

  /** A StatusTracker sink: `tracker.onChange(metrics.sink)`. */
  readonly sink = (s: NodeStatus): void => this.observe(s);

  /** Also export the cluster reporter's write counters. */
  trackReporter(reporter: { stats: ReporterStats }): void {
    this.reporter = reporter;
  }

  /** Also export the metrics listener's answers by status (its 401s and 403s: who is refused). */
  trackListener(listener: { stats: { answers: Record<string, number> } }): void {
    this.listener = listener;
  }

  observe(s: NodeStatus): void {
    const prev = this.current;
    const at = time(s.updatedAt, this.clock());
    if (!prev || prev.phase !== s.phase) {
      if (prev) this.durations.set(prev.phase, Math.max(0, (at - this.phaseSince) / 1000));
      this.phaseSince = at;
      this.durations.delete(s.phase);
      if (s.phase === 'Failed' && prev) {
        const reason =
          s.conditions.find((c) => c.type === 'Failed' && c.status === 'True')?.reason || 'Unknown';
        this.failures.set(reason, (this.failures.get(reason) ?? 0) + 1);
      }
      if (s.phase === 'Ready' && prev) this.bundlesReady.count++;
    }
    // Counters grow by the progress made; a smaller value means a new step or bundle started.
    const bytes = s.progress.bytesDone;
    const delta = bytes >= this.lastBytes ? bytes - this.lastBytes : bytes;
    if (delta > 0 && (s.phase === 'Verifying' || s.phase === 'Staging')) {
      this.bytesVerified += delta;
      if (s.phase === 'Staging') this.bytesStaged += delta;
    }
    this.lastBytes = bytes;
    const images = s.progress.imagesDone;
    const di = images >= this.lastImages ? images - this.lastImages : images;
    if (di > 0 && (s.phase === 'Preloading' || s.phase === 'Serving' || s.phase === 'Pinning'))
      this.imagesPulled += di;
    this.lastImages = images;
    this.current = structuredClone(s);
  }

  /** The exposition text: the status families, then (with build info) the build and process metrics. */
  async render(): Promise<string> {
    const own = this.renderStatus();
    if (!this.build) return own;
    const theirs = await Registry.merge([this.build, processMetrics()]).metrics();
    // prom-client separates families with blank lines and writes NaN as "Nan": the canonical form, as ours
    return own + theirs.replace(/\n{2,}/g, '\n').replace(/ Nan$/gm, ' NaN');
  }

  private renderStatus(): string {
    const s = this.current;
    const now = this.clock();
    const fams: Family[] = [...this.counterFamilies(), ...this.phaseFamilies(s, now)];
    if (s) fams.push(...statusFamilies(s, now));
    const r = this.reporter?.stats;
    if (r) fams.push(...reporterFamilies(r));
    const l = this.listener?.stats.answers;
    if (l) fams.push(listenerFamily(l));
    return fams.map((x) => x.render()).join('');
  }

  /** The counters observe() keeps: bytes, images, bundles Ready, failures by reason. */
  private counterFamilies(): Family[] {
    const f = new Family(
      'bundle_agent_failures_total',
      'counter',
      'Bundle loads that failed, by reason.',
    );
    for (const [reason, n] of [...this.failures].sort()) f.add(n, { reason });
    return [
      new Family(
        'bundle_agent_bytes_staged_total',
        'counter',
        'Bytes of bundles copied to the upgrade directory and checked.',
      ).add(this.bytesStaged),
      new Family(
        'bundle_agent_bytes_verified_total',
        'counter',
        'Bytes of bundles read and checked (staging or verifying in place).',
      ).add(this.bytesVerified),
      new Family(
        'bundle_agent_images_pulled_total',
        'counter',
        'Images pulled into the container runtime through the local registry.',
      ).add(this.imagesPulled),
      new Family('bundle_agent_bundles_ready_total', 'counter', 'Bundles loaded to Ready.').add(
        this.bundlesReady.count,
      ),
      f,
    ];
  }

  /** Time spent in each phase, and which phase the node is in. */
  private phaseFamilies(s: NodeStatus | undefined, now: number): Family[] {
    const d = new Family(
      'bundle_agent_phase_duration_seconds',
      'gauge',
      'Seconds spent in each phase the last time the node went through it (the current phase: so far).',
    );
    for (const p of PHASES) {
      const v =
        s && s.phase === p ? Math.max(0, (now - this.phaseSince) / 1000) : this.durations.get(p);
      if (v !== undefined) d.add(Math.round(v * 1000) / 1000, { phase: p });
    }
    const ph = new Family(
      'bundle_agent_phase',
      'gauge',
      'The phase the node is in (1) and the others (0).',
    );
    for (const p of PHASES) ph.add(s?.phase === p ? 1 : 0, { phase: p });
    return [d, ph];
  }
}

/** What the last status says: its conditions, progress, bundle, peers and when it changed. */
function statusFamilies(s: NodeStatus, now: number): Family[] {
  const fams: Family[] = [];
  const c = new Family(
    'bundle_agent_condition',
    'gauge',
    'Status conditions: 1 for the status the condition has.',
  );
  for (const cond of s.conditions)
    for (const st of ['True', 'False', 'Unknown'])
      c.add(cond.status === st ? 1 : 0, { type: cond.type, status: st });
  fams.push(c);
  const p = s.progress;
  fams.push(
    new Family(
      'bundle_agent_progress_bytes',
      'gauge',
      'Bytes done and in total in the current step.',
    )
      .add(p.bytesDone, { kind: 'done' })
      .add(p.bytesTotal, { kind: 'total' }),
  );
  fams.push(
    new Family(
      'bundle_agent_progress_images',
      'gauge',
      'Images done and in total in the current bundle.',
    )
      .add(p.imagesDone, { kind: 'done' })
      .add(p.imagesTotal, { kind: 'total' }),
  );
  if (s.bundle?.version) {
    fams.push(
      new Family('bundle_agent_bundle_info', 'gauge', 'The bundle being (or last) loaded.').add(1, {
        version: s.bundle.version,
        arch: s.bundle.arch ?? '',
        mode: s.bundle.mode ?? '',
      }),
    );
  }
  if (s.peers) fams.push(...peerFamilies(s.peers));
  fams.push(
    new Family(
      'bundle_agent_status_updated_timestamp_seconds',
      'gauge',
      'When the status last changed (Unix time).',
    ).add(Math.round(time(s.updatedAt, now) / 1000)),
  );
  return fams;
}

/** The cluster reporter's writes: accepted, failed, and one waiting. */
function reporterFamilies(r: ReporterStats): Family[] {
  return [
    new Family(
      'bundle_agent_cluster_writes_total',
      'counter',
      'Status writes the API server accepted.',
    ).add(r.writes),
    new Family(
      'bundle_agent_cluster_write_failures_total',
      'counter',
      'Failed status write attempts (retried or refused).',
    ).add(r.failures),
    new Family(
      'bundle_agent_cluster_write_pending',
      'gauge',
      '1 while a newer status than the last one written waits for the API server.',
    ).add(r.pending ? 1 : 0),
  ];
}

function listenerFamily(answers: Record<string, number>): Family {
  const f = new Family(
    'bundle_agent_metrics_requests_total',
    'counter',
    'Requests to the authenticated metrics listener, by the HTTP status answered (401: no or unknown credentials, 403: no RBAC for /metrics).',
  );
  for (const code of Object.keys(answers).sort()) f.add(answers[code]!, { code });
  return f;
}

/**
 * What the dashboard shows, read from the API in one go: one row per Node (so a node whose agent
 * never reported shows), joined with its NodeBundleStatus by the same rollup() `bundle cluster
 * status` uses, plus what the page needs beyond the status table (progress, source, the
 * technician's message, history). Every string is cut to the CRD's bounds: the page trusts
 * nothing of the API's beyond what the CRD lets through.
 */
import {
  heartbeatSecondsOf,
  nodeHoldings,
  readPathStatus,
  rollup,
  type NodeHoldings,
  type NodeRow,
  type PathReleaseStatus,
} from '@offline-bundle/cluster';
import {
  boundHoldings,
  completedRelease,
  GROUP,
  LIMITS,
  PLURAL,
  progressPercent,
  truncate,
  VERSION,
  type Phase,
} from '@offline-bundle/status';
import { apiCall, listAll, type AdminApis } from '@offline-bundle/kube';
import { formatBytes, timeLeft } from '@offline-bundle/cli';

/** Rows sent to the page at most: Kubernetes' own ceiling is 5,000 nodes. */
export const MAX_DASHBOARD_ROWS = 5000;

interface DashboardProgress {
  /** 0–100 of the current step, absent while nothing is measured. */
  percent?: number;
  /** "4.2 GB of 18.4 GB" or "12 of 140 images". */
  done?: string;
  rate?: string;
  eta?: string;
}

interface TimelineEntry {
  version: string;
  state: string;
  at: string;
}

/** heartbeatAge and aheadBy are left out: the page ages `heartbeat` itself, and a snapshot that changed every read would be pushed every read. */
export interface DashboardRow extends Omit<NodeRow, 'heartbeatAge' | 'aheadBy'> {
  progress: DashboardProgress;
  /** Where the bundle came from: the stick (its label) now; a peer once peers land. */
  source?: string;
  /** The agent's one sentence for the technician. */
  technician?: string;
  history: TimelineEntry[];
  /** What its runtime holds of the target bundle's image names (of its own loaded bundles when no file was given), as its agent publishes it. */
  holdings: NodeHoldings;
}

export interface DashboardWarning {
  kind: string;
  object: string;
  message: string;
}

export interface Target {
  /** The bundle file digest the cluster would upgrade with: the one given, else the one most Ready nodes report. */
  digest?: string;
  version?: string;
  /** The bundle file given on the command line, if any. */
  file?: string;
  /** The release the cluster runs (ClusterVersion's newest completed entry), on OpenShift. */
  running?: string;
  ready: boolean;
  summary: string;
}

interface ApiContact {
  ok: boolean;
  /** Last successful read. */
  lastOk?: string;
  /** First failed read of the current outage. */
  lostSince?: string;
  error?: string;
}

export interface Snapshot {
  rows: DashboardRow[];
  /** Rows left out past MAX_DASHBOARD_ROWS. */
  omitted: number;
  target: Target;
  warnings: DashboardWarning[];
  api: ApiContact;
  /** The poll interval, so the page can tell a silent server from a quiet cluster. */
  intervalMs: number;
  /** An update path (#43) as `bundle cluster status` reads it (readPathStatus): its hop line and each release's state. */
  path?: DashboardPath;
}

interface DashboardPath {
  line: string;
  releases: PathReleaseStatus[];
}

const str = (v: unknown, max: number) => (typeof v === 'string' ? truncate(v, max) : undefined);
const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
const list = (v: unknown) => (Array.isArray(v) ? v : []);

interface PickedNode {
  metadata: { name: string; creationTimestamp?: string | Date };
  status: { conditions: { type?: string; status?: string }[] };
}

function pickNode(n: Record<string, unknown>): PickedNode {
  const meta = obj(n.metadata);
  const created =
    meta.creationTimestamp instanceof Date
      ? meta.creationTimestamp
      : str(meta.creationTimestamp, 64);
  const ready = list(obj(n.status).conditions)
    .map(obj)
    .filter((c) => c.type === 'Ready')
    .map((c) => ({ type: 'Ready', status: str(c.status, 16) }));
  return {
    metadata: {
      name: str(meta.name, LIMITS.nodeName) ?? '',
      ...(created ? { creationTimestamp: created } : {}),
    },
    status: { conditions: ready },
  };
}

/** The status fields rollup() reads, and the page's own (progress, bundle source, history). */
export function pickStatus(s: Record<string, unknown>) {
  const st = obj(s.status);
  const b = obj(st.bundle);
  const p = obj(st.progress);
  return {
    metadata: { name: str(obj(s.metadata).name, LIMITS.nodeName) ?? '' },
    status: {
      phase: str(st.phase, LIMITS.phase),
      message: str(st.message, LIMITS.message),
      updatedAt: str(st.updatedAt, 64),
      heartbeatSeconds: heartbeatSecondsOf(st.heartbeatSeconds),
      bundle: {
        version: str(b.version, LIMITS.version),
        digest: str(b.digest, 71),
        media: str(b.media, LIMITS.media),
        mode: str(b.mode, LIMITS.mode),
      },
      conditions: list(st.conditions)
        .slice(0, LIMITS.conditions)
        .map(obj)
        .map((c) => ({
          type: str(c.type, LIMITS.conditionType),
          status: str(c.status, LIMITS.conditionStatus),
          reason: str(c.reason, LIMITS.reason),
          message: str(c.message, LIMITS.conditionMessage),
        })),
      history: list(st.history)
        .slice(-LIMITS.history)
        .map(obj)
        .map((e) => ({
          version: str(e.version, LIMITS.version) ?? '',
          state: str(e.state, LIMITS.historyState) ?? '',
          at: str(e.at, 64) ?? '',
        })),
      progress: {
        bytesDone: num(p.bytesDone) ?? 0,
        bytesTotal: num(p.bytesTotal) ?? 0,
        imagesDone: num(p.imagesDone) ?? 0,
        imagesTotal: num(p.imagesTotal) ?? 0,
        rate: num(p.rate),
        etaSeconds: num(p.etaSeconds),
      },
      // what its runtime holds, within the CRD's bounds (a malformed one is none): rollup() holds a Ready node to it, the row counts it
      runtime: boundHoldings(st.runtime),
    },
  };
}
type PickedStatus = ReturnType<typeof pickStatus>;

const IMAGE_PHASES = new Set(['Serving', 'Preloading', 'Pinning']);

/** Progress as the page shows it, in the words and units of the CLIs (formatBytes, timeLeft); a stale report's rate and time left are not shown as live. */
export function progressOf(
  s: PickedStatus['status'] | undefined,
  stale = false,
): DashboardProgress {
  if (!s?.phase) return {};
  const p = s.progress;
  const percent = progressPercent(s.phase as Phase, p);
  const images = IMAGE_PHASES.has(s.phase) || (s.phase === 'Failed' && p.imagesTotal > 0);
  const done = images
    ? p.imagesTotal
      ? `${p.imagesDone} of ${p.imagesTotal} images`
      : undefined
    : p.bytesTotal
      ? `${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}`
      : undefined;
  const moving = !stale && s.phase !== 'Ready' && s.phase !== 'Failed' && s.phase !== 'Idle';
  return {
    ...(percent !== undefined ? { percent } : {}),
    ...(done ? { done } : {}),
    ...(moving && p.rate ? { rate: `${formatBytes(p.rate)}/s` } : {}),
    ...(moving && p.etaSeconds !== undefined ? { eta: timeLeft(p.etaSeconds) } : {}),
  };
}

function sourceOf(s: PickedStatus['status'] | undefined): string | undefined {
  if (!s?.bundle.media && !s?.bundle.mode) return undefined;
  const how = s.bundle.mode === 'staged' ? 'copied from stick' : 'stick';
  return s.bundle.media ? `${how} ${s.bundle.media}` : how;
}

/** Rows and target from lists already read (pure: the part the unit tests drive); `names`: the target bundle's image names. */
export function dashboardRows(
  nodes: PickedNode[],
  statuses: PickedStatus[],
  want?: string,
  cv?: unknown,
  now = new Date(),
  names?: Iterable<string>,
): { rows: DashboardRow[]; omitted: number; target: Target } {
  const running = completedRelease(cv);
  const r = rollup(nodes, statuses, want, running, now);
  const byNode = new Map(statuses.map((s) => [s.metadata.name, s.status]));
  const shown = r.rows.slice(0, MAX_DASHBOARD_ROWS);
  const held = nodeHoldings(
    shown.map((x) => x.node),
    r.holdings ?? {},
    names,
  );
  const rows = shown.map(({ heartbeatAge: _age, aheadBy: _ahead, ...row }, i): DashboardRow => {
    const s = byNode.get(row.node);
    const source = sourceOf(s);
    return {
      holdings: held[i]!,
      ...row,
      progress: progressOf(s, row.stale === true),
      ...(source ? { source } : {}),
      ...(s?.message ? { technician: s.message } : {}),
      history: s?.history.filter((e) => e.version) ?? [],
    };
  });
  const version = r.digest
    ? r.rows.find((x) => x.digest === r.digest && x.version)?.version
    : undefined;
  return {
    rows,
    omitted: r.rows.length - rows.length,
    target: {
      ...(r.digest ? { digest: r.digest } : {}),
      ...(version ? { version } : {}),
      ...(running ? { running: running.version } : {}),
      ready: r.ready,
      summary: r.summary,
    },
  };
}

/** One read of Nodes, NodeBundleStatuses, (on OpenShift) ClusterVersion and the upgrade gate's path. */
export async function readDashboard(
  apis: AdminApis,
  opts: { selector?: string; digest?: string; names?: Iterable<string> } = {},
) {
  const nodes = await listAll(
    'list nodes',
    (q) => apis.core.listNode({ ...q, ...(opts.selector ? { labelSelector: opts.selector } : {}) }),
    pickNode,
  );
  const statuses = await listAll(
    `list ${PLURAL}.${GROUP}`,
    (q) =>
      apis.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL, ...q }),
    pickStatus,
    { notFound: () => [] },
  );
  const cv = await apiCall(
    'read ClusterVersion "version"',
    () =>
      apis.custom.getClusterCustomObject({
        group: 'config.openshift.io',
        version: 'v1',
        plural: 'clusterversions',
        name: 'version',
      }),
    { notFound: () => undefined },
  );
  // the path from the gate prepare or upgrade wrote, read as status reads it, with the ClusterVersion just read
  const path = await readPathStatus(apis, { clusterVersion: cv });
  return {
    ...dashboardRows(nodes, statuses, opts.digest, cv, new Date(), opts.names),
    ...(path ? { path: { line: path.line, releases: path.releases } } : {}),
  };
}

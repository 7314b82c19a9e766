/**
 * The admin's roll-up of every node: one row per Node (so a node whose agent never reported
 * shows up), joined with its NodeBundleStatus. "Ready" for the cluster means every node (of
 * the selector) reports phase Ready with a Ready=True condition for one and the same bundle
 * digest (the whole file's sha256, as the agent verified it), its Node is Ready, and its agent
 * reported within the last STALE_AFTER_BEATS heartbeats: a report is only as true as it is fresh.
 */
import {
  boundHoldings,
  completedRelease,
  DEFAULT_HEARTBEAT_MS,
  fromSpool,
  GROUP,
  holdsRelease,
  onRemovableMedia,
  PEER_MEDIA,
  PLURAL,
  VERSION,
  type RuntimeHoldings,
} from '@offline-bundle/status';
import { apiCall, listAll, type AdminApis } from '@offline-bundle/kube';
import { plural, timeAgo } from '@offline-bundle/cli';

/** Heartbeats an agent may miss before its row counts as stale (a slow API write or a skewed clock is not a dead agent). */
export const STALE_AFTER_BEATS = 3;

export interface NodeRow {
  node: string;
  /** The Kubernetes Node's own Ready condition. */
  nodeReady: boolean;
  /** The NodeBundleStatus phase, or NotReported when the node has none. */
  phase: string;
  version?: string;
  digest?: string;
  /** Status of the Pinned condition (True, False, Unknown), when reported. */
  pinned?: string;
  /** status.updatedAt: the agent's last report. */
  heartbeat?: string;
  /** Seconds since that report, at the time of the roll-up. */
  heartbeatAge?: number;
  /** No report for STALE_AFTER_BEATS of the agent's heartbeats: what the row says may no longer hold. */
  stale?: boolean;
  /** Seconds the report is dated ahead of the admin's clock, when over a heartbeat (then stale). */
  aheadBy?: number;
  /** Why it is not ready (the Failed/Ready condition's reason and message, or the agent's line). */
  reason?: string;
  message?: string;
  /** Ready for the roll-up's digest. */
  ready: boolean;
  /** The release the cluster runs, when this node joined after it completed and has not loaded it. */
  missingRunning?: string;
  /** Names of images it loaded that its runtime no longer holds (status.runtime: a crio-wipe, a pruned store), however Ready its agent says it is. */
  lacking?: { count: number; example: string };
  /** Where its bundle came from: "stick", "spool" (parts copied from sticks), "file", "peers" (being fetched) or "peer NAME[,NAME…]" (issue #22). */
  source?: string;
  /** Bytes per second while it copies or fetches its bundle (phase Staging). */
  rate?: number;
  /** Bytes copied or fetched so far and in all, with the rate. */
  bytesDone?: number;
  bytesTotal?: number;
  /** What it serves its peers, as it publishes it (status.serving). */
  serving?: RowServing;
}

export interface RowServing {
  manifestDigest: string;
  complete: boolean;
  verifiedBlobs: number;
  address: string;
  port: number;
}

export interface Rollup {
  /** The digest every node must be Ready for: the one asked for, else the most common Ready one. */
  digest?: string;
  rows: NodeRow[];
  /** Every node Ready for `digest` (and at least one node). */
  ready: boolean;
  /** "3 of 5 nodes Ready for bundle sha256:…; node-4 never reported; node-5 Failed (PullFailed)". */
  summary: string;
  /** What each node's runtime holds (status.runtime, well-formed), by node, for the nodes that publish it. */
  holdings?: Record<string, RuntimeHoldings>;
  /** The ClusterVersion readRollup read (undefined: not OpenShift), for callers that need more of it than the running release. */
  clusterVersion?: unknown;
}

interface NodeLike {
  metadata?: { name?: string; creationTimestamp?: string | Date };
  status?: { conditions?: { type?: string; status?: string }[] };
}
interface StatusLike {
  metadata?: { name?: string };
  status?: {
    phase?: string;
    message?: string;
    updatedAt?: string;
    heartbeatSeconds?: number;
    bundle?: { version?: string; digest?: string; media?: string; fromPeers?: string[] };
    serving?: RowServing;
    progress?: { bytesDone?: number; bytesTotal?: number; rate?: number };
    conditions?: { type?: string; status?: string; reason?: string; message?: string }[];
    history?: { version?: string; state?: string }[];
    runtime?: RuntimeHoldings;
  };
}

/** The release the cluster runs (ClusterVersion's newest completed entry) and when it completed. */
interface RunningRelease {
  version: string;
  completionTime?: string;
}

const cond = (s: StatusLike, type: string) => s.status?.conditions?.find((c) => c.type === type);

/**
 * Whether a node lacks the running release's images. With no registry, a node created after
 * that release completed (added or replaced later, from an older boot image) gets them only
 * from a bundle of that release; nodes that existed then were installed or upgraded with it.
 */
function missesRunning(
  node: NodeLike,
  s: StatusLike | undefined,
  running: RunningRelease | undefined,
): boolean {
  if (!running?.completionTime || holdsRelease(s?.status?.history, running.version)) return false;
  const created = node.metadata?.creationTimestamp
    ? new Date(node.metadata.creationTimestamp).getTime()
    : NaN;
  return created > Date.parse(running.completionTime);
}

function sourceOf(media: string | undefined, peers: readonly string[]): string | undefined {
  if (peers.length) return `peer ${peers.join(',')}`;
  if (!media) return undefined;
  if (media === PEER_MEDIA) return 'peers';
  if (fromSpool(media)) return 'spool';
  return onRemovableMedia(media) ? 'stick' : 'file';
}

/** The longest heartbeat an agent may claim: a claim of a day would keep a dead agent fresh for three. */
const MAX_HEARTBEAT_SECONDS = 300;

/**
 * The age of the agent's last report and whether it is stale; a report with no time is stale,
 * and so is one dated more than a heartbeat ahead of our clock (aheadBy says so: a skewed clock
 * on one side or the other, which hides a dead agent as well as a live one).
 */
export function freshness(
  st: { updatedAt?: string; heartbeatSeconds?: number },
  now: Date,
): Pick<NodeRow, 'heartbeatAge' | 'stale' | 'aheadBy'> {
  const at = st.updatedAt ? Date.parse(st.updatedAt) : NaN;
  if (Number.isNaN(at)) return { stale: true };
  const beat = Math.min(st.heartbeatSeconds ?? DEFAULT_HEARTBEAT_MS / 1000, MAX_HEARTBEAT_SECONDS);
  const age = Math.round((now.getTime() - at) / 1000);
  if (age < -beat) return { heartbeatAge: 0, stale: true, aheadBy: -age };
  const heartbeatAge = Math.max(0, age);
  return { heartbeatAge, stale: heartbeatAge > STALE_AFTER_BEATS * beat };
}

/** The source, serving and transfer-rate fields of a row, where the status has them. */
function sourceAndServing(
  st: NonNullable<StatusLike['status']>,
  stale: boolean,
): Pick<NodeRow, 'source' | 'serving' | 'rate' | 'bytesDone' | 'bytesTotal'> {
  const source = sourceOf(st.bundle?.media, st.bundle?.fromPeers ?? []);
  const p = st.progress;
  // the rate of the copy or fetch under way; after it, or from a report gone stale, a rate says nothing
  const moving =
    st.phase === 'Staging' && !stale && p?.rate !== undefined
      ? { rate: p.rate, bytesDone: p.bytesDone ?? 0, bytesTotal: p.bytesTotal ?? 0 }
      : {};
  return {
    ...(source ? { source } : {}),
    ...(st.serving ? { serving: st.serving } : {}),
    ...moving,
  };
}

/** What a node published it lacks of its own loads: with no registry, nothing brings those back but a stick or its kept copy. */
function lackingOf(h: RuntimeHoldings | undefined): Pick<NodeRow, 'lacking'> {
  const missing = h?.bundle.missing ?? [];
  return missing.length ? { lacking: { count: missing.length, example: missing[0]! } } : {};
}

const lostWords = (l: NonNullable<NodeRow['lacking']>) =>
  `no longer holds ${plural(l.count, 'image name')} it loaded (${l.example}${l.count > 1 ? ', …' : ''})`;

type BaseRow = NodeRow & { ok: boolean };

/** One node's row before the bundle to hold it to is known: `ok` says it is Ready for some bundle. */
function baseRow(
  n: NodeLike,
  s: StatusLike | undefined,
  running: RunningRelease | undefined,
  now: Date,
): BaseRow {
  const node = n.metadata?.name ?? '';
  const nodeReady = n.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
  const missing = missesRunning(n, s, running) ? { missingRunning: running!.version } : {};
  if (!s) return { node, nodeReady, phase: 'NotReported', ok: false, ...missing } as BaseRow;
  const failed = cond(s, 'Failed');
  const readyCond = cond(s, 'Ready');
  const why =
    failed?.status === 'True' ? failed : readyCond?.status !== 'True' ? readyCond : undefined;
  const st = s.status ?? {};
  const fresh = freshness(st, now);
  // only a node that says its images are loaded can be held to it (preload.method none loads none)
  const lacking =
    st.phase === 'Ready' && readyCond?.status === 'True' && readyCond.reason !== 'NotPreloaded'
      ? lackingOf(st.runtime)
      : {};
  return {
    node,
    nodeReady,
    phase: st.phase ?? 'Unknown',
    ...(st.bundle?.version ? { version: st.bundle.version } : {}),
    ...(st.bundle?.digest ? { digest: st.bundle.digest } : {}),
    ...(cond(s, 'Pinned')?.status ? { pinned: cond(s, 'Pinned')!.status } : {}),
    ...(st.updatedAt ? { heartbeat: st.updatedAt } : {}),
    ...fresh,
    ...sourceAndServing(st, fresh.stale === true),
    ...(why?.reason ? { reason: why.reason } : {}),
    ...((why?.message ?? st.message) ? { message: why?.message ?? st.message } : {}),
    // what the table's PHASE column and the page's row say of it
    ...(lacking.lacking
      ? { reason: 'ImagesLost', message: `its runtime ${lostWords(lacking.lacking)}` }
      : {}),
    ok: st.phase === 'Ready' && readyCond?.status === 'True' && !!st.bundle?.digest,
    ...missing,
    ...lacking,
  } as BaseRow;
}

/** The bundle asked for, or else the one most nodes are Ready for (ties: the lowest digest). */
function agreedDigest(base: readonly BaseRow[], want: string | undefined): string | undefined {
  if (want) return want;
  const counts = new Map<string, number>();
  for (const r of base) if (r.ok) counts.set(r.digest!, (counts.get(r.digest!) ?? 0) + 1);
  return [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]?.[0];
}

/** Why a row that is not ready is not, in the words the summary joins. */
function notReadyNotes(r: NodeRow, digest: string | undefined): string[] {
  const out: string[] = [];
  if (r.aheadBy !== undefined)
    out.push(
      `${r.node}'s agent reported from ${timeAgo(r.aheadBy)} ahead of this clock (stale: set the clocks right, on this machine or on ${r.node})`,
    );
  else if (r.stale)
    out.push(
      `${r.node}'s agent ${r.heartbeatAge === undefined ? 'reported no time' : `last reported ${timeAgo(r.heartbeatAge)} ago`} (stale: its row may no longer hold)`,
    );
  if (!r.nodeReady) out.push(`${r.node}'s Node is not Ready`);
  if (r.lacking)
    out.push(`${r.node}'s runtime ${lostWords(r.lacking)}, though its agent said Ready`);
  if (r.phase === 'NotReported') out.push(`${r.node} never reported`);
  else if (r.phase === 'Ready' && r.digest !== digest)
    out.push(
      `${r.node} Ready for ${r.digest ?? 'an unknown bundle'}${r.version ? ` (${r.version})` : ''}, not this one`,
    );
  else if (r.phase !== 'Ready') out.push(`${r.node} ${r.phase}${r.reason ? ` (${r.reason})` : ''}`);
  return out;
}

/** The one-line verdict: how many rows are Ready for the bundle, then every note. */
function summaryOf(rows: readonly NodeRow[], readyCount: number, digest: string | undefined) {
  const notes = rows.filter((r) => !r.ready).flatMap((r) => notReadyNotes(r, digest));
  for (const r of rows)
    if (r.missingRunning)
      notes.push(
        `${r.node} is missing the running release ${r.missingRunning}: load the ${r.missingRunning} bundle on it`,
      );
  return rows.length === 0
    ? 'no nodes match'
    : `${readyCount} of ${rows.length} nodes Ready${digest ? ` for bundle ${digest}` : ''}${notes.length ? `; ${notes.join('; ')}` : ''}`;
}

/** Joins Nodes and NodeBundleStatuses (pure: the part tests drive with any objects, and any `now`). */
export function rollup(
  nodes: readonly NodeLike[],
  statuses: readonly StatusLike[],
  want?: string,
  running?: RunningRelease,
  now = new Date(),
): Rollup {
  const byNode = new Map(statuses.map((s) => [s.metadata?.name ?? '', s]));
  const base = nodes.map((n) => baseRow(n, byNode.get(n.metadata?.name ?? ''), running, now));
  const digest = agreedDigest(base, want);
  const rows: NodeRow[] = base
    .map(({ ok, ...r }) => ({
      ...r,
      ready: ok && r.digest === digest && r.nodeReady && r.stale !== true && !r.lacking,
    }))
    .sort((a, b) => (a.node < b.node ? -1 : 1));
  const readyCount = rows.filter((r) => r.ready).length;
  const summary = summaryOf(rows, readyCount, digest);
  const holdings = Object.fromEntries(
    rows.flatMap((r) => {
      const h = byNode.get(r.node)?.status?.runtime;
      return h ? [[r.node, h] as const] : [];
    }),
  );
  return {
    ...(digest ? { digest } : {}),
    rows,
    ready: rows.length > 0 && readyCount === rows.length,
    summary,
    ...(Object.keys(holdings).length ? { holdings } : {}),
  };
}

/** Failures of a node's own setup (trust keys, config, runtime): plugging the stick again cannot help. */
const SETUP_REASONS: ReadonlySet<string> = new Set([
  'UntrustedKey',
  'NoTrust',
  'InvalidConfig',
  'RuntimeIgnoresMirror',
  'ForeignFile',
  'UnsupportedVersion',
]);

/** What to do about the rows that are not ready, by why they are not: a stick cannot wake a dead agent or kubelet, nor fix a node's setup. */

export function nextSteps(r: { rows: readonly NodeRow[] }): string {
  const names = (rows: readonly NodeRow[]) =>
    rows.length > 3
      ? `${rows
          .slice(0, 3)
          .map((x) => x.node)
          .join(', ')} and ${rows.length - 3} more`
      : rows.map((x) => x.node).join(', ');
  const waiting = r.rows.filter((x) => !x.ready);
  const stale = waiting.filter((x) => x.stale && x.phase !== 'NotReported');
  const down = waiting.filter((x) => !x.nodeReady);
  // a failure no stick can fix: the node's own setup refused the bundle
  const setup = waiting.filter(
    (x) => !x.stale && x.nodeReady && x.phase === 'Failed' && SETUP_REASONS.has(x.reason ?? ''),
  );
  const load = waiting.filter(
    (x) => ((!x.stale && x.nodeReady) || x.phase === 'NotReported') && !setup.includes(x),
  );
  const steps = [
    ...(load.length ? [`plug the stick into ${names(load)}`] : []),
    ...(setup.length
      ? [
          `fix the agent's setup on ${names(setup)} (${[...new Set(setup.map((x) => x.reason))].join(', ')}: "bundle-agent status" there says what; a stick does not help until then)`,
        ]
      : []),
    ...(stale.length
      ? [
          `check the agent on ${names(stale)} ("systemctl status bundle-agent" there): its last report is too old to count`,
        ]
      : []),
    ...(down.length ? [`bring the kubelet of ${names(down)} back to Ready`] : []),
  ];
  return steps.length ? steps.join('; ') : 'nothing to do';
}

const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
const conditions = (status: Record<string, unknown>) =>
  (Array.isArray(status.conditions) ? status.conditions : []).map((c) => {
    const o = obj(c);
    return {
      type: str(o.type),
      status: str(o.status),
      reason: str(o.reason),
      message: str(o.message),
    };
  });

/** What rollup reads of a Node, and nothing else (the rest of a page is dropped at once). */
function pickNode(n: Record<string, unknown>): NodeLike {
  const meta = obj(n.metadata);
  // client-node turns creationTimestamp into a Date
  const created =
    meta.creationTimestamp instanceof Date ? meta.creationTimestamp : str(meta.creationTimestamp);
  return {
    metadata: { name: str(meta.name) ?? '', ...(created ? { creationTimestamp: created } : {}) },
    status: { conditions: conditions(obj(n.status)).filter((c) => c.type === 'Ready') },
  };
}

/** status.serving when it is whole (the CRD requires every field); else nothing. */
function pickServing(v: unknown): RowServing | undefined {
  const s = obj(v);
  const manifestDigest = str(s.manifestDigest);
  const address = str(s.address);
  const n = (x: unknown) =>
    typeof x === 'number' && Number.isSafeInteger(x) && x >= 0 ? x : undefined;
  const verifiedBlobs = n(s.verifiedBlobs);
  const port = n(s.port);
  if (!manifestDigest || !address || verifiedBlobs === undefined || port === undefined)
    return undefined;
  return { manifestDigest, complete: s.complete === true, verifiedBlobs, address, port };
}

/** status.heartbeatSeconds within the CRD's bounds, else nothing (the default applies). */
export const heartbeatSecondsOf = (v: unknown): number | undefined =>
  Number.isSafeInteger(v) && (v as number) >= 1 && (v as number) <= 86_400
    ? (v as number)
    : undefined;

function pickStatus(s: Record<string, unknown>): StatusLike {
  const st = obj(s.status);
  const b = obj(st.bundle);
  const fromPeers = (Array.isArray(b.fromPeers) ? b.fromPeers : [])
    .map(str)
    .filter((x): x is string => !!x)
    .slice(0, 16);
  const serving = pickServing(st.serving);
  const history = (Array.isArray(st.history) ? st.history : []).map((e) => ({
    version: str(obj(e).version),
    state: str(obj(e).state),
  }));
  const p = obj(st.progress);
  const n = (x: unknown) =>
    typeof x === 'number' && Number.isSafeInteger(x) && x >= 0 ? x : undefined;
  const progress = { bytesDone: n(p.bytesDone), bytesTotal: n(p.bytesTotal), rate: n(p.rate) };
  // what a node publishes of its runtime, bounded and checked here again: a malformed one is none
  const runtime = boundHoldings(st.runtime);
  return {
    metadata: { name: str(obj(s.metadata).name) ?? '' },
    status: {
      phase: str(st.phase),
      message: str(st.message),
      updatedAt: str(st.updatedAt),
      heartbeatSeconds: heartbeatSecondsOf(st.heartbeatSeconds),
      bundle: {
        version: str(b.version),
        digest: str(b.digest),
        media: str(b.media),
        ...(fromPeers.length ? { fromPeers } : {}),
      },
      conditions: conditions(st),
      history,
      progress,
      ...(serving ? { serving } : {}),
      ...(runtime ? { runtime } : {}),
    },
  } as StatusLike;
}

/**
 * Reads Nodes (of `selector`), every NodeBundleStatus and (on OpenShift) the running release, and
 * rolls them up. `clusterVersion`: the ClusterVersion the caller read already (not read again).
 */
export async function readRollup(
  apis: AdminApis,
  opts: { selector?: string; digest?: string; clusterVersion?: unknown } = {},
): Promise<Rollup> {
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
  const cv =
    'clusterVersion' in opts
      ? opts.clusterVersion
      : await apiCall(
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
  return {
    ...rollup(nodes, statuses, opts.digest, completedRelease(cv)),
    ...(cv === undefined ? {} : { clusterVersion: cv }),
  };
}

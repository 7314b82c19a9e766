/**
 * `bundle cluster check`, per node: which of the images the cluster asks for each node holds
 * (pinned, unpinned: the image GC may take it), which it lacks and why (in no bundle; in a
 * bundle this node has not loaded; missing on a node that says Ready, which should not happen),
 * from what each agent publishes of its runtime (status.runtime: fingerprints of every name
 * held, and the names of its own bundles it lacks or does not pin). A node that publishes
 * nothing (an older agent, or none yet) is "unknown", never "holds it".
 */
import type { NodeRow, Rollup } from '@offline-bundle/cluster';
import { heldState, imageKey, type HeldState, type RuntimeHoldings } from '@offline-bundle/status';
import { timeAgo } from '@offline-bundle/cli';

/** high: a pod needing it fails on some node; medium: held everywhere, but the image GC may take it; low: held pinned everywhere. */
export type Severity = 'high' | 'medium' | 'low';
const RANK: Record<Severity, number> = { low: 0, medium: 1, high: 2 };
export const worst = (s: readonly Severity[]): Severity | undefined =>
  s.reduce<Severity | undefined>(
    (a, b) => (a === undefined || RANK[b] > RANK[a] ? b : a),
    undefined,
  );

/** Nodes named per state at most this many times (each list's length is in `counts`). */
const MAX_NODES_NAMED = 20;
/** Images named per node and state at most this many times. */
const MAX_IMAGES_NAMED = 20;

export interface WhoHolds {
  pinned: string[];
  unpinned: string[];
  missing: string[];
  unknown: string[];
  counts: { pinned: number; unpinned: number; missing: number; unknown: number };
}

const STATE_NAME: Record<HeldState, keyof WhoHolds['counts']> = {
  pinned: 'pinned',
  unpinned: 'unpinned',
  absent: 'missing',
  unknown: 'unknown',
};

/** Which nodes hold `image` under that name, pinned or not, which lack it, and which do not say. */
export function whoHolds(
  image: string,
  nodes: readonly string[],
  holdings: Readonly<Record<string, RuntimeHoldings>>,
): WhoHolds {
  const w: WhoHolds = {
    pinned: [],
    unpinned: [],
    missing: [],
    unknown: [],
    counts: { pinned: 0, unpinned: 0, missing: 0, unknown: 0 },
  };
  for (const n of nodes) {
    const s = STATE_NAME[heldState(holdings[n], image)];
    w.counts[s]++;
    if (w[s].length < MAX_NODES_NAMED) w[s].push(n);
  }
  return w;
}

const some = (names: readonly string[], n: number) =>
  n > names.length ? `${names.join(', ')} and ${n - names.length} more` : names.join(', ');

/** How bad an image in no bundle is, given who holds it, and the sentence that says so. */
export function inNoBundleSeverity(w: WhoHolds): { severity: Severity; held: string } {
  const c = w.counts;
  const total = c.pinned + c.unpinned + c.missing + c.unknown;
  if (c.missing || c.unknown || total === 0) {
    const parts = [
      ...(c.missing ? [`missing on ${some(w.missing, c.missing)}`] : []),
      ...(c.unknown
        ? [`not known on ${some(w.unknown, c.unknown)} (no runtime holdings published)`]
        : []),
      ...(c.pinned + c.unpinned
        ? [`held by ${c.pinned + c.unpinned} node${c.pinned + c.unpinned === 1 ? '' : 's'}`]
        : []),
    ];
    return { severity: 'high', held: parts.length ? parts.join('; ') : 'no node to hold it' };
  }
  if (c.unpinned)
    return {
      severity: 'medium',
      held: `held by every node, but not pinned on ${some(w.unpinned, c.unpinned)}: the image GC may take it`,
    };
  return {
    severity: 'low',
    held: `held pinned by every node: a lesser gap (a crio-wipe, or a node added later, still loses it)`,
  };
}

type MissingWhy = 'InNoBundle' | 'NotLoaded' | 'MissingOnReady';
type UnpinnedWhy = 'InNoBundle' | 'NotLoaded' | 'UnpinnedOnReady' | 'PinsNotReported';

export interface NodeReport {
  node: string;
  /** The node publishes what its runtime holds. */
  published: boolean;
  observedAt?: string;
  /** The runtime's own counts, and the digest of every name it holds. */
  images?: number;
  pinnedImages?: number;
  digest?: string;
  /** The runtime reports pins (false: "not pinned" means "not known to be pinned"). */
  pinsReported?: boolean;
  /** The first node (by name) publishing the same digest: the same names held. */
  sameAs?: string;
  /** Of the images the cluster asks for, counted by state on this node. */
  needed: { pinned: number; unpinned: number; missing: number; unknown: number };
  missing: { image: string; why: MissingWhy }[];
  unpinned: { image: string; why: UnpinnedWhy }[];
  /** The agent's own list: names of the bundles it loaded missing from, or not pinned in, its runtime. */
  bundleMissing: string[];
  bundleUnpinned: string[];
}

export interface NodeGap {
  node: string;
  image: string;
  state: 'missing' | 'unpinned';
  severity: Severity;
  message: string;
}

interface NodeCheck {
  reports: NodeReport[];
  gaps: NodeGap[];
}

interface Context {
  /** Normalized names the bundles given hold, and those of the first (the one every node must be Ready for). */
  inBundles: ReadonlySet<string>;
  inFirst: ReadonlySet<string>;
  digest?: string;
}

const says = (r: NodeRow) => r.phase === 'Ready';
const readyForFirst = (r: NodeRow, c: Context) => says(r) && !!c.digest && r.digest === c.digest;

function classify(
  r: NodeRow,
  h: RuntimeHoldings | undefined,
  images: readonly string[],
  c: Context,
): Pick<NodeReport, 'needed' | 'missing' | 'unpinned'> {
  const out: Pick<NodeReport, 'needed' | 'missing' | 'unpinned'> = {
    needed: { pinned: 0, unpinned: 0, missing: 0, unknown: 0 },
    missing: [],
    unpinned: [],
  };
  for (const image of images) {
    const key = imageKey(image);
    if (key === undefined) continue;
    const s = STATE_NAME[heldState(h, image)];
    out.needed[s]++;
    const loaded = c.inFirst.has(key) && readyForFirst(r, c);
    if (s === 'missing' && out.missing.length < MAX_IMAGES_NAMED)
      out.missing.push({
        image,
        why: loaded ? 'MissingOnReady' : c.inBundles.has(key) ? 'NotLoaded' : 'InNoBundle',
      });
    const unpinnedWhy = !h?.pinsReported
      ? 'PinsNotReported'
      : loaded
        ? 'UnpinnedOnReady'
        : c.inBundles.has(key)
          ? 'NotLoaded'
          : 'InNoBundle';
    if (s === 'unpinned' && out.unpinned.length < MAX_IMAGES_NAMED)
      out.unpinned.push({ image, why: unpinnedWhy });
  }
  return out;
}

/** The lines for a node that says Ready and lacks (or does not pin) an image of what it loaded: that should not happen. */
function readyGaps(r: NodeRow, h: RuntimeHoldings | undefined, rep: NodeReport): NodeGap[] {
  if (!says(r) || !h) return [];
  const missing = new Set([
    ...h.bundle.missing,
    ...rep.missing.filter((m) => m.why === 'MissingOnReady').map((m) => m.image),
  ]);
  // a runtime that reports no pins at all (the agent's Pinned condition says Unknown) cannot show one missing
  const unpinned = new Set(
    h.pinsReported
      ? [
          ...h.bundle.unpinned,
          ...rep.unpinned.filter((m) => m.why === 'UnpinnedOnReady').map((m) => m.image),
        ]
      : [],
  );
  return [
    ...[...missing].map((image): NodeGap => ({
      node: r.node,
      image,
      state: 'missing',
      severity: 'high',
      message: `says Ready, but its runtime does not hold ${image} of the bundle it loaded (should not happen: the image GC, a crio-wipe or someone's rmi took it): plug the stick into ${r.node} again, or restart its agent if it kept a copy`,
    })),
    ...[...unpinned].map((image): NodeGap => ({
      node: r.node,
      image,
      state: 'unpinned',
      severity: 'medium',
      message: `says Ready, but its runtime does not pin ${image} of the bundle it loaded (should not happen; the image GC may take it): a crio.conf.d file sorting after the agent's may replace its pins`,
    })),
  ];
}

/** Per node: its report and its gaps, for the images the cluster asks for (`images`). */
export function checkNodes(
  rollup: Rollup,
  images: readonly string[],
  c: Omit<Context, 'digest'>,
): NodeCheck {
  const holdings = rollup.holdings ?? {};
  const ctx: Context = { ...c, ...(rollup.digest ? { digest: rollup.digest } : {}) };
  const firstByDigest = new Map<string, string>();
  const reports: NodeReport[] = [];
  const gaps: NodeGap[] = [];
  for (const r of rollup.rows) {
    const h = holdings[r.node];
    const same = h ? firstByDigest.get(h.digest) : undefined;
    if (h && !same) firstByDigest.set(h.digest, r.node);
    const rep: NodeReport = {
      node: r.node,
      published: !!h,
      ...(h
        ? {
            observedAt: h.observedAt,
            images: h.images,
            pinnedImages: h.pinned,
            digest: h.digest,
            pinsReported: h.pinsReported,
          }
        : {}),
      ...(same ? { sameAs: same } : {}),
      ...classify(r, h, images, ctx),
      bundleMissing: h?.bundle.missing ?? [],
      bundleUnpinned: h?.bundle.unpinned ?? [],
    };
    reports.push(rep);
    gaps.push(...readyGaps(r, h, rep));
  }
  return { reports, gaps };
}

/** One line per node: what it holds of the closure, what it lacks and why. */
export function nodeLine(rep: NodeReport, now = new Date()): string {
  if (!rep.published)
    return `node ${rep.node}: publishes nothing of its runtime (an agent before this version, or no load since it started): what it holds is not known`;
  const n = rep.needed;
  const held = `${n.pinned + n.unpinned} of ${n.pinned + n.unpinned + n.missing + n.unknown} images the cluster asks for held (${n.pinned} pinned${n.unpinned ? `, ${n.unpinned} not pinned: the image GC may take them` : ''})`;
  const list = (xs: { image: string; why: string }[], count: number) =>
    `${xs.map((x) => `${x.image} (${x.why})`).join(', ')}${count > xs.length ? ` and ${count - xs.length} more` : ''}`;
  const missing = n.missing ? `; missing ${n.missing}: ${list(rep.missing, n.missing)}` : '';
  const unpinned = n.unpinned ? `; not pinned: ${list(rep.unpinned, n.unpinned)}` : '';
  const age = rep.observedAt
    ? Math.max(0, Math.round((now.getTime() - Date.parse(rep.observedAt)) / 1000))
    : undefined;
  const pins =
    rep.pinsReported === false
      ? ' (it reports no pins: CRI-O before 1.28, containerd before 1.6.22)'
      : '';
  const runtime = `; its runtime: ${rep.images} images, ${rep.pinnedImages} pinned${pins}${age !== undefined ? `, read ${timeAgo(age)} ago` : ''}${rep.sameAs ? `, the same names as ${rep.sameAs}` : ''}`;
  return `node ${rep.node}: ${held}${missing}${unpinned}${runtime}`;
}

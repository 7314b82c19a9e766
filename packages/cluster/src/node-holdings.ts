/**
 * What each node's runtime holds of one bundle's images, from what its agent publishes
 * (status.runtime, read through boundHoldings): how many of the bundle's image names it holds,
 * pins and lacks, and the first names it lacks, for `prepare` and the page: which node lacks
 * what before the upgrade asks for it. Without a bundle's images (the page given no file) the
 * agent's own list stands in: the names of the bundles it loaded. A node that publishes
 * nothing is "not known", never "holds it".
 */
import { heldState, type RuntimeHoldings } from '@offline-bundle/status';

/** Names of what a node lacks, given per node at most (the counts say the rest). */
export const MAX_LACKS_NAMED = 3;

export interface NodeHoldings {
  node: string;
  /** The node publishes what its runtime holds; when false every count is 0. */
  published: boolean;
  /** The image names counted: the bundle's (by digest, and by tag where it has one), or the agent's own. */
  names: number;
  /** Held, pinned or not. */
  held: number;
  pinned: number;
  missing: number;
  /** Names its published list cannot tell (the list was cut at its bound). */
  unknown: number;
  /** The runtime reports pins at all (CRI-O from 1.28, containerd from 1.6.22): else "not pinned" is "not known". */
  pinsReported: boolean;
  /** The first MAX_LACKS_NAMED names it lacks. */
  lacks: string[];
}

const none = (node: string): NodeHoldings => ({
  node,
  published: false,
  names: 0,
  held: 0,
  pinned: 0,
  missing: 0,
  unknown: 0,
  pinsReported: false,
  lacks: [],
});

/** From the agent's own list: the names of the bundles it loaded, which it lacks, which it does not pin. */
function ofLoaded(node: string, h: RuntimeHoldings): NodeHoldings {
  const names = h.bundle.refs;
  const missing = Math.min(names, h.bundle.missing.length);
  // a cut list names only some of what it lacks or leaves unpinned: the rest is not known, never held
  if (h.bundle.truncated)
    return {
      node,
      published: true,
      names,
      held: 0,
      pinned: 0,
      missing,
      unknown: names - missing,
      pinsReported: h.pinsReported,
      lacks: h.bundle.missing.slice(0, MAX_LACKS_NAMED),
    };
  const held = names - missing;
  const pinned = h.pinsReported ? Math.max(0, held - h.bundle.unpinned.length) : 0;
  return {
    node,
    published: true,
    names,
    held,
    pinned,
    missing,
    unknown: 0,
    pinsReported: h.pinsReported,
    lacks: h.bundle.missing.slice(0, MAX_LACKS_NAMED),
  };
}

/**
 * Per node (in the order given), what it holds of `bundleNames` (a bundle's image names,
 * bundleImageNames), or of its own loaded bundles when that is undefined.
 */
export function nodeHoldings(
  nodes: readonly string[],
  holdings: Readonly<Record<string, RuntimeHoldings>>,
  bundleNames?: Iterable<string>,
): NodeHoldings[] {
  const names = bundleNames ? [...new Set(bundleNames)].sort() : undefined;
  return nodes.map((node) => {
    const h = holdings[node];
    if (!h) return none(node);
    if (!names) return ofLoaded(node, h);
    const out: NodeHoldings = {
      node,
      published: true,
      names: names.length,
      held: 0,
      pinned: 0,
      missing: 0,
      unknown: 0,
      pinsReported: h.pinsReported,
      lacks: [],
    };
    for (const name of names) {
      const s = heldState(h, name);
      if (s === 'pinned' || s === 'unpinned') out.held++;
      if (s === 'pinned') out.pinned++;
      if (s === 'unknown') out.unknown++;
      if (s === 'absent') {
        out.missing++;
        if (out.lacks.length < MAX_LACKS_NAMED) out.lacks.push(name);
      }
    }
    return out;
  });
}

/** "node-a: holds 12 of 12 image names of 4.15.1, 12 pinned" / "…; lacks 3: a, b and 1 more". */
export function holdingsLine(h: NodeHoldings, of: string): string {
  if (!h.published)
    return `${h.node}: publishes nothing of its runtime (an older agent, or no load since it started): what it holds of ${of} is not known`;
  const pins = h.pinsReported ? `, ${h.pinned} pinned` : ' (its runtime reports no pins)';
  const unknown = h.unknown ? `, ${h.unknown} not known (its list was cut)` : '';
  const lacks = h.missing
    ? `; lacks ${h.missing}: ${h.lacks.join(', ')}${h.missing > h.lacks.length ? ` and ${h.missing - h.lacks.length} more` : ''}`
    : '';
  return `${h.node}: holds ${h.held} of ${h.names} image names of ${of}${pins}${unknown}${lacks}`;
}

// Which peer sends which blob. Nodes that fetch one bundle at the same time must not all take
// every blob from the stick node (it would upload the bundle once per node): each starts at
// another place in the blob list, blobs few peers hold are asked for first (those only the
// complete peers hold go to them; the rest to the nodes still fetching), and among the peers
// that hold a blob, one that is itself still fetching is preferred over a complete one and one
// that lately said it was busy (503) is avoided, at random so that fetchers do not all pick alike.

/** What the choice needs to know of a peer. */
export interface Holder {
  /** Digests it holds verified; undefined: every blob (a complete peer). */
  have: Set<string> | undefined;
  /** When it last answered 503 (0: never). */
  busyAt: number;
}

/** Weight of a complete peer beside peers still fetching that hold the blob too: the stick node is kept for what only it holds. */
export const COMPLETE_WEIGHT = 1 / 8;
/** Weight of a peer that answered 503 within BUSY_MEMORY_MS. */
export const BUSY_WEIGHT = 1 / 4;
export const BUSY_MEMORY_MS = 10_000;

export const holds = (p: Holder, digest: string): boolean => !p.have || p.have.has(digest);

/** `items` from a random place on, wrapping round (each fetcher begins elsewhere in the list). */
export function rotated<T>(items: readonly T[], random: () => number): T[] {
  const at = Math.min(items.length - 1, Math.floor(random() * items.length));
  return at > 0 ? [...items.slice(at), ...items.slice(0, at)] : [...items];
}

/** `jobs` ordered by how many peers hold each (fewest first), in their own order among equals. */
export function rarestFirst<J>(jobs: readonly J[], holders: (job: J) => number): J[] {
  return jobs
    .map((job, i) => ({ job, i, n: holders(job) }))
    .sort((a, b) => a.n - b.n || a.i - b.i)
    .map((x) => x.job);
}

function weightOf(p: Holder, partialsToo: boolean, now: number): number {
  const complete = p.have === undefined && partialsToo ? COMPLETE_WEIGHT : 1;
  return complete * (p.busyAt && now - p.busyAt < BUSY_MEMORY_MS ? BUSY_WEIGHT : 1);
}

/** One of `candidates` (all holding the blob), at random by weightOf; undefined when there is none. */
export function weightedPick<P extends Holder>(
  candidates: readonly P[],
  now: number,
  random: () => number,
): P | undefined {
  if (candidates.length <= 1) return candidates[0];
  const partialsToo = candidates.some((p) => p.have !== undefined);
  const weights = candidates.map((p) => weightOf(p, partialsToo, now));
  let r = random() * weights.reduce((a, b) => a + b, 0);
  for (let i = 0; i < candidates.length; i++) {
    r -= weights[i]!;
    if (r < 0) return candidates[i];
  }
  return candidates.at(-1);
}

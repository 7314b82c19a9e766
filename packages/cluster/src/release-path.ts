/**
 * The releases a bundle takes a cluster through (#43: EUS to EUS, two hops from one stick), as
 * the cluster side reads them: each with its image by digest and its own signatures, the final
 * one last; and where a cluster stands on that path, from ClusterVersion's history.
 */
import { positionOnPath } from '@offline-bundle/format';
import { ClusterError } from '@offline-bundle/kube';

/** One release of a bundle's update path. */
export interface PathRelease {
  version: string;
  image: string | null;
  digest: string | null;
  upgradeFrom: string[];
  signatures: Uint8Array[];
}

/** What releasesOf reads of a bundle: its final release, and its path when it carries one. */
interface PathSource {
  version: string;
  image: string | null;
  digest: string | null;
  upgradeFrom: string[];
  signatures: Uint8Array[];
  /** Every release of the path, the final one last (absent or one entry: a bundle of one release). */
  path?: PathRelease[];
}

/** The bundle's releases in the order a cluster takes them (one for a bundle of one release). */
export function releasesOf(b: PathSource): PathRelease[] {
  if (b.path?.length) return b.path;
  return [
    {
      version: b.version,
      image: b.image,
      digest: b.digest,
      upgradeFrom: b.upgradeFrom,
      signatures: b.signatures,
    },
  ];
}

/** "4.14.30 → 4.15.40 → 4.16.2": the path from the version it starts from. */
export function pathWords(path: readonly PathRelease[], from?: string): string {
  return [...(from ? [from] : []), ...path.map((r) => r.version)].join(' → ');
}

/** Where the cluster is: the index of the last release of the path it completed (-1: none yet). */
export interface PathPosition {
  done: number;
  running?: string;
}

/** What the path's first release upgrades from, for a refusal. */
const sourcesOf = (first: PathRelease) =>
  first.upgradeFrom.length
    ? first.upgradeFrom.join(', ')
    : `any release older than ${first.version}`;

/**
 * Where a cluster that runs `running` stands on `path`: on a release of it, or on a version
 * one of its releases upgrades from (the latest such release: the fewest hops), as the node's
 * policy reads it (positionOnPath). Anything else is refused (NOT_AN_UPGRADE_SOURCE), naming
 * what the path starts from.
 */
export function pathPosition(
  path: readonly PathRelease[],
  running: string | undefined,
): PathPosition {
  const done = positionOnPath(path, running);
  if (done !== undefined) return { done, ...(running ? { running } : {}) };
  const first = path[0]!;
  if (path.length === 1)
    throw new ClusterError(
      'NOT_AN_UPGRADE_SOURCE',
      `the cluster runs ${running ?? 'no completed version'}, which ${first.version} does not accept as a source (it accepts ${sourcesOf(first)}): build a bundle for an intermediate version first`,
    );
  throw new ClusterError(
    'NOT_AN_UPGRADE_SOURCE',
    `the cluster runs ${running ?? 'no completed version'}, which no release of the bundle's path ${pathWords(path)} accepts as a source (it starts from ${sourcesOf(first)}): build a bundle for an intermediate version first`,
  );
}

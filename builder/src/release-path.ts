import { releasePath, type BundleRelease, type HopAdds } from '@offline-bundle/format';
import { formatBytes, plural } from '@offline-bundle/cli';
import { someOf } from './image-set/schema.js';

/**
 * An update path as inspect, diff and a dry run show it (#43): where it starts and each
 * release in the order a cluster takes them, with what each adds over the one before.
 */
export interface PathSummary {
  /** The versions the first release upgrades from: the one the cluster runs among them. */
  from: string[];
  /** `signatures`: how many release signatures the bundle carries for it (a dry run has not fetched them). */
  releases: {
    version: string;
    image: string | null;
    digest: string | null;
    adds?: HopAdds;
    signatures?: number;
  }[];
}

/** What one release's images are: their top manifests and every blob they name. */
interface HopImages {
  entry: { digest: string };
  blobs: { digest: string; size: number }[];
}

/**
 * What `next` adds over `prev` (none: the whole of `next`): its images whose manifest `prev`
 * lacks, and the bytes of its blobs `prev` lacks, each blob once.
 */
export function hopAdds(prev: HopImages[] | undefined, next: HopImages[]): HopAdds {
  const images = new Set((prev ?? []).map((r) => r.entry.digest));
  const blobs = new Set((prev ?? []).flatMap((r) => r.blobs.map((b) => b.digest)));
  const added = new Map<string, number>();
  for (const r of next)
    for (const b of r.blobs) if (!blobs.has(b.digest)) added.set(b.digest, b.size);
  return {
    images: new Set(next.map((r) => r.entry.digest).filter((d) => !images.has(d))).size,
    bytes: [...added.values()].reduce((s, n) => s + n, 0),
  };
}

/**
 * A release's `payload` for bundle.json: the digests of its release image and its payload's
 * images, each once, sorted (the same split the agent reads from the release image itself).
 */
export function payloadOf(images: readonly HopImages[]): string[] {
  return [...new Set(images.map((r) => r.entry.digest))].sort();
}

/** The path a bundle's release carries, or undefined for a bundle of one release. */
export function pathOf(release: BundleRelease): PathSummary | undefined {
  if (!release.via?.length) return undefined;
  const hops = releasePath({ release });
  return {
    from: hops[0]!.upgradeFrom,
    releases: hops.map((h) => ({
      version: h.version,
      image: h.image,
      digest: h.digest,
      ...(h.adds ? { adds: h.adds } : {}),
      signatures: h.signatures?.length ?? 0,
    })),
  };
}

/** "4.14.30 → 4.15.40 → 4.16.2"; several starts in braces: "{4.14.29, 4.14.30} → …". */
function pathText(p: PathSummary): string {
  const start = p.from.length === 1 ? p.from[0]! : `{${someOf(p.from, 4)}}`;
  return [start, ...p.releases.map((r) => r.version)].join(' → ');
}

/**
 * The path and what each hop adds over the one before ("4.16.2 adds 12 images, 1.1 GB over
 * 4.15.40"): the stick's cost of the second hop. Lines indented under `label`.
 */
export function pathLines(p: PathSummary, label = 'path:      '): string[] {
  const indent = ' '.repeat(label.length);
  const lines = [
    `${label}${pathText(p)} (${plural(p.releases.length, 'release')} carried, each payload once)`,
  ];
  p.releases.forEach((r, i) => {
    if (!r.adds) return;
    const before = p.releases[i - 1];
    const signed =
      r.signatures === undefined ? '' : `; ${plural(r.signatures, 'release signature')}`;
    lines.push(
      before
        ? `${indent}${r.version} adds ${plural(r.adds.images, 'image')}, ${formatBytes(r.adds.bytes)} over ${before.version}${signed}`
        : `${indent}${r.version}: ${plural(r.adds.images, 'image')}, ${formatBytes(r.adds.bytes)}${signed}`,
    );
  });
  return lines;
}

/** inspect's "upgrades from" line: with a path, from where the path starts, and the final release's own sources. */
export function upgradesFromLine(release: BundleRelease): string {
  const p = pathOf(release);
  const own = release.upgradeFrom.length ? release.upgradeFrom.join(', ') : 'any version';
  return p
    ? `upgrades from: ${p.from.join(', ')} (through the path; ${release.version} alone from ${own})`
    : `upgrades from: ${own}`;
}

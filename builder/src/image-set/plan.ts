import { formatPlatform } from '@offline-bundle/oci';
import { escapeControls } from '@offline-bundle/host';
import type { BundleImage } from '@offline-bundle/format';
import { formatBytes, plural } from '@offline-bundle/cli';
import { pathLines, type PathSummary } from '../release-path.js';

/** One image `bundle create --dry-run` would carry, with the bytes its manifests name. */
interface PlannedImage {
  reference: string;
  digest: string;
  platforms: string[];
  component?: string;
  /** Its manifests, config and layers, for the platforms kept: shared layers count in each image. */
  bytes: number;
  /** Where it was asked for: "--image #1", "bundle.yaml:7 (images[0])", "the release payload's etcd". */
  from: string;
}

/** What `bundle create --dry-run` prints: the resolved set, nothing fetched beyond manifests. */
export interface BundlePlan {
  /** With an update path (#43): each release of it, and what each adds over the one before. */
  release: { version: string; image: string | null; digest: string | null; path?: PathSummary };
  images: PlannedImage[];
  /** Helm charts (OCI artifacts): served by the node, never pulled. */
  charts: PlannedImage[];
  blobs: number;
  /** Every distinct blob once: the bundle's content before compression. */
  totalBytes: number;
  /** What is not in the blob cache yet and comes from a registry. */
  downloadBytes: number;
  /** What is not in the blob cache yet and is read from local files (archives, layouts, directories). */
  localBytes: number;
  /** As create's --json lists them (an operator catalog carried whole). */
  warnings?: { kind: string; object: string; message: string }[];
}

interface Resolved {
  entry: BundleImage;
  blobs: { digest: string; size: number }[];
  where: string;
  chart?: true;
}

const refName = (img: BundleImage) =>
  img.tag ? `${img.repository}:${img.tag}` : `${img.repository}@${img.digest}`;

export function planOf(
  images: Iterable<Resolved>,
  release: BundlePlan['release'],
  totals: { blobs: number; totalBytes: number; downloadBytes: number; localBytes: number },
): BundlePlan {
  const planned = (list: Resolved[]) =>
    list
      .map((r) => ({
        reference: refName(r.entry),
        digest: r.entry.digest,
        platforms: r.entry.platforms.map(formatPlatform),
        ...(r.entry.component ? { component: r.entry.component } : {}),
        bytes: r.blobs.reduce((s, b) => s + b.size, 0),
        from: r.where,
      }))
      .sort((a, b) => (a.reference < b.reference ? -1 : 1));
  const all = [...images];
  return {
    release,
    images: planned(all.filter((r) => !r.chart)),
    charts: planned(all.filter((r) => r.chart)),
    ...totals,
  };
}

function formatPlan(plan: BundlePlan): string {
  const r = plan.release;
  const width = Math.max(0, ...[...plan.images, ...plan.charts].map((i) => i.reference.length));
  const lines = [
    `release: ${r.version}${r.image ? ` (${r.image}, ${r.digest})` : ''}`,
    ...(r.path ? pathLines(r.path, 'path: ') : []),
    `images (${plan.images.length}):`,
    ...plan.images.map(
      (i) =>
        `  ${i.reference.padEnd(width)}  ${formatBytes(i.bytes).padStart(9)}  ${i.platforms.join(',')}  ${i.component ? `[${i.component}]` : i.from}`,
    ),
    ...(plan.charts.length
      ? [
          `charts (${plan.charts.length}):`,
          ...plan.charts.map(
            (i) => `  ${i.reference.padEnd(width)}  ${formatBytes(i.bytes).padStart(9)}  ${i.from}`,
          ),
        ]
      : []),
    `${plural(plan.blobs, 'blob')}, ${formatBytes(plan.totalBytes)} before compression; ${formatBytes(plan.downloadBytes)} to download${plan.localBytes ? `, ${formatBytes(plan.localBytes)} to read from local files` : ''} (the rest is in the cache)`,
    'dry run: no bundle written',
  ];
  // names come from registries and files: they must not drive the terminal
  return lines.map(escapeControls).join('\n') + '\n';
}

/** The plan on stdout: a table, or one JSON document with --json. */
export function reportPlan(plan: BundlePlan, json: boolean): void {
  process.stdout.write(json ? JSON.stringify({ dryRun: true, ...plan }) + '\n' : formatPlan(plan));
}

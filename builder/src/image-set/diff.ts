import { stat } from 'node:fs/promises';
import { assertRegularFile, escapeControls } from '@offline-bundle/host';
import {
  FormatError,
  namesSplitBundle,
  readHeader,
  withBundle,
  type BundleImage,
  type BundleManifest,
  type BundleRelease,
} from '@offline-bundle/format';
import { pathLines, pathOf, type PathSummary } from '../release-path.js';
import { formatBytes, plural } from '@offline-bundle/cli';
import { CATALOG_COMPONENT } from './catalog-source.js';

/** bundle.json as `inspect` reads it (its first frames, nothing verified): the one call into the format's readers. */
export async function readBundleManifest(file: string): Promise<BundleManifest> {
  // as inspect's code, without the raw ENOENT; NAME.bundle with only its parts there is the bundle
  if (!(await stat(file).catch(() => undefined)) && !(await namesSplitBundle(file)))
    throw new FormatError('IO_ERROR', `${file} does not exist: give the path of a .bundle file`);
  await assertRegularFile(file);
  return (await withBundle(file, readHeader)).manifest;
}

/** A bundle's release; with an update path (#43), its releases too. */
interface Side {
  file: string;
  release: { name: string; version: string; digest: string | null; path?: PathSummary };
}
interface Count {
  count: number;
  bytes: number;
}
interface ImageChange {
  reference: string;
  component?: string;
  digest: string;
}

/** What is compared of a bundle: bundle.json's, or what a bundle file resolves to (`bundle diff -f`). */
export interface Contents {
  release: Omit<Side['release'], 'path'> & { via?: BundleRelease['via']; path?: PathSummary };
  images: BundleImage[];
  charts?: BundleImage[];
  blobs: { digest: string; size: number }[];
}

interface ListDiff {
  added: ImageChange[];
  removed: ImageChange[];
  /** The same name (or, for a release's payload, the same component) with another digest. */
  changed: {
    reference: string;
    component?: string;
    from: string;
    to: string;
    fromReference: string;
  }[];
  unchanged: number;
}

interface BundleDiff {
  from: Side;
  to: Side;
  images: ListDiff;
  /** Helm charts, compared as the images are (by name). */
  charts: ListDiff;
  blobs: { shared: Count; added: Count; removed: Count };
}

const refName = (img: BundleImage) =>
  img.tag ? `${img.repository}:${img.tag}` : `${img.repository}@${img.digest}`;

/**
 * How an image is paired across two bundles. A payload image is named by its digest, so a new
 * release renames it: its component pairs the two. A component that is no one image's (every
 * operator catalog's, or one given twice) pairs nothing: those go by name.
 */
function keyer(a: Contents, b: Contents): (img: BundleImage) => string {
  const seen = new Map<string, number>();
  for (const m of [a, b]) {
    const mine = new Map<string, number>();
    for (const i of m.images)
      if (i.component) mine.set(i.component, (mine.get(i.component) ?? 0) + 1);
    for (const [c, n] of mine) seen.set(c, Math.max(seen.get(c) ?? 0, n));
  }
  return (img) =>
    img.component && img.component !== CATALOG_COMPONENT && seen.get(img.component) === 1
      ? `component:${img.component}`
      : `name:${refName(img)}`;
}
const change = (img: BundleImage): ImageChange => ({
  reference: refName(img),
  ...(img.component ? { component: img.component } : {}),
  digest: img.digest,
});

function count(blobs: { size: number }[]): Count {
  return { count: blobs.length, bytes: blobs.reduce((s, b) => s + b.size, 0) };
}

/** One list of A against the same list of B. */
function diffList(
  a: BundleImage[],
  b: BundleImage[],
  keyOf: (img: BundleImage) => string,
): ListDiff {
  // a key met again (the same name twice) is numbered: every image is counted
  const byKey = (list: BundleImage[]) => {
    const out = new Map<string, BundleImage>();
    const met = new Map<string, number>();
    for (const i of list) {
      const k = keyOf(i);
      const n = (met.get(k) ?? 0) + 1;
      met.set(k, n);
      out.set(n === 1 ? k : `${k}#${n}`, i);
    }
    return out;
  };
  const [before, after] = [byKey(a), byKey(b)];
  const images: ListDiff = { added: [], removed: [], changed: [], unchanged: 0 };
  for (const [k, img] of after) {
    const old = before.get(k);
    if (!old) images.added.push(change(img));
    else if (old.digest !== img.digest)
      images.changed.push({
        reference: refName(img),
        ...(img.component ? { component: img.component } : {}),
        from: old.digest,
        to: img.digest,
        fromReference: refName(old),
      });
    else images.unchanged++;
  }
  for (const [k, img] of before) if (!after.has(k)) images.removed.push(change(img));
  return images;
}

/** A against B: the one comparison of `bundle diff A B` and `bundle diff -f FILE BUNDLE`. */
export function diffContents(a: Contents, b: Contents, files: [string, string]): BundleDiff {
  const keyOf = keyer(a, b);
  const images = diffList(a.images, b.images, keyOf);
  const charts = diffList(a.charts ?? [], b.charts ?? [], (img) => `name:${refName(img)}`);
  const aBlobs = new Set(a.blobs.map((x) => x.digest));
  const bBlobs = new Set(b.blobs.map((x) => x.digest));
  const side = (file: string, m: Contents): Side => {
    // a bundle's path is in its release (via), a resolved file's is given
    const path = m.release.path ?? (m.release.via ? pathOf(m.release as BundleRelease) : undefined);
    return {
      file,
      release: {
        name: m.release.name,
        version: m.release.version,
        digest: m.release.digest,
        ...(path ? { path } : {}),
      },
    };
  };
  return {
    from: side(files[0], a),
    to: side(files[1], b),
    images,
    charts,
    blobs: {
      shared: count(b.blobs.filter((x) => aBlobs.has(x.digest))),
      added: count(b.blobs.filter((x) => !aBlobs.has(x.digest))),
      removed: count(a.blobs.filter((x) => !bBlobs.has(x.digest))),
    },
  };
}

const label = (c: { reference: string; component?: string }) =>
  c.component ? `${c.component} (${c.reference})` : c.reference;
function listLines(what: string, i: ListDiff): string[] {
  return [
    `${what}: ${i.added.length} added, ${i.removed.length} removed, ${i.changed.length} changed, ${i.unchanged} unchanged`,
    ...i.added.map((c) => `  + ${label(c)}  ${c.digest}`),
    ...i.removed.map((c) => `  - ${label(c)}  ${c.digest}`),
    ...i.changed.map((c) => `  ~ ${label(c)}  ${c.from} -> ${c.to}`),
  ];
}

export function formatDiff(d: BundleDiff): string {
  const c = d.charts;
  const lines = [
    `release: ${d.from.release.name} (${d.from.release.version}) -> ${d.to.release.name} (${d.to.release.version})`,
    ...(d.from.release.path ? pathLines(d.from.release.path, 'path (A): ') : []),
    ...(d.to.release.path ? pathLines(d.to.release.path, 'path (B): ') : []),
    ...listLines('images', d.images),
    ...(c.added.length + c.removed.length + c.changed.length + c.unchanged
      ? listLines('charts', c)
      : []),
    `blobs: ${plural(d.blobs.shared.count, 'blob')} shared (${formatBytes(d.blobs.shared.bytes)}), ${d.blobs.added.count} new (${formatBytes(d.blobs.added.bytes)}), ${d.blobs.removed.count} dropped (${formatBytes(d.blobs.removed.bytes)})`,
  ];
  // bundle.json is read before anything is verified: its strings must not drive the terminal
  return lines.map(escapeControls).join('\n') + '\n';
}

import { quoteName } from '@offline-bundle/host';
import { sha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import {
  BLOB_DIR,
  BUNDLE_JSON,
  INDEX_JSON,
  OCI_LAYOUT,
  OCI_LAYOUT_CONTENT,
  SIGNATURE,
  blobPath,
} from './layout.js';
import type { BundleManifest } from './manifest.js';

interface Listed {
  digest: string;
  size: number;
}

/**
 * The layout entries the archive carries, in the writer's order: oci-layout, index.json, the
 * blobs, but for a delta's blobs marked fromBase (baseEntries), which the node fills itself.
 */
export function layoutEntries(manifest: BundleManifest): (Listed & { path: string })[] {
  return [
    { path: OCI_LAYOUT, digest: sha256(OCI_LAYOUT_CONTENT), size: OCI_LAYOUT_CONTENT.length },
    { path: INDEX_JSON, digest: manifest.index.digest, size: manifest.index.size },
    ...manifest.blobs
      .filter((b) => !b.fromBase)
      .map((b) => ({ path: blobPath(b.digest), digest: b.digest, size: b.size })),
  ];
}

/** A delta's blobs that are listed but not carried: what the node must hold of its base. Empty for a full bundle. */
export function baseEntries(manifest: BundleManifest): (Listed & { path: string })[] {
  return manifest.blobs
    .filter((b) => b.fromBase)
    .map((b) => ({ path: blobPath(b.digest), digest: b.digest, size: b.size }));
}

/** "delta against 4.14.39 (4.14.39, sha256:…): 12 of 340 blobs carried, 1.2 GB of 18.0 GB": the facts inspect and verify show. */
export interface DeltaFacts {
  base: NonNullable<BundleManifest['base']>;
  carriedBlobs: number;
  totalBlobs: number;
  carriedBytes: number;
  totalBytes: number;
  /** Bytes the node fills from its base. */
  baseBytes: number;
}

/** "4.14.38", or "stable 4.14.38" when the release's name is not only its version. */
export function baseLabel(base: { name: string; version: string }): string {
  return base.name === base.version ? base.version : `${base.name} ${base.version}`;
}

/** What a delta carries and what it needs from its base; undefined for a full bundle. */
export function deltaFacts(manifest: BundleManifest): DeltaFacts | undefined {
  if (!manifest.base) return undefined;
  const fromBase = baseEntries(manifest);
  const totalBytes = manifest.blobs.reduce((s, b) => s + b.size, 0);
  const baseBytes = fromBase.reduce((s, b) => s + b.size, 0);
  return {
    base: manifest.base,
    carriedBlobs: manifest.blobs.length - fromBase.length,
    totalBlobs: manifest.blobs.length,
    carriedBytes: totalBytes - baseBytes,
    totalBytes,
    baseBytes,
  };
}

/**
 * The layout entries a trusted bundle.json lists, in the one order the writer packs them:
 * oci-layout, index.json, then the blobs in bundle.json's order (by digest before version 3). Each entry
 * is checked as it comes: listed, once, in order, at its listed size. An entry may come after
 * a gap (the skipped ones are then missing, reported at the end as MISSING_ENTRY), never
 * before one that already came (BAD_ORDER): order is part of "same bytes, same bundle", and
 * what makes a bundle reproducible and walkable by its headers.
 */
export class ListedEntries {
  private readonly byName = new Map<string, Listed & { position: number }>();
  private readonly seen = new Set<string>();
  private next = 0;

  constructor(manifest: BundleManifest) {
    layoutEntries(manifest).forEach((l, position) =>
      this.byName.set(l.path, { digest: l.digest, size: l.size, position }),
    );
  }

  /** Listed sizes in archive order. */
  get sizes(): number[] {
    return [...this.byName.values()].map((l) => l.size);
  }

  /** Checks the header of the next layout entry; returns what its bytes must hash to. */
  accept(name: string, size: number): Listed {
    const want = this.byName.get(name);
    if (!want) {
      const again = name === BUNDLE_JSON || name === SIGNATURE;
      const where = name.startsWith(BLOB_DIR)
        ? 'a blob bundle.json does not list'
        : 'outside the layout';
      throw new FormatError(
        again ? 'DUPLICATE_ENTRY' : 'UNEXPECTED_ENTRY',
        `entry ${quoteName(name)} is ${again ? 'a second copy' : where}`,
      );
    }
    if (this.seen.has(name))
      throw new FormatError('DUPLICATE_ENTRY', `entry ${quoteName(name)} appears twice`);
    if (want.position < this.next) {
      throw new FormatError(
        'BAD_ORDER',
        `entry ${quoteName(name)} comes after an entry listed later; a bundle holds ${OCI_LAYOUT}, ${INDEX_JSON}, then the blobs in bundle.json's order: the file was altered or not written by bundle create`,
      );
    }
    this.seen.add(name);
    this.next = want.position + 1;
    if (size > want.size)
      throw new FormatError(
        'OVERSIZED_ENTRY',
        `entry ${quoteName(name)} is ${size} bytes; bundle.json lists ${want.size}`,
      );
    if (size < want.size)
      throw new FormatError(
        'SIZE_MISMATCH',
        `entry ${quoteName(name)} is ${size} bytes; bundle.json lists ${want.size}`,
      );
    return { digest: want.digest, size: want.size };
  }

  /** The first listed entry that never came, if any. */
  missing(): string | undefined {
    for (const name of this.byName.keys()) if (!this.seen.has(name)) return name;
    return undefined;
  }

  /** All listed entries came. */
  get complete(): boolean {
    return this.seen.size === this.byName.size;
  }
}

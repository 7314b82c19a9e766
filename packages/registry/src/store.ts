import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { BundleRandomReader, blobPath, type BundleManifest } from '@offline-bundle/format';
import { mirrorPath } from '@offline-bundle/oci';

/**
 * Where the registry's bytes come from. Implementations only serve blobs the trusted
 * bundle.json lists, and only bytes that were checked against their signed digest.
 */
export interface BlobStore {
  /** Size of a listed blob, or undefined when the bundle has no such blob. */
  size(digest: string): number | undefined;
  /** Bytes [start, end) of a listed blob. */
  open(digest: string, start: number, end: number): Promise<Readable>;
  close(): Promise<void>;
}

const MANIFEST_TYPES = new Set([
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
]);

/** What names, tags and manifests the registry answers for, derived once from bundle.json. */
export interface Catalog {
  /** Repository name (mirrorPath of the source) → tag → manifest digest. */
  repositories: Map<string, Map<string, string>>;
  /** Manifest digest → media type. */
  manifests: Map<string, string>;
  blobs: Map<string, number>;
}

export function catalogOf(manifest: BundleManifest): Catalog {
  const repositories = new Map<string, Map<string, string>>();
  for (const img of manifest.images) {
    const name = mirrorPath(img.repository);
    const tags = repositories.get(name) ?? new Map<string, string>();
    if (img.tag) tags.set(img.tag, img.digest);
    repositories.set(name, tags);
  }
  const manifests = new Map<string, string>();
  const blobs = new Map<string, number>();
  for (const b of manifest.blobs) {
    blobs.set(b.digest, b.size);
    if (MANIFEST_TYPES.has(b.mediaType)) manifests.set(b.digest, b.mediaType);
  }
  // The top manifest's media type as resolved at build time wins over the blob list's.
  for (const img of manifest.images) manifests.set(img.digest, img.mediaType);
  return { repositories, manifests, blobs };
}

/** A staged layout: every file was digest-checked as it was written, and only renamed in place when complete. */
export class LayoutStore implements BlobStore {
  constructor(private readonly dir: string, private readonly catalog: Catalog) {}

  static async open(dir: string, catalog: Catalog): Promise<LayoutStore> {
    for (const [digest, size] of catalog.blobs) {
      const actual = await stat(join(dir, blobPath(digest))).then((s) => s.size, () => -1);
      if (actual !== size) throw new Error(`staged layout ${dir} is incomplete: ${blobPath(digest)} ${actual < 0 ? 'is missing' : `has ${actual} of ${size} bytes`}; stage the bundle again`);
    }
    return new LayoutStore(dir, catalog);
  }

  size(digest: string): number | undefined {
    return this.catalog.blobs.get(digest);
  }

  async open(digest: string, start: number, end: number): Promise<Readable> {
    return createReadStream(join(this.dir, blobPath(digest)), { start, end: end - 1 });
  }

  async close(): Promise<void> {}
}

/**
 * Serving straight from the media through the seek index. The index is untrusted and the
 * media may change under us, so each blob is hashed in full against its signed digest
 * before any byte of it is served; a blob verified once is not re-hashed while the file's
 * size and mtime stay the same.
 */
export class BundleFileStore implements BlobStore {
  private readonly verified = new Map<string, Promise<void>>();
  private stamp = '';

  private constructor(private readonly path: string, private readonly reader: BundleRandomReader, private readonly catalog: Catalog) {}

  static async open(path: string, manifest: BundleManifest, catalog: Catalog): Promise<BundleFileStore> {
    const reader = await BundleRandomReader.open(path, manifest);
    const store = new BundleFileStore(path, reader, catalog);
    store.stamp = await store.fileStamp();
    return store;
  }

  private async fileStamp(): Promise<string> {
    const s = await stat(this.path);
    return `${s.size}:${s.mtimeMs}:${s.ino}`;
  }

  size(digest: string): number | undefined {
    return this.catalog.blobs.get(digest);
  }

  private verify(digest: string): Promise<void> {
    let p = this.verified.get(digest);
    if (!p) {
      p = this.reader.verify(blobPath(digest));
      this.verified.set(digest, p);
      p.catch(() => this.verified.delete(digest));
    }
    return p;
  }

  async open(digest: string, start: number, end: number): Promise<Readable> {
    const stamp = await this.fileStamp();
    if (stamp !== this.stamp) {
      this.verified.clear();
      this.stamp = stamp;
    }
    await this.verify(digest);
    return this.reader.stream(blobPath(digest), start, end);
  }

  close(): Promise<void> {
    return this.reader.close();
  }
}

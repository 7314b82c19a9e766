import { constants } from 'node:fs';
import { lstat, open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { BundleRandomReader, blobPath, type BundleManifest } from '@offline-bundle/format';
import { BaseError, mirrorPath, sha256File } from '@offline-bundle/oci';

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

/** Why a layout cannot be served: missing, resized, not a regular file, or not the signed bytes. */
export class LayoutError extends BaseError<'LAYOUT_INVALID'> {}

/**
 * A staged or extracted layout. Blob files must be regular files (a symlink could point
 * anywhere) of the signed size, and are hashed once at open unless the caller has just
 * written them through a verified extraction.
 */
export class LayoutStore implements BlobStore {
  private constructor(private readonly dir: string, private readonly catalog: Catalog) {}

  static async open(dir: string, catalog: Catalog, opts: { verified?: boolean } = {}): Promise<LayoutStore> {
    for (const [digest, size] of catalog.blobs) {
      const path = join(dir, blobPath(digest));
      const st = await lstat(path).catch(() => undefined);
      if (!st) throw new LayoutError('LAYOUT_INVALID', `layout ${dir} is incomplete: ${blobPath(digest)} is missing; stage or extract the bundle again`);
      if (!st.isFile()) throw new LayoutError('LAYOUT_INVALID', `layout ${dir}: ${blobPath(digest)} is not a regular file; extract the bundle again`);
      if (st.size !== size) throw new LayoutError('LAYOUT_INVALID', `layout ${dir}: ${blobPath(digest)} has ${st.size} of ${size} bytes; stage or extract the bundle again`);
      if (!opts.verified) {
        const actual = await sha256File(path);
        if (actual.digest !== digest) throw new LayoutError('LAYOUT_INVALID', `layout ${dir}: ${blobPath(digest)} does not match its signed digest; extract the bundle again`);
      }
    }
    return new LayoutStore(dir, catalog);
  }

  size(digest: string): number | undefined {
    return this.catalog.blobs.get(digest);
  }

  async open(digest: string, start: number, end: number): Promise<Readable> {
    // O_NOFOLLOW: a blob swapped for a symlink after open() checked it is refused, not followed
    const fh = await open(join(this.dir, blobPath(digest)), constants.O_RDONLY | constants.O_NOFOLLOW);
    return fh.createReadStream({ start, end: end - 1 });
  }

  async close(): Promise<void> {}
}

/**
 * Serving straight from the media through the seek index. The index is untrusted and the
 * media may change under us, so each blob is hashed in full against its signed digest
 * before any byte of it is served; a blob verified once is not re-hashed while the file's
 * size and mtime stay the same.
 */
const SMALL_BLOB = 4 * 1024 * 1024;

/** Passes bytes through one chunk behind, releasing the last chunk only if the whole hashes to `digest`. */
function holdBackUntilVerified(digest: string): Transform {
  const hash = createHash('sha256');
  let held: Buffer | undefined;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      const out = held;
      held = chunk;
      cb(null, out);
    },
    flush(cb) {
      const actual = 'sha256:' + hash.digest('hex');
      if (actual !== digest) return cb(new Error(`blob ${digest} changed on the media while being served (read ${actual})`));
      cb(null, held);
    },
  });
}

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
    const path = blobPath(digest);
    const size = this.catalog.blobs.get(digest)!;
    // The media is read again for every request, so what was hashed is not proof of what is
    // sent: small blobs (manifests, configs) go out from the very buffer that was checked,
    // whole large blobs are hashed again as they stream and cut off before their last bytes
    // if they differ. Ranges rely on the earlier check and the frames' own checksums.
    if (size <= SMALL_BLOB) return Readable.from([(await this.reader.readVerified(path)).subarray(start, end)]);
    await this.verify(digest);
    const stream = this.reader.stream(path, start, end);
    return start === 0 && end === size ? stream.pipe(holdBackUntilVerified(digest)) : stream;
  }

  close(): Promise<void> {
    return this.reader.close();
  }
}

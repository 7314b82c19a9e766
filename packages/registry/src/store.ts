import { lstat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import {
  BundleRandomReader,
  blobPath,
  processFrameBudget,
  type BundleManifest,
  type BundleSource,
  type ByteBudget,
  type VerifiedFrames,
} from '@offline-bundle/format';
import { mirrorPath, newSha256 } from '@offline-bundle/oci';
import { BaseError, openRegularFile } from '@offline-bundle/host';
import { fileRange, readFully } from './file-range.js';

/**
 * Where the registry's bytes come from. Implementations only serve blobs the trusted
 * bundle.json lists, and only bytes that were checked against their signed digest.
 */
export interface BlobStore {
  /** Size of a listed blob, or undefined when the bundle has no such blob. */
  size(digest: string): number | undefined;
  /** Bytes [start, end) of a listed blob. */
  open(digest: string, start: number, end: number): Promise<Readable>;
  /** Whether streams wait for memory the open streams share (a frame budget): then a client that stops reading keeps it from them. */
  contended?(): boolean;
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
  /** Mirror name → the source repository it holds ("127.0.0.1_5000/acme/app" → "127.0.0.1:5000/acme/app"). */
  sources: Map<string, string>;
  /** Short name (the source path without its registry) → mirror name, where only one source has that path. */
  shortNames: Map<string, string>;
  /** Short names two or more sources share → their mirror names: never guessed, refused with the choices. */
  ambiguous: Map<string, string[]>;
  /** Manifest digest → media type. */
  manifests: Map<string, string>;
  blobs: Map<string, number>;
}

/**
 * Names a repository is served under. The mirror name (its registry as the first component,
 * ":" written "_") is what the runtimes' mirror drop-ins ask for and never collides. A person
 * pulling from the served address expects the source's own path ("H/acme/app" for an image
 * of 127.0.0.1:5000/acme/app), so that is answered too, unless two sources (or a mirror name)
 * share it: then it is refused with the names to use instead.
 */
function nameIndex(
  repositories: Iterable<string>,
): Pick<Catalog, 'sources' | 'shortNames' | 'ambiguous'> {
  const sources = new Map<string, string>();
  const claims = new Map<string, string[]>();
  for (const repository of repositories) {
    const name = mirrorPath(repository);
    sources.set(name, repository);
    const slash = name.indexOf('/');
    if (slash < 0) continue;
    const short = name.slice(slash + 1);
    claims.set(short, [...(claims.get(short) ?? []), name]);
  }
  const shortNames = new Map<string, string>();
  const ambiguous = new Map<string, string[]>();
  for (const [short, names] of claims) {
    if (names.length === 1 && !sources.has(short)) shortNames.set(short, names[0]!);
    else ambiguous.set(short, [...new Set(sources.has(short) ? [short, ...names] : names)].sort());
  }
  return { sources, shortNames, ambiguous };
}

export function catalogOf(manifest: BundleManifest): Catalog {
  const repositories = new Map<string, Map<string, string>>();
  // charts are served like images (only the runtime's pull and pin lists leave them out); an
  // image comes last so that, should a name or digest ever be both, the image's wins
  const served = [...(manifest.charts ?? []), ...manifest.images];
  for (const img of served) {
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
  for (const img of served) manifests.set(img.digest, img.mediaType);
  return { repositories, ...nameIndex(new Set(served.map((i) => i.repository))), manifests, blobs };
}

/** Each source repository with the names `address` serves it under, the short one first when it has one. */
export function servedNames(
  catalog: Catalog,
  address: string,
): { source: string; names: string[] }[] {
  const short = new Map([...catalog.shortNames].map(([s, name]) => [name, s]));
  return [...catalog.sources]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, source]) => ({
      source,
      names: [...(short.has(name) ? [short.get(name)!] : []), name].map((n) => `${address}/${n}`),
    }));
}

/** Why a layout cannot be served: missing, resized, not a regular file, or not the signed bytes. */
export type RegistryErrorCode = 'LAYOUT_INVALID';
class LayoutError extends BaseError<RegistryErrorCode> {}

/** Unit of re-checking a layout blob as it is served: small enough to hold per request. */
const CHECK_CHUNK = 1024 * 1024;
/**
 * Units read ahead of the one a client is sent, so the disk overlaps the socket. None while
 * each chunk is hashed again: two chunks ahead, hashed on the pool, tripled the memory of each
 * client (64 clients: 282 → 544 MiB; 300 that abort: 238 MiB → 2 GB) for no gain in time on 2
 * cores, where the hash competes with the client for the same CPU. One 256 KiB read otherwise.
 */
const CHECK_AHEAD = 0;
const READ_AHEAD = 1;
/** Read unit of a blob served unchecked: less CPU than 64 KiB or 1 MiB reads for a 16-stream client. */
const READ_UNIT = 256 * 1024;

const shrankLayout = (at: number) =>
  new LayoutError(
    'LAYOUT_INVALID',
    `a layout blob shrank to ${at} bytes while being served; extract the bundle again`,
  );

/**
 * Bytes [start, end) of a blob file. With `chunks` (its CHECK_CHUNK digests from a read that
 * found the signed digest), each chunk is hashed again and passed on only if it still matches.
 */
export function layoutRange(
  fh: FileHandle,
  size: number,
  start: number,
  end: number,
  what: string,
  chunks?: Buffer[],
): Readable {
  const check =
    chunks &&
    (async (c: number, piece: Buffer) => {
      if (!newSha256().update(piece).digest().equals(chunks[c]!)) {
        const at = c * CHECK_CHUNK;
        throw new LayoutError(
          'LAYOUT_INVALID',
          `${what} changed on disk after it was checked (bytes ${at}-${at + piece.length - 1}); it is not served: extract the bundle again`,
        );
      }
    });
  return check
    ? fileRange(fh, size, start, end, {
        unit: CHECK_CHUNK,
        ahead: CHECK_AHEAD,
        shrank: shrankLayout,
        check,
      })
    : fileRange(fh, size, start, end, { unit: READ_UNIT, ahead: READ_AHEAD, shrank: shrankLayout });
}

/**
 * A staged or extracted layout. Blob files must be regular files (a symlink could point
 * anywhere) of the signed size. Unless the caller has just written them through a verified
 * extraction into a directory only it writes, each blob is hashed at open, chunk by chunk,
 * and every chunk served later is held to its digest from that read: a file edited in place
 * after the check is refused, not served.
 */
export class LayoutStore implements BlobStore {
  private constructor(
    private readonly dir: string,
    private readonly catalog: Catalog,
    private readonly chunks: Map<string, Buffer[]> | undefined,
  ) {}

  static async open(
    dir: string,
    catalog: Catalog,
    opts: { verified?: boolean } = {},
  ): Promise<LayoutStore> {
    const chunks = opts.verified ? undefined : new Map<string, Buffer[]>();
    for (const [digest, size] of catalog.blobs) {
      const path = join(dir, blobPath(digest));
      const st = await lstat(path).catch(() => undefined);
      if (!st)
        throw new LayoutError(
          'LAYOUT_INVALID',
          `layout ${dir} is incomplete: ${blobPath(digest)} is missing; stage or extract the bundle again`,
        );
      if (!st.isFile())
        throw new LayoutError(
          'LAYOUT_INVALID',
          `layout ${dir}: ${blobPath(digest)} is not a regular file; extract the bundle again`,
        );
      if (st.size !== size)
        throw new LayoutError(
          'LAYOUT_INVALID',
          `layout ${dir}: ${blobPath(digest)} has ${st.size} of ${size} bytes; stage or extract the bundle again`,
        );
      if (chunks) {
        const hashed = await hashInChunks(path, size);
        if (hashed.digest !== digest)
          throw new LayoutError(
            'LAYOUT_INVALID',
            `layout ${dir}: ${blobPath(digest)} does not match its signed digest; extract the bundle again`,
          );
        chunks.set(digest, hashed.chunks);
      }
    }
    return new LayoutStore(dir, catalog, chunks);
  }

  size(digest: string): number | undefined {
    return this.catalog.blobs.get(digest);
  }

  async open(digest: string, start: number, end: number): Promise<Readable> {
    const what = `layout ${this.dir}: ${blobPath(digest)}`;
    // a blob swapped for a symlink or a FIFO after open() checked it is refused, not followed or waited on
    const fh = await openLayoutBlob(join(this.dir, blobPath(digest)), what);
    return layoutRange(
      fh,
      this.catalog.blobs.get(digest)!,
      start,
      end,
      what,
      this.chunks?.get(digest),
    );
  }

  async close(): Promise<void> {}
}

/** A layout blob file open for reading, or a LayoutError naming `what` and why it cannot be. */
function openLayoutBlob(path: string, what: string): Promise<FileHandle> {
  return openRegularFile(path).catch((err: unknown) => {
    throw new LayoutError(
      'LAYOUT_INVALID',
      `${what} cannot be served: ${(err as Error).message}; extract the bundle again`,
      { cause: err },
    );
  });
}

/** One read of a blob: its digest and each CHECK_CHUNK's sha256. */
async function hashInChunks(
  path: string,
  size: number,
): Promise<{ digest: string; chunks: Buffer[] }> {
  // swapped between the lstat and here: a FIFO must not hang the start
  const fh = await openLayoutBlob(path, path);
  try {
    const whole = newSha256();
    const chunks: Buffer[] = [];
    const buf = Buffer.allocUnsafe(Math.min(CHECK_CHUNK, size));
    for (let at = 0; at < size; at += CHECK_CHUNK) {
      const piece = await readFully(fh, buf, at, Math.min(CHECK_CHUNK, size - at), shrankLayout);
      whole.update(piece);
      chunks.push(newSha256().update(piece).digest());
    }
    return { digest: 'sha256:' + whole.digest('hex'), chunks };
  } finally {
    await fh.close();
  }
}

/**
 * Serving straight from the media through the seek index. The media may change under us
 * (rewritten in place, mtime restored), so every frame read is held to the sha256 of that
 * frame as a verifying pass read it (BundleRandomReader.streamChecked): a full GET and a
 * Range alike pass on only bytes that were verified.
 */
export class BundleFileStore implements BlobStore {
  private constructor(
    private readonly reader: BundleRandomReader,
    private readonly catalog: Catalog,
    private readonly budget: ByteBudget,
  ) {}

  /**
   * `verified`: the pass `verifyBundle(source, { frameDigests: true })` just made, saving a second
   * read of each blob. The store reads through `source`; whoever opened it closes it, after the store.
   */
  static async open(
    source: BundleSource,
    manifest: BundleManifest,
    catalog: Catalog,
    verified?: VerifiedFrames,
  ): Promise<BundleFileStore> {
    // a delta's base blobs are listed but not in the file: serving it would promise what it cannot send
    if (manifest.base)
      throw new LayoutError(
        'LAYOUT_INVALID',
        `${source.identity} is a delta against ${manifest.base.version}: the blobs it takes from there are not in it, so it cannot be served from its file; load it on a node that keeps ${manifest.base.version}, or serve the full bundle`,
      );
    // the reader's budget, named here so the registry can tell when others wait for it
    const budget = processFrameBudget;
    return new BundleFileStore(
      await BundleRandomReader.open(source, manifest, verified, { frameBudget: budget }),
      catalog,
      budget,
    );
  }

  size(digest: string): number | undefined {
    return this.catalog.blobs.get(digest);
  }

  open(digest: string, start: number, end: number): Promise<Readable> {
    return this.reader.streamChecked(blobPath(digest), start, end);
  }

  contended(): boolean {
    return this.budget.waiting > 0;
  }

  /** Nothing of its own to release: the source is its opener's. */
  async close(): Promise<void> {}
}

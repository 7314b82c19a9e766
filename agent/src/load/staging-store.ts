// Serving a layout while it is being staged, so pulls can start before the whole bundle is
// copied: a blob is served only once the extraction has written it and found its signed digest.
import type { FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { blobPath, type BundleManifest } from '@offline-bundle/format';
import { parseManifest } from '@offline-bundle/oci';
import { openRegularFile } from '@offline-bundle/host';
import { layoutRange, type BlobStore, type Catalog } from '@offline-bundle/registry';
import { AgentError } from '../errors.js';
import { namesOf } from '../runtime/runtime-target.js';

interface Waiter {
  promise: Promise<void>;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * A BlobStore over `partial` (where extractBundle writes) and then `target` (where it renames
 * it), serving only the blobs `verified` was told of. `image(ref)` resolves once every blob a
 * pull of that name needs is servable: its manifest, a child manifest of an index, the config,
 * the layers (read from the verified manifests as they arrive).
 */
export class StagingStore implements BlobStore {
  private readonly ready = new Set<string>();
  private readonly waiting = new Map<string, Waiter>();
  private readonly digestOf = new Map<string, string>();
  private failure: { err: unknown } | undefined;
  private dirs: string[];

  constructor(
    partial: string,
    private readonly target: string,
    private readonly catalog: Catalog,
    m: BundleManifest,
  ) {
    this.dirs = [partial, target];
    for (const img of m.images) for (const n of namesOf(img)) this.digestOf.set(n, img.digest);
  }

  /** The extraction wrote `digest` and it hashes as bundle.json (signed) says. */
  verified(digest: string): void {
    this.ready.add(digest);
    this.waiting.get(digest)?.resolve();
    this.waiting.delete(digest);
  }

  /** The layout is complete and renamed into place. */
  staged(): void {
    this.dirs = [this.target];
  }

  /** Staging failed: every wait ends with `err`. */
  fail(err: unknown): void {
    this.failure ??= { err };
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }

  /** Every blob of the catalog staged. */
  private all(): Promise<void> {
    return Promise.all([...this.catalog.blobs.keys()].map((d) => this.blob(d))).then(
      () => undefined,
    );
  }

  private blob(digest: string): Promise<void> {
    if (this.ready.has(digest)) return Promise.resolve();
    if (this.failure) return Promise.reject(this.failure.err);
    let w = this.waiting.get(digest);
    if (!w) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const promise = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      // awaited by whoever asked; a failure nobody waits for is no crash
      promise.catch(() => undefined);
      w = { promise, resolve, reject };
      this.waiting.set(digest, w);
    }
    return w.promise;
  }

  /** Resolves when the image pulled by `ref` (a name from imageRefs) can be served in full. */
  async image(ref: string): Promise<void> {
    const digest = this.digestOf.get(ref);
    if (!digest) throw new AgentError('StagingFailed', `${ref} is not an image of this bundle`);
    await this.manifest(digest);
  }

  private async manifest(digest: string): Promise<void> {
    await this.blob(digest);
    let parsed: ReturnType<typeof parseManifest>;
    try {
      parsed = parseManifest(await this.read(digest), this.catalog.manifests.get(digest));
    } catch {
      // a kind of manifest not understood here: its pull waits for the whole layout, as without overlap
      return this.all();
    }
    // only what the bundle carries: a platform left out of it is never asked for
    const carried = (d: { digest: string }) => this.catalog.blobs.has(d.digest);
    if (parsed.kind === 'index')
      await Promise.all(parsed.index.manifests.filter(carried).map((c) => this.manifest(c.digest)));
    else
      await Promise.all(
        [parsed.manifest.config, ...parsed.manifest.layers]
          .filter(carried)
          .map((d) => this.blob(d.digest)),
      );
  }

  private async read(digest: string): Promise<Buffer> {
    const fh = await this.openFile(digest);
    try {
      return await fh.readFile();
    } finally {
      await fh.close();
    }
  }

  /** Tries the partial directory, then the renamed one: the rename may happen between the two. */
  private async openFile(digest: string): Promise<FileHandle> {
    let last: unknown;
    for (const dir of this.dirs) {
      try {
        // as LayoutStore: a blob swapped for a symlink or a FIFO is refused, not followed or waited on
        return await openRegularFile(join(dir, blobPath(digest)));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        last = err;
      }
    }
    throw last;
  }

  size(digest: string): number | undefined {
    return this.catalog.blobs.get(digest);
  }

  async open(digest: string, start: number, end: number): Promise<Readable> {
    if (!this.ready.has(digest))
      throw new AgentError('StagingFailed', `blob ${digest} is not staged and verified yet`);
    const fh = await this.openFile(digest);
    return layoutRange(
      fh,
      this.catalog.blobs.get(digest)!,
      start,
      end,
      `staged ${blobPath(digest)}`,
    );
  }

  async close(): Promise<void> {}
}

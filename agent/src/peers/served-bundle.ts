// What a node offers its peers of one bundle: the signed description as it was verified here,
// and the layout entries it holds verified: a kept staged layout, a staging still being
// written (each entry once it is renamed into place after hashing to its signed digest), or
// the bundle file itself when the node serves from the media (every frame held to its digest).
import { lstat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { BundleRandomReader, OCI_LAYOUT, bundleIdentity, layoutEntries, parseManifestBytes, readLayoutDescription, type BundleManifest, type BundleSource, type VerifiedFrames } from '@offline-bundle/format';
import { openRegularFile } from '@offline-bundle/host';
import { layoutRange } from '@offline-bundle/registry';

interface Entry { path: string; size: number }

/** What the peer server needs of a bundle it serves. */
export interface PeerOffer {
  readonly manifestDigest: string;
  readonly manifestBytes: Buffer;
  readonly signature: Buffer;
  readonly complete: boolean;
  verifiedDigests(limit: number): string[];
  size(digest: string): number | undefined;
  open(digest: string, start: number, end: number): Promise<Readable>;
}

export class ServedBundle implements PeerOffer {
  /** sha256 of bundle.json: the name peers ask for it by. */
  readonly manifestDigest: string;
  private readonly entries = new Map<string, Entry>();
  private readonly ready = new Set<string>();
  private reader: BundleRandomReader | undefined;

  private constructor(readonly manifestBytes: Buffer, readonly signature: Buffer, readonly manifest: BundleManifest, private dirs: string[]) {
    this.manifestDigest = bundleIdentity(manifestBytes);
    // oci-layout's bytes are fixed: a fetcher writes it itself
    for (const e of layoutEntries(manifest)) if (e.path !== OCI_LAYOUT) this.entries.set(e.digest, { path: e.path, size: e.size });
  }

  /**
   * A staged layout kept after its load (staging.keep): its entries were verified when staged
   * and are served at their signed size; a peer hashes every byte again.
   */
  static async fromLayout(dir: string): Promise<ServedBundle> {
    const { manifestBytes, signature } = await readLayoutDescription(dir);
    const served = new ServedBundle(manifestBytes, signature, parseManifestBytes(manifestBytes), [dir]);
    for (const [digest, e] of served.entries) {
      const st = await lstat(join(dir, e.path)).catch(() => undefined);
      if (st?.isFile() && st.size === e.size) served.ready.add(digest);
    }
    return served;
  }

  /**
   * A staging under way into `partial` (renamed to `target` at its end): nothing is served
   * until `verified` names it, so a peer fetches from a node that is itself still fetching.
   */
  static staging(partial: string, target: string, head: { manifestBytes: Buffer; signature: Buffer; manifest: BundleManifest }): ServedBundle {
    return new ServedBundle(head.manifestBytes, head.signature, head.manifest, [partial, target]);
  }

  /**
   * The bundle file a node serves from the media (`source` stays open while served; its opener
   * closes it). Every frame read is held to its digest from `verified` (the load's verifying
   * pass) or from the entry's own hash check before its first byte (BundleRandomReader).
   */
  static async fromBundleFile(source: BundleSource, head: { manifestBytes: Buffer; signature: Buffer; manifest: BundleManifest }, verified?: VerifiedFrames): Promise<ServedBundle> {
    const served = new ServedBundle(head.manifestBytes, head.signature, head.manifest, []);
    served.reader = await BundleRandomReader.open(source, head.manifest, verified);
    for (const digest of served.entries.keys()) served.ready.add(digest);
    return served;
  }

  /** The entry `digest` is in place and hashed to its signed digest. */
  verified(digest: string): void {
    if (this.entries.has(digest)) this.ready.add(digest);
  }

  /** The staging was renamed into place. */
  staged(): void {
    if (this.dirs.length) this.dirs = [this.dirs.at(-1)!];
  }

  get complete(): boolean {
    return this.ready.size === this.entries.size;
  }

  /** Digests served now, at most `limit` of them. */
  verifiedDigests(limit: number): string[] {
    return [...this.ready].slice(0, limit);
  }

  /** The size of a verified entry; undefined for one not listed or not verified yet. */
  size(digest: string): number | undefined {
    return this.ready.has(digest) ? this.entries.get(digest)!.size : undefined;
  }

  /** Bytes [start, end) of a verified entry. */
  async open(digest: string, start: number, end: number): Promise<Readable> {
    const e = this.entries.get(digest)!;
    if (this.reader) return this.reader.streamChecked(e.path, start, end);
    const fh = await this.openFile(e.path);
    return layoutRange(fh, e.size, start, end, `served ${e.path}`);
  }

  /** The partial directory, then the renamed one: the rename may fall between the two. */
  private async openFile(path: string): Promise<FileHandle> {
    let last: unknown;
    for (const dir of this.dirs) {
      try {
        // a file swapped for a symlink or a FIFO is refused, not followed or waited on
        return await openRegularFile(join(dir, path));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        last = err;
      }
    }
    throw last;
  }
}

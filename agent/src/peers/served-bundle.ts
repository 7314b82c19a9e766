// What a node offers its peers of one bundle: the signed description as it was verified here,
// and the layout entries it holds verified: a kept staged layout, a staging still being
// written (each entry once it is renamed into place after hashing to its signed digest), or
// the bundle file itself when the node serves from the media (every frame held to its digest).
// A staging under way also serves the verified pieces of the blobs it is still writing (the
// head's `pieces`): their temp file only ever holds pieces that matched, from its start.
import { lstat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Readable } from 'node:stream';
import {
  BundleRandomReader,
  OCI_LAYOUT,
  PieceDigests,
  WRITING_SUFFIX,
  bundleIdentity,
  layoutEntries,
  parseManifestBytes,
  readLayoutDescription,
  type BundleManifest,
  type BundleSource,
  type VerifiedFrames,
} from '@offline-bundle/format';
import { openRegularFile } from '@offline-bundle/host';
import { layoutRange } from '@offline-bundle/registry';
import { MAX_HAVE_PARTIAL_BLOBS, prefixBitmap } from './piece-listing.js';

interface Entry {
  path: string;
  size: number;
}

/** What the peer server needs of a bundle it serves. */
export interface PeerOffer {
  readonly manifestDigest: string;
  readonly manifestBytes: Buffer;
  readonly signature: Buffer;
  readonly complete: boolean;
  verifiedDigests(limit: number): string[];
  size(digest: string): number | undefined;
  open(digest: string, start: number, end: number): Promise<Readable>;
  /** Blobs held only in part, each a bitmap of its verified pieces (piece-listing.ts); absent: whole blobs only (an older agent). */
  partialPieces?(limit: number): Record<string, string>;
  /** The signed size of a blob held in part and how many of its first bytes are verified; undefined when none are. */
  partial?(digest: string): { size: number; verified: number } | undefined;
}

/** A blob's range asked of a node that no longer (or not yet) holds it: answered as a blob not held (404), the peer not to blame. */
export class NotHeldHere extends Error {}

/** Pieces announced but not (or no longer) in the temp file: answered busy (503), so the asker tries again and charges no miss. */
export class NotOnDiskYet extends Error {}

/**
 * How long announced pieces may take to show in the temp file (the fetch announces them once
 * landed, so only a truncation between announcement and ask waits): beyond it, busy.
 */
const ON_DISK_WAIT_MS = 250;

async function onDisk(fh: FileHandle, end: number): Promise<void> {
  const until = Date.now() + ON_DISK_WAIT_MS;
  while ((await fh.stat()).size < end) {
    if (Date.now() > until)
      throw new NotOnDiskYet(`bytes up to ${end} are not on disk here yet: try again`);
    await sleep(10);
  }
}

export class ServedBundle implements PeerOffer {
  /** sha256 of bundle.json: the name peers ask for it by. */
  readonly manifestDigest: string;
  private readonly entries = new Map<string, Entry>();
  private readonly ready = new Set<string>();
  private reader: BundleRandomReader | undefined;
  /** Verified bytes (whole pieces, from the start) of the blobs a staging is still writing. */
  private readonly prefix = new Map<string, number>();
  private readonly pieces: PieceDigests | undefined;

  private constructor(
    readonly manifestBytes: Buffer,
    readonly signature: Buffer,
    readonly manifest: BundleManifest,
    private dirs: string[],
  ) {
    this.manifestDigest = bundleIdentity(manifestBytes);
    // oci-layout's bytes are fixed: a fetcher writes it itself
    for (const e of layoutEntries(manifest))
      if (e.path !== OCI_LAYOUT) this.entries.set(e.digest, { path: e.path, size: e.size });
    this.pieces = manifest.pieces ? new PieceDigests(manifest.pieces) : undefined;
  }

  /**
   * A staged layout kept after its load (staging.keep): its entries were verified when staged
   * and are served at their signed size; a peer hashes every byte again.
   */
  static async fromLayout(dir: string): Promise<ServedBundle> {
    const { manifestBytes, signature } = await readLayoutDescription(dir);
    const served = new ServedBundle(manifestBytes, signature, parseManifestBytes(manifestBytes), [
      dir,
    ]);
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
  static staging(
    partial: string,
    target: string,
    head: { manifestBytes: Buffer; signature: Buffer; manifest: BundleManifest },
  ): ServedBundle {
    return new ServedBundle(head.manifestBytes, head.signature, head.manifest, [partial, target]);
  }

  /**
   * The bundle file a node serves from the media (`source` stays open while served; its opener
   * closes it). Every frame read is held to its digest from `verified` (the load's verifying
   * pass) or from the entry's own hash check before its first byte (BundleRandomReader).
   */
  static async fromBundleFile(
    source: BundleSource,
    head: { manifestBytes: Buffer; signature: Buffer; manifest: BundleManifest },
    verified?: VerifiedFrames,
  ): Promise<ServedBundle> {
    const served = new ServedBundle(head.manifestBytes, head.signature, head.manifest, []);
    served.reader = await BundleRandomReader.open(source, head.manifest, verified);
    for (const digest of served.entries.keys()) served.ready.add(digest);
    return served;
  }

  /** The entry `digest` is in place and hashed to its signed digest. */
  verified(digest: string): void {
    if (this.entries.has(digest)) this.ready.add(digest);
    this.prefix.delete(digest);
  }

  /**
   * The first `bytes` of a blob a staging is writing matched their signed pieces and are in its
   * temp file (the fetch's word; 0 when it starts the blob over). Only blobs the head
   * splits into pieces, and never in a served layout or bundle file.
   */
  verifiedPrefix(digest: string, bytes: number): void {
    if (this.ready.has(digest) || !this.pieces?.covers(digest) || this.dirs.length < 2) return;
    if (bytes > 0) this.prefix.set(digest, Math.min(bytes, this.entries.get(digest)!.size));
    else this.prefix.delete(digest);
  }

  partialPieces(limit: number): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [digest, bytes] of [...this.prefix].slice(
      0,
      Math.min(limit, MAX_HAVE_PARTIAL_BLOBS),
    )) {
      if (bytes >= this.pieces!.size)
        out[digest] = prefixBitmap(this.entries.get(digest)!.size, this.pieces!.size, bytes);
    }
    return out;
  }

  partial(digest: string): { size: number; verified: number } | undefined {
    const bytes = this.prefix.get(digest);
    if (bytes === undefined) return undefined;
    const size = this.entries.get(digest)!.size;
    // whole pieces only: the bitmap says no more
    return {
      size,
      verified: bytes >= size ? size : Math.floor(bytes / this.pieces!.size) * this.pieces!.size,
    };
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

  /** Bytes [start, end) of a verified entry, or of the verified pieces of one a staging is still writing. */
  async open(digest: string, start: number, end: number): Promise<Readable> {
    const e = this.entries.get(digest)!;
    if (this.reader) return this.reader.streamChecked(e.path, start, end);
    if (!this.ready.has(digest)) return this.openPartial(e, digest, start, end);
    const fh = await this.openFile(e.path);
    return layoutRange(fh, e.size, start, end, `served ${e.path}`);
  }

  /**
   * From the temp file the fetch writes verified pieces to: only up to what it announced, and
   * only what is on disk. Renamed in between:
   * the whole entry, now verified.
   */
  private async openPartial(
    e: Entry,
    digest: string,
    start: number,
    end: number,
  ): Promise<Readable> {
    const held = this.partial(digest);
    if (!held || end > held.verified)
      throw new NotHeldHere(`bytes ${start}-${end - 1} of ${digest} are not held verified here`);
    let fh: FileHandle;
    try {
      fh = await openRegularFile(join(this.dirs[0]!, e.path + WRITING_SUFFIX));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      if (this.ready.has(digest)) return this.open(digest, start, end);
      throw new NotHeldHere(`${digest} is no longer being written here`);
    }
    try {
      await onDisk(fh, end);
    } catch (err) {
      await fh.close();
      throw err;
    }
    return layoutRange(fh, end, start, end, `served ${e.path} (verified pieces)`);
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

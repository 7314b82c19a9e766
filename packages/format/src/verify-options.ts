import type { Hash } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { FrameInspector } from './frame-inspector.js';
import type { TrustedKey } from './keys.js';
import type { BundleManifest } from './manifest.js';
import type { SeekIndex } from './seekable.js';
import type { BundleSource } from './source.js';
import type { TarWalker } from './tar-walker.js';
import type { Trust } from './trust.js';
import type { BoundedDecompress } from './zstd-bounded.js';

export interface LayoutEntry {
  /** Path inside the layout: "oci-layout", "index.json" or "blobs/sha256/<hex>". */
  path: string;
  digest: string;
  size: number;
}

export interface VerifyOptions {
  trust: Trust;
  /**
   * Receives each layout entry's bytes as they stream by; the entry is only known good
   * when the whole pass resolves, so a consumer writes to a staging place it can drop.
   * Without it, the bytes are hashed and discarded.
   */
  onEntry?: (entry: LayoutEntry, data: Readable) => Promise<void>;
  /**
   * Called once an entry (after onEntry resolved) hashes to the digest bundle.json lists. Under
   * a signature that is the entry known good; under digest-only trust nothing is before the
   * pass resolves.
   */
  onVerified?: (entry: LayoutEntry) => void;
  /** Called after bundle.json is trusted, before any layout entry. */
  onManifest?: (
    manifest: BundleManifest,
    manifestBytes: Buffer,
    signature: Buffer,
  ) => Promise<void> | void;
  /** Compressed bytes read so far, of the file's size. */
  onProgress?: (done: number, total: number) => void;
  /** Stops the pass (the agent shutting down); it then rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Also hash each zstd frame's compressed bytes as they pass, for reading the same file
   * again later through the seek index (serving from the media) with every frame held to
   * what this pass verified, instead of hashing each blob a second time.
   */
  frameDigests?: boolean;
}

/** bundle.json and its signature, trusted. */
export interface TrustedHead {
  manifest: BundleManifest;
  manifestBytes: Buffer;
  signature: Buffer;
  /** The trusted key that verified the signature (undefined under digest-only trust). */
  signer?: TrustedKey;
}

export interface VerifiedBundle extends TrustedHead {
  fileDigest: string;
  fileSize: number;
  /** Proven to describe the file's frames exactly (offsets and sizes) as this pass read them. */
  seekIndex: SeekIndex;
  /** sha256 of each frame's compressed bytes, by seek-index position (with `frameDigests`). */
  frameDigests?: Buffer[];
}

/** What the phases of one verifying pass share (reader.ts runs it). */
export interface PassState {
  readonly source: BundleSource;
  readonly opts: VerifyOptions;
  /** The source's size at open: the bytes the pass reads. */
  readonly fileSize: number;
  readonly fileHash: Hash;
  readonly inspector: FrameInspector;
  readonly walker: TarWalker;
  readonly decompress: BoundedDecompress;
  /** Compressed bytes read. */
  rawRead: number;
  /** Where the source's bytes ran out before its size, if they did. */
  endedAt?: number;
  /** The archive's length, once bundle.json has told it. */
  expectedTar: number;
  /** Archive bytes decompressed so far. */
  tarBytes: number;
  /** Not a flag set as bytes pass: a small archive passes in one chunk before bundle.json has told how long it should be. */
  complete(): boolean;
}

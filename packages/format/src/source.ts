import type { Readable } from 'node:stream';

/**
 * Where a bundle's bytes come from: one file today; parts across sticks, a base release plus
 * a delta, or a peer node next (docs/ARCHITECTURE.md). Every reader of a bundle reads through
 * one. A source is untrusted: it may return short, fail, or return other bytes on a second
 * read of the same range; the readers above it check every byte against the signed
 * bundle.json, so none of that can pass as a good bundle.
 *
 * Whoever opens a source closes it; the readers given one never do.
 */
export interface StreamOptions {
  pass?: boolean;
}

export interface BundleSource {
  /** Names the bundle in logs and errors (a file's path). */
  readonly identity: string;
  /** The bundle's length in bytes when the source was opened: what the readers read. */
  readonly size: number;
  /**
   * Bytes [offset, offset + length); fewer only when the source ends early (cut short). `into`:
   * a buffer the caller owns, read into (and a view of it returned) when it is large enough and
   * the source reads in one piece; the caller must not use it again while it uses the result.
   */
  read(offset: number, length: number, into?: Buffer): Promise<Buffer>;
  /**
   * Bytes [start, end) in big chunks. Ends early when the source does; errors as reading does.
   * `pass`: this is the one verifying pass over the whole bundle (a file source reads it
   * sequentially, so how far it got shows in /proc/PID/fdinfo, as for a plain read).
   */
  stream(start: number, end: number, opts?: StreamOptions): Readable;
  /**
   * The length now, smaller than `size` when the bundle shrank while it was read (its media
   * going away). Rejects (IO_ERROR naming the identity) when the bundle cannot be reached at
   * all any more: a file deleted, its stick pulled.
   */
  currentSize(): Promise<number>;
  close(): Promise<void>;
}

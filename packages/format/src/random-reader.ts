import type { Readable } from 'node:stream';
import { quoteName, readBuffers } from '@offline-bundle/host';
import { newSha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { headerMessage, headerMismatch } from './entry-header.js';
import { processFrameBudget, type ByteBudget } from './frame-budget.js';
import { FrameStream, type FramePiece } from './frame-stream.js';
import { frameHeaderProblem, parseFrameHeader, type FrameHeader } from './frame-inspector.js';
import {
  BUNDLE_JSON,
  FRAME_BYTES,
  INDEX_JSON,
  SIGNATURE,
  TAR_BLOCK,
  blobPath,
  paddedSize,
} from './layout.js';
import { ListedEntries } from './listing.js';
import type { BundleManifest } from './manifest.js';
import { readSeekIndex } from './bundle-ends.js';
import { frameAt, type SeekIndex } from './seekable.js';
import type { BundleSource } from './source.js';
import { parseHeader } from './ustar.js';
import { decompressFrame } from './zstd-bounded.js';

interface Located {
  frame: number;
  offset: number;
  size: number;
}

/** Digest checks of the frames a stream reads (see `frame`). */
interface FrameChecks {
  require?: boolean;
  record?: Map<number, Buffer>;
}

export interface RandomReaderOptions {
  /** What decoded frames of all this reader's streams may hold at once; the process's own (FRAME_BUDGET_BYTES) by default. */
  frameBudget?: ByteBudget;
}

/** What a verifying pass over this very file proved: its true frame list and each frame's sha256. */
export interface VerifiedFrames {
  seekIndex: SeekIndex;
  frameDigests: readonly Buffer[];
}

/**
 * Random access to a bundle's entries through its seek index, without decompressing from
 * the start. The index is outside the signature, so every located entry must have the
 * name and size the trusted bundle.json lists, and `readVerified` hashes a whole entry
 * before returning a byte of it.
 *
 * The source is read again for every request and may change in between (media rewritten in
 * place, a peer answering otherwise), so `streamChecked` holds every frame it reads to the sha256 of that frame's bytes
 * as a verifying pass read them: from `verifyBundle`'s pass when given, else from the
 * entry's own hash check, made once before its first byte is returned.
 */
export class BundleRandomReader {
  private readonly frameDigests: (Buffer | undefined)[];
  private readonly checked = new Map<string, Promise<void>>();

  private constructor(
    private readonly source: BundleSource,
    readonly index: SeekIndex,
    private readonly entries: Map<string, Located>,
    private readonly listed: Map<string, { digest: string; size: number }>,
    private readonly allChecked: boolean,
    digests: readonly Buffer[] | undefined,
    private readonly budget: ByteBudget,
  ) {
    this.frameDigests = digests ? [...digests] : new Array<Buffer | undefined>(index.frames.length);
  }

  /**
   * `verified`: what `verifyBundle(source, { frameDigests: true })` returned for this source.
   * The reader reads through `source` until its opener closes it; it holds nothing else open.
   */
  static async open(
    source: BundleSource,
    manifest: BundleManifest,
    verified?: VerifiedFrames,
    opts: RandomReaderOptions = {},
  ): Promise<BundleRandomReader> {
    const index = verified?.seekIndex ?? (await readSeekIndex(source));
    if (verified && verified.frameDigests.length !== index.frames.length)
      throw new FormatError(
        'BAD_SEEK_TABLE',
        'the frame digests given do not match the seek index',
      );
    const listed = new Map<string, { digest: string; size: number }>([
      [INDEX_JSON, manifest.index],
    ]);
    for (const b of manifest.blobs) listed.set(blobPath(b.digest), b);
    const entries = new Map<string, Located>();
    const reader = new BundleRandomReader(
      source,
      index,
      entries,
      listed,
      !!verified,
      verified?.frameDigests,
      opts.frameBudget ?? processFrameBudget,
    );
    await reader.walk(new ListedEntries(manifest));
    return reader;
  }

  /**
   * Walks the archive by its headers, holding them to the streaming reader's rules: every
   * header the writer's own (entry-header.ts), bundle.json and its signature first, then the
   * listed entries in order at their listed sizes, then the two zero blocks as the last frame.
   */
  private async walk(layout: ListedEntries): Promise<void> {
    const head = [BUNDLE_JSON, SIGNATURE];
    let offset = 0;
    let count = 0;
    while (offset < this.index.decompressedBytes) {
      const frame = frameAt(this.index, offset);
      const block = await this.frame(frame);
      const zero = block.subarray(0, TAR_BLOCK).every((b) => b === 0);
      // after the last listed entry: the trailer, unless another header comes (whose own
      // fault, a duplicate or an unlisted entry, is the better reason)
      if (layout.complete && (zero || !isHeaderFrame(block))) return this.trailer(block, offset);
      if (zero) break;
      if (block.length !== TAR_BLOCK)
        throw new FormatError('BAD_SEEK_TABLE', `frame ${frame} should hold one tar header`);
      const h = parseHeader(block)!;
      if (h.type !== '0' && h.type !== '\0')
        throw new FormatError('NOT_A_FILE', `entry ${quoteName(h.name)} is not a regular file`);
      const mismatch = headerMismatch(block);
      if (mismatch) throw new FormatError('UNEXPECTED_ENTRY', headerMessage(h.name, mismatch));
      if (count < head.length) {
        if (h.name !== head[count])
          throw new FormatError(
            'BAD_ORDER',
            `the archive's entry ${count + 1} is ${quoteName(h.name)}; a bundle starts with ${BUNDLE_JSON} then ${SIGNATURE}`,
          );
      } else {
        layout.accept(h.name, h.size);
      }
      count++;
      this.entries.set(h.name, {
        frame: h.size > 0 ? frameAt(this.index, offset + TAR_BLOCK) : frame + 1,
        offset: offset + TAR_BLOCK,
        size: h.size,
      });
      offset += TAR_BLOCK + paddedSize(h.size);
    }
    const missing = layout.missing();
    if (missing)
      throw new FormatError('MISSING_ENTRY', `entry ${quoteName(missing)} is not in the archive`);
    throw new FormatError(
      'TRUNCATED',
      'the archive ends without its two end-of-archive blocks: the file is incomplete or was altered',
    );
  }

  /** The end of the archive: one last frame of exactly two zero blocks, as the writer makes it. */
  private trailer(block: Buffer, offset: number): void {
    if (
      block.length !== 2 * TAR_BLOCK ||
      offset + block.length !== this.index.decompressedBytes ||
      !block.every((b) => b === 0)
    ) {
      throw new FormatError(
        'TRAILING_DATA',
        'the archive does not end with one frame of two zero blocks after its listed entries: the file was altered; get a fresh copy',
      );
    }
  }

  /**
   * Frame `i` decompressed. Its compressed bytes must hash to the digest a verifying pass
   * recorded for it when there is one (or when `require`d); `record` collects the digests of
   * frames read without one. Decoded into `into` when it is given and large enough; then its
   * compressed bytes, when they fill at least half a pooled buffer (the budget charges their
   * size), are read into one too, done with once the frame is decoded.
   */
  private async frame(
    i: number,
    opts: FrameChecks = {},
    into?: Buffer,
    signal?: AbortSignal,
  ): Promise<Buffer> {
    const f = this.index.frames[i];
    if (!f) throw new FormatError('BAD_SEEK_TABLE', `frame ${i} is past the seek index`);
    const readInto =
      into &&
      f.compressedSize <= compressedBuffers.size &&
      f.compressedSize >= compressedBuffers.size / 2
        ? compressedBuffers.take()
        : undefined;
    try {
      const buf = await this.source.read(f.compressedOffset, f.compressedSize, readInto);
      if (buf.length !== f.compressedSize)
        throw new FormatError(
          'TRUNCATED',
          `frame ${i} is cut short: the file was truncated (media removed?)`,
        );
      // its stream is gone (a client that left while this frame was read ahead): no hash, no decode
      signal?.throwIfAborted();
      const want = this.frameDigests[i];
      if (want || opts.require || opts.record) {
        const got = newSha256().update(buf).digest();
        if (want && !got.equals(want)) throw changedOnMedia(i, f.compressedOffset);
        if (!want && opts.require)
          throw new FormatError(
            'BLOB_DIGEST_MISMATCH',
            `frame ${i} was never verified; it cannot be served`,
          );
        if (!want) opts.record?.set(i, got);
      }
      // the streaming pass checks every frame's flags too; media may have changed since
      const header = parseFrameHeaderOf(buf, i);
      const bad = frameHeaderProblem(header, f.compressedOffset);
      if (bad) throw bad;
      try {
        return decompressFrame(buf, f.decompressedSize, into);
      } catch (cause) {
        if (cause instanceof FormatError)
          throw new FormatError(cause.code, `frame ${i}: ${cause.message}`, { cause });
        throw new FormatError(
          'CORRUPT',
          `frame ${i} does not decompress: ${(cause as Error).message}`,
          { cause },
        );
      }
    } finally {
      if (readInto) compressedBuffers.give(readInto);
    }
  }

  has(path: string): boolean {
    return this.entries.has(path);
  }

  /** An entry's bytes [start, end) as a stream; not verified (see readVerified, streamChecked). */
  stream(path: string, start = 0, end?: number): Readable {
    return this.frames(path, start, end, {}, true);
  }

  /**
   * An entry's bytes [start, end), every frame held to the digest a verifying pass recorded:
   * the entry is hashed in full first unless a pass over the whole file was given at open.
   * A frame changed since then fails the stream before any of its bytes are passed on.
   */
  async streamChecked(path: string, start = 0, end?: number): Promise<Readable> {
    if (!this.allChecked) {
      let p = this.checked.get(path);
      if (!p) {
        p = this.check(path);
        this.checked.set(path, p);
        p.catch(() => this.checked.delete(path));
      }
      await p;
    }
    return this.frames(path, start, end, { require: true }, true);
  }

  /**
   * Frames are read only as the consumer takes bytes, each under the reader's budget (see
   * FrameStream); `copy` unless the consumer is this reader, which keeps no chunk.
   */
  private frames(
    path: string,
    start: number,
    end: number | undefined,
    checks: FrameChecks,
    copy: boolean,
  ): Readable {
    const loc = this.entries.get(path);
    if (!loc) throw new FormatError('MISSING_ENTRY', `no entry ${quoteName(path)}`);
    const stop = Math.min(end ?? loc.size, loc.size);
    return new FrameStream(this.pieces(loc, start, stop), {
      budget: this.budget,
      load: (i, into, signal) => this.frame(i, checks, into, signal),
      copy,
    });
  }

  /** The frames holding an entry's bytes [start, stop), each with the part of its decoded bytes wanted. */
  private *pieces(loc: Located, start: number, stop: number): Generator<FramePiece> {
    let frame = loc.frame;
    let pos = loc.offset; // decompressed offset of `frame`
    const from = loc.offset + start;
    const to = loc.offset + stop;
    while (pos < to) {
      const f = this.index.frames[frame];
      if (!f) throw new FormatError('BAD_SEEK_TABLE', 'entry runs past the last frame');
      const next = pos + f.decompressedSize;
      const piece = {
        frame,
        from: Math.max(0, from - pos),
        to: Math.min(f.decompressedSize, to - pos),
        size: f.decompressedSize,
        weight: f.compressedSize + f.decompressedSize,
      };
      if (piece.from < piece.to) yield piece;
      pos = next;
      frame++;
    }
  }

  /** Hashes a whole entry through the index, handing each chunk to `sink`; throws unless size and digest match bundle.json. */
  private async check(path: string, sink?: (chunk: Buffer) => void): Promise<void> {
    const want = this.listed.get(path);
    if (!want)
      throw new FormatError('UNEXPECTED_ENTRY', `${quoteName(path)} is not listed in bundle.json`);
    const hash = newSha256();
    let size = 0;
    const seen = new Map<number, Buffer>();
    for await (const c of this.frames(path, 0, undefined, { record: seen }, false)) {
      hash.update(c as Buffer);
      size += (c as Buffer).length;
      sink?.(c as Buffer);
    }
    const actual = 'sha256:' + hash.digest('hex');
    if (size !== want.size || actual !== want.digest) {
      throw new FormatError(
        'BLOB_DIGEST_MISMATCH',
        `entry ${quoteName(path)} read through the seek index hashes to ${actual}; bundle.json lists ${want.digest}: the media changed since it was verified`,
      );
    }
    // these bytes decompress to the signed entry: later reads of these frames must find them again
    for (const [i, d] of seen) this.frameDigests[i] ??= d;
  }

  /** Checks an entry against its signed size and digest without keeping it in memory. */
  verify(path: string): Promise<void> {
    return this.check(path);
  }

  /** The whole entry, returned only once its size and digest match bundle.json. */
  async readVerified(path: string): Promise<Buffer> {
    const parts: Buffer[] = [];
    await this.check(path, (c) => parts.push(c));
    return Buffer.concat(parts);
  }
}

/** A frame's compressed bytes as read for a frame stream: at most a full frame stored raw, with its block headers. */
const compressedBuffers = readBuffers(FRAME_BYTES + 64 * 1024);

const changedOnMedia = (i: number, at: number) =>
  new FormatError(
    'BLOB_DIGEST_MISMATCH',
    `frame ${i} (byte ${at}) is not what was verified: the file changed on the media since; plug the original stick in again or copy the bundle afresh`,
  );

/** A frame holding one well-formed, named tar header (and nothing else). */
function isHeaderFrame(block: Buffer): boolean {
  if (block.length !== TAR_BLOCK) return false;
  try {
    return !!parseHeader(block)?.name;
  } catch {
    return false;
  }
}

function parseFrameHeaderOf(buf: Buffer, i: number): FrameHeader {
  let h: FrameHeader | undefined;
  try {
    h = parseFrameHeader(buf);
  } catch (cause) {
    throw new FormatError('CORRUPT', `frame ${i}: ${(cause as Error).message}`, { cause });
  }
  if (!h || h.length > buf.length)
    throw new FormatError('CORRUPT', `frame ${i} is too short to hold a zstd frame header`);
  return h;
}

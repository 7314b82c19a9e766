import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { FormatError } from './errors.js';
import { SKIPPABLE_MAGIC_SEEK_TABLE } from './seekable.js';

/** zstd frame format (RFC 8878): the magic of a data frame, and the range of skippable ones. */
const ZSTD_MAGIC = 0xfd2fb528;
const SKIPPABLE_MASK = 0xfffffff0;
const SKIPPABLE_BASE = 0x184d2a50;
const BLOCK_HEADER = 3;
const CHECKSUM_BYTES = 4;
/** Magic, descriptor, window byte, dictionary id (up to 4) and content size (up to 8). */
const MAX_FRAME_HEADER = 4 + 1 + 1 + 4 + 8;

export interface FrameHeader {
  checksum: boolean;
  contentSize: boolean;
  /** Bytes from the magic to the first block header. */
  length: number;
}

/**
 * Reads a data frame's header from its first bytes (magic included): the Frame_Header_Descriptor
 * says whether the frame ends with an XXH64 content checksum (bit 2) and records its content
 * size (Frame_Content_Size_Flag, bits 7-6, or Single_Segment_Flag, bit 5). Undefined when
 * `head` is too short to tell; throws CORRUPT when it is not a zstd frame header.
 */
export function parseFrameHeader(head: Buffer): FrameHeader | undefined {
  if (head.length < 5) return undefined;
  if (head.readUInt32LE(0) !== ZSTD_MAGIC)
    throw new FormatError(
      'CORRUPT',
      'a zstd frame does not start with the zstd magic: the file is damaged or not a bundle',
    );
  const fhd = head[4]!;
  const fcsFlag = fhd >> 6;
  const singleSegment = (fhd & 0x20) !== 0;
  if (fhd & 0x08)
    throw new FormatError(
      'CORRUPT',
      'a zstd frame header sets the reserved bit: the file is damaged or not a bundle',
    );
  const dictBytes = [0, 1, 2, 4][fhd & 0x03]!;
  const fcsBytes = fcsFlag === 0 ? (singleSegment ? 1 : 0) : 1 << fcsFlag;
  const length = 5 + (singleSegment ? 0 : 1) + dictBytes + fcsBytes;
  return { checksum: (fhd & 0x04) !== 0, contentSize: fcsFlag !== 0 || singleSegment, length };
}

/** The Frame_Content_Size a whole header (`h.length` bytes of `head`) records, if any. */
function frameContentSize(head: Buffer, h: FrameHeader): number | undefined {
  const fhd = head[4]!;
  const fcsFlag = fhd >> 6;
  const fcsBytes = fcsFlag === 0 ? ((fhd & 0x20) !== 0 ? 1 : 0) : 1 << fcsFlag;
  if (fcsBytes === 0) return undefined;
  const at = h.length - fcsBytes;
  switch (fcsBytes) {
    case 1:
      return head[at]!;
    case 2:
      return head.readUInt16LE(at) + 256;
    case 4:
      return head.readUInt32LE(at);
    default:
      return Number(head.readBigUInt64LE(at));
  }
}

/** A data frame as the walk found it; `digest` (sha256 of its compressed bytes) when asked for. */
export interface WalkedFrame {
  compressedOffset: number;
  compressedSize: number;
  decompressedSize: number;
  digest?: Buffer;
}

/** The format's rule for a data frame's header flags (docs/FORMAT.md §1), as a one-line refusal. */
export function frameHeaderProblem(h: FrameHeader, at: number): FormatError | undefined {
  const missing = !h.checksum
    ? 'a content checksum'
    : !h.contentSize
      ? 'its content size'
      : undefined;
  if (!missing) return undefined;
  return new FormatError(
    'CORRUPT',
    `the zstd frame at byte ${at} does not record ${missing}, which every bundle frame carries (docs/FORMAT.md §1): the file was not written by bundle create or was altered; rebuild it`,
  );
}

type State = 'magic' | 'skippable-size' | 'frame-header' | 'block-header' | 'skip';

/**
 * Watches the compressed file go by without decompressing it, walking zstd frame boundaries
 * through frame and block headers (a few bytes each; nothing else is kept), and records the
 * first frame the format does not allow: a data frame without a content checksum or content
 * size, or any skippable frame other than the seek table that ends the file. The decoder skips
 * skippable frames and does not need checksums, so without this such files would verify and
 * extract alike while breaking the format's promises (every frame checked, a seek table found
 * at the end only). It passes every byte on unchanged and never fails the stream: the verifier
 * asks for `problem` once its own checks passed, so its better-placed errors keep priority.
 */
export class FrameInspector extends Transform {
  problem: FormatError | undefined;
  /** The walk reached the seek table that ends the file (it kept in step with every frame). */
  sawSeekTable = false;
  private state: State = 'magic';
  private readonly head = Buffer.alloc(MAX_FRAME_HEADER);
  private have = 0;
  private need = 4;
  private skipLeft = 0;
  private afterSkip: 'magic' | 'block-header' = 'magic';
  private offset = 0;
  private frameStart = 0;
  private frame: FrameHeader | undefined;
  private skippableMagic = 0;
  private stopped = false;
  /** Every data frame walked, in order: what the seek index must describe exactly. */
  readonly frames: WalkedFrame[] = [];
  private contentSize = 0;
  private inDataFrame = false;
  private frameHash: Hash | undefined;

  /**
   * `fileSize`: where the seek table must end. `hashFrames`: also hash each data frame's
   * compressed bytes, so later reads of the same file can be held to what was walked here.
   */
  constructor(
    private readonly fileSize: number,
    opts: { hashFrames?: boolean } = {},
  ) {
    super();
    if (opts.hashFrames) this.frameHash = createHash('sha256');
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (!this.stopped) this.walk(chunk);
    cb(null, chunk);
  }

  private stop(problem?: FormatError): void {
    this.problem ??= problem;
    this.stopped = true;
  }

  private walk(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length && !this.stopped) {
      if (this.state === 'skip') {
        const n = Math.min(this.skipLeft, chunk.length - i);
        this.frameHash?.update(chunk.subarray(i, i + n));
        i += n;
        this.offset += n;
        this.skipLeft -= n;
        if (this.skipLeft === 0) this.enter(this.afterSkip);
        continue;
      }
      const n = Math.min(this.need - this.have, chunk.length - i);
      chunk.copy(this.head, this.have, i, i + n);
      this.frameHash?.update(chunk.subarray(i, i + n));
      this.have += n;
      i += n;
      this.offset += n;
      if (this.have === this.need) this.step();
    }
  }

  private enter(state: 'magic' | 'skippable-size' | 'block-header'): void {
    if (state === 'magic') this.frameEnded();
    this.state = state;
    this.have = 0;
    this.need = state === 'block-header' ? BLOCK_HEADER : 4;
  }

  private skip(bytes: number, then: 'magic' | 'block-header'): void {
    this.afterSkip = then;
    if (bytes === 0) return this.enter(then);
    this.state = 'skip';
    this.skipLeft = bytes;
  }

  private step(): void {
    switch (this.state) {
      case 'magic': {
        this.frameStart = this.offset - 4;
        const magic = this.head.readUInt32LE(0);
        if (magic === ZSTD_MAGIC) {
          // keep the magic in `head`: parseFrameHeader reads the header from it on
          this.state = 'frame-header';
          this.need = 5;
          return undefined;
        }
        if ((magic & SKIPPABLE_MASK) === SKIPPABLE_BASE) {
          this.skippableMagic = magic;
          return this.enter('skippable-size');
        }
        // not zstd: the decoder fails on it and the verifier names why
        return this.stop();
      }
      case 'skippable-size':
        return this.skippable(this.head.readUInt32LE(0));
      case 'frame-header': {
        const h = parseFrameHeaderSafe(this.head.subarray(0, this.have));
        if (!h) return this.stop();
        if (this.have < h.length) return void (this.need = h.length);
        this.frame = h;
        const bad = frameHeaderProblem(h, this.frameStart);
        if (bad) return this.stop(bad);
        this.inDataFrame = true;
        this.contentSize = frameContentSize(this.head, h)!;
        return this.enter('block-header');
      }
      case 'block-header': {
        const v = this.head[0]! | (this.head[1]! << 8) | (this.head[2]! << 16);
        const last = (v & 1) === 1;
        const type = (v >> 1) & 3;
        const size = v >>> 3;
        if (type === 3) return this.stop(); // reserved block type: the decoder fails on it
        const then = last ? 'magic' : 'block-header';
        // an RLE block stores one byte however many it stands for
        const bytes = (type === 1 ? 1 : size) + (last && this.frame!.checksum ? CHECKSUM_BYTES : 0);
        return this.skip(bytes, then);
      }
      default:
        return undefined;
    }
  }

  /** Every byte hashed since the last boundary was this frame's (frames tile the file from byte 0). */
  private frameEnded(): void {
    const digest = this.frameHash?.digest();
    if (this.frameHash) this.frameHash = createHash('sha256');
    if (!this.inDataFrame) return;
    this.inDataFrame = false;
    this.frames.push({
      compressedOffset: this.frameStart,
      compressedSize: this.offset - this.frameStart,
      decompressedSize: this.contentSize,
      ...(digest ? { digest } : {}),
    });
  }

  /** A skippable frame of `size` bytes after its 8-byte header, which started at frameStart. */
  private skippable(size: number): void {
    const magic = this.skippableMagic;
    const end = this.frameStart + 8 + size;
    // One that would run past the file's end is a table cut short (or lying about its
    // length): the seek-table checks name that; nothing follows it to walk.
    if (end > this.fileSize) return this.stop();
    if (magic !== SKIPPABLE_MAGIC_SEEK_TABLE || end !== this.fileSize) {
      return this.stop(
        new FormatError(
          'BAD_SEEK_TABLE',
          `a skippable zstd frame at byte ${this.frameStart} is not the seek table that ends the file; a bundle has no other (docs/FORMAT.md §1): the file was altered; get a fresh copy`,
        ),
      );
    }
    this.sawSeekTable = true;
    this.skip(size, 'magic');
  }
}

function parseFrameHeaderSafe(head: Buffer): FrameHeader | undefined {
  try {
    return parseFrameHeader(head);
  } catch {
    return undefined;
  }
}

import { FormatError } from './errors.js';
import { FRAME_BYTES } from './layout.js';

/** zstd seekable format: a trailing skippable frame listing every frame's sizes. */
export const SKIPPABLE_MAGIC_SEEK_TABLE = 0x184d2a5e;
export const SEEKABLE_MAGIC = 0x8f92eab1;
export const FOOTER_BYTES = 9;
const ENTRY_BYTES = 8;
const MAX_FRAMES = 0x8000000;
/** zstd's worst case for a FRAME_BYTES frame (ZSTD_compressBound) plus room for the frame header. */
const MAX_COMPRESSED_FRAME = FRAME_BYTES + (FRAME_BYTES >> 8) + 1024;

export interface FrameEntry {
  compressedSize: number;
  decompressedSize: number;
}

/** Frame positions derived from the table: where each starts in the file and in the decompressed stream. */
export interface SeekIndex {
  frames: (FrameEntry & { compressedOffset: number; decompressedOffset: number })[];
  /** Bytes of the frames (the file is this plus the seek table). */
  compressedBytes: number;
  decompressedBytes: number;
  tableBytes: number;
}

/** We write no per-frame checksums: every zstd frame carries its own XXH64 content checksum. */
export function encodeSeekTable(frames: FrameEntry[]): Buffer {
  const size = frames.length * ENTRY_BYTES + FOOTER_BYTES;
  const buf = Buffer.alloc(8 + size);
  buf.writeUInt32LE(SKIPPABLE_MAGIC_SEEK_TABLE, 0);
  buf.writeUInt32LE(size, 4);
  let o = 8;
  for (const f of frames) {
    buf.writeUInt32LE(f.compressedSize, o);
    buf.writeUInt32LE(f.decompressedSize, o + 4);
    o += ENTRY_BYTES;
  }
  buf.writeUInt32LE(frames.length, o);
  buf.writeUInt8(0, o + 4);
  buf.writeUInt32LE(SEEKABLE_MAGIC, o + 5);
  return buf;
}

/** Reads the footer from the last 9 bytes and tells how many bytes the whole table takes. */
export function seekTableLength(footer: Buffer): {
  tableBytes: number;
  frameCount: number;
  entryBytes: number;
} {
  if (footer.length !== FOOTER_BYTES || footer.readUInt32LE(5) !== SEEKABLE_MAGIC) {
    throw new FormatError(
      'BAD_SEEK_TABLE',
      'no seek index at the end of the file: it is truncated, has data appended, or is not a bundle',
    );
  }
  const frameCount = footer.readUInt32LE(0);
  const descriptor = footer.readUInt8(4);
  if (frameCount > MAX_FRAMES || (descriptor & 0x7c) !== 0)
    throw new FormatError('BAD_SEEK_TABLE', 'the seek index footer is malformed');
  const entryBytes = descriptor & 0x80 ? 12 : ENTRY_BYTES;
  return { tableBytes: 8 + frameCount * entryBytes + FOOTER_BYTES, frameCount, entryBytes };
}

/** Parses the whole table (skippable frame header included) and checks it accounts for `fileSize` exactly. */
export function decodeSeekTable(table: Buffer, fileSize: number): SeekIndex {
  const { tableBytes, frameCount, entryBytes } = seekTableLength(
    table.subarray(table.length - FOOTER_BYTES),
  );
  if (
    table.length !== tableBytes ||
    table.readUInt32LE(0) !== SKIPPABLE_MAGIC_SEEK_TABLE ||
    table.readUInt32LE(4) !== tableBytes - 8
  ) {
    throw new FormatError(
      'BAD_SEEK_TABLE',
      'the seek index frame header does not match its footer',
    );
  }
  const frames: SeekIndex['frames'] = [];
  let c = 0;
  let d = 0;
  for (let i = 0; i < frameCount; i++) {
    const o = 8 + i * entryBytes;
    const compressedSize = table.readUInt32LE(o);
    const decompressedSize = table.readUInt32LE(o + 4);
    // The table is outside the signature: a frame it claims larger than the format allows
    // would make a reader allocate and decompress it in one piece.
    if (decompressedSize > FRAME_BYTES || compressedSize > MAX_COMPRESSED_FRAME) {
      throw new FormatError(
        'BAD_SEEK_TABLE',
        `the seek index lists a frame of ${compressedSize} compressed / ${decompressedSize} bytes, over the 4 MiB frame limit: the index was altered`,
      );
    }
    frames.push({ compressedSize, decompressedSize, compressedOffset: c, decompressedOffset: d });
    c += compressedSize;
    d += decompressedSize;
  }
  if (c + tableBytes !== fileSize) {
    throw new FormatError(
      'BAD_SEEK_TABLE',
      `the seek index covers ${c + tableBytes} bytes but the file has ${fileSize}: it is truncated or has data appended`,
    );
  }
  return { frames, compressedBytes: c, decompressedBytes: d, tableBytes };
}

/** The frame that starts exactly at decompressed offset `offset` (entries are frame-aligned). */
export function frameAt(index: SeekIndex, offset: number): number {
  let lo = 0;
  let hi = index.frames.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const f = index.frames[mid]!;
    if (f.decompressedOffset === offset) return mid;
    if (f.decompressedOffset < offset) lo = mid + 1;
    else hi = mid - 1;
  }
  throw new FormatError(
    'BAD_SEEK_TABLE',
    `no frame starts at offset ${offset}: the seek index does not match the archive`,
  );
}

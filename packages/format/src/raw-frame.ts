import { Compressor } from 'zstd-napi';

/** A raw block holds at most this much (zstd's Block_Maximum_Size). */
const RAW_BLOCK = 128 * 1024;
const MAGIC = 0xfd2fb528;

/** Frame_Content_Size field width for a single-segment frame of `n` bytes (RFC 8878 3.1.1.1.4). */
function fcsBytes(n: number): number {
  return n < 256 ? 1 : n < 65536 + 256 ? 2 : 4;
}

/**
 * The byte length of rawFrame(data) for `n` bytes of content: it depends on `n` alone, which is
 * what lets the writer reserve the head of the file before bundle.json's content is final.
 */
export function rawFrameSize(n: number): number {
  return 4 + 1 + fcsBytes(n) + 3 * Math.max(1, Math.ceil(n / RAW_BLOCK)) + n + 4;
}

let checksummer: Compressor | undefined;

/** XXH64's low 32 bits, as zstd records them: taken from a real frame's end, not a second implementation. */
function contentChecksum(data: Buffer): Buffer {
  if (!checksummer) {
    checksummer = new Compressor();
    checksummer.setParameters({ compressionLevel: 1, checksumFlag: true, contentSizeFlag: true });
  }
  const frame = checksummer.compress(data);
  return frame.subarray(frame.length - 4);
}

/**
 * One zstd frame storing `data` as raw blocks, with its content size and content checksum like
 * every bundle frame (docs/FORMAT.md §1). Single segment: the window is the content (≤ FRAME_BYTES).
 */
export function rawFrame(data: Buffer): Buffer {
  if (data.length > 0xffffffff) throw new RangeError('raw frame too large');
  const out = Buffer.alloc(rawFrameSize(data.length));
  out.writeUInt32LE(MAGIC, 0);
  const fcs = fcsBytes(data.length);
  // Frame_Content_Size_Flag (bits 7-6): 0 = 1 byte with single segment, 1 = 2 bytes, 2 = 4 bytes
  const fcsFlag = fcs === 1 ? 0 : fcs === 2 ? 1 : 2;
  out[4] = (fcsFlag << 6) | 0x20 | 0x04;
  if (fcs === 1) out[5] = data.length;
  else if (fcs === 2) out.writeUInt16LE(data.length - 256, 5);
  else out.writeUInt32LE(data.length, 5);
  let o = 5 + fcs;
  let at = 0;
  do {
    const n = Math.min(RAW_BLOCK, data.length - at);
    const last = at + n >= data.length ? 1 : 0;
    // Block_Header: Last_Block bit, Block_Type 0 (raw), Block_Size
    const header = last | (0 << 1) | (n << 3);
    out[o] = header & 0xff;
    out[o + 1] = (header >> 8) & 0xff;
    out[o + 2] = (header >> 16) & 0xff;
    o += 3;
    data.copy(out, o, at, at + n);
    o += n;
    at += n;
  } while (at < data.length);
  contentChecksum(data).copy(out, o);
  return out;
}

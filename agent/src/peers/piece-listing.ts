// What a node still fetching a bundle says of the blobs it holds only in part: for each blob
// the signed head splits into pieces, a bitmap of the pieces it verified (the `pieces` field of
// /have). Older agents neither send nor read the field: to them the listing is what it was.
// The bitmap is the peer's word only for whom to ask; every piece is checked again on arrival.
import { pieceCount, type PieceDigests } from '@offline-bundle/format';

/**
 * Partial blobs one /have may list: a node writes at most its few streams' blobs at once, and
 * keeps the verified pieces of those a cut left. A listing with more is ignored whole.
 */
export const MAX_HAVE_PARTIAL_BLOBS = 256;

/** Piece `index` is set in `bitmap` (bit 7 of byte 0 is piece 0). */
export const pieceSet = (bitmap: Buffer, index: number): boolean =>
  index >> 3 < bitmap.length && (bitmap[index >> 3]! & (0x80 >> (index & 7))) !== 0;

/** The bitmap of a blob whose first `verifiedBytes` are held verified (whole pieces only), base64. */
export function prefixBitmap(size: number, pieceSize: number, verifiedBytes: number): string {
  const bits = Buffer.alloc(Math.ceil(pieceCount(size, pieceSize) / 8));
  const whole =
    verifiedBytes >= size ? pieceCount(size, pieceSize) : Math.floor(verifiedBytes / pieceSize);
  for (let i = 0; i < whole; i++) bits[i >> 3] = bits[i >> 3]! | (0x80 >> (i & 7));
  return bits.toString('base64');
}

/** Pieces the head lists for `blob` (its digests are 32 bytes each): a bitmap's exact length follows from it. */
function listedPieces(digests: PieceDigests, blob: string): number {
  return Buffer.byteLength(digests.pieces.blobs[blob]!, 'base64') / 32;
}

/**
 * A peer's `pieces` field held to the signed head: only blobs the head splits into pieces, each
 * bitmap exactly its blob's length (no stray bit past its last piece), at most
 * MAX_HAVE_PARTIAL_BLOBS of them. Anything else: the whole field is ignored (the peer is then
 * asked for whole blobs only, as an older agent is). A blob the head splits that this fetch
 * does not need (held here already, a resumed fetch) is checked as well and left out: the
 * peer's pieces of the others still count.
 */
export function parsePieceListing(
  v: unknown,
  digests: PieceDigests | undefined,
  needed: (digest: string) => boolean,
): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  if (!digests || typeof v !== 'object' || v === null || Array.isArray(v)) return out;
  const keys = Object.keys(v);
  if (keys.length > MAX_HAVE_PARTIAL_BLOBS) return out;
  for (const digest of keys) {
    const text = (v as Record<string, unknown>)[digest];
    if (!digests.covers(digest) || typeof text !== 'string') return new Map();
    const count = listedPieces(digests, digest);
    const bytes = Math.ceil(count / 8);
    if (text.length !== Math.ceil(bytes / 3) * 4 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text))
      return new Map();
    const bitmap = Buffer.from(text, 'base64');
    // bits past the last piece would name pieces that do not exist
    if (
      bitmap.length !== bytes ||
      (count % 8 !== 0 && (bitmap[bytes - 1]! & (0xff >> (count % 8))) !== 0)
    )
      return new Map();
    if (needed(digest)) out.set(digest, bitmap);
  }
  return out;
}

/** Bytes from `from` (on a piece's start) a peer's bitmap covers in a run: the end of the range to ask it for, or `from` when it lacks that piece. */
export function runEnd(
  bitmap: Buffer | undefined,
  from: number,
  size: number,
  pieceSize: number,
): number {
  if (!bitmap) return from;
  let i = Math.floor(from / pieceSize);
  while (i * pieceSize < size && pieceSet(bitmap, i)) i++;
  return Math.max(from, Math.min(size, i * pieceSize));
}

/** Pieces set in all of a peer's bitmaps: a listing that grew means a peer still fetching is worth waiting for. */
export function piecesSet(bitmaps: ReadonlyMap<string, Buffer>): number {
  let n = 0;
  for (const bitmap of bitmaps.values())
    for (const byte of bitmap) for (let b = byte; b; b &= b - 1) n++;
  return n;
}

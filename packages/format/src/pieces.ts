import { createHash, timingSafeEqual } from 'node:crypto';
import { FormatError } from './errors.js';

/**
 * Per-piece digests of a bundle's large blobs, signed with the head (`bundle.json` `pieces`,
 * docs/FORMAT.md §3 "Pieces"). A blob is otherwise checked only whole, so a node fetching it
 * from peers could pass nothing on before its last byte; with these a node checks each piece
 * as it arrives against the factory's signature and may serve it at once. Older readers ignore
 * the field (it needs no new version): they check every blob whole, as before.
 */
export interface BundlePieces {
  /** Bytes per piece: a power of two from MIN_PIECE_BYTES to MAX_PIECE_BYTES. */
  size: number;
  /**
   * For every blob the archive carries that is longer than one piece (not a delta's `fromBase`
   * blobs, which the builder never reads), keyed by its digest: the sha256 of each piece in
   * order, 32 bytes each, concatenated, base64 (standard alphabet, padded).
   */
  blobs: Record<string, string>;
}

export const MIN_PIECE_BYTES = 1 << 20;
export const MAX_PIECE_BYTES = 64 << 20;
/** What `bundle create` writes: small enough that a 1 Gbit/s link moves one in ~35 ms, so a relay starts early. */
export const PIECE_BYTES = 4 << 20;
const DIGEST_BYTES = 32;

/** How many pieces a blob of `size` bytes has (0 for an empty blob). */
export const pieceCount = (size: number, pieceSize: number): number => Math.ceil(size / pieceSize);

/** Byte range [start, end) of piece `index` of a blob of `size` bytes. */
export function pieceRange(
  size: number,
  pieceSize: number,
  index: number,
): { start: number; end: number } {
  const start = index * pieceSize;
  return { start, end: Math.min(size, start + pieceSize) };
}

/** Whether a blob of this size is listed in `pieces.blobs` (longer than one piece, carried). */
export const hasPieces = (blob: { size: number; fromBase?: true }, pieceSize: number): boolean =>
  blob.fromBase !== true && blob.size > pieceSize;

/** Characters of the base64 list of `count` digests. */
export const listChars = (count: number): number => Math.ceil((count * DIGEST_BYTES) / 3) * 4;

/**
 * The digests a list holds when it is exactly `count` of them in canonical base64, else
 * undefined. Node's decoder skips what it cannot read and takes any padding, so a list of the
 * right length may decode short: only a list that encodes back to itself is taken.
 */
export function decodePieceList(text: unknown, count: number): Buffer | undefined {
  if (typeof text !== 'string' || text.length !== listChars(count)) return undefined;
  const buf = Buffer.from(text, 'base64');
  return buf.length === count * DIGEST_BYTES && buf.toString('base64') === text ? buf : undefined;
}

const bad = (msg: string): never => {
  throw new FormatError('INVALID_MANIFEST', `bundle.json: ${msg}`);
};

/**
 * Holds `pieces` to the blobs it describes: a valid size, every carried blob longer than one
 * piece listed and no other key, each list exactly its blob's count of digests. Called by
 * validateManifest when the field is there; all or nothing, so a reader never mixes rules.
 */
export function validatePieces(
  v: unknown,
  blobs: readonly { digest: string; size: number; fromBase?: true }[],
): void {
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    return bad('pieces must be an object');
  const p = v as Record<string, unknown>;
  const size = p.size;
  if (
    !Number.isSafeInteger(size) ||
    (size as number) < MIN_PIECE_BYTES ||
    (size as number) > MAX_PIECE_BYTES ||
    ((size as number) & ((size as number) - 1)) !== 0
  ) {
    bad(`pieces.size must be a power of two from ${MIN_PIECE_BYTES} to ${MAX_PIECE_BYTES}`);
  }
  const lists = p.blobs;
  if (typeof lists !== 'object' || lists === null || Array.isArray(lists))
    return bad('pieces.blobs must be an object');
  const listed = lists as Record<string, unknown>;
  const want = new Map<string, number>();
  for (const b of blobs)
    if (hasPieces(b, size as number)) want.set(b.digest, pieceCount(b.size, size as number));
  for (const key of Object.keys(listed)) {
    const count = want.get(key);
    if (count === undefined)
      bad(
        `pieces.blobs names ${key.slice(0, 80)}, which is not a carried blob longer than one piece`,
      );
    if (decodePieceList(listed[key], count!) === undefined) {
      bad(
        `pieces.blobs[${key}] must be ${count} sha256 digests in base64 (${listChars(count!)} characters), canonical: padded as base64 pads`,
      );
    }
  }
  for (const key of want.keys())
    if (!Object.hasOwn(listed, key))
      bad(`pieces.blobs lacks ${key} (every carried blob longer than one piece is listed)`);
}

/** A validated head's piece digests, decoded per blob on first use. */
export class PieceDigests {
  private readonly decoded = new Map<string, Buffer>();
  constructor(readonly pieces: BundlePieces) {}
  get size(): number {
    return this.pieces.size;
  }
  /** Whether the head lists this blob's pieces (else it is checked whole). */
  covers(blob: string): boolean {
    return Object.hasOwn(this.pieces.blobs, blob);
  }
  /** The signed sha256 of piece `index` of `blob` (32 bytes). */
  digest(blob: string, index: number): Buffer {
    const all = this.decodedList(blob);
    if (!Number.isSafeInteger(index) || index < 0 || (index + 1) * DIGEST_BYTES > all.length)
      throw new RangeError(`piece ${index} is outside ${blob}`);
    return all.subarray(index * DIGEST_BYTES, (index + 1) * DIGEST_BYTES);
  }
  private decodedList(blob: string): Buffer {
    let all = this.decoded.get(blob);
    if (all === undefined) {
      const text = Object.hasOwn(this.pieces.blobs, blob) ? this.pieces.blobs[blob] : undefined;
      if (text === undefined) throw new Error(`no piece digests for ${blob}`);
      all = Buffer.from(text, 'base64');
      this.decoded.set(blob, all);
    }
    return all;
  }
  /** Whether `bytes` are piece `index` of `blob` as signed: never, for a piece the head does not list. */
  matches(blob: string, index: number, bytes: Uint8Array | readonly Uint8Array[]): boolean {
    if (
      !this.covers(blob) ||
      !Number.isSafeInteger(index) ||
      index < 0 ||
      (index + 1) * DIGEST_BYTES > this.decodedList(blob).length
    )
      return false;
    const h = createHash('sha256');
    for (const b of Array.isArray(bytes) ? (bytes as readonly Uint8Array[]) : [bytes as Uint8Array])
      h.update(b);
    return timingSafeEqual(h.digest(), this.digest(blob, index));
  }
}

/**
 * The builder's side: fed a blob's bytes in order, in chunks of any size, gives the base64 list
 * `pieces.blobs` carries for it.
 */
export class PieceHasher {
  private hash = createHash('sha256');
  private filled = 0;
  private readonly out: Buffer[] = [];
  constructor(private readonly pieceSize: number) {}
  update(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length) {
      const take = Math.min(chunk.length - at, this.pieceSize - this.filled);
      this.hash.update(chunk.subarray(at, at + take));
      this.filled += take;
      at += take;
      if (this.filled === this.pieceSize) this.cut();
    }
  }
  /** The list, once every byte was given. */
  end(): string {
    if (this.filled > 0) this.cut();
    return Buffer.concat(this.out).toString('base64');
  }
  private cut(): void {
    this.out.push(this.hash.digest());
    this.hash = createHash('sha256');
    this.filled = 0;
  }
}

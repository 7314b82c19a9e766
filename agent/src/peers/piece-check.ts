// A blob's bytes checked piece by piece as they arrive from a peer, against the per-piece
// digests signed with the head (format pieces.ts): only a piece that matched passes on to the
// staging's writer, so the blob's temp file only ever holds verified pieces, from its start,
// and a node may serve them before the blob is whole. A piece that does not match stops the
// response at once; its bytes are dropped and the verified ones before it kept.
import { Transform, type TransformCallback } from 'node:stream';
import { pieceRange, type PieceDigests } from '@offline-bundle/format';

interface PieceCheckOptions {
  digests: PieceDigests;
  blob: string;
  size: number;
  /** Where the response starts in the blob: a piece's start. */
  from: number;
  /** Bytes before this are held already (verified): checked again with their piece, not passed on. */
  keepFrom: number;
  /** The error for piece `index` that does not match (the peer's fault). */
  mismatch: (index: number) => Error;
  /** The error for a byte past the blob's signed size. */
  overflow: () => Error;
  /** The blob's first `end` bytes are verified now (told after they passed on). */
  onVerified: (end: number) => void;
}

export class PieceCheck extends Transform {
  private at: number;
  private parts: Buffer[] = [];
  private filled = 0;
  /** Bytes received so far, verified or not (the minimum-rate guard counts these). */
  received = 0;

  constructor(private readonly o: PieceCheckOptions) {
    super();
    if (o.from % o.digests.size !== 0)
      throw new RangeError(`a piece check starts on a piece, not at ${o.from}`);
    this.at = o.from;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    let off = 0;
    this.received += chunk.length;
    while (off < chunk.length) {
      const index = Math.floor(this.at / this.o.digests.size);
      if (this.at + this.filled >= this.o.size) return cb(this.o.overflow());
      const { end } = pieceRange(this.o.size, this.o.digests.size, index);
      const take = Math.min(chunk.length - off, end - this.at - this.filled);
      this.parts.push(chunk.subarray(off, off + take));
      this.filled += take;
      off += take;
      if (this.at + this.filled === end && !this.piece(index, end))
        return cb(this.o.mismatch(index));
    }
    cb();
  }

  /** A whole piece arrived: passed on when it matches. */
  private piece(index: number, end: number): boolean {
    const start = this.at;
    if (!this.o.digests.matches(this.o.blob, index, this.parts)) return false;
    const bytes = Buffer.concat(this.parts, this.filled);
    this.parts = [];
    this.filled = 0;
    this.at = end;
    if (end > this.o.keepFrom) this.push(bytes.subarray(Math.max(0, this.o.keepFrom - start)));
    this.o.onVerified(end);
    return true;
  }
}

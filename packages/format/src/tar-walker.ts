import { FormatError } from './errors.js';
import { headerMismatch } from './entry-header.js';
import { TAR_BLOCK, paddedSize } from './layout.js';
import { octal } from './ustar.js';

// pax and GNU long-name/long-link headers: tar-stream folds them into the next entry
const META_TYPES = new Set(['x', 'g', 'L', 'K', 'N']);

/** What the raw header blocks say about an entry tar-stream yields, which its parsed header cannot. */
export interface RawHeaderFacts {
  /** An end-of-archive (zero) block came before it: standard tools stop there. */
  followsEnd: boolean;
  /** How its header block differs from the one the writer writes (entry-header.ts). */
  mismatch?: string;
  /** A pax or GNU extension header came before it and was folded into it. */
  extended?: boolean;
}

/**
 * Follows the tar headers in the stream tar is fed, to tell for each entry tar will yield
 * what only its raw header block shows: whether a zero block (an end-of-archive marker) came
 * before it, whether its header is byte for byte the writer's, and whether an extension
 * header was folded into it. It also remembers where the first zero block sat and whether
 * any byte after it was not zero, which tar-stream does not report (it reads on, and takes a
 * block holding only checksum-field bytes for a zero block) while GNU tar fails on it.
 * Holds one block and the facts of the entries tar has not yielded yet.
 */
export class TarWalker {
  private offset = 0;
  private next = 0;
  private readonly block = Buffer.alloc(TAR_BLOCK);
  private have = 0;
  private zeroAt: number | undefined;
  private dirtyAfterZero = false;
  private extended = false;
  private readonly facts: RawHeaderFacts[] = [];

  feed(chunk: Buffer): void {
    let scanned = false;
    let i = 0;
    while (i < chunk.length) {
      if (this.zeroAt !== undefined && !scanned) {
        // everything after the first zero block must be zero too (the second block of the
        // trailer and nothing else); bytes past the archive's end are cut before they get here
        scanned = true;
        if (!this.dirtyAfterZero && chunk.subarray(i).some((b) => b !== 0))
          this.dirtyAfterZero = true;
      }
      if (this.offset < this.next) {
        const skip = Math.min(this.next - this.offset, chunk.length - i);
        i += skip;
        this.offset += skip;
        continue;
      }
      const take = Math.min(TAR_BLOCK - this.have, chunk.length - i);
      chunk.copy(this.block, this.have, i, i + take);
      this.have += take;
      i += take;
      this.offset += take;
      if (this.have < TAR_BLOCK) return;
      this.have = 0;
      this.next = this.offset;
      if (tarStreamReadsAsZero(this.block)) {
        this.zeroAt ??= this.offset - TAR_BLOCK;
        if (!this.block.every((b) => b === 0)) this.dirtyAfterZero = true;
        continue;
      }
      this.header();
    }
  }

  private header(): void {
    const size = octal(this.block, 124, 12);
    // not a header we can follow (tar will fail on it): stop walking
    if (!Number.isSafeInteger(size) || size < 0) this.next = Infinity;
    else this.next += paddedSize(size);
    if (META_TYPES.has(String.fromCharCode(this.block[156]!))) {
      this.extended = true;
      return;
    }
    const mismatch = headerMismatch(this.block);
    this.facts.push({
      followsEnd: this.zeroAt !== undefined,
      ...(mismatch ? { mismatch } : {}),
      ...(this.extended ? { extended: true } : {}),
    });
    this.extended = false;
  }

  /** The facts of the next entry tar yields. */
  nextEntry(): RawHeaderFacts {
    return this.facts.shift() ?? { followsEnd: false };
  }

  /**
   * For an archive that reached its expected length `end`: the two zero blocks must sit
   * exactly at its end and hold nothing but zeros, or `zstd -dc | tar -x` fails on them.
   */
  trailerProblem(end: number): FormatError | undefined {
    if (this.zeroAt === end - 2 * TAR_BLOCK && !this.dirtyAfterZero) return undefined;
    return new FormatError(
      'TRAILING_DATA',
      'the two end-of-archive blocks hold non-zero bytes, which standard tar refuses: the file was altered; get a fresh copy',
    );
  }
}

/**
 * tar-stream takes a block whose only non-zero bytes are in the checksum field for a zero
 * block (its checksum sum equals that of an all-zero block) and yields no entry for it; the
 * walk must do the same to stay in step with the entries tar yields.
 */
function tarStreamReadsAsZero(block: Buffer): boolean {
  for (let i = 0; i < TAR_BLOCK; i++) if (block[i] !== 0 && (i < 148 || i >= 156)) return false;
  return true;
}

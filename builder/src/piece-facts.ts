import { createHash } from 'node:crypto';
import type { BlobCache, CacheFetchOptions } from '@offline-bundle/image-fetch';
import {
  PieceHashThread,
  decodePieceList,
  hasPieces,
  listChars,
  pieceCount,
} from '@offline-bundle/format';

type Blob = { digest: string; size: number };

/**
 * Each blob's piece list (bundle.json `pieces`, docs/FORMAT.md "Pieces") worked out when the blob
 * arrives, not when it is packed: the head then goes out once every blob is there, as without
 * pieces, and the whole-file hash runs beside the packing. A download is hashed piece by piece
 * as it streams in (beside its digest check, on a thread); the list is kept in the cache beside
 * the blob, so a later build reads it instead of the blob.
 */
export class PieceFacts {
  private readonly thread = new PieceHashThread();
  /** Lists worked out in this run. */
  private readonly known = new Map<string, string>();
  /** Lists hashed from files found in the cache, kept once the build packed them (keepChecked). */
  private readonly found = new Map<string, { blob: Blob; list: string }>();
  private readonly kind: string;

  constructor(
    private readonly cache: BlobCache,
    private readonly pieceSize: number,
  ) {
    this.kind = `pieces-${pieceSize}`;
  }

  /** For cache.fetch: hashes a blob longer than one piece as it arrives; its list is kept once its digest matched. */
  tap(blob: Blob): CacheFetchOptions['tap'] {
    if (!hasPieces(blob, this.pieceSize)) return undefined;
    return () => {
      const stream = this.thread.open(this.pieceSize);
      return {
        push: (chunk) => stream.push(chunk),
        finish: async () => this.keep(blob, await stream.end()),
        abandon: () => stream.abandon(),
      };
    };
  }

  /**
   * The list of a blob in the cache at `path`, asked by the writer: as this run's download
   * hashed it, as an earlier run kept it, or hashed from the file now (a cache filled before
   * lists were kept) and kept.
   */
  async listOf(blob: Blob, path: string): Promise<string | undefined> {
    if (!hasPieces(blob, this.pieceSize)) return undefined;
    const known = this.known.get(blob.digest) ?? (await this.read(blob));
    if (known !== undefined) return known;
    const list = await this.thread.hashFile(path, this.pieceSize);
    // a file of another length: the packing's digest check refuses it; nothing is kept
    if (decodePieceList(list, pieceCount(blob.size, this.pieceSize)) === undefined) return list;
    // a file merely found (by its size) may be damaged: its list is kept only once the packing
    // checked it against its digest (keepChecked), never beside a blob the packing refused
    if (this.cache.verified(blob.digest)) await this.keep(blob, list);
    else this.found.set(blob.digest, { blob, list });
    return list;
  }

  /** The build packed every blob, each checked against its digest: the lists of found files are kept too. */
  async keepChecked(): Promise<void> {
    for (const { blob, list } of this.found.values()) await this.keep(blob, list);
    this.found.clear();
  }

  async stop(): Promise<void> {
    await this.thread.stop();
  }

  /** The fact's second line: a damaged or cut-short file is no list. */
  private check(blob: Blob, list: string): string {
    return createHash('sha256')
      .update(`${blob.digest} ${blob.size} ${this.pieceSize} ${list}`)
      .digest('hex');
  }

  private async keep(blob: Blob, list: string): Promise<void> {
    this.known.set(blob.digest, list);
    await this.cache.keepFact(this.kind, blob.digest, `${list}\n${this.check(blob, list)}\n`);
  }

  private async read(blob: Blob): Promise<string | undefined> {
    const count = pieceCount(blob.size, this.pieceSize);
    // the list, a newline, 64 hex digits, a newline: nothing longer is read
    const parts = (await this.cache.readFact(this.kind, blob.digest, listChars(count) + 66))
      ?.toString('latin1')
      .split('\n');
    if (
      parts?.length !== 3 ||
      parts[2] !== '' ||
      parts[1] !== this.check(blob, parts[0]!) ||
      decodePieceList(parts[0], count) === undefined
    )
      return undefined;
    return parts[0];
  }
}

import { open as openFile, type FileHandle } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { giveBack, readBuffers } from '@offline-bundle/host';
import { OciError, timedSync, type newSha256 } from '@offline-bundle/oci';

/**
 * Bytes of a download gathered before they are hashed, fed and written: a registry's body comes
 * in 16-64 KiB chunks, and each chunk was a write on the thread pool, a wake-up of the counting
 * and piece threads and a hash call (#45: some 16 000 of each per GiB).
 */
const BATCH_BYTES = 256 * 1024;

/** Batches of a download, reused once written (the counting and piece threads copy what they keep). */
const batches = readBuffers(BATCH_BYTES);

/** What else a download's bytes are fed to, batch by batch in order; done with a batch once it resolves. */
interface Feed {
  push(chunk: Buffer): Promise<void>;
}

interface BatchedAppendOptions {
  /** The .partial file the download is appended to. */
  path: string;
  digest: string;
  size: number;
  hash: ReturnType<typeof newSha256>;
  /** Bytes of the blob taken in so far (the .partial's length at the start, then each chunk). */
  at: { written: number };
  /** Progress: called with the offset on disk after each batch is written. */
  reach: (offset: number) => void;
  feeds: Feed[];
}

/**
 * Holds a download to its size, and appends it to its .partial in batches, each hashed and fed
 * before it is written. A batch goes on when full, or once the chunks at hand are in (a stalled
 * download's bytes are on disk, not held back). One batch is stored at a time and one fills
 * meanwhile: a full batch waits for the one before it, and the download waits with it, so a slow
 * disk or feed holds back the socket rather than piling batches up in memory.
 */
export class BatchedAppend extends Writable {
  private file: FileHandle | undefined;
  private batch: Buffer | undefined;
  private fill = 0;
  /** The batch being hashed, fed and written; settles once none of that reads it any more. */
  private busy: Promise<void> | undefined;
  private failure: Error | undefined;
  private soon: NodeJS.Immediate | undefined;
  private stored: number;

  constructor(private readonly o: BatchedAppendOptions) {
    super();
    this.stored = o.at.written;
  }

  override _construct(cb: (err?: Error | null) => void): void {
    openFile(this.o.path, 'a').then((f) => {
      this.file = f;
      cb();
    }, cb);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.take(chunk).then(() => cb(), cb);
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.clearSoon();
    this.sendWhenIdle()
      .then(() => this.idle())
      .then(() => cb(), cb);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.clearSoon();
    // a batch in flight is given back once its write settles; close waits for that write
    if (this.batch) giveBack(this.batch);
    this.batch = undefined;
    this.fill = 0;
    const file = this.file;
    this.file = undefined;
    if (!file) return cb(err);
    file.close().then(
      () => cb(err),
      (closeErr: unknown) => cb(err ?? (closeErr as Error)),
    );
  }

  private async take(chunk: Buffer): Promise<void> {
    const { at, size, digest } = this.o;
    at.written += chunk.length;
    if (at.written > size)
      throw new OciError('SIZE_MISMATCH', `blob ${digest} is larger than its ${size} bytes`);
    for (let off = 0; off < chunk.length;) {
      this.batch ??= batches.take();
      const n = chunk.copy(this.batch, this.fill, off);
      this.fill += n;
      off += n;
      if (this.fill === this.batch.length) await this.sendWhenIdle();
    }
    // a part waits for the chunks at hand, then goes on even if no more come
    if (this.fill > 0)
      this.soon ??= setImmediate(() => {
        this.soon = undefined;
        this.sendWhenIdle().catch((err: unknown) => this.destroy(err as Error));
      });
  }

  /** The batch so far goes on once the one before it is stored. */
  private async sendWhenIdle(): Promise<void> {
    await this.idle();
    if (this.fill === 0) return;
    const data = this.batch!.subarray(0, this.fill);
    this.batch = undefined;
    this.fill = 0;
    this.busy = this.store(data)
      .catch((err: unknown) => {
        this.failure = err as Error;
        // nothing may be waiting on it (a stalled download): the failure ends the download now
        this.destroy(err as Error);
      })
      .finally(() => {
        giveBack(data);
        this.busy = undefined;
      });
  }

  private async idle(): Promise<void> {
    while (this.busy) await this.busy;
    if (this.failure) throw this.failure;
  }

  /** Settles only once nothing reads `data` any more: it goes back to the pool then. */
  private async store(data: Buffer): Promise<void> {
    timedSync('registry reads: digest check', () => this.o.hash.update(data), data.length);
    const fed = await Promise.allSettled(this.o.feeds.map((f) => f.push(data)));
    const bad = fed.find((r) => r.status === 'rejected');
    if (bad) throw bad.reason;
    if (!this.file) throw new Error('the download was stopped');
    await writeWhole(this.file, data);
    this.stored += data.length;
    this.o.reach(this.stored);
  }

  private clearSoon(): void {
    if (this.soon) clearImmediate(this.soon);
    this.soon = undefined;
  }
}

/** An append may be short (a signal, a full disk on some filesystems): the rest goes after it. */
async function writeWhole(file: FileHandle, data: Buffer): Promise<void> {
  for (let off = 0; off < data.length;) {
    const { bytesWritten } = await file.write(data, off, data.length - off);
    if (bytesWritten === 0)
      throw Object.assign(new Error('write returned 0 bytes'), { code: 'EIO' });
    off += bytesWritten;
  }
}

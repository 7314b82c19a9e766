import { Transform, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { newSha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { HEADER_BYTES_MAX } from './bundle-ends.js';
import { FrameInspector } from './frame-inspector.js';
import type { BundleSource } from './source.js';
import { TarWalker } from './tar-walker.js';
import { assertTrust } from './trust.js';
import { EntryChecks } from './verify-entries.js';
import { failureCause, passTotals } from './verify-outcome.js';
import type { PassState, VerifiedBundle, VerifyOptions } from './verify-options.js';
import { BoundedDecompress } from './zstd-bounded.js';

/**
 * One streaming pass over a bundle: bundle.json and its signature must be the first two
 * entries and are checked before anything else is trusted (the signer it names must be the
 * key that verified it); then every entry must be one bundle.json lists, a regular file of
 * exactly the listed size and digest, each once, in the writer's order, under the writer's
 * exact header (listing.ts, tar-walker.ts); the archive must end exactly where the listed
 * entries end, with two zero blocks; every zstd frame must carry its checksum and the only
 * skippable frame must be the seek table ending the file (frame-inspector.ts); the seek index
 * must account for the file; and the whole file's sha256 must match when a digest is trusted.
 * So a bundle that verifies always unpacks with plain `zstd -dc FILE | tar -x` to the same files.
 *
 * Phases: the pass itself (here), its entries (verify-entries.ts), then its frames and totals
 * or the cause of its failure (verify-outcome.ts). The source is read once, start to end, and
 * its tail again for the seek index; it is not closed here.
 */
export async function verifyBundle(
  source: BundleSource,
  opts: VerifyOptions,
): Promise<VerifiedBundle> {
  assertTrust(opts.trust);
  const pass = new VerifyPass(source, opts);
  const failure = await pass.run();
  if (failure) throw await failureCause(pass, failure);
  return passTotals(pass, pass.entries.head!);
}

/** The streams of one pass: the source's bytes hashed, inspected as frames, decompressed, walked as tar. */
class VerifyPass implements PassState {
  readonly fileSize: number;
  readonly fileHash = newSha256();
  readonly inspector: FrameInspector;
  readonly walker = new TarWalker();
  readonly decompress = new BoundedDecompress({ tolerant: true });
  // Headers of unknown formats reach the entry checks, which name the field (not "corrupt").
  readonly extract = tar.extract({ allowUnknownFormat: true } as Parameters<typeof tar.extract>[0]);
  readonly entries: EntryChecks = new EntryChecks(this);
  rawRead = 0;
  endedAt: number | undefined;
  expectedTar = Infinity;
  tarBytes = 0;
  private failure: unknown;

  constructor(
    readonly source: BundleSource,
    readonly opts: VerifyOptions,
  ) {
    this.fileSize = source.size;
    // Frames the decoder accepts but the format forbids (no checksum, a skippable frame inside).
    this.inspector = new FrameInspector(this.fileSize, { hashFrames: opts.frameDigests === true });
    // Until bundle.json has said how long the archive is, only its first two entries may come.
    this.decompress.stopAfter(HEADER_BYTES_MAX);
  }

  complete(): boolean {
    return this.tarBytes >= this.expectedTar;
  }

  private fail(err: unknown): void {
    this.failure ??= err;
  }

  /** Runs the pass to its end; resolves with what failed first (undefined when nothing did). */
  async run(): Promise<unknown> {
    const { opts } = this;
    opts.signal?.throwIfAborted();
    const input = this.source.stream(0, this.fileSize, { pass: true });
    const onAbort = () => input.destroy(opts.signal!.reason as Error);
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const piping = pipeline(
      input,
      this.rawTap(),
      this.inspector,
      this.decompress,
      this.tarLimit(),
      this.extract as unknown as Writable,
    ).catch((err) => {
      this.fail(err);
      this.extract.destroy(err as Error);
    });
    try {
      await this.entries.consume(this.extract);
    } catch (err) {
      this.fail(err);
    }
    if (this.failure) {
      this.decompress.destroy();
      this.extract.destroy();
    }
    await piping;
    opts.signal?.removeEventListener('abort', onAbort);
    if (this.failure && opts.signal?.aborted) throw opts.signal.reason;
    return this.failure;
  }

  /** Hashes the source's bytes and counts them; a source that ends before its size fails the pass. */
  private rawTap(): Transform {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const pass = this;
    return new Transform({
      transform(chunk: Buffer, _e, cb) {
        pass.fileHash.update(chunk);
        pass.rawRead += chunk.length;
        pass.opts.onProgress?.(pass.rawRead, pass.fileSize);
        cb(null, chunk);
      },
      flush(cb) {
        if (pass.rawRead >= pass.fileSize) return cb();
        pass.endedAt = pass.rawRead;
        cb(
          new FormatError(
            'TRUNCATED',
            `${pass.source.identity} ended at byte ${pass.rawRead} of ${pass.fileSize}`,
          ),
        );
      },
    });
  }

  /**
   * Bytes past the listed entries' end never reach tar: its input ends there, and they are
   * reported once tar has judged what came before them. Failing at once would let the chunk
   * that crosses the end hide an unlisted, duplicate or special entry in it (the better
   * reason), depending on chunk sizes and on onEntry's speed.
   */
  private tarLimit(): Transform {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const pass = this;
    return new Transform({
      transform(chunk: Buffer, _e, cb) {
        if (pass.tarBytes > pass.expectedTar) return cb();
        const room = pass.expectedTar - pass.tarBytes;
        pass.tarBytes += chunk.length;
        if (chunk.length <= room) {
          pass.walker.feed(chunk);
          return cb(null, chunk);
        }
        const part = chunk.subarray(0, Math.max(0, room));
        pass.walker.feed(part);
        if (part.length > 0) this.push(part);
        this.push(null);
        cb();
      },
    });
  }
}

import { FormatError } from './errors.js';
import { endsWithSeekTable, isSystemError, readSeekIndex, undecodable } from './bundle-ends.js';
import type { WalkedFrame } from './frame-inspector.js';
import type { SeekIndex } from './seekable.js';
import type { BundleSource } from './source.js';
import type { PassState, TrustedHead, VerifiedBundle } from './verify-options.js';

// How a verifying pass ends: the frames and totals checked once the entries passed, or the
// error that names the cause when something failed first.

/** Marks what onEntry threw, so its own failures are not blamed on the bundle. */
export class ConsumerFailure {
  constructor(readonly error: unknown) {}
}

export const truncated = (cause?: unknown) =>
  new FormatError(
    'TRUNCATED',
    'the file ends before the archive does: the copy is incomplete (was the media removed early?); copy it again',
    { cause },
  );

/**
 * Where the index and the frames walked differ, if they do. Random reads map entries through
 * the index, so it must be the file's true frame list, not merely one that sums right.
 */
function indexMismatch(index: SeekIndex, walked: readonly WalkedFrame[]): string | undefined {
  if (index.frames.length !== walked.length)
    return `${index.frames.length} frames listed, ${walked.length} in the file`;
  for (let i = 0; i < walked.length; i++) {
    const a = index.frames[i]!;
    const b = walked[i]!;
    if (
      a.compressedOffset !== b.compressedOffset ||
      a.compressedSize !== b.compressedSize ||
      a.decompressedSize !== b.decompressedSize
    ) {
      return `frame ${i} is listed at byte ${a.compressedOffset}, ${a.compressedSize} bytes holding ${a.decompressedSize}; the file has it at byte ${b.compressedOffset}, ${b.compressedSize} bytes holding ${b.decompressedSize}`;
    }
  }
  return undefined;
}

/** The frames and totals of a pass whose entries all checked out. */
export async function passTotals(pass: PassState, head: TrustedHead): Promise<VerifiedBundle> {
  const { inspector, opts, source, fileSize } = pass;
  // Judged only now: the inspector sees the whole file, after the entries' own checks.
  if (inspector.problem) throw inspector.problem;
  // Still there after the pass, and as it was: a file deleted while it was read (its stick
  // pulled) is the media going away, though its open descriptor read on; one that grew is
  // still being written to, or was altered.
  const sizeNow = await source.currentSize();
  if (sizeNow > fileSize) {
    throw new FormatError(
      'TRAILING_DATA',
      `${source.identity} grew from ${fileSize} to ${sizeNow} bytes while being read: it is still being written, or was altered; let the copy finish, then try again`,
    );
  }
  // Anything but zstd frames after the archive failed the pass above, so a table that is
  // missing or does not account for the file is the table's own fault (BAD_SEEK_TABLE), not
  // data appended to the archive.
  const seekIndex = await readSeekIndex(source);
  if (seekIndex.decompressedBytes !== pass.tarBytes) {
    throw new FormatError(
      'BAD_SEEK_TABLE',
      `the seek index covers ${seekIndex.decompressedBytes} bytes of archive, but it has ${pass.tarBytes}`,
    );
  }
  const unlike = indexMismatch(seekIndex, inspector.frames);
  if (unlike)
    throw new FormatError(
      'BAD_SEEK_TABLE',
      `the seek index does not describe the file's frames (${unlike}): the file was altered; get a fresh copy`,
    );
  const fileDigest = 'sha256:' + pass.fileHash.digest('hex');
  if (opts.trust.digest && opts.trust.digest !== fileDigest) {
    throw new FormatError(
      'FILE_DIGEST_MISMATCH',
      `the file's sha256 is ${fileDigest}, not the expected ${opts.trust.digest}: wrong file, or damaged in copying; copy it again`,
    );
  }
  return {
    ...head,
    fileDigest,
    fileSize,
    seekIndex,
    ...(opts.frameDigests ? { frameDigests: inspector.frames.map((f) => f.digest!) } : {}),
  };
}

/** The error that names why a pass failed, from whatever failed first. */
export async function failureCause(pass: PassState, failure: unknown): Promise<unknown> {
  const { source, fileSize } = pass;
  // A bundle that shrank while we read it (or whose source came short of its size) is media
  // going away, whatever the decoder made of the cut.
  const sizeNow = Math.min(await source.currentSize().catch(() => 0), pass.endedAt ?? Infinity);
  if (sizeNow < fileSize) {
    return new FormatError(
      'TRUNCATED',
      `${source.identity} shrank from ${fileSize} to ${sizeNow} bytes while being read: the media was removed or changed; plug it in again`,
      { cause: failure },
    );
  }
  return classify(
    failure,
    pass.decompress.failed,
    pass.complete(),
    pass.rawRead >= fileSize,
    source,
  );
}

/** Turns whatever failed first into the error that names the cause. */
async function classify(
  err: unknown,
  upstream: Error | undefined,
  complete: boolean,
  readAllInput: boolean,
  source: BundleSource,
): Promise<unknown> {
  if (err instanceof ConsumerFailure) {
    // The consumer's own I/O failing (a full disk while staging) is not a damaged bundle:
    // pass it on with its errno code. Anything else reached it through the entry's stream.
    if (isSystemError(err.error)) return err.error;
    err = err.error;
  }
  if (err instanceof FormatError) return err;
  // tar's complaint about an archive cut short by undecodable bytes: the bytes are the cause
  if (upstream && !isSystemError(err)) err = upstream;
  // zstd's own words, which name neither the file nor what to do
  const decoder = upstream !== undefined && err === upstream && !(upstream instanceof FormatError);
  const msg = (err as Error)?.message ?? String(err);
  // reading the bundle failed (media removed, I/O error): not a verdict on its contents
  if (isSystemError(err))
    return new FormatError('IO_ERROR', `cannot read ${source.identity}: ${msg}`, { cause: err });
  const cutShort =
    readAllInput &&
    /middle of compressed data frame|Unexpected end of data|premature close/i.test(msg);
  if (complete) {
    // The archive is whole, so what failed to decompress comes after it: the seek table or
    // something appended. A file cut inside the table must not read as "altered", nor a
    // table whose header lies about its length as appended data.
    if (await endsWithSeekTable(source)) {
      const bad = await readSeekIndex(source).then(
        () => undefined,
        (e: unknown) => e,
      );
      if (bad)
        return bad instanceof FormatError
          ? bad
          : new FormatError(
              'BAD_SEEK_TABLE',
              `the seek index cannot be read: ${(bad as Error).message}`,
              { cause: bad },
            );
    } else if (cutShort) {
      return truncated(err);
    }
    return new FormatError(
      'TRAILING_DATA',
      `data follows the end of the archive${decoder ? '' : ` (${msg})`}: the file was altered`,
      { cause: err },
    );
  }
  if (cutShort) return truncated(err);
  if (decoder) return undecodable(source, err);
  return new FormatError('CORRUPT', `the file is damaged or not a bundle: ${msg}`, { cause: err });
}

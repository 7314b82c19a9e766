import { lstat, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { openRegularFile, readSmallFile, writeFileAtomic } from '@offline-bundle/host';
import { newSha256, sha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { isSystemError, readHeader } from './bundle-ends.js';
import { EntryFiles, entryMismatch, removeUnfinishedWrites } from './entry-files.js';
import { layoutEntries } from './listing.js';
import { BundleRandomReader } from './random-reader.js';
import type { BundleSource } from './source.js';
import { checkSignature, checkSigner, type Trust } from './trust.js';
import type { LayoutEntry, TrustedHead, VerifyOptions } from './verify-options.js';
import type { SeekIndex } from './seekable.js';

/** Names, in a partial staging directory, the bundle whose verified entries it holds. */
export const RESUME_MARKER = 'resume.json';
/** The marker holds one digest: anything larger is not one this code wrote. */
export const MAX_RESUME_MARKER_BYTES = 4096;

const IDENTITY = /^sha256:[0-9a-f]{64}$/;

/**
 * A bundle's content identity: the digest of its signed bundle.json, which lists every entry's
 * digest. Not the media path: the same bundle may come back from another stick or name.
 */
export function bundleIdentity(manifestBytes: Buffer): string {
  return sha256(manifestBytes);
}

export async function writeResumeMarker(partial: string, manifestBytes: Buffer): Promise<void> {
  await writeFileAtomic(
    join(partial, RESUME_MARKER),
    JSON.stringify({ bundleJson: bundleIdentity(manifestBytes) }) + '\n',
  );
}

/** The bundle identity a partial directory's marker names; undefined when it has none this code could have written. */
export async function partialBundle(partial: string): Promise<string | undefined> {
  try {
    const parsed = JSON.parse(
      (await readSmallFile(join(partial, RESUME_MARKER), MAX_RESUME_MARKER_BYTES)).bytes.toString(
        'utf8',
      ),
    ) as { bundleJson?: unknown };
    return typeof parsed?.bundleJson === 'string' && IDENTITY.test(parsed.bundleJson)
      ? parsed.bundleJson
      : undefined;
  } catch {
    return undefined;
  }
}

/** What a resumed extraction found already staged. */
export interface ResumeInfo {
  /** Layout bytes (entries' sizes) kept from the interrupted staging, of `totalBytes`. */
  keptBytes: number;
  totalBytes: number;
  keptEntries: number;
  totalEntries: number;
  /** Entries found in place that no longer hashed to their signed digest: removed and read again. */
  dropped: number;
}

/**
 * The trusted head of `source` when `partial` holds pieces of this very bundle and they may be
 * kept: only under a signature, where each entry is good once it hashes to the digest the
 * signed bundle.json lists. A trusted whole-file digest vouches for nothing before the whole
 * file was hashed, so there a kept piece saves no read and the staging starts over.
 */
export async function resumableHead(
  source: BundleSource,
  partial: string,
  trust: Trust,
  known?: Omit<TrustedHead, 'signer'>,
): Promise<TrustedHead | undefined> {
  if (trust.digest || !trust.keys?.length) return undefined;
  const held = await partialBundle(partial);
  if (!held) return undefined;
  const head = known ?? (await readHeader(source));
  if (bundleIdentity(head.manifestBytes) !== held) return undefined;
  const signer = checkSignature(
    head.manifestBytes,
    head.signature,
    head.manifest.signer.fingerprint,
    trust,
  )!;
  checkSigner(head.manifest, signer);
  return { ...head, signer };
}

/** Whether `entry`'s file is in `dir` at its listed size (a regular file); anything else there is removed. */
async function sized(dir: string, entry: LayoutEntry): Promise<boolean> {
  const path = join(dir, entry.path);
  const st = await lstat(path).catch(() => undefined);
  if (!st) return false;
  if (st.isFile() && st.size === entry.size) return true;
  await rm(path, { recursive: true, force: true });
  return false;
}

/**
 * Whether the file of `entry` in `dir` still hashes to its signed digest (removed when not).
 * Re-hashed, not trusted on its name: the rename proves it verified when written, not that the
 * disk kept it (a bad sector, a hand, a power cut on a filesystem without ordered data), and a
 * size check misses a flipped byte. It runs while the missing entries are read from the stick.
 */
async function hashesRight(
  dir: string,
  entry: LayoutEntry,
  stopped: () => boolean,
): Promise<boolean | undefined> {
  const path = join(dir, entry.path);
  const fh = await openRegularFile(path).catch(() => undefined);
  let good = false;
  if (fh) {
    try {
      const hash = newSha256();
      let size = 0;
      for await (const chunk of fh.createReadStream({
        highWaterMark: 1024 * 1024,
        autoClose: false,
      })) {
        if (stopped()) return undefined;
        hash.update(chunk as Buffer);
        size += (chunk as Buffer).length;
      }
      good = size === entry.size && 'sha256:' + hash.digest('hex') === entry.digest;
    } finally {
      await fh.close();
    }
  }
  if (!good) await rm(path, { force: true });
  return good;
}

/**
 * Whether `entry` is in `dir` whole: a regular file at its listed size that hashes again to its
 * signed digest; anything else under its name is removed. undefined when `stopped` said stop
 * mid-way. What every resume of a staging (from a stick or from peers) keeps an entry by.
 */
export async function verifiedInPlace(
  dir: string,
  entry: LayoutEntry,
  stopped: () => boolean,
): Promise<boolean | undefined> {
  return (await sized(dir, entry)) ? hashesRight(dir, entry, stopped) : false;
}

interface ResumeOptions extends Pick<VerifyOptions, 'onProgress' | 'signal'> {
  /** What was found in place at its size, before the re-check (`dropped` 0): the kept bytes count as done from here. */
  onResume?: (info: ResumeInfo) => void;
  /** The re-check is over: what was kept, and how many entries were dropped and read again. */
  onRechecked?: (info: ResumeInfo) => void;
}

/** Which entries are in `partial` at their listed size (kept, to be re-hashed) and which are to be read. */
async function takeStock(
  partial: string,
  entries: LayoutEntry[],
): Promise<{ info: ResumeInfo; found: LayoutEntry[]; missing: LayoutEntry[] }> {
  const info: ResumeInfo = {
    keptBytes: 0,
    totalBytes: 0,
    keptEntries: 0,
    totalEntries: entries.length,
    dropped: 0,
  };
  const found: LayoutEntry[] = [];
  const missing: LayoutEntry[] = [];
  for (const e of entries) {
    info.totalBytes += e.size;
    if (await sized(partial, e)) {
      found.push(e);
      info.keptEntries++;
      info.keptBytes += e.size;
    } else {
      missing.push(e);
    }
  }
  return { info, found, missing };
}

/** A random reader over `source`, once its last byte is there to read. */
async function openWhole(source: BundleSource, head: TrustedHead): Promise<BundleRandomReader> {
  // a source cut short shows at its end first: named so, not as a seek index gone missing
  const last = await source
    .read(source.size - 1, 1)
    .catch((err: unknown) => sourceFailure(source, err));
  if (last.length < 1)
    await sourceFailure(
      source,
      new FormatError(
        'TRUNCATED',
        `${source.identity} ends before its ${source.size} bytes: the media was removed or changed; plug it in again`,
      ),
    );
  // the headers are held to the signed listing as a verifying pass holds them
  return BundleRandomReader.open(source, head.manifest).catch((err: unknown) =>
    sourceFailure(source, err),
  );
}

/**
 * The rest of an interrupted staging of `head`'s bundle into `partial`: temp files go; only the
 * entries not in place are read, through the seek index, each frame of them and nothing else
 * (entries are frame-aligned), while the entries in place are re-hashed beside that read; one
 * that no longer matches is removed and read after the others. Every entry read is hashed to
 * its signed digest before `files` puts it in place.
 */
export async function resumeInto(
  source: BundleSource,
  partial: string,
  head: TrustedHead,
  files: EntryFiles,
  opts: ResumeOptions & { onVerified?: (e: LayoutEntry) => void },
): Promise<{ info: ResumeInfo; seekIndex: SeekIndex }> {
  await removeUnfinishedWrites(partial);
  const { info, found, missing } = await takeStock(partial, layoutEntries(head.manifest));
  opts.onResume?.({ ...info });
  const reader = await openWhole(source, head);
  let done = info.keptBytes;
  const progress = (n: number) => {
    done += n;
    opts.onProgress?.(Math.round(source.size * (done / Math.max(1, info.totalBytes))), source.size);
  };
  progress(0);
  const fetch = fetcher(source, reader, files, progress, opts.signal);
  let stop = false;
  const again: LayoutEntry[] = [];
  const recheck = (async () => {
    for (const e of found) {
      const good = await hashesRight(partial, e, () => stop || !!opts.signal?.aborted);
      if (good === undefined) return;
      if (good) {
        opts.onVerified?.(e);
        continue;
      }
      info.dropped++;
      info.keptEntries--;
      info.keptBytes -= e.size;
      progress(-e.size);
      again.push(e);
    }
  })();
  const [read, checked] = await Promise.allSettled([
    fetch(missing).catch((err: unknown) => {
      stop = true;
      throw err;
    }),
    recheck,
  ]);
  if (read.status === 'rejected') throw read.reason;
  if (checked.status === 'rejected') throw checked.reason;
  opts.signal?.throwIfAborted();
  await fetch(again);
  opts.onRechecked?.({ ...info });
  return { info, seekIndex: reader.index };
}

/** Reads entries through the seek index, each hashed to its signed digest, into place. */
function fetcher(
  source: BundleSource,
  reader: BundleRandomReader,
  files: EntryFiles,
  progress: (n: number) => void,
  signal?: AbortSignal,
) {
  return async (entries: LayoutEntry[]): Promise<void> => {
    for (const e of entries) {
      signal?.throwIfAborted();
      const hash = newSha256();
      let size = 0;
      const data = reader.stream(e.path);
      const counted = counting(
        hash,
        (n) => {
          size += n;
          progress(n);
        },
        signal,
      );
      data.on('error', (err) => counted.destroy(err));
      // pipe() leaves the source open when the write fails: destroyed, it gives back its frame budget
      await files
        .write(e, data.pipe(counted))
        .catch((err: unknown) => sourceFailure(source, err))
        .finally(() => data.destroy());
      const actual = 'sha256:' + hash.digest('hex');
      if (size !== e.size || actual !== e.digest) {
        throw entryMismatch(e.path, actual, e.digest);
      }
      files.place(e);
    }
  };
}

/** Names a failed read of the source as the verifying pass does (media shrank, IO_ERROR); the disk's own errors pass on. */
async function sourceFailure(source: BundleSource, err: unknown): Promise<never> {
  if (err instanceof FormatError && err.code !== 'TRUNCATED') throw err;
  const sizeNow = await source.currentSize().catch(() => 0);
  if (sizeNow < source.size) {
    throw new FormatError(
      'TRUNCATED',
      `${source.identity} shrank from ${source.size} to ${sizeNow} bytes while being read: the media was removed or changed; plug it in again`,
      { cause: err },
    );
  }
  if (isSystemError(err) && err.syscall === 'read')
    throw new FormatError('IO_ERROR', `cannot read ${source.identity}: ${err.message}`, {
      cause: err,
    });
  throw err;
}

function counting(
  hash: ReturnType<typeof newSha256>,
  onBytes: (n: number) => void,
  signal?: AbortSignal,
): Transform {
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      if (signal?.aborted) return cb(signal.reason as Error);
      hash.update(chunk);
      onBytes(chunk.length);
      cb(null, chunk);
    },
  });
}

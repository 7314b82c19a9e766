import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { openRegularFile, readSmallFile, writeFileAtomic } from '@offline-bundle/host';
import { newSha256, sha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { isSystemError, readHeader } from './bundle-ends.js';
import { EntryFiles, removeUnfinishedWrites } from './entry-files.js';
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
  await writeFileAtomic(join(partial, RESUME_MARKER), JSON.stringify({ bundleJson: bundleIdentity(manifestBytes) }) + '\n');
}

/** The bundle identity a partial directory's marker names; undefined when it has none this code could have written. */
export async function partialBundle(partial: string): Promise<string | undefined> {
  try {
    const parsed = JSON.parse((await readSmallFile(join(partial, RESUME_MARKER), MAX_RESUME_MARKER_BYTES)).bytes.toString('utf8')) as { bundleJson?: unknown };
    return typeof parsed?.bundleJson === 'string' && IDENTITY.test(parsed.bundleJson) ? parsed.bundleJson : undefined;
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
export async function resumableHead(source: BundleSource, partial: string, trust: Trust, known?: Omit<TrustedHead, 'signer'>): Promise<TrustedHead | undefined> {
  if (trust.digest || !trust.keys?.length) return undefined;
  const held = await partialBundle(partial);
  if (!held) return undefined;
  const head = known ?? await readHeader(source);
  if (bundleIdentity(head.manifestBytes) !== held) return undefined;
  const signer = checkSignature(head.manifestBytes, head.signature, head.manifest.signer.fingerprint, trust)!;
  checkSigner(head.manifest, signer);
  return { ...head, signer };
}

/**
 * Whether `entry` is in place in `dir`, whole and hashing to its signed digest. Re-hashed, not
 * trusted on its name: the rename proves it verified when written, not that the disk kept it
 * (a bad sector, a hand, a power cut on a filesystem without ordered data). Reading the local
 * disk costs far less than the stick it replaces (docs/ARCHITECTURE.md, Resume).
 */
async function inPlace(dir: string, entry: LayoutEntry, signal?: AbortSignal): Promise<'kept' | 'missing' | 'dropped'> {
  const path = join(dir, entry.path);
  let fh;
  try {
    fh = await openRegularFile(path);
  } catch {
    await rm(path, { recursive: true, force: true });
    return 'missing';
  }
  let good = false;
  try {
    if ((await fh.stat()).size === entry.size) {
      const hash = newSha256();
      for await (const chunk of fh.createReadStream({ highWaterMark: 1024 * 1024, autoClose: false })) {
        signal?.throwIfAborted();
        hash.update(chunk as Buffer);
      }
      good = 'sha256:' + hash.digest('hex') === entry.digest;
    }
  } finally {
    await fh.close();
  }
  if (good) return 'kept';
  await rm(path, { force: true });
  return 'dropped';
}

export interface ResumeOptions extends Pick<VerifyOptions, 'onProgress' | 'signal'> {
  onResume?: (info: ResumeInfo) => void;
}

/**
 * The rest of an interrupted staging of `head`'s bundle into `partial`: temp files go, every
 * entry in place is re-hashed (kept or dropped), and only the entries still missing are read,
 * through the seek index, each frame of them and nothing else (entries are frame-aligned). Every
 * entry read is hashed to its signed digest before `files` puts it in place.
 */
export async function resumeInto(source: BundleSource, partial: string, head: TrustedHead, files: EntryFiles, opts: ResumeOptions & { onVerified?: (e: LayoutEntry) => void }): Promise<{ info: ResumeInfo; seekIndex: SeekIndex }> {
  await removeUnfinishedWrites(partial);
  const entries = layoutEntries(head.manifest);
  const info: ResumeInfo = { keptBytes: 0, totalBytes: 0, keptEntries: 0, totalEntries: entries.length, dropped: 0 };
  const missing: LayoutEntry[] = [];
  for (const e of entries) {
    info.totalBytes += e.size;
    const state = await inPlace(partial, e, opts.signal);
    if (state !== 'kept') {
      if (state === 'dropped') info.dropped++;
      missing.push(e);
      continue;
    }
    info.keptEntries++;
    info.keptBytes += e.size;
    opts.onVerified?.(e);
  }
  opts.onResume?.(info);
  // the headers are held to the signed listing as a verifying pass holds them
  const reader = await BundleRandomReader.open(source, head.manifest);
  let done = info.keptBytes;
  const progress = (n: number) => {
    done += n;
    opts.onProgress?.(Math.round(source.size * (done / Math.max(1, info.totalBytes))), source.size);
  };
  progress(0);
  for (const e of missing) {
    opts.signal?.throwIfAborted();
    const hash = newSha256();
    let size = 0;
    const data = reader.stream(e.path);
    const counted = counting(hash, (n) => { size += n; progress(n); }, opts.signal);
    data.on('error', (err) => counted.destroy(err));
    await files.write(e, data.pipe(counted)).catch((err: unknown) => sourceFailure(source, err));
    const actual = 'sha256:' + hash.digest('hex');
    if (size !== e.size || actual !== e.digest) {
      throw new FormatError('BLOB_DIGEST_MISMATCH', `entry "${e.path}" hashes to ${actual}; bundle.json lists ${e.digest}: the bundle is damaged or was altered`);
    }
    files.place(e);
  }
  return { info, seekIndex: reader.index };
}

/** Names a failed read of the source as the verifying pass does (media shrank, IO_ERROR); the disk's own errors pass on. */
async function sourceFailure(source: BundleSource, err: unknown): Promise<never> {
  if (err instanceof FormatError && err.code !== 'TRUNCATED') throw err;
  const sizeNow = await source.currentSize().catch(() => 0);
  if (sizeNow < source.size) {
    throw new FormatError('TRUNCATED', `${source.identity} shrank from ${source.size} to ${sizeNow} bytes while being read: the media was removed or changed; plug it in again`, { cause: err });
  }
  if (isSystemError(err) && err.syscall === 'read') throw new FormatError('IO_ERROR', `cannot read ${source.identity}: ${err.message}`, { cause: err });
  throw err;
}

function counting(hash: ReturnType<typeof newSha256>, onBytes: (n: number) => void, signal?: AbortSignal): Transform {
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      if (signal?.aborted) return cb(signal.reason as Error);
      hash.update(chunk);
      onBytes(chunk.length);
      cb(null, chunk);
    },
  });
}

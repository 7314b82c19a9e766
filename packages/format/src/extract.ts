import { readdir, rename, rm, rmdir } from 'node:fs/promises';
import { makeDirs, readSmallFile, syncDirBestEffort, writeFileAtomic } from '@offline-bundle/host';
import { dirname, join, resolve } from 'node:path';
import { isSystemError } from './bundle-ends.js';
import { FormatError } from './errors.js';
import { EntryFiles, emptyStaging, removeUnfinishedWrites, stagingProbe } from './entry-files.js';
import {
  RESUME_MARKER,
  resumableHead,
  resumeInto,
  writeResumeMarker,
  type ResumeInfo,
} from './extract-resume.js';
import { BUNDLE_JSON, MAX_BUNDLE_JSON_BYTES, MAX_SIGNATURE_BYTES, SIGNATURE } from './layout.js';
import { verifyBundle } from './reader.js';
import type { VerifiedBundle, VerifyOptions } from './verify-options.js';
import type { BundleSource } from './source.js';
import type { BundleManifest } from './manifest.js';
import { fillFromBase, needsBase, type BaseSource } from './base-fill.js';

export interface ExtractOptions extends Omit<
  VerifyOptions,
  'onEntry' | 'onManifest' | 'onVerified'
> {
  /** Where to build the layout before the rename (default: DIR.partial beside DIR). */
  partialDir?: string;
  /** fsync every entry before its rename into place, so a crash never leaves a "complete" file or layout with holes. */
  fsync?: boolean;
  onManifest?: VerifyOptions['onManifest'];
  /** Told of each entry once it is verified and in place in the partial directory (kept ones on a resume first). */
  onVerified?: VerifyOptions['onVerified'];
  /**
   * Keep what a failed extraction verified, and continue from it when the same bundle (the
   * same signed bundle.json) is extracted into the same partial directory again. Signed trust only.
   */
  resume?: boolean;
  /** bundle.json and its signature as the caller read them already (readHeader): a resume does not read them again. */
  head?: { manifest: BundleManifest; manifestBytes: Buffer; signature: Buffer };
  /** A resume found this much already staged (before any byte of the rest is read). */
  onResume?: (info: ResumeInfo) => void;
  /** A resume's re-check of what it found is over (`dropped`: entries no longer matching, read again). */
  onRechecked?: (info: ResumeInfo) => void;
  /**
   * A delta's base: its blobs are copied into the staging (each hashed to its signed digest)
   * once bundle.json is trusted, before any entry of the archive. Without it a delta is refused.
   */
  base?: BaseSource;
}

async function isEmptyOrMissing(dir: string): Promise<boolean> {
  try {
    return (await readdir(dir)).length === 0;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw err;
  }
}

/** What extractBundle returns: the verified bundle, and what a resume kept (`fileDigest` is then '': the file was not read whole). */
export interface ExtractedBundle extends VerifiedBundle {
  resumed?: ResumeInfo;
}

/** Resuming needs a signature (see resumableHead). */
const resumable = (trust: ExtractOptions['trust']) => !trust.digest && !!trust.keys?.length;

/**
 * Verified extraction: the layout is written to a partial directory while the one pass
 * checks everything, and renamed to `dir` only when the pass succeeded. On any failure the
 * partial directory is removed, so `dir` holds nothing of the bundle, unless `resume`: then a
 * staging cut short (worthResuming) leaves the entries verified so far in place for the next extraction of the same
 * bundle, which re-checks them and reads only the rest (extract-resume.ts). Either way `dir`
 * itself is only ever complete. `source` is not closed here.
 */
export async function extractBundle(
  source: BundleSource,
  dir: string,
  opts: ExtractOptions,
): Promise<ExtractedBundle> {
  const target = resolve(dir);
  if (!(await isEmptyOrMissing(target))) {
    throw new FormatError('IO_ERROR', `${target} exists and is not empty: choose a new directory`);
  }
  if (opts.head?.manifest.base && !opts.base) throw needsBase(opts.head.manifest, BASE_FIX);
  const partial = opts.partialDir ?? `${target}.partial`;
  const head = opts.resume
    ? await resumableHead(source, partial, opts.trust, opts.head)
    : undefined;
  if (!head) await emptyStaging(partial);
  const files = new EntryFiles(partial, opts.fsync !== false, opts.onVerified);
  let keep = !!head;
  try {
    let verified: ExtractedBundle;
    if (head) {
      await opts.onManifest?.(head.manifest, head.manifestBytes, head.signature);
      // a base blob cut short last time left its temp file, which a new write of it must not meet
      await removeUnfinishedWrites(partial);
      await fillBase(head.manifest, files, opts);
      const { info, seekIndex } = await resumeInto(source, partial, head, files, opts);
      verified = { ...head, fileDigest: '', fileSize: source.size, seekIndex, resumed: info };
    } else {
      verified = await verifyBundle(source, {
        ...opts,
        onManifest: async (manifest, manifestBytes, signature) => {
          await opts.onManifest?.(manifest, manifestBytes, signature);
          // from here on what is written belongs to this signed bundle.json and may be kept
          // best effort: a marker that cannot be written (a full disk) costs only the resume, and
          // the entries' own writes then fail with the disk's error
          if (opts.resume && resumable(opts.trust))
            keep = await writeResumeMarker(partial, manifestBytes).then(
              () => true,
              () => false,
            );
          await fillBase(manifest, files, opts);
        },
        onEntry: (entry, data) => files.write(entry, data),
        onVerified: (entry) => files.place(entry),
      });
    }
    await files.settle();
    await finishLayout(partial, target, verified);
    return verified;
  } catch (err) {
    await files.quiet();
    if (!keep || !worthResuming(err, opts.signal))
      await rm(partial, { recursive: true, force: true });
    throw err;
  }
}

const BASE_FIX = 'extract the full bundle instead';

/** A delta's base blobs into the staging, before the archive's entries; a full bundle has none. */
async function fillBase(m: BundleManifest, files: EntryFiles, opts: ExtractOptions): Promise<void> {
  if (!m.base) return;
  if (!opts.base) throw needsBase(m, BASE_FIX);
  try {
    await fillFromBase(m, files, opts.base, { signal: opts.signal });
  } finally {
    await opts.base.close?.();
  }
}

/**
 * Only a staging cut short keeps its pieces: a stop, or the source failing (media removed,
 * cut short, a read error). A verdict on the bytes (damaged, altered) leaves nothing, as bad
 * input always does; and a full disk keeps nothing, since the pieces would hold the room the
 * refusal asks to free.
 */
function worthResuming(err: unknown, signal: AbortSignal | undefined): boolean {
  for (
    let e = err as { code?: unknown; cause?: unknown } | undefined, depth = 0;
    e && depth < 4;
    e = e.cause as typeof e, depth++
  ) {
    if (e.code === 'ENOSPC' || e.code === 'EDQUOT') return false;
  }
  if (signal?.aborted) return true;
  if (err instanceof FormatError) return err.code === 'IO_ERROR' || err.code === 'TRUNCATED';
  return isSystemError(err) && err.syscall === 'read';
}

/**
 * The signed description beside the entries, then the whole directory renamed into place: how
 * every staging ends, from a bundle or from peers (agent/src/peers/peer-fetch.ts).
 */
export async function finishLayout(
  partial: string,
  target: string,
  verified: { manifestBytes: Buffer; signature: Buffer },
): Promise<void> {
  await writeFileAtomic(join(partial, BUNDLE_JSON), verified.manifestBytes);
  await writeFileAtomic(join(partial, SIGNATURE), verified.signature);
  await rm(join(partial, RESUME_MARKER), { force: true });
  await rmdir(target).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
  await makeDirs(dirname(target));
  await rename(partial, target);
  await syncDirBestEffort(dirname(target));
  stagingProbe.use?.(finishLayout, target);
}

/**
 * The signed description of an extracted layout (`DIR/bundle.json` and its signature), each read
 * within its format limit: regular files only, so a FIFO or device put there fails at once.
 */
export async function readLayoutDescription(
  dir: string,
): Promise<{ manifestBytes: Buffer; signature: Buffer }> {
  const manifestBytes = (await readSmallFile(join(dir, BUNDLE_JSON), MAX_BUNDLE_JSON_BYTES)).bytes;
  const signature = (await readSmallFile(join(dir, SIGNATURE), MAX_SIGNATURE_BYTES)).bytes;
  return { manifestBytes, signature };
}

// The partial staging directory an origin with no bundle file fills (peers): made ready by
// format's staged-layout functions, as a stick's extraction makes it (packages/format
// entry-files.ts, extract-resume.ts), so either origin may finish what the other began. A head
// with `pieces` also keeps what a cut left of the blobs being written: the temp file's whole
// pieces that hash to the signed list, from its start (issue #42).
import { rm } from 'node:fs/promises';
import { Readable } from 'node:stream';
import {
  FormatError,
  OCI_LAYOUT,
  OCI_LAYOUT_CONTENT,
  PieceDigests,
  bundleIdentity,
  emptyStaging,
  layoutEntries,
  partialBundle,
  removeUnfinishedWrites,
  verifiedInPlace,
  writeResumeMarker,
  type EntryAppend,
  type EntryFiles,
  type LayoutEntry,
} from '@offline-bundle/format';
import type { StagedHead } from './kept-layout.js';

/** Whether `entry` is in `dir` whole and hashing right again (removed when not); a stop ends the look. */
async function kept(dir: string, entry: LayoutEntry, signal: AbortSignal): Promise<boolean> {
  const good = await verifiedInPlace(dir, entry, () => signal.aborted);
  signal.throwIfAborted();
  return good === true;
}

/** The head's piece digests: without them (an older bundle) a temp file is never trusted. */
const digestsOf = (head: StagedHead): PieceDigests | undefined =>
  head.manifest.pieces ? new PieceDigests(head.manifest.pieces) : undefined;

/**
 * The writer of `e` resumed after the verified pieces its temp file holds (cut after them);
 * undefined when none are. A stop ends the hashing between pieces, the file left as it was; a
 * temp file that cannot be read (EIO) goes, and only it.
 */
async function resumedWrite(
  files: EntryFiles,
  e: LayoutEntry,
  digests: PieceDigests,
  signal: AbortSignal,
): Promise<EntryAppend | undefined> {
  const w = files.appender(e);
  let got: number;
  try {
    got = await w.keepVerifiedPieces(
      digests.size,
      (i, piece) => digests.matches(e.digest, i, piece),
      () => signal.aborted,
    );
  } catch (err) {
    signal.throwIfAborted();
    if (typeof (err as NodeJS.ErrnoException).code !== 'string') throw err;
    await rm(files.tempOf(e.path), { recursive: true, force: true });
    return undefined;
  }
  signal.throwIfAborted();
  return got > 0 ? w : undefined;
}

/** Every piece of `w`'s entry was there: placed now (false when its whole hash says otherwise, the temp file gone). */
async function placedWhole(w: EntryAppend): Promise<boolean> {
  if (w.got < w.entry.size) return false;
  try {
    await w.commit();
    return true;
  } catch (err) {
    if (err instanceof FormatError) return false;
    throw err;
  }
}

/** What preparePartial found: the entries to fill, and the writers of those begun (their verified pieces kept). */
interface PreparedPartial {
  missing: LayoutEntry[];
  /** Whole entries kept, and the verified pieces of those begun. */
  keptBytes: number;
  /** By entry path: the writers of missing entries whose first pieces were kept, each to go on after them. */
  begun: Map<string, EntryAppend>;
}

/**
 * The partial directory of `files` made ready for `head`'s bundle: what an interrupted staging of
 * the same bundle (from peers or a stick) left is kept once it hashes right again; anything else
 * goes. Returns the entries still to fill (oci-layout, whose bytes are fixed, written here
 * through the writer as any entry). `onMarked` is told once the partial is marked as this
 * bundle's (found so, or emptied and marked): from then on a stop keeps it for the next try.
 */
export async function preparePartial(
  files: EntryFiles,
  partial: string,
  head: StagedHead,
  signal: AbortSignal,
  onKept: (e: LayoutEntry) => void,
  onMarked: () => void = () => undefined,
): Promise<PreparedPartial> {
  const entries = layoutEntries(head.manifest);
  const same = (await partialBundle(partial)) === bundleIdentity(head.manifestBytes);
  const digests = same ? digestsOf(head) : undefined;
  if (!same) {
    await emptyStaging(partial);
    await writeResumeMarker(partial, head.manifestBytes);
  } else await removeUnfinishedWrites(partial, piecedEntries(head, digests));
  onMarked();
  const out: PreparedPartial = { missing: [], keptBytes: 0, begun: new Map() };
  for (const e of entries) {
    // no temp file is left without a writer: removeUnfinishedWrites took those of entries without
    // pieces, and resumedWrite removes one that kept no verified piece
    const w = digests?.covers(e.digest) ? await resumedWrite(files, e, digests, signal) : undefined;
    if ((same && !w && (await kept(partial, e, signal))) || (w && (await placedWhole(w)))) {
      out.keptBytes += e.size;
      onKept(e);
    } else if (e.path === OCI_LAYOUT) {
      const oci = files.appender(e);
      await oci.append(Readable.from([OCI_LAYOUT_CONTENT]));
      await oci.commit();
      onKept(e);
    } else {
      out.missing.push(e);
      if (w && w.got > 0) {
        out.begun.set(e.path, w);
        out.keptBytes += w.got;
      }
    }
  }
  return out;
}

/**
 * A staging cut short leaves its partial for the next try: its temp files go (their bytes were
 * never verified), except, with a head that lists pieces, those of blobs it splits into
 * pieces: the next preparePartial keeps their verified prefix.
 */
export async function leaveForResume(partial: string, head: StagedHead): Promise<void> {
  await removeUnfinishedWrites(partial, piecedEntries(head, digestsOf(head)));
}

/** The layout paths whose temp files a resume checks piece by piece (none without pieces). */
function piecedEntries(head: StagedHead, digests: PieceDigests | undefined) {
  const paths = new Set(
    digests
      ? layoutEntries(head.manifest)
          .filter((e) => digests.covers(e.digest))
          .map((e) => e.path)
      : [],
  );
  return (path: string) => paths.has(path);
}

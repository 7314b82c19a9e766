// The partial staging directory an origin with no bundle file fills (peers): made ready by
// format's staged-layout functions, as a stick's extraction makes it (packages/format
// entry-files.ts, extract-resume.ts), so either origin may finish what the other began.
import { Readable } from 'node:stream';
import {
  OCI_LAYOUT,
  OCI_LAYOUT_CONTENT,
  bundleIdentity,
  emptyStaging,
  layoutEntries,
  partialBundle,
  removeUnfinishedWrites,
  verifiedInPlace,
  writeResumeMarker,
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

/**
 * The partial directory of `files` made ready for `head`'s bundle: what an interrupted staging of
 * the same bundle (from peers or a stick) left is kept once it hashes right again; anything else
 * goes. Returns the entries still to fill (oci-layout, whose bytes are fixed, written here
 * through the writer as any entry).
 */
export async function preparePartial(
  files: EntryFiles,
  partial: string,
  head: StagedHead,
  signal: AbortSignal,
  onKept: (e: LayoutEntry) => void,
): Promise<{ missing: LayoutEntry[]; keptBytes: number }> {
  const entries = layoutEntries(head.manifest);
  const same = (await partialBundle(partial)) === bundleIdentity(head.manifestBytes);
  if (same) {
    await removeUnfinishedWrites(partial);
  } else {
    await emptyStaging(partial);
    await writeResumeMarker(partial, head.manifestBytes);
  }
  const missing: LayoutEntry[] = [];
  let keptBytes = 0;
  for (const e of entries) {
    if (same && (await kept(partial, e, signal))) {
      keptBytes += e.size;
      onKept(e);
    } else if (e.path === OCI_LAYOUT) {
      const w = files.appender(e);
      await w.append(Readable.from([OCI_LAYOUT_CONTENT]));
      await w.commit();
      onKept(e);
    } else {
      missing.push(e);
    }
  }
  return { missing, keptBytes };
}

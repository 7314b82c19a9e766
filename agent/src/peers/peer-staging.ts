// The partial staging directory a fetch from peers writes: the very layout, temp-file names and
// resume marker a stick's extraction uses (packages/format extract.ts, extract-resume.ts), so
// either source may finish what the other began, and the load runs unchanged on the result.
import { createReadStream } from 'node:fs';
import { lstat, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { OCI_LAYOUT, OCI_LAYOUT_CONTENT, bundleIdentity, layoutEntries, partialBundle, removeUnfinishedWrites, writeResumeMarker, type LayoutEntry } from '@offline-bundle/format';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { newSha256 } from '@offline-bundle/oci';
import type { PeerHead } from './peer-head.js';

/** Whether the file of `entry` in `dir` is a regular file of its size that hashes to its digest; removed when not. */
async function keptRight(dir: string, entry: LayoutEntry, signal: AbortSignal): Promise<boolean> {
  const path = join(dir, entry.path);
  const st = await lstat(path).catch(() => undefined);
  if (!st) return false;
  if (st.isFile() && st.size === entry.size) {
    const hash = newSha256();
    for await (const c of createReadStream(path, { signal })) hash.update(c as Buffer);
    if ('sha256:' + hash.digest('hex') === entry.digest) return true;
  }
  await rm(path, { recursive: true, force: true });
  return false;
}

/**
 * The partial directory made ready for `head`'s bundle: what an interrupted staging of the same
 * bundle (from peers or a stick) left is kept once it hashes right again; anything else goes.
 * Returns the entries still to fetch (oci-layout, whose bytes are fixed, written here).
 */
export async function preparePartial(partial: string, head: PeerHead, signal: AbortSignal, onKept: (e: LayoutEntry) => void): Promise<{ missing: LayoutEntry[]; keptBytes: number }> {
  const entries = layoutEntries(head.manifest);
  const same = (await partialBundle(partial)) === bundleIdentity(head.manifestBytes);
  if (same) {
    await removeUnfinishedWrites(partial);
  } else {
    await rm(partial, { recursive: true, force: true });
    await makeDirs(join(partial, 'blobs', 'sha256'));
    await writeResumeMarker(partial, head.manifestBytes);
  }
  const missing: LayoutEntry[] = [];
  let keptBytes = 0;
  for (const e of entries) {
    if (same && await keptRight(partial, e, signal)) {
      keptBytes += e.size;
      onKept(e);
    } else if (e.path === OCI_LAYOUT) {
      await writeFileAtomic(join(partial, OCI_LAYOUT), OCI_LAYOUT_CONTENT);
      onKept(e);
    } else {
      missing.push(e);
    }
  }
  return { missing, keptBytes };
}

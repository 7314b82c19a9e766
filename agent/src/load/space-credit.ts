// The agent's own partial staging sits on the upgrade filesystem: statfs counts it as used,
// though the agent deletes it (another bundle's) or keeps it (this bundle's) before writing.
// Its size is summed for planSpace's credit; the directory may hold anything, so the walk is
// bounded and never follows a symlink or leaves the filesystem.
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/** Most entries looked at in one partial staging directory; past it the sum stops short (less credit, never more). */
export const MAX_PARTIAL_ENTRIES = 100_000;

/**
 * The bytes of the regular files under `dir` on its own filesystem (their sizes, and never more
 * than the blocks they hold), by lstat (a symlink counts
 * nothing and is not followed; a mount under it is not entered); 0 when `dir` is absent or not a
 * directory. Stops after MAX_PARTIAL_ENTRIES entries: an undercount only lowers the credit.
 */
export async function partialBytes(dir: string, maxEntries = MAX_PARTIAL_ENTRIES): Promise<number> {
  const top = await lstat(dir).catch(() => undefined);
  if (!top?.isDirectory()) return 0;
  let bytes = 0;
  let seen = 0;
  const pending = [dir];
  while (pending.length > 0 && seen < maxEntries) {
    const parent = pending.pop()!;
    const names = await readdir(parent, { withFileTypes: true }).catch(() => []);
    for (const e of names) {
      if (++seen > maxEntries) break;
      const path = join(parent, e.name);
      const st = await lstat(path).catch(() => undefined);
      if (!st || st.dev !== top.dev) continue;
      // a sparse file holds fewer bytes than its size: credit only what is on the disk
      if (st.isFile()) bytes += Math.min(st.size, st.blocks * 512);
      else if (st.isDirectory()) pending.push(path);
    }
  }
  return bytes;
}

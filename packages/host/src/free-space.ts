import { stat, statfs } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * Free bytes (for unprivileged writers) of the filesystem `dir` is, or will be, on: found from
 * its nearest existing ancestor, so a check creates nothing. `dev` tells filesystems apart;
 * `size` is its capacity, which the kubelet's thresholds in percent are shares of.
 */
export async function filesystemFree(
  dir: string,
): Promise<{ free: number; size: number; dev: number }> {
  let p = dir;
  for (;;) {
    try {
      const [fs, st] = await Promise.all([statfs(p), stat(p)]);
      return { free: fs.bavail * fs.bsize, size: fs.blocks * fs.bsize, dev: st.dev };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(p) === p) throw err;
      p = dirname(p);
    }
  }
}

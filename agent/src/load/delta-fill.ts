// A delta's blobs that are listed but not carried come from the base release as this node keeps
// it (a layout kept with staging.keep). Located before anything is written, so a node without
// the base refuses at once; each blob is then hashed to the delta's own signed digest as it is
// copied into the staging (packages/format/src/base-fill.ts), a damaged one refusing the load.
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { baseEntries, baseLabel, type BaseSource, type BundleManifest, type LayoutEntry } from '@offline-bundle/format';
import { openRegularFile } from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';
import type { Logger } from '../log.js';
import { readReleases } from '../releases/state.js';

/** The one line a node without the base says: which release it needs, and the fix. */
export function baseMissing(m: BundleManifest, detail: string): AgentError {
  return new AgentError('BaseMissing', `This update needs ${m.base!.version} on this node; plug in the full bundle (it is a delta against ${baseLabel(m.base!)}: ${detail})`);
}

/**
 * Layouts this node keeps, the base's own first: each release record's kept layout (staging.keep)
 * and the directory the base would be staged in. Any of them may hold a blob: they are looked up
 * by digest and held to the delta's signed digests, whichever bundle put them there.
 */
async function keptLayouts(config: AgentConfig, m: BundleManifest): Promise<string[]> {
  const releases = await readReleases(config.paths.stateDir);
  const own = join(config.paths.upgradeDir, `${m.base!.version}-${m.release.arch}`);
  const kept = releases.filter((r) => r.layout).sort((a, b) => Number(b.version === m.base!.version) - Number(a.version === m.base!.version)).map((r) => r.layout!);
  return [...new Set([own, ...kept])];
}

/** The first of `dirs` holding `entry` as a regular file at its listed size. */
async function holder(dirs: string[], entry: LayoutEntry): Promise<string | undefined> {
  for (const dir of dirs) {
    const st = await lstat(join(dir, entry.path)).catch(() => undefined);
    if (st?.isFile() && st.size === entry.size) return dir;
  }
  return undefined;
}

/**
 * Where each of a delta's base blobs is on this node, found before anything is written; a
 * missing one refuses the load (BaseMissing). The source opens each there, refusing a symlink
 * or FIFO put in its place; its bytes are checked by the copy, not here.
 */
export async function locateBase(config: AgentConfig, m: BundleManifest, log: Logger): Promise<BaseSource> {
  const entries = baseEntries(m);
  const dirs = await keptLayouts(config, m);
  const where = new Map<string, string>();
  const missing: LayoutEntry[] = [];
  for (const e of entries) {
    const dir = await holder(dirs, e);
    if (dir) where.set(e.path, dir);
    else missing.push(e);
  }
  if (missing.length) {
    const bytes = missing.reduce((s, e) => s + e.size, 0);
    throw baseMissing(m, `${missing.length} of the ${entries.length} blobs it takes from there (${formatBytes(bytes)}) are not kept on this node`);
  }
  const bytes = entries.reduce((s, e) => s + e.size, 0);
  log.info('staging', `a delta against ${baseLabel(m.base!)}: ${entries.length} blobs (${formatBytes(bytes)}) come from ${[...new Set(where.values())].join(', ')}, each checked against this bundle's signed digest`);
  return {
    open: async (e) => {
      const path = join(where.get(e.path)!, e.path);
      const fh = await openRegularFile(path).catch((err: unknown) => { throw baseMissing(m, `${path} went missing (${(err as Error).message})`); });
      return fh.createReadStream({ highWaterMark: 1024 * 1024 });
    },
  };
}

// A bundle split into NAME.bundle.part-001-of-005 files (for FAT32 sticks) is one bundle to the
// media watcher: one look, one offer, one load, whose identity changes when any part does.
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { MAX_PARTS, parsePartName } from '@offline-bundle/format';
import { bundleKey, partsKeyOf } from '../releases/bundle-records.js';

export interface PartSetLook {
  /** The lowest-numbered part present: the path the load is given (it finds the others). */
  file: string;
  /** Every part's identity: stable only when every part is. */
  key: string;
  /** The newest part's mtime: the set is quiet when all its parts are. */
  mtimeMs: number;
}

/**
 * The part sets among a directory's names, by base name, each with its part names in order.
 * A set whose bundle is there whole too is left out (the file is the bundle, the parts a copy of
 * it), and at most MAX_PARTS part names are looked at per directory: the rest are `skipped`.
 */
export function partSets(names: readonly string[]): { sets: Map<string, string[]>; skipped: number } {
  const whole = new Set(names);
  const sets = new Map<string, string[]>();
  for (const n of [...names].sort()) {
    const p = parsePartName(n);
    if (!p || whole.has(p.base)) continue;
    const list = sets.get(p.base) ?? [];
    list.push(n);
    sets.set(p.base, list);
  }
  let budget = MAX_PARTS;
  let skipped = 0;
  for (const [base, list] of sets) {
    if (list.length > budget) {
      sets.delete(base);
      skipped += list.length;
    } else {
      budget -= list.length;
    }
  }
  for (const list of sets.values()) list.sort((a, b) => parsePartName(a)!.n - parsePartName(b)!.n);
  return { sets, skipped };
}

/** The set as it is now (every part stat'd), or undefined when a part is not a regular file or vanished. */
export async function lookAtPartSet(dir: string, parts: readonly string[], count: () => void): Promise<PartSetLook | undefined> {
  const keys: string[] = [];
  let mtimeMs = 0;
  for (const n of parts) {
    count();
    const st = await stat(join(dir, n)).catch(() => undefined);
    if (!st?.isFile()) return undefined;
    keys.push(bundleKey(st));
    mtimeMs = Math.max(mtimeMs, st.mtimeMs);
  }
  return { file: join(dir, parts[0]!), key: partsKeyOf(keys), mtimeMs };
}

/** Whether the names are every part of one split: one count, each number from 1 to it once. */
export function isWholeSet(names: readonly string[]): boolean {
  const parsed = names.map((n) => parsePartName(n));
  const count = parsed[0]?.count ?? 0;
  const ns = new Set(parsed.map((p) => (p?.count === count ? p.n : -1)));
  return names.length === count && ns.size === count && [...ns].every((n) => n >= 1 && n <= count);
}

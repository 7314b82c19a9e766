// A bundle split into NAME.bundle.part-001-of-005 files (for FAT32 sticks) is one bundle to the
// media watcher: one look, one offer, one load, whose identity changes when any part does.
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { MAX_PARTS, parsePartName } from '@offline-bundle/format';
import { bundleKey, partsKeyOf } from '../state/bundle-records.js';

/** Longest part name taken: its temporary copy `.NAME.copying` and spool.json's lines stay bounded (names are 255 bytes at most). */
export const MAX_PART_NAME_BYTES = 200;

/** Why a part's name is refused (too long, or control characters a console would act on), or undefined. */
export function partNameProblem(name: string): string | undefined {
  const bytes = Buffer.byteLength(name);
  if (bytes > MAX_PART_NAME_BYTES)
    return `its name is ${bytes} bytes, more than the ${MAX_PART_NAME_BYTES} a part's name may have: rename the bundle to a shorter name and split it again`;
  if (/[\x00-\x1f\x7f]/.test(name))
    return 'its name holds control characters: rename the bundle and split it again';
  return undefined;
}

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
export function partSets(names: readonly string[]): {
  sets: Map<string, string[]>;
  skipped: number;
  refused: string[];
} {
  const whole = new Set(names);
  const sets = new Map<string, string[]>();
  const refused: string[] = [];
  for (const n of [...names].sort()) {
    const p = parsePartName(n);
    if (!p || whole.has(p.base)) continue;
    if (partNameProblem(n)) {
      refused.push(n);
      continue;
    }
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
  return { sets, skipped, refused };
}

/**
 * The set as it is now (every part lstat'd), undefined when a part vanished, or the name of a
 * part that is no regular file (a symbolic link is not followed: the load would refuse it).
 */
export async function lookAtPartSet(
  dir: string,
  parts: readonly string[],
  count: () => void,
): Promise<PartSetLook | { notRegular: string } | undefined> {
  const keys: string[] = [];
  let mtimeMs = 0;
  for (const n of parts) {
    count();
    const st = await lstat(join(dir, n)).catch(() => undefined);
    if (!st) return undefined;
    if (!st.isFile()) return { notRegular: n };
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

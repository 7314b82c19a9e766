// What the technician reads while a split update's parts are collected from several sticks:
// the part numbers held and the ones still to come, in as few words as a console line allows.

/** `1–2, 4` for [1, 2, 4]: runs of consecutive numbers joined by an en dash. */
export function numberRanges(ns: readonly number[]): string {
  const sorted = [...new Set(ns)].sort((a, b) => a - b);
  const runs: string[] = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    runs.push(j === i ? String(sorted[i]) : `${sorted[i]}–${sorted[j]}`);
    i = j + 1;
  }
  return runs.join(', ');
}

/** The part numbers 1..count not in `have`. */
export function missingParts(have: readonly number[], count: number): number[] {
  const held = new Set(have);
  return Array.from({ length: count }, (_, i) => i + 1).filter((n) => !held.has(n));
}

const partWord = (ns: readonly number[]) => (ns.length === 1 ? 'part' : 'parts');

/** "Copying part 2 of 5 of u.bundle — do not remove this stick yet." */
export function copyingLine(n: number, count: number, base: string): string {
  return `Copying part ${n} of ${count} of ${base} — do not remove this stick yet.`;
}

/** "Checking part 2 of 5 of u.bundle — do not remove this stick yet.": a part held already, read again to compare. */
export function checkingLine(n: number, count: number, base: string): string {
  return `Checking part ${n} of ${count} of ${base} — do not remove this stick yet.`;
}

/** "Copied parts 1–2 of 5 of u.bundle. You may remove this stick. Insert the stick with part 3 of 5 of u.bundle." */
export function waitingLine(have: readonly number[], count: number, base: string): string {
  const missing = missingParts(have, count);
  return `Copied ${partWord(have)} ${numberRanges(have)} of ${count} of ${base}. You may remove this stick. Insert the stick with ${partWord(missing)} ${numberRanges(missing)} of ${count} of ${base}.`;
}

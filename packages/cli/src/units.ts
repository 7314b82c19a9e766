/**
 * Byte counts for people, in one unit system for both CLIs and every status text: decimal
 * (KB, MB, GB; 1 GB = 10^9 bytes), the units disks and USB sticks are sold in, so "18.4 GB"
 * on the screen is the number on the stick's label. Config sizes accept either system.
 */
export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = Math.max(0, n);
  let u = 0;
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return `${u === 0 ? Math.round(v) : v.toFixed(1)} ${units[u]}`;
}

/**
 * Time left for people, the one wording every progress line and status sentence uses: an
 * estimate, so "about", in the unit that fits (never minutes promised for a few seconds).
 */
export function timeLeft(seconds: number): string {
  if (!Number.isFinite(seconds)) return 'time left unknown';
  const s = Math.max(1, Math.round(seconds));
  // to the nearest 5 s above 10 s: a rate measured over seconds is not better than that
  if (s < 58) return `about ${s <= 10 ? s : Math.round(s / 5) * 5} s left`;
  const min = Math.round(s / 60);
  if (min < 60) return `about ${min} min left`;
  const h = Math.floor(min / 60);
  return `about ${h} h${min % 60 ? ` ${min % 60} min` : ''} left`;
}

/** "40 s", "4 min", "3 h", "2 days": how long ago, to the unit that reads best. */
export function timeAgo(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172_800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86_400)} days`;
}

/** "1 image", "2 images": a count with its noun (regular plurals; pass `many` for others). */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * A status sentence for a terminal `columns` wide: lines broken between sentences where they
 * fit, else between words, never inside a word, so the terminal never wraps it mid-word;
 * continuation lines are indented. Unchanged when the width is unknown (not a terminal).
 */
export function fitToWidth(text: string, columns: number | undefined): string {
  const len = (x: string) => [...x].length;
  if (!columns || len(text) <= columns) return text;
  const width = Math.max(columns, 20);
  const lines: string[] = [];
  let line = '';
  const add = (piece: string) => {
    const next = line ? `${line} ${piece}` : lines.length ? `  ${piece}` : piece;
    if (len(next) <= width || !line.trim()) line = next;
    else {
      lines.push(line);
      line = `  ${piece}`;
    }
  };
  for (const sentence of text.split(/(?<=\.) +/)) {
    // a sentence that fits on a line of its own is not split between two
    if (len(sentence) + 2 <= width) add(sentence);
    else for (const word of sentence.split(' ')) add(word);
  }
  if (line) lines.push(line);
  return lines.join('\n');
}

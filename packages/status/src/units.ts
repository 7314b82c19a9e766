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

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** "1 image", "2 images": a count with its noun (regular plurals; pass `many` for others). */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * Byte counts and durations for people: binary units (KiB, MiB) by default, decimal (KB, MB,
 * GB) with `si` for the technician's sentences, where "7.1 of 18.4 GB" reads naturally.
 */
export function formatBytes(n: number, opts: { si?: boolean } = {}): string {
  const base = opts.si ? 1000 : 1024;
  const units = opts.si ? ['B', 'KB', 'MB', 'GB', 'TB'] : ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Math.max(0, n);
  let u = 0;
  while (v >= base && u < units.length - 1) {
    v /= base;
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

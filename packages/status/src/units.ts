/**
 * Byte counts and durations for people, in one unit system everywhere (both CLIs, the agent's
 * messages, the technician's sentences): decimal units (KB, MB, GB), as USB sticks and disks are
 * sold, so "7.1 of 18.4 GB" matches the label on the stick.
 */
export function formatBytes(n: number): string {
  const base = 1000;
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
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

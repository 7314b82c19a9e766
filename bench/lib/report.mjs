// The results: one row per comparison, printed as a markdown table and written as JSON.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * @typedef {import('./measure.mjs').Stats} Stats
 * @typedef {{ id: string, step: string, ours: Stats, peer?: Stats, peerName?: string, ratios?: Stats,
 *   unit: 's'|'MiB', target?: { max: number, what: string } }} Row  target.max bounds the ratio (s) or the largest sample (MiB)
 */

const fmt = (v, unit) => (unit === 'MiB' ? `${(v / 1048576).toFixed(0)} MiB` : `${v.toFixed(2)} s`);
const spread = (s, unit) =>
  s.samples.length > 1 ? ` (${fmt(s.min, unit)}–${fmt(s.max, unit)})` : '';

/** A ratio's verdict against its target: the median decides. */
export function verdict(row) {
  if (!row.target) return '';
  const value = row.unit === 'MiB' ? row.ours.max : row.ratios?.median;
  if (value === undefined) return '';
  return value <= row.target.max ? 'met' : 'missed';
}

/** Rows whose whole work runs in processes the bench waits for or in the servers it names (serve rows: server + client; load rows: the node's containerd too, and the peer's docker-registry), so their CPU time is all of it. */
const CPU_ROWS = new Set([
  'build',
  'stage',
  'stage-durable',
  'random',
  'serve',
  'serve16',
  'serve-staging',
  'serve16-staging',
  'preload',
  'load',
  'load-order',
]);

/** A markdown table cell: a pipe inside it (shell pipelines) must not end the cell. */
const cell = (s) => s.replace(/\|/g, '\\|');

/** @param {Row[]} rows */
export function table(rows) {
  const lines = [
    '| step | ours | peer | ratio (min–max) | target | CPU s ours / peer |',
    '|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const peer = r.peer
      ? `${cell(r.peerName ?? '')}: ${fmt(r.peer.median, r.unit)}${spread(r.peer, r.unit)}`
      : (r.peerName ?? '');
    const ratio = r.ratios
      ? `${r.ratios.median.toFixed(2)}${r.ratios.samples.length > 1 ? ` (${r.ratios.min.toFixed(2)}–${r.ratios.max.toFixed(2)})` : ''}`
      : '';
    const target = r.target ? `${r.target.what} ${verdict(r)}` : '';
    const cpu =
      r.cpu && CPU_ROWS.has(r.id.replace(/-x\d+$/, ''))
        ? `${r.cpu.ours.median.toFixed(1)} / ${r.cpu.peer.median.toFixed(1)}`
        : '';
    lines.push(
      `| ${cell(r.step)} | ${fmt(r.ours.median, r.unit)}${spread(r.ours, r.unit)} | ${peer} | ${ratio} | ${target} | ${cpu} |`,
    );
  }
  return lines.join('\n');
}

/**
 * @param {string} file
 * @param {object} meta
 * @param {Row[]} rows
 */
export async function writeResults(file, meta, rows) {
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(
    file,
    JSON.stringify(
      { meta, rows: rows.map((r) => ({ ...r, verdict: verdict(r) || undefined })) },
      null,
      2,
    ) + '\n',
  );
}

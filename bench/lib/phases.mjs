// The build row's breakdown (issue #45): where ours spends its time, phase by phase (the file
// `bundle create` writes when BUNDLE_PHASE_TIMES names it), beside the peer's two steps timed
// apart, so each claim that a cost is the format's own has a row that measures it.
import { readFile, rm } from 'node:fs/promises';
import { stats } from './measure.mjs';

/** The env that makes one build record its phases into `file`. */
export const phaseEnv = (file) => ({ ...process.env, BUNDLE_PHASE_TIMES: file });

/** One build's phases, flattened to { name: { wall, cpu, bytes } } with the process's totals as rows. */
export async function readPhases(file, measured) {
  const raw = JSON.parse(await readFile(file, 'utf8'));
  await rm(file, { force: true });
  const rows = {};
  for (const [name, p] of Object.entries(raw.phases))
    rows[name] = { wall: p.wall, cpu: p.cpu, bytes: p.bytes };
  const hasher = raw.phases['whole-file hash: its thread']?.cpu ?? 0;
  const main = raw.process.mainThreadCpu;
  rows['process: main thread (JavaScript, compression, digest checks)'] = { cpu: main };
  rows['process: main thread in GC pauses'] = { wall: raw.process.gcPauses };
  // the libuv pool (file reads and writes, zlib for a layer decompressed for the estimate) and V8's GC helpers
  if (main !== undefined)
    rows['process: other threads (libuv pool: fs, zlib; V8 GC helpers)'] = {
      cpu: raw.process.cpu - main - hasher,
    };
  rows['process: node bootstrap (before any module of ours)'] = { wall: raw.process.bootstrap };
  // what the bench saw: the whole process, its start and exit too
  rows['total (as the bench measured it)'] = { wall: measured.wall, cpu: measured.cpu };
  // not a row: the per-thread times and the rest, kept in the results file
  Object.defineProperty(rows, 'process', { value: raw.process, enumerable: false });
  return rows;
}

/** Medians over the runs of each phase's wall, CPU and bytes. */
export function medianPhases(runs) {
  const names = [...new Set(runs.flatMap((r) => Object.keys(r)))];
  const med = (name, key) => {
    const v = runs.map((r) => r[name]?.[key]).filter((x) => x !== undefined);
    return v.length ? stats(v).median : undefined;
  };
  return Object.fromEntries(
    names.map((n) => [n, { wall: med(n, 'wall'), cpu: med(n, 'cpu'), bytes: med(n, 'bytes') }]),
  );
}

const num = (v, digits = 2) => (v === undefined ? '' : v.toFixed(digits));
const mib = (v) => (v === undefined ? '' : `${(v / 2 ** 20).toFixed(0)} MiB`);

/** The breakdown as a markdown table: our phases, then the peer's steps. */
export function breakdownTable(breakdown) {
  const lines = ['| side | phase | wall s | CPU s | bytes |', '|---|---|---|---|---|'];
  for (const [name, p] of Object.entries(breakdown.ours).sort(([a], [b]) => a.localeCompare(b)))
    lines.push(`| ours | ${name} | ${num(p.wall)} | ${num(p.cpu)} | ${mib(p.bytes)} |`);
  for (const [name, p] of Object.entries(breakdown.peer))
    lines.push(`| peer | ${name.replace(/\|/g, '\\|')} | ${num(p.wall)} | ${num(p.cpu)} | |`);
  return lines.join('\n');
}

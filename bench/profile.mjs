#!/usr/bin/env node
// Where a run of ours spends its time, from a V8 CPU profile (`node --cpu-prof`, or the bench
// with BENCH_PROFILE=DIR): self time per function, heaviest first, and the idle share (the
// main thread waiting on I/O or other threads).
//   node bench/profile.mjs FILE.cpuprofile [TOP]
import { readFile } from 'node:fs/promises';

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench/profile.mjs FILE.cpuprofile [TOP]');
  process.exit(2);
}
const prof = JSON.parse(await readFile(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const self = new Map();
prof.samples.forEach((id, i) => {
  const n = byId.get(id);
  const f = n.callFrame;
  const where = f.url
    ? `${f.url.replace(/^file:\/\/.*?\/(node_modules|packages|agent|builder)\//, '$1/')}:${f.lineNumber + 1}`
    : '';
  const key = `${f.functionName || '(anonymous)'} ${where}`.trim();
  self.set(key, (self.get(key) ?? 0) + (prof.timeDeltas[i] ?? 0));
});
const total = [...self.values()].reduce((a, b) => a + b, 0);
console.log(`${(total / 1e6).toFixed(2)} s sampled`);
for (const [k, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg ?? 25))) {
  console.log(
    `${(us / 1e6).toFixed(2).padStart(7)} s ${((100 * us) / total).toFixed(1).padStart(5)}%  ${k}`,
  );
}

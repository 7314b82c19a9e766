// Test tiers by rule, not by a hand-kept list: a file whose first lines hold UNIT_MARK is a unit
// test (no process, no socket: test/helpers/unit-guard.mjs holds it to that in every run);
// `pnpm test:unit` runs those, `pnpm test` runs everything.
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

export const UNIT_MARK = '// tier: unit';

const isTestFile = (n) => n.endsWith('.test.ts') || n.endsWith('.test.mjs');

/** Every test file under `dir` (recursively) marked as a unit test, sorted. */
export function unitFiles(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...unitFiles(p));
    else if (
      e.isFile() &&
      isTestFile(e.name) &&
      readFileSync(p, 'utf8').slice(0, 400).split('\n').slice(0, 3).includes(UNIT_MARK)
    )
      out.push(p);
  }
  return out.sort();
}

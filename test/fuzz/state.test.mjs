// The CI sample of the state-file fuzzer (test/fuzz/state.mjs): seeded mutations of
// agent-switch.json, release records and the boot guard's marker and start count, zero findings
// expected; one case rerun alone with --only comes out as in the run.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const RUN = path.join(path.dirname(fileURLToPath(import.meta.url)), 'state.mjs');
const COUNT = Number(process.env.FUZZ_STATE_COUNT ?? 300);
const fuzz = (args) => {
  const r = spawnSync(process.execPath, [RUN, '--json', '--seed', '1', ...args], {
    encoding: 'utf8',
    timeout: 280_000,
  });
  return { code: r.status, summary: JSON.parse(r.stdout || '{}'), stderr: r.stderr };
};

t.test(`${COUNT} seeded state-file mutations: no findings`, async (t) => {
  const r = fuzz(['--count', String(COUNT)]);
  t.equal(r.code, 0, r.stderr);
  t.strictSame(r.summary.findings, [], 'no findings');
  t.equal(r.summary.cases, COUNT);
  t.ok(
    Object.values(r.summary.perKind).every((n) => n >= Math.floor(COUNT / 3)),
    'every kind ran',
  );
});

t.test('a case reruns alone with --only', async (t) => {
  const r = fuzz(['--only', '7']);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.summary.cases, 1);
});

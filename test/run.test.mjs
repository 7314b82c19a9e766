// tier: unit
// test/run.mjs's coverage rule: the whole suite runs without V8 coverage unless --coverage asks
// for it (its report came out empty, its collection cost time in every process); a run naming
// files or directories, --unit among them, keeps .taprc's coverage; an explicit tap coverage
// option is left to tap.
import t from 'tap';
import { coverageArgs } from './run.mjs';

const paths = new Set(['test/agent/cli.test.ts', 'test/cluster']);
const namesPath = (/** @type {string} */ a) => paths.has(a);

t.test('the whole suite: coverage off, whatever the reporter options', async (t) => {
  t.same(coverageArgs([], namesPath), ['--disable-coverage'], 'pnpm test');
  t.same(
    coverageArgs(['-R', 'tap'], namesPath),
    ['--disable-coverage'],
    "an option's value is not a test file",
  );
  t.same(coverageArgs(['--reporter=base', '--bail'], namesPath), ['--disable-coverage']);
});

t.test('--coverage turns it back on for the whole suite', async (t) => {
  t.same(coverageArgs(['--coverage'], namesPath), []);
  t.same(coverageArgs(['-R', 'tap', '--coverage'], namesPath), []);
});

t.test('a run that names files or directories keeps coverage as .taprc says', async (t) => {
  t.same(coverageArgs(['test/agent/cli.test.ts'], namesPath), [], 'one file');
  t.same(coverageArgs(['-R', 'tap', 'test/cluster'], namesPath), [], 'a directory');
});

t.test("an explicit tap coverage option is tap's to apply", async (t) => {
  t.same(coverageArgs(['--disable-coverage'], namesPath), [], 'not given twice');
  t.same(coverageArgs(['--no-disable-coverage'], namesPath), [], 'not contradicted');
});

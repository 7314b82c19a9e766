// tier: unit
// test/run.mjs's coverage rule: the whole suite runs without V8 coverage unless --coverage asks
// for it (its report came out empty, its collection cost time in every process); a run naming
// files or directories, --unit among them, keeps .taprc's coverage; an explicit tap coverage
// option is left to tap. A run that collects coverage starts the dist/ CLIs, not the bundles
// (which have no source maps: what the tests ran through the CLIs would be missing).
import t from 'tap';
import { bundlesClis, collectsCoverage, coverageArgs } from './run.mjs';

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

t.test('coverage is collected unless the last coverage option turns it off', async (t) => {
  t.equal(collectsCoverage(['test/agent/cli.test.ts']), true, ".taprc's default");
  t.equal(collectsCoverage(['--disable-coverage']), false);
  t.equal(collectsCoverage(['--disable-coverage', '--no-disable-coverage']), true, 'the last wins');
  t.equal(collectsCoverage(['--', '--disable-coverage']), true, "past --: the tests' own");
});

t.test('the CLIs are bundled only when no coverage is collected', async (t) => {
  const run = (/** @type {string[]} */ given, env = {}) => {
    const tapArgs = [...coverageArgs(given, namesPath), ...given.filter((a) => a !== '--coverage')];
    return bundlesClis({ unit: false, tapArgs, env });
  };
  t.equal(run([]), true, 'the whole suite');
  t.equal(run(['--coverage']), false, 'the whole suite with --coverage');
  t.equal(run(['test/agent/cli.test.ts']), false, 'a named file (coverage by default)');
  t.equal(run(['--disable-coverage', 'test/agent/cli.test.ts']), true, 'a named file without');
  t.equal(run([], { OFFLINE_BUNDLE_TEST_CLIS: '' }), false, 'OFFLINE_BUNDLE_TEST_CLIS given');
  t.equal(bundlesClis({ unit: true, tapArgs: ['--disable-coverage'], env: {} }), false, '--unit');
});

// tier: unit
// `pnpm lint` checks the code's format (#41): prettier at 100 columns (.prettierrc.json), so the
// function-length ceiling counts lines as a reader sees them, not lines made long to pass it.
// Checked in-process with prettier's own API and the repo's settings; the checkout is not touched.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as prettier from 'prettier';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const IGNORE = join(ROOT, '.prettierignore');

t.test('pnpm lint runs the format check before the other linters', async (t) => {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  t.match(pkg.scripts.lint, /^prettier --check\b[^&]* \. &&/, 'the check covers the whole tree');
});

t.test('an unformatted file fails the check, the same code formatted passes', async (t) => {
  const options = {
    ...(await prettier.resolveConfig(join(ROOT, 'agent/src/x.ts'))),
    parser: 'typescript',
  };
  t.equal(options.printWidth, 100, 'the width the length rule is read at');
  const long = `export function f(first: string, second: number, third: boolean, fourth: string[]): void { g(first, second, third, fourth); }\n`;
  t.notOk(await prettier.check(long, options), 'a 120-column line is refused');
  const formatted = await prettier.format(long, options);
  t.ok(await prettier.check(formatted, options), 'what `pnpm format` writes passes');
  t.ok(
    formatted.split('\n').every((l) => l.length <= 100),
    'and no line of it is over 100 columns',
  );
});

t.test('code is checked, prose and fixtures keep their own shape', async (t) => {
  for (const path of [
    'agent/src/cli.ts',
    'packages/format/src/writer.ts',
    'scripts/package.mjs',
    'bench/run.mjs',
    'test/run.mjs',
    'eslint.config.js',
  ]) {
    const info = await prettier.getFileInfo(join(ROOT, path), { ignorePath: IGNORE });
    t.notOk(info.ignored, `${path} is checked`);
  }
  for (const path of [
    'README.md',
    'deploy/rbac.yaml',
    'package.json',
    'test/fixtures/frozen-reader/reader-0b1c790.mjs',
    'agent/dist/cli.js',
  ]) {
    const info = await prettier.getFileInfo(join(ROOT, path), { ignorePath: IGNORE });
    t.ok(info.ignored, `${path} is left alone`);
  }
});

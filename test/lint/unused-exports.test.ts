// tier: unit
// `pnpm lint`'s unused-export check (scripts/unused-exports.mjs, #41): an export of shipped code
// that nothing imports is listed, so a package's surface is what others use of it. Run in-process
// on the real tree and on a small tree written for the purpose (the checkout is never touched).
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
// @ts-expect-error: a plain .mjs script, no declarations
import { unusedExports } from '../../scripts/unused-exports.mjs';
import { tmpdir } from '../helpers/tmp.mjs';

type Export = { file: string; name: string; line?: number };
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const listed = (root: string, list: Export[]) =>
  list.map((e) => `${relative(root, e.file)} ${e.name}`).sort();

t.test('the tree as it is exports nothing that goes unimported', async (t) => {
  const { all, unused } = unusedExports(ROOT) as { all: Export[]; unused: Export[] };
  t.ok(all.length > 1000, 'every package, the agent and the builder were read');
  t.same(listed(ROOT, unused), [], 'drop the export, or the code if nothing uses it');
});

// what each file of the small tree holds; comments say why an export counts as used or not
const TREE: Record<string, string> = {
  'packages/a/package.json': JSON.stringify({ name: '@x/a' }),
  // the index passes a use on to m.ts; unusedAtIndex is re-exported but imported by nobody
  'packages/a/src/index.ts':
    "export { used, viaTest, unusedAtIndex, uses, onlyChild } from './m.js';\n",
  // dead is used only in its own file: the export is not needed
  'packages/a/src/m.ts':
    'export const used = 1;\nexport const viaTest = 2;\nexport const unusedAtIndex = 3;\nexport const dead = 4;\nexport const uses = () => dead;\nexport const onlyChild = 5;\n',
  'agent/package.json': JSON.stringify({ name: '@x/agent' }),
  // run is imported by nobody; ns.ts is used whole, lazy.ts through a literal import()
  'agent/src/main.ts':
    "import { used, uses } from '@x/a';\nimport * as ns from './ns.js';\nexport const run = async () => [used, uses, ns, await import('./lazy.js')];\n",
  'agent/src/ns.ts': 'export const inNamespace = 1;\n',
  'agent/src/lazy.ts': 'export const lazy = 1;\n',
  // a test reaching a module by a computed path uses the names it mentions, not the others
  'agent/src/hidden.ts': 'export const hidden = 1;\nexport const notMentioned = 2;\n',
  // a script a test writes for a child process (`node -e`) imports as text: onlyChild is used
  'test/child.test.ts':
    "const script = `import { onlyChild } from '@x/a'; console.log(onlyChild);`;\nexport { script };\n",
  'test/a.test.ts':
    "import { viaTest } from '@x/a';\nconst p = '../agent/dist/hidden.js';\nconst { hidden } = await import(p);\nexport const both = [viaTest, hidden];\n",
};

t.test('a written tree: exactly the exports nothing else imports are listed', async (t) => {
  const root = await tmpdir(t, 'ob-unused-exports-');
  await mkdir(join(root, 'packages'));
  for (const [file, text] of Object.entries(TREE)) {
    await mkdir(dirname(join(root, file)), { recursive: true });
    await writeFile(join(root, file), text);
  }
  const { unused } = unusedExports(root) as { unused: Export[] };
  t.same(listed(root, unused), [
    'agent/src/hidden.ts notMentioned',
    'agent/src/main.ts run',
    'packages/a/src/index.ts unusedAtIndex',
    'packages/a/src/m.ts dead',
    'packages/a/src/m.ts unusedAtIndex',
  ]);
});

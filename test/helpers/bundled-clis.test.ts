// The CLIs most tests start are esbuild bundles of the dist/ builds (test/helpers/bundled-clis.mjs):
// here each bundle answers byte for byte as its dist/ launcher does (version, help, the shell
// completion generated from the whole command tree, a refusal) and finds what lies beside its
// modules (package.json, read through each module's own import.meta.url); on a checkout reduced
// to a few modules, a tree is bundled once and reused, the cache key is the built code, a non-JS
// input (a JSON import) edited alone rebuilds, a build cut short (a power cut) or made while the
// tree changed is not reused, and the cache keeps the three builds used last.
import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, stat, truncate, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { bundledClis, cliBin, CLIS_ENV, distCli, inputsKey } from './bundled-clis.mjs';
import { tmpdir } from './tmp.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
const dir = await bundledClis();

/** stdout, stderr and exit status of one start. */
function answer(bin: string, args: string[]) {
  const r = spawnSync(process.execPath, [bin, ...args], {
    encoding: 'utf8',
    env: { ...process.env, COLUMNS: '120' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const ASKED: Record<'bundle' | 'bundle-agent', string[][]> = {
  bundle: [['--version'], ['--help'], ['completion', 'bash'], ['verify', '/nonexistent.bundle']],
  'bundle-agent': [['--version'], ['--help'], ['completion', 'bash'], ['status', '--json', '-x']],
};

for (const [name, asks] of Object.entries(ASKED) as [keyof typeof ASKED, string[][]][]) {
  t.test(`${name}: the bundle answers as the dist/ launcher does`, async (t) => {
    const bundled = cliBin(name, { [CLIS_ENV]: dir });
    t.equal(bundled, join(dir, name, 'cli.mjs'));
    for (const args of asks) {
      t.same(answer(bundled, args), answer(distCli(name), args), `${name} ${args.join(' ')}`);
    }
  });
}

t.test('each bundled module reads its own package.json (import.meta.url kept)', async (t) => {
  for (const [name, pkg] of [
    ['bundle', 'builder/package.json'],
    ['bundle-agent', 'agent/package.json'],
  ] as const) {
    const { version } = JSON.parse(await readFile(join(ROOT, pkg), 'utf8')) as { version: string };
    const r = answer(cliBin(name, { [CLIS_ENV]: dir }), ['--version']);
    t.equal(r.stdout.trim(), version, `${name} --version is ${pkg}'s`);
  }
});

t.test('without a bundle directory the tests start the dist/ launchers', async (t) => {
  t.equal(cliBin('bundle', {}), join(ROOT, 'builder/bin/bundle.js'));
  t.equal(cliBin('bundle-agent', { [CLIS_ENV]: '' }), join(ROOT, 'agent/bin/bundle-agent.js'));
});

/** A checkout reduced to what the bundles are made of. */
async function fakeTree(t: Test) {
  const root = await tmpdir(t, 'ob-clis-tree-');
  const put = async (rel: string, text: string) => {
    await mkdir(join(root, rel, '..'), { recursive: true });
    await writeFile(join(root, rel), text);
  };
  const here = 'console.log(import.meta.url);\n';
  await put('builder/dist/cli.js', here);
  await put('agent/dist/cli.js', `import './where.js';\n${here}`);
  await put('agent/dist/where.js', here);
  await put('packages/format/dist/index.js', 'export {};\n');
  await put('pnpm-lock.yaml', 'lock');
  return { root, put };
}

t.test('a tree is bundled once, each module keeping its own import.meta.url', async (t) => {
  const { root, put } = await fakeTree(t);
  const built = await bundledClis(root);
  t.equal(built, join(root, 'node_modules/.cache/offline-bundle-test', `clis-${inputsKey(root)}`));
  t.same(
    answer(join(built, 'bundle-agent', 'cli.mjs'), [])
      .stdout.trim()
      .split('\n'),
    ['where.js', 'cli.js'].map((f) => pathToFileURL(join(root, 'agent/dist', f)).href),
    'the bundle prints the URLs of the dist modules it was made of',
  );
  const mtime = async (d: string) => (await stat(join(d, 'bundle', 'cli.mjs'))).mtimeMs;
  const first = await mtime(built);
  t.equal(await bundledClis(root), built, 'the same tree: the same directory');
  t.equal(await mtime(built), first, 'not rebuilt');
  await put('builder/dist/cli.js', 'console.log("changed");\n');
  const again = await bundledClis(root);
  t.not(again, built, 'a changed tree: another directory');
  t.equal(answer(join(again, 'bundle', 'cli.mjs'), []).stdout, 'changed\n');
  t.ok(existsSync(built), "the other tree's bundles stay (among the three used last)");
});

t.test('the cache key follows the built .js files and the lockfile', async (t) => {
  const { root, put } = await fakeTree(t);
  const key = inputsKey(root);
  t.match(key, /^[0-9a-f]{16}$/);
  await put('packages/format/dist/index.js.map', 'map');
  await put('packages/format/src/index.ts', 'src');
  await put('packages/format/node_modules/x/dist/y.js', 'dep');
  t.equal(inputsKey(root), key, 'maps, sources and nested node_modules do not count');
  await put('packages/format/dist/index.js', 'export const c = 2;\n');
  const changed = inputsKey(root);
  t.not(changed, key, 'a changed dist module makes another key');
  await put('pnpm-lock.yaml', 'lock2');
  t.not(inputsKey(root), changed, 'a changed lockfile makes another key');
});

/** What a bundle prints when started without arguments. */
const output = (dir: string, name = 'bundle-agent') =>
  answer(join(dir, name, 'cli.mjs'), []).stdout;

t.test('a JSON file the bundle holds is an input too: editing only it rebuilds', async (t) => {
  const { root, put } = await fakeTree(t);
  // as agent/dist/config-schema.js imports systemd/config.schema.json
  await put(
    'agent/dist/cli.js',
    "import schema from '../../systemd/config.schema.json' with { type: 'json' };\nconsole.log(schema.maximum);\n",
  );
  await put('systemd/config.schema.json', '{"maximum": 10}');
  const key = inputsKey(root);
  t.equal(output(await bundledClis(root)), '10\n');
  await put('systemd/config.schema.json', '{"maximum": 99}');
  t.equal(inputsKey(root), key, 'the key (the .js files) is the same');
  const again = await bundledClis(root);
  t.equal(basename(again), `clis-${key}`, 'the same cache entry');
  t.equal(output(again), '99\n', 'rebuilt from the edited JSON');
  t.equal(answer(join(root, 'agent/dist/cli.js'), []).stdout, '99\n', 'dist/ reads the same');
});

/** A fake tree whose agent CLI loads a second module as a chunk of its own. */
async function chunkedTree(t: Test) {
  const tree = await fakeTree(t);
  await tree.put('agent/dist/cli.js', "const { late } = await import('./late.js');\nlate();\n");
  await tree.put('agent/dist/late.js', "export const late = () => console.log('late');\n");
  return tree;
}

t.test('a build whose files do not match its marker (a power cut) is built again', async (t) => {
  const { root } = await chunkedTree(t);
  const dir = await bundledClis(root);
  t.equal(output(dir), 'late\n');
  await truncate(join(dir, 'bundle-agent', 'cli.mjs'), 0);
  t.equal(output(dir), '', 'an empty cli.mjs: no answer, exit status 0');
  t.equal(await bundledClis(root), dir);
  t.equal(output(dir), 'late\n', 'an empty cli.mjs: rebuilt');
  const chunk = readdirSync(join(dir, 'bundle-agent')).find((f) => f.startsWith('chunk-'));
  t.ok(chunk, 'the dynamic import is a chunk');
  const file = join(dir, 'bundle-agent', String(chunk));
  const text = await readFile(file, 'utf8');
  await writeFile(file, text.replace(/(["'])late\1/, '$1LATE$1'));
  t.equal(output(dir), 'LATE\n', 'a chunk changed, its size the same');
  await bundledClis(root);
  t.equal(output(dir), 'late\n', 'a changed chunk: rebuilt');
  await writeFile(join(dir, 'built.json'), '');
  const before = (await stat(join(dir, 'bundle', 'cli.mjs'))).mtimeMs;
  await bundledClis(root);
  t.not((await stat(join(dir, 'bundle', 'cli.mjs'))).mtimeMs, before, 'no marker: rebuilt');
});

t.test('a tree changed during the build: that build is used once, not cached', async (t) => {
  const { root, put } = await fakeTree(t);
  await put('builder/dist/cli.js', 'console.log("old");\n');
  const key = inputsKey(root);
  // stand-in for a `tsc -b` that rewrites dist/ while esbuild runs
  const used = await bundledClis(root, {
    afterBuild: () => writeFileSync(join(root, 'builder/dist/cli.js'), 'console.log("new");\n'),
  });
  t.not(basename(used), `clis-${key}`, 'not stored under the key computed before');
  t.not(basename(used), `clis-${inputsKey(root)}`, 'nor under the new one');
  t.equal(output(used, 'bundle'), 'old\n', 'what was built is used');
  t.notOk(existsSync(join(root, 'node_modules/.cache/offline-bundle-test', `clis-${key}`)));
  const next = await bundledClis(root);
  t.equal(basename(next), `clis-${inputsKey(root)}`, 'the next run builds the tree as it is');
  t.equal(output(next, 'bundle'), 'new\n');
});

t.test('the cache keeps the three builds used last and those a live run uses', async (t) => {
  const { root, put } = await fakeTree(t);
  const cache = join(root, 'node_modules/.cache/offline-bundle-test');
  const dead = spawnSync(process.execPath, ['-e', '']).pid;
  const built: string[] = [];
  const zeros = `clis-${'0'.repeat(16)}`;
  await mkdir(join(cache, `${zeros}.tmp-${dead}-1`), { recursive: true });
  await mkdir(join(cache, `${zeros}.tmp-${process.ppid}-1`));
  for (let i = 1; i <= 5; i++) {
    await put('builder/dist/cli.js', `console.log(${i});\n`);
    built.push(await bundledClis(root));
    // another run (the test's parent standing in) uses build 1; one that has ended used build 2
    const user = i === 1 ? process.ppid : i === 2 ? dead : undefined;
    if (user) {
      await mkdir(join(built[i - 1], 'users'), { recursive: true });
      await writeFile(join(built[i - 1], 'users', String(user)), '');
    }
  }
  t.same(
    readdirSync(cache).sort(),
    [built[0], built[2], built[3], built[4]]
      .map((d) => basename(d))
      .concat(`${zeros}.tmp-${process.ppid}-1`)
      .sort(),
    "builds 3 to 5 and the one in use stay; an ended run's leftover goes",
  );
});

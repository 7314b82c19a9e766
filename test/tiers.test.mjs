// The unit tier's rule as it runs: a file marked `// tier: unit` that starts a process, listens or
// connects fails at that call, in a plain run of test/run.mjs as in `--unit` (tsx's own probe for
// a parent pipe as it loads a .ts file excepted); an unmarked file may do all of it; `--unit`
// selects by the mark alone.
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { UNIT_MARK, unitFiles } from './tiers.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** test/run.mjs over `files` (relative to the repository): its exit code and output. */
const run = (files) =>
  new Promise((resolve) => {
    execFile(
      process.execPath,
      ['test/run.mjs', '-R', 'tap', ...files],
      { cwd: root, timeout: 120_000 },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, out: `${stdout}${stderr}` }),
    );
  });

t.test(
  'a marked file that starts a process, listens or connects fails there; unmarked, the same passes',
  async (t) => {
    const dir = await mkdtemp(path.join(root, 'test', '.tier-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const body = (what) =>
      `import t from 'tap';\nimport { execFileSync } from 'node:child_process';\nimport net from 'node:net';\n` +
      `t.test('x', async (t) => { ${what}; t.pass(); });\n`;
    const spawns = "execFileSync('true')";
    const listens =
      "await new Promise((r) => { const s = net.createServer().listen(0, '127.0.0.1', () => s.close(r)); })";
    const files = {
      'marked-spawn.test.mjs': `${UNIT_MARK}\n${body(spawns)}`,
      'marked-listen.test.mjs': `${UNIT_MARK}\n${body(listens)}`,
      'plain.test.mjs': body(`${spawns}; ${listens}`),
      // a probe that takes the refusal for "not installed" and skips: the file fails all the same
      'marked-probe.test.mjs': `${UNIT_MARK}\n${body(`try { ${spawns}; } catch { t.skip('not installed'); return; }`)}`,
    };
    for (const [n, text] of Object.entries(files)) await writeFile(path.join(dir, n), text);
    const rel = (n) => path.relative(root, path.join(dir, n));
    t.same(
      unitFiles(dir).map((f) => path.basename(f)),
      ['marked-listen.test.mjs', 'marked-probe.test.mjs', 'marked-spawn.test.mjs'],
      'the tier is the marked files',
    );
    const probeRun = await run([rel('marked-probe.test.mjs')]);
    t.not(probeRun.code, 0, 'a refusal caught by the test still fails its file');
    t.match(probeRun.out, /unit tier: \S+marked-probe\.test\.mjs execFileSyncs a process/);
    const spawnRun = await run([rel('marked-spawn.test.mjs')]);
    t.not(spawnRun.code, 0);
    t.match(
      spawnRun.out,
      /unit tier: \S+marked-spawn\.test\.mjs execFileSyncs a process; a unit test runs no process/,
    );
    const listenRun = await run([rel('marked-listen.test.mjs')]);
    t.match(listenRun.out, /unit tier: \S+marked-listen\.test\.mjs listens on a port/);
    const plainRun = await run([rel('plain.test.mjs')]);
    t.equal(plainRun.code, 0, plainRun.out.slice(-1500));
  },
);

t.test(
  'a marked TypeScript file passes while tsx probes for its parent pipe; any other socket is refused',
  async (t) => {
    const dir = await mkdtemp(path.join(root, 'test', '.tier-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const files = {
      // tsx (.taprc) connects to TMPDIR/tsx-<uid>/<ppid>.pipe as it loads this file
      'marked-ts.test.ts': `${UNIT_MARK}\nimport t from 'tap';\nconst n: number = 1;\nt.equal(n, 1);\n`,
      'marked-connect.test.mjs':
        `${UNIT_MARK}\nimport t from 'tap';\nimport net from 'node:net';\n` +
        `try { net.connect('/nonexistent/tsx-0/1.pipe').on('error', () => {}); } catch {}\nt.pass();\n`,
    };
    for (const [n, text] of Object.entries(files)) await writeFile(path.join(dir, n), text);
    const rel = (n) => path.relative(root, path.join(dir, n));
    const tsRun = await run([rel('marked-ts.test.ts')]);
    t.equal(tsRun.code, 0, tsRun.out.slice(-1500));
    t.notMatch(tsRun.out, /unit tier:/);
    const connectRun = await run([rel('marked-connect.test.mjs')]);
    t.not(connectRun.code, 0);
    t.match(connectRun.out, /unit tier: \S+marked-connect\.test\.mjs connects a socket/);
  },
);

t.test(
  "the repository's unit tier is not empty and every file in it carries the mark on its first line",
  async (t) => {
    const files = unitFiles(path.join(root, 'test'));
    t.ok(files.length >= 30, `${files.length} unit test files`);
    const { readFile } = await import('node:fs/promises');
    for (const f of files)
      t.equal((await readFile(f, 'utf8')).split('\n')[0], UNIT_MARK, path.relative(root, f));
  },
);

#!/usr/bin/env node
// Test entry point for `pnpm test`: runs node-tap 21 over test/**/*.test.ts and
// test/**/*.test.mjs and ends with a plain `N passed, N failed` line.
//
//   node test/run.mjs                         # whole suite
//   node test/run.mjs test/helpers.test.mjs   # any tap args/files pass through
//   node test/run.mjs --unit                  # the unit tier: files marked `// tier: unit` (test/tiers.mjs)
//   node test/run.mjs --coverage              # whole suite with V8 coverage collected and reported
//
// Coverage: a run that names test files (or --unit) collects and reports it as .taprc says; the
// whole suite does not unless --coverage asks. There it cost 8 to 18 % of a file's CPU time
// (each process writes its V8 coverage, 10 MiB for a `bundle cluster` start) for a report that
// came out empty: test/tiers.test.mjs runs tap again in this project, and every tap run
// starts by deleting .tap/coverage, the whole suite's included (docs/testing.md).
//
// The `bundle` and `bundle-agent` the tests start are esbuild bundles of their dist/ builds, made
// here once per tree and cached (test/helpers/bundled-clis.mjs; OFFLINE_BUNDLE_TEST_CLIS= runs the
// dist/ launchers instead), except in a run that collects coverage: the bundles carry no source
// maps and live under node_modules, so what the tests run through the CLIs would be missing from
// the report; such a run starts the dist/ launchers (slower). TypeScript test files run through
// tsx (.taprc).
//
// Settings (include globs, timeout 300 s, jobs 2, tsx, coverage reported
// but not gated via allow-incomplete-coverage/allow-empty-coverage) live in
// /.taprc so that running `tap` directly behaves the same.
//
// How the summary is obtained: we need tap's normal output on the console and
// machine-readable results at the same time.
// - When the effective reporter is raw TAP (stdout is not a TTY, e.g. CI, or
//   `-R tap`), tap's stdout is piped through this script: every chunk is
//   echoed unchanged and the TAP lines are parsed as they stream by.
// - Otherwise (a TTY with tap's default `base` reporter, or any other
//   reporter), stdout is inherited and tap additionally writes the raw TAP of
//   the run to a temp file (`--output-file`), which is parsed afterwards.
//   (--output-file is not combined with the raw `tap` reporter because tap 21
//   then writes every TAP line to stdout twice.)
// The counts come from tap's own root-level closing comment
// `# { total: N, pass: N, fail: N, skip: N, todo: N }` -- the same numbers as
// tap's "Asserts:" summary: individual assertions, plus one failure for every
// subtest/test file that failed without a failing assertion of its own (a
// crash, a non-zero exit, "no tests found", a timeout). If that comment is
// missing (bail out, runner killed), the same rule is applied to the parsed
// TAP test points instead. Skipped/todo points are reported separately.
// Exit status is non-zero if anything failed or tap itself exited non-zero.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { bundledClis, CLIS_ENV } from './helpers/bundled-clis.mjs';
import { unitFiles } from './tiers.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tapBin = path.join(root, 'node_modules', '.bin', 'tap');

/**
 * Streaming TAP 14 counter (indented subtests, YAML diagnostics).
 * Counts leaf test points; a subtest's own closing point only counts when it
 * failed while none of its descendants failed.
 */
export class TapCounter {
  constructor() {
    this.pass = 0;
    this.fail = 0;
    this.skip = 0;
    this.todo = 0;
    /** @type {{ total: number, pass: number, fail: number, skip: number, todo: number } | null} */
    this.tapCounts = null;
    this.sawTap = false;
    this.bailedOut = false;
    /** @type {Map<number, { points: number, failed: boolean, header: boolean }>} depth -> frame */
    this.frames = new Map();
    /** @type {number|null} indentation of the YAML block being skipped */
    this.yamlIndent = null;
    /** @type {number|null} indentation of the last test point */
    this.lastPointIndent = null;
    /** @type {{ depth: number, ok: boolean, directive: string }[]} open buffered subtests */
    this.buffered = [];
    this.partial = '';
  }

  /** @param {number} d */
  frame(d) {
    let f = this.frames.get(d);
    if (!f) this.frames.set(d, (f = { points: 0, failed: false, header: false }));
    return f;
  }

  /** @param {string} chunk */
  write(chunk) {
    const lines = (this.partial + chunk).split('\n');
    this.partial = lines.pop() ?? '';
    for (const l of lines) this.line(l.replace(/\r$/, ''));
  }

  end() {
    if (this.partial) this.line(this.partial);
    this.partial = '';
  }

  /** @param {string} raw */
  line(raw) {
    const indent = raw.length - raw.trimStart().length;
    const text = raw.trim();
    if (this.yamlIndent !== null) {
      if (text === '...' && indent === this.yamlIndent) {
        this.yamlIndent = null;
        return;
      }
      // A YAML block never de-indents; if it does, the block was not YAML.
      if (text === '' || indent >= this.yamlIndent) return;
      this.yamlIndent = null;
    }
    if (text === '---' && this.lastPointIndent !== null && indent > this.lastPointIndent) {
      this.yamlIndent = indent;
      return;
    }
    if (/^TAP version \d+/.test(text)) this.sawTap = true;
    if (/^Bail out!/.test(text)) this.bailedOut = true;
    const depth = Math.floor(indent / 4);
    if (indent === 0 && /^# \{ ?total: \d+/.test(text)) {
      /** @param {string} k */
      const n = (k) => Number((text.match(new RegExp(`\\b${k}: (\\d+)`)) ?? [])[1] ?? 0);
      this.tapCounts = {
        total: n('total'),
        pass: n('pass'),
        fail: n('fail'),
        skip: n('skip'),
        todo: n('todo'),
      };
      return;
    }
    if (/^# Subtest\b/.test(text)) {
      this.frame(depth).header = true;
      return;
    }
    if (text === '}') {
      // End of a buffered subtest `ok N - name {`: settle it like an
      // unbuffered closing point, with the result remembered at its start.
      const b = this.buffered.pop();
      if (b) this.point(b.depth, b.ok, b.directive, true);
      return;
    }
    const m = text.match(/^(not )?ok\b(?:\s+\d+)?(.*)$/);
    if (!m) return;
    this.lastPointIndent = indent;
    const ok = !m[1];
    const rest = m[2];
    const directive = (rest.match(/#\s*(SKIP|TODO)\b/i)?.[1] ?? '').toUpperCase();
    if (/\{\s*$/.test(rest)) {
      this.buffered.push({ depth, ok, directive });
      return;
    }
    this.point(depth, ok, directive, false);
  }

  /**
   * @param {number} depth
   * @param {boolean} ok
   * @param {string} directive 'SKIP' | 'TODO' | ''
   * @param {boolean} subtest  known to be a subtest's closing point
   */
  point(depth, ok, directive, subtest) {
    const here = this.frame(depth);
    // Is this the closing point of a subtest (children at a deeper level)?
    let childPoints = 0;
    let childFailed = false;
    for (const [d, f] of this.frames) {
      if (d > depth) {
        childPoints += f.points;
        childFailed ||= f.failed;
        this.frames.delete(d);
      }
    }
    const isSubtest = subtest || here.header || childPoints > 0;
    here.header = false;
    here.points++;
    if (isSubtest) {
      if (!ok && !directive && !childFailed) this.fail++;
      else if (childPoints === 0 && directive === 'SKIP') this.skip++;
      else if (childPoints === 0 && directive === 'TODO') this.todo++;
      if ((!ok && !directive) || childFailed) here.failed = true;
      return;
    }
    if (directive === 'SKIP') this.skip++;
    else if (directive === 'TODO') this.todo++;
    else if (ok) this.pass++;
    else {
      this.fail++;
      here.failed = true;
    }
  }

  /** @returns {{ pass: number, fail: number, skip: number, todo: number, source: string }} */
  result() {
    if (this.tapCounts) return { ...this.tapCounts, source: 'tap' };
    return { pass: this.pass, fail: this.fail, skip: this.skip, todo: this.todo, source: 'parsed' };
  }
}

/**
 * Find the value of a tap option in argv (`--name=v`, `--name v`, `-Xv`, `-X v`).
 * @param {string[]} argv
 * @param {string} long
 * @param {string} short
 * @returns {string|undefined} last value given
 */
function optValue(argv, long, short) {
  let v;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') break;
    if (a === `--${long}` || a === `-${short}`) v = argv[++i];
    else if (a.startsWith(`--${long}=`)) v = a.slice(long.length + 3);
    else if (a.startsWith(`-${short}`) && !a.startsWith('--') && a.length > 2)
      v = a.slice(2).replace(/^=/, '');
  }
  return v;
}

/**
 * tap's arguments for coverage: off (`--disable-coverage`) for a whole-suite run, that is one
 * naming no test file or directory, unless `--coverage` is given; nothing when a coverage
 * option is given explicitly. `--coverage` is this script's own and is not passed on.
 * @param {string[]} userArgs arguments for tap (--unit's files already added)
 * @param {(arg: string) => boolean} namesPath whether an argument names a file or directory
 * @returns {string[]}
 */
export function coverageArgs(userArgs, namesPath) {
  if (userArgs.includes('--coverage')) return [];
  if (userArgs.some((a) => /^--(no-)?disable-coverage(=|$)/.test(a))) return [];
  return userArgs.some((a) => !a.startsWith('-') && namesPath(a)) ? [] : ['--disable-coverage'];
}

/**
 * Whether tap collects coverage with these arguments: .taprc does, unless the last coverage
 * option given says otherwise.
 * @param {string[]} tapArgs
 */
export function collectsCoverage(tapArgs) {
  let on = true;
  for (const a of tapArgs) {
    if (a === '--') break;
    const m = a.match(/^--(no-)?disable-coverage(?:=(.*))?$/);
    if (m) on = Boolean(m[1]) === (m[2] !== 'false');
  }
  return on;
}

/**
 * Whether the run bundles the CLIs the tests start: not for the unit tier (it starts none), not
 * when coverage is collected (see the header), and not when OFFLINE_BUNDLE_TEST_CLIS is given
 * (empty: the dist/ CLIs).
 * @param {{ unit: boolean, tapArgs: string[], env: NodeJS.ProcessEnv }} run
 */
export function bundlesClis({ unit, tapArgs, env }) {
  return !unit && !collectsCoverage(tapArgs) && !(CLIS_ENV in env);
}

async function main() {
  const unit = process.argv.includes('--unit');
  const given = process.argv.slice(2).filter((a) => a !== '--unit');
  if (unit) given.push(...unitFiles(path.join(root, 'test')).map((f) => path.relative(root, f)));
  const userArgs = [
    ...coverageArgs(given, (a) => existsSync(path.resolve(root, a))),
    ...given.filter((a) => a !== '--coverage'),
  ];
  const reporter =
    process.env.TAP === '1'
      ? 'tap'
      : (optValue(userArgs, 'reporter', 'R') ?? (process.stdout.isTTY ? 'base' : 'tap'));
  const reporterFile = optValue(userArgs, 'reporter-file', 'f');
  const rawOnStdout =
    reporter === 'tap' && (!reporterFile || reporterFile === '-' || reporterFile === '/dev/stdout');

  const args = [];
  let tmp;
  let outputFile = optValue(userArgs, 'output-file', 'o');
  if (rawOnStdout) {
    if (!optValue(userArgs, 'reporter', 'R')) args.push('--reporter=tap');
  } else if (!outputFile) {
    tmp = mkdtempSync(path.join(os.tmpdir(), 'ob-tap-'));
    outputFile = path.join(tmp, 'run.tap');
    args.push(`--output-file=${outputFile}`);
  }
  args.push(...userArgs);

  const bundles = bundlesClis({ unit, tapArgs: userArgs, env: process.env });
  const clis = bundles ? { [CLIS_ENV]: await bundledClis() } : {};
  const counter = new TapCounter();
  const child = spawn(tapBin, args, {
    cwd: root,
    // Same as `test-env` in .taprc, in case --test-env is given on the command
    // line (which replaces the .taprc list): tsx compiles *.test.ts as ESM.
    // the unit guard holds every file marked as a unit test to the tier's rule, in every run
    env: {
      TSX_TSCONFIG_PATH: path.join(root, 'test', 'tsconfig.json'),
      ...clis,
      ...process.env,
      NODE_OPTIONS:
        `${process.env.NODE_OPTIONS ?? ''} --import=${pathToFileURL(path.join(root, 'test', 'helpers', 'unit-guard.mjs')).href}`.trim(),
    },
    stdio: ['inherit', rawOnStdout ? 'pipe' : 'inherit', 'inherit'],
  });
  if (rawOnStdout && child.stdout) {
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (/** @type {string} */ chunk) => {
      process.stdout.write(chunk);
      counter.write(chunk);
    });
  }
  /** @type {NodeJS.Signals[]} */
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const sig of signals) {
    process.on(sig, () => {
      if (child.pid !== undefined && child.exitCode === null) {
        try {
          process.kill(child.pid, sig);
        } catch {
          /* already gone */
        }
      }
    });
  }
  const { code, signal } = await new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal }));
  });

  if (!rawOnStdout && outputFile) {
    try {
      counter.write(readFileSync(path.resolve(root, outputFile), 'utf8'));
    } catch (e) {
      console.error(`test/run.mjs: cannot read tap output ${outputFile}: ${e}`);
    }
  }
  counter.end();
  if (tmp) rmSync(tmp, { recursive: true, force: true });

  const r = counter.result();
  const tapFailed = code !== 0;
  if (tapFailed && r.fail === 0) {
    console.log(
      `# tap exited with ${signal ? `signal ${signal}` : `code ${code}`}${counter.bailedOut ? ' (bailed out)' : ''}`,
    );
  }
  const skipped = r.skip + r.todo;
  console.log(`\n${r.pass} passed, ${r.fail} failed${skipped ? `, ${skipped} skipped` : ''}`);
  process.exitCode = r.fail > 0 || tapFailed ? 1 : 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(e);
    console.log('\n0 passed, 1 failed');
    process.exitCode = 1;
  });
}

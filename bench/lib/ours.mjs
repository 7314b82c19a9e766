// Our side of each comparison: the CLIs as they ship, run as a user runs them (a new process each).
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { NODE_ARGS } from '../../scripts/node-args.mjs';
import { run } from './measure.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');

/**
 * The app a node or a factory runs: `pnpm package`'s esbuild bundle (one module graph, the
 * Kubernetes client loaded only when used) on the artifact's own Node runtime, not the
 * workspace's dist/ of many small modules, which costs ~0.3 s more at each start (0.73 against
 * 0.40 s for `--version`, idle). BENCH_APP=dev measures dist/ on this machine's Node (quick, no
 * packaging). Only bench/run.mjs switches to them (useShippedApps); the other scripts run dist/.
 */
function shippedApps() {
  const out = mkdtempSync(path.join(os.tmpdir(), 'ob-bench-app-'));
  process.once('exit', () => rmSync(out, { recursive: true, force: true }));
  const arch = process.arch === 'arm64' ? 'arm64' : 'amd64';
  for (const only of ['agent', 'builder']) {
    execFileSync(
      process.execPath,
      [
        path.join(ROOT, 'scripts/package.mjs'),
        '--only',
        only,
        '--arch',
        arch,
        '--no-oci',
        '--out',
        out,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
  }
  const app = (name, dir) => {
    const top = `${name}-${JSON.parse(readFileSync(path.join(ROOT, dir, 'package.json'), 'utf8')).version}-linux-${arch}`;
    execFileSync('tar', ['-xzf', path.join(out, `${top}.tar.gz`), '-C', out]);
    const script = path.join(out, top, 'lib', name, 'app', 'cli.mjs');
    runtimes.set(script, path.join(out, top, 'lib', name, 'node'));
    return script;
  };
  return { BUNDLE: app('bundle', 'builder'), AGENT: app('bundle-agent', 'agent') };
}

/** The Node runtime each app runs on: its artifact's own, else this one. */
const runtimes = new Map();
const nodeFor = (script) => runtimes.get(script) ?? process.execPath;

// live bindings: useShippedApps changes what every importer sees
export let APP = 'dev';
export let BUNDLE = path.join(ROOT, 'builder/bin/bundle.js');
export let AGENT = path.join(ROOT, 'agent/bin/bundle-agent.js');

/** Our side becomes the shipped apps (packaged now, ~1 min) unless BENCH_APP=dev. */
export function useShippedApps() {
  if (process.env.BENCH_APP === 'dev' || APP === 'shipped') return;
  ({ BUNDLE, AGENT } = shippedApps());
  APP = 'shipped';
}

/**
 * The Node flags this build's shipped launcher passes (scripts/node-args.mjs), for this build's
 * two apps in either mode: the bench starts the app's script itself (to add --cpu-prof, which
 * NODE_OPTIONS refuses), so it passes them as the launcher would. Anything else (another build's
 * agent in an A/B, the staging server) gets none: its own launcher's flags are not ours to guess.
 * @param {string} script
 */
export function launcherFlags(script) {
  if (script === BUNDLE) return NODE_ARGS.bundle;
  if (script === AGENT) return NODE_ARGS['bundle-agent'];
  return [];
}

/** BENCH_PROFILE=DIR: every run of ours writes a V8 CPU profile there (`node --cpu-prof`). */
const profile = process.env.BENCH_PROFILE
  ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(process.env.BENCH_PROFILE)]
  : [];

/**
 * `bundle ARGS` or `bundle-agent ARGS`; resolves with the peak RSS in bytes when `rssFile` is given.
 * @param {string} bin BUNDLE or AGENT
 * @param {string[]} args
 * @param {string} [rssFile]
 * @param {NodeJS.ProcessEnv} [env] the environment, when not this process's (BUNDLE_PHASE_TIMES)
 */
export const cli = (bin, args, rssFile, env) =>
  run(nodeFor(bin), [...profile, ...launcherFlags(bin), bin, ...args], {
    ...(rssFile ? { rssFile } : {}),
    ...(env ? { env } : {}),
  });

/**
 * `bundle-agent serve PATH` on a random loopback port.
 * @param {string} target a bundle file or a staged layout
 * @param {string} pub trusted key
 * @returns {Promise<{ address: string, stop: () => Promise<void> }>}
 */
/** `agent`: another build's bundle-agent (an A/B of two builds). */
export const serve = (target, pub, agent = AGENT) =>
  listening([agent, 'serve', target, '--key', pub, '--json'], 'bundle-agent serve');

/**
 * The agent load's own registry (a StagingStore over its verified staging) on the layout `staged`.
 * @param {string} staged a layout made by `bundle extract`
 */
export const serveStaging = (staged) => listening([STAGING_SERVER, staged], 'staging-server');

const STAGING_SERVER = path.join(ROOT, 'bench/lib/staging-server.mjs');

/** Starts `node ARGS` and waits for the {"address"} line it prints once listening. */
async function listening(args, what) {
  const child = spawn(nodeFor(args[0]), [...profile, ...launcherFlags(args[0]), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => {
    err = (err + d).slice(-2000);
  });
  const exited = new Promise((resolve) => child.once('close', resolve));
  const address = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => l.includes('"address"'));
      if (line) resolve(JSON.parse(line).address);
    });
    exited.then((code) =>
      reject(new Error(`${what} exited ${code} before listening: ${err.trim()}`)),
    );
  });
  return {
    address,
    pid: child.pid,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

// Our side of each comparison: the built CLIs, run as a user runs them (a new process each).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { run } from './measure.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
export const BUNDLE = path.join(ROOT, 'builder/bin/bundle.js');
export const AGENT = path.join(ROOT, 'agent/bin/bundle-agent.js');

/** BENCH_PROFILE=DIR: every run of ours writes a V8 CPU profile there (`node --cpu-prof`). */
const profile = process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(process.env.BENCH_PROFILE)] : [];

/**
 * `bundle ARGS` or `bundle-agent ARGS`; resolves with the peak RSS in bytes when `rssFile` is given.
 * @param {string} bin BUNDLE or AGENT
 * @param {string[]} args
 * @param {string} [rssFile]
 */
export const cli = (bin, args, rssFile) => run(process.execPath, [...profile, bin, ...args], rssFile ? { rssFile } : {});

/**
 * `bundle-agent serve PATH` on a random loopback port.
 * @param {string} target a bundle file or a staged layout
 * @param {string} pub trusted key
 * @returns {Promise<{ address: string, stop: () => Promise<void> }>}
 */
/** `agent`: another build's bundle-agent (an A/B of two builds). */
export const serve = (target, pub, agent = AGENT) => listening([agent, 'serve', target, '--key', pub, '--json'], 'bundle-agent serve');

/**
 * The agent load's own registry (a StagingStore over its verified staging) on the layout `staged`.
 * @param {string} staged a layout made by `bundle extract`
 */
export const serveStaging = (staged) => listening([STAGING_SERVER, staged], 'staging-server');

const STAGING_SERVER = path.join(ROOT, 'bench/lib/staging-server.mjs');

/** Starts `node ARGS` and waits for the {"address"} line it prints once listening. */
async function listening(args, what) {
  const child = spawn(process.execPath, [...profile, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => { err = (err + d).slice(-2000); });
  const exited = new Promise((resolve) => child.once('close', resolve));
  const address = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => l.includes('"address"'));
      if (line) resolve(JSON.parse(line).address);
    });
    exited.then((code) => reject(new Error(`${what} exited ${code} before listening: ${err.trim()}`)));
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

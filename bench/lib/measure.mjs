// Timing and peak memory: each comparison runs ours and the peer alternately in the same run
// (ours, peer, ours, peer...), so a neighbour's load on this shared machine hits both sides.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';

/** @typedef {{ median: number, min: number, max: number, samples: number[] }} Stats */

/** @param {number[]} samples @returns {Stats} */
export function stats(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median, min: s[0], max: s[s.length - 1], samples };
}

/**
 * Runs a command; rejects with its stderr's tail when it fails. With `rssFile`, it runs under
 * /usr/bin/time and resolves with its peak resident set in bytes (children included only
 * when they are waited for, which is how these CLIs run theirs).
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ rssFile?: string, env?: NodeJS.ProcessEnv }} [opts]
 * @returns {Promise<number|undefined>}
 */
export async function run(cmd, args, opts = {}) {
  const argv = opts.rssFile
    ? ['/usr/bin/time', '-f', '%M', '-o', opts.rssFile, cmd, ...args]
    : [cmd, ...args];
  await new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: opts.env ?? process.env,
    });
    let err = '';
    child.stderr.on('data', (d) => {
      err = (err + d).slice(-4000);
    });
    child.on('error', reject);
    child.on('close', (code, signal) =>
      code === 0
        ? resolve(undefined)
        : reject(
            new Error(`${argv.join(' ').slice(0, 300)} failed (${code ?? signal}): ${err.trim()}`),
          ),
    );
  });
  if (!opts.rssFile) return undefined;
  const kb = Number((await readFile(opts.rssFile, 'utf8')).trim().split('\n').pop());
  await rm(opts.rssFile, { force: true });
  return kb * 1024;
}

/** `sh -c script` (bash when it needs process substitution). */
export const shell = (script) => run('bash', ['-c', `set -o pipefail; ${script}`]);

/** Seconds one call takes. */
export async function seconds(fn) {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

/** Clock ticks per second of /proc's times (getconf CLK_TCK: 100 on Linux). */
const CLK_TCK = 100;

/**
 * A process's CPU times from /proc/PID/stat, in seconds: its own (utime, stime: fields 14, 15)
 * and its waited-for children's (cutime, cstime: 16, 17), counted after the command name's ")".
 */
function procTimes(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return {
    own: (Number(f[11]) + Number(f[12])) / CLK_TCK,
    children: (Number(f[13]) + Number(f[14])) / CLK_TCK,
  };
}

/**
 * CPU seconds used so far by this process and the children it has waited for (the CLIs,
 * skopeo, tar, zstd), plus each long-running server's in `servers` (never waited for, so never
 * in our cutime), its own and its waited-for children's: on a shared machine CPU time is
 * steadier than wall time.
 */
function cpuSeconds(servers) {
  const own = process.cpuUsage();
  return (
    (own.user + own.system) / 1e6 +
    procTimes('self').children +
    servers.reduce((sum, pid) => {
      const t = procTimes(pid);
      return sum + t.own + t.children;
    }, 0)
  );
}

/** One call's wall and CPU seconds (this process and the children it waits for): a step of a side timed apart. */
export async function timedCpu(fn) {
  const cpu0 = cpuSeconds([]);
  const wall = await seconds(fn);
  return { wall, cpu: cpuSeconds([]) - cpu0 };
}

/**
 * Times `ours` and `peer` alternately, `runs` times each. `prepare`/`cleanup` run untimed
 * around every sample (fresh directories, a fresh containerd).
 * @template C
 * @param {number} runs
 * @param {{ ours: (c: C, i: number) => Promise<unknown>, peer: (c: C, i: number) => Promise<unknown>,
 *   prepare?: (side: 'ours'|'peer', i: number) => Promise<C>, cleanup?: (c: C) => Promise<void>,
 *   servers?: { ours?: number, peer?: number } | ((side: 'ours'|'peer', c: C) => number[]) }} sides
 * @returns {Promise<{ ours: Stats, peer: Stats, ratios: Stats, cpu: { ours: Stats, peer: Stats } }>}
 *   cpu: CPU seconds of each sample, this process and its waited-for children, plus the
 *   long-running servers of that side that `sides.servers` names (the serve rows: the server;
 *   the load rows: the node's containerd, and the peer's docker-registry)
 */
export async function alternate(runs, sides) {
  const ours = [];
  const peer = [];
  const cpu = { ours: [], peer: [] };
  for (let i = 0; i < runs; i++) {
    for (const side of /** @type {const} */ (['ours', 'peer'])) {
      const c = sides.prepare ? await sides.prepare(side, i) : /** @type {C} */ (undefined);
      try {
        const servers =
          typeof sides.servers === 'function'
            ? sides.servers(side, c)
            : [sides.servers?.[side]].filter((p) => p !== undefined);
        const cpu0 = cpuSeconds(servers);
        (side === 'ours' ? ours : peer).push(await seconds(() => sides[side](c, i)));
        cpu[side].push(cpuSeconds(servers) - cpu0);
      } finally {
        await sides.cleanup?.(c);
      }
    }
  }
  return {
    ours: stats(ours),
    peer: stats(peer),
    ratios: stats(ours.map((o, i) => o / peer[i])),
    cpu: { ours: stats(cpu.ours), peer: stats(cpu.peer) },
  };
}

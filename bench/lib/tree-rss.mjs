// A command's wall time and peak memory, its whole process tree included: /usr/bin/time's %M
// sees only the largest single process it waited for, and misses children that are not
// waited for (a FUSE daemon, containerd). So /proc is polled as well: the sum of VmRSS over
// the tree at each tick (its peak is the tree's), and every process's own VmHWM.
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';

const POLL_MS = 200;

/** ppid of every process, read once per tick. */
function parents() {
  const out = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // field 4 after the command name's closing parenthesis
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      out.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone between readdir and read
    }
  }
  return out;
}

/** `root` and every descendant of it. */
function tree(root) {
  const pp = parents();
  const all = new Set([root]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, ppid] of pp)
      if (all.has(ppid) && !all.has(pid)) {
        all.add(pid);
        grew = true;
      }
  }
  return [...all];
}

/** VmRSS and VmHWM in bytes and the command name, or undefined once the process is gone. */
export function memOf(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)?.[1] ?? 0) * 1024;
    return { name: /^Name:\s+(.*)$/m.exec(s)?.[1] ?? '?', rss: kb('VmRSS'), hwm: kb('VmHWM') };
  } catch {
    return undefined;
  }
}

/**
 * Polls the tree under `pid` until `stop()`: { treePeak, byName } where byName maps a command
 * name to the largest VmHWM any process of that name reached.
 */
export function watchTree(pid) {
  const byName = {};
  let treePeak = 0;
  const tick = () => {
    let sum = 0;
    for (const p of tree(pid)) {
      const m = memOf(p);
      if (!m) continue;
      sum += m.rss;
      byName[m.name] = Math.max(byName[m.name] ?? 0, m.hwm);
    }
    treePeak = Math.max(treePeak, sum);
  };
  const timer = setInterval(tick, POLL_MS);
  tick();
  return {
    stop: () => {
      clearInterval(timer);
      tick();
      return { treePeak, byName };
    },
  };
}

/**
 * Runs `cmd args` under /usr/bin/time, polling its tree. Rejects with stderr's tail on failure.
 * `abort` (an AbortSignal) kills the command's process group.
 * @returns {Promise<{ seconds: number, maxRss: number, treePeak: number, byName: Record<string, number>, stdout: string }>}
 */
export async function measure(cmd, args, { abort, env } = {}) {
  const rssFile = `/tmp/ob-scale-time.${process.pid}.${Date.now()}`;
  const argv = ['/usr/bin/time', '-f', '%M', '-o', rssFile, cmd, ...args];
  const t0 = process.hrtime.bigint();
  const child = spawn(argv[0], argv.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: env ?? process.env,
  });
  const watch = watchTree(child.pid);
  const kill = () => {
    try {
      process.kill(-child.pid, 'SIGTERM');
    } catch {
      /* gone */
    }
  };
  abort?.addEventListener('abort', kill, { once: true });
  let err = '';
  let out = '';
  child.stderr.on('data', (d) => {
    err = (err + d).slice(-4000);
  });
  child.stdout.on('data', (d) => {
    out = (out + d).slice(-64_000);
  });
  const code = await new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (c, s) => resolve(c ?? s));
  });
  abort?.removeEventListener('abort', kill);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const { treePeak, byName } = watch.stop();
  const maxRss =
    Number((await readFile(rssFile, 'utf8').catch(() => '0')).trim().split('\n').pop()) * 1024;
  await rm(rssFile, { force: true });
  if (code !== 0)
    throw new Error(
      `${[cmd, ...args].join(' ').slice(0, 300)} failed (${code}): ${abort?.aborted ? `${abort.reason?.message ?? abort.reason}; ` : ''}${err.trim().slice(-1500)}`,
    );
  return { seconds, maxRss, treePeak, byName, stdout: out };
}

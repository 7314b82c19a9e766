// What a namespace "node" costs, counted the same way for whatever runs in it: the bytes it
// sent onto its cable (the host end of its veth) and the CPU time of its processes (every
// process whose network namespace is the node's: the agent, containerd, a registry, and the
// children they waited for).
import { readFileSync, readdirSync, readlinkSync, statSync } from 'node:fs';

/** Clock ticks per second of /proc's times (getconf CLK_TCK: 100 on Linux). */
const CLK_TCK = 100;

/**
 * Bytes the node sent on its cable so far: what the host end of its veth received (every
 * protocol, headers included, so both sides of a comparison are counted alike).
 * @param {string} hostVeth
 */
export const sentOnCable = (hostVeth) =>
  Number(readFileSync(`/sys/class/net/${hostVeth}/statistics/rx_bytes`, 'utf8'));

/**
 * CPU seconds of one process from a /proc/PID/stat line: its own (utime, stime) and those of
 * the children it waited for (cutime, cstime), counted after the command name's ")".
 * @param {string} stat
 */
export function statSeconds(stat) {
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK;
}

/**
 * PIDs of the processes in the network namespace `ns` (as `ip netns` names it).
 * @param {string} ns
 * @returns {number[]}
 */
export function pidsIn(ns) {
  const want = `net:[${statSync(`/run/netns/${ns}`).ino}]`;
  const pids = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readlinkSync(`/proc/${name}/ns/net`) === want) pids.push(Number(name));
    } catch {
      // gone since the listing, or a kernel thread
    }
  }
  return pids;
}

/** CPU seconds so far of each process in `ns`, by PID. */
function cpuByPid(ns) {
  const out = new Map();
  for (const pid of pidsIn(ns)) {
    try {
      out.set(pid, statSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8')));
    } catch {
      // exited since the listing: its parent's children times hold it
    }
  }
  return out;
}

/**
 * Starts counting the CPU time of the node's processes; the reader gives the seconds since.
 * A process that exits meanwhile is counted through its parent's children times, when the
 * parent (also in the node) waited for it; a process that started meanwhile counts whole.
 * @param {string} ns
 * @returns {() => number}
 */
export function nodeCpu(ns) {
  const before = cpuByPid(ns);
  return () => {
    let sum = 0;
    for (const [pid, s] of cpuByPid(ns)) sum += s - (before.get(pid) ?? 0);
    return sum;
  };
}

/**
 * The data directory (containerd's `root`) of the containerd running in `ns`, read from its
 * command line's --config: where its content store shows which blobs it holds.
 * @param {string} ns
 */
export function containerdRootIn(ns) {
  for (const pid of pidsIn(ns)) {
    let argv;
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (!argv[0]?.endsWith('containerd')) continue;
    const config = argv[argv.indexOf('--config') + 1];
    const root = config && /^root\s*=\s*"([^"]+)"/m.exec(readFileSync(config, 'utf8'))?.[1];
    if (root) return root;
  }
  throw new Error(`no containerd with a --config naming its root runs in network namespace ${ns}`);
}

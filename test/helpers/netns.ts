// Nodes as network namespaces on a test bridge (makeBridge in node.ts), lighter than booted
// nodes: each namespace has only its loopback and one veth onto the bridge, so what a process
// in it serves on its address is reachable across the bridge and nowhere else. Link faults as
// this kernel allows them (it has no netem): tc tbf for a link's rate, nft `numgen random`
// drops for loss, `ip link set down` for a cut cable; and an nft counter of the bytes a node
// sent from a TCP port (what its peer server uploaded, seen on the wire).
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { Bridge } from './node.js';

type T = { teardown(fn: () => unknown): void };

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const quiet = (cmd: string, args: string[]) => {
  try {
    execFileSync(cmd, args, { stdio: 'ignore' });
  } catch {
    /* already gone */
  }
};

export interface NetNode {
  /** the namespace's name (for `ip netns exec`) */
  ns: string;
  /** the veth end on the bridge, in the host's namespace: the node's cable */
  hostVeth: string;
  address: string;
  /** runs argv in the namespace */
  exec(argv: string[]): string;
}

/** A network namespace with lo up and `address`/24 on a veth whose other end is on the bridge. Removed at teardown. */
export function netnsNode(t: T, bridge: Bridge, address: string): NetNode {
  const id = randomBytes(3).toString('hex');
  const ns = `obns${id}`;
  const hostVeth = `obv${id}`;
  ip('netns', 'add', ns);
  t.teardown(() => quiet('ip', ['netns', 'del', ns]));
  ip('link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', `obp${id}`);
  t.teardown(() => quiet('ip', ['link', 'del', hostVeth]));
  ip('link', 'set', `obp${id}`, 'netns', ns);
  ip('link', 'set', hostVeth, 'master', bridge.name, 'up');
  const exec = (argv: string[]) =>
    execFileSync('ip', ['netns', 'exec', ns, ...argv], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  exec(['ip', 'link', 'set', `obp${id}`, 'name', 'eth0']);
  exec(['ip', 'addr', 'add', `${address}/24`, 'dev', 'eth0']);
  exec(['ip', 'link', 'set', 'eth0', 'up']);
  exec(['ip', 'link', 'set', 'lo', 'up']);
  return { ns, hostVeth, address, exec };
}

/**
 * Limits the node's link to `rate` (tc syntax, e.g. '1gbit') both ways: tbf on the host's end
 * (what reaches the node) and on the node's eth0 (what it sends).
 */
export function limitLink(node: NetNode, rate: string): void {
  // burst of at least rate/HZ (250 here) or tbf cannot reach its rate; 1 MB covers 1 Gbit/s
  const tbf = ['root', 'tbf', 'rate', rate, 'burst', '1mb', 'latency', '50ms'];
  execFileSync('tc', ['qdisc', 'replace', 'dev', node.hostVeth, ...tbf]);
  node.exec(['tc', 'qdisc', 'replace', 'dev', 'eth0', ...tbf]);
}

/** Drops `percent`% of the packets the node receives, at random (nft numgen: this kernel has no netem); returns a reader of how many were dropped. */
export function dropIncoming(node: NetNode, percent: number): () => number {
  node.exec(['nft', 'add', 'table', 'inet', 'obloss']);
  node.exec([
    'nft',
    'add',
    'chain',
    'inet',
    'obloss',
    'in',
    '{ type filter hook input priority 0; }',
  ]);
  node.exec([
    'nft',
    'add',
    'rule',
    'inet',
    'obloss',
    'in',
    'iifname',
    'eth0',
    'numgen',
    'random',
    'mod',
    '100',
    '<',
    String(percent),
    'counter',
    'drop',
  ]);
  return () =>
    Number(
      /counter packets (\d+)/.exec(
        node.exec(['nft', 'list', 'chain', 'inet', 'obloss', 'in']),
      )?.[1] ?? Number.NaN,
    );
}

export function clearDrops(node: NetNode): void {
  node.exec(['nft', 'delete', 'table', 'inet', 'obloss']);
}

/** The cable pulled (down) or plugged back (up), at the bridge's end. */
export function setLink(node: NetNode, state: 'up' | 'down'): void {
  ip('link', 'set', node.hostVeth, state);
}

/** Starts counting the bytes the node sends from TCP `port` on eth0 (an nft counter); returns a reader of the count. */
export function countSentFrom(node: NetNode, port: number): () => number {
  node.exec(['nft', 'add', 'table', 'inet', 'obcount']);
  node.exec([
    'nft',
    'add',
    'chain',
    'inet',
    'obcount',
    'out',
    '{ type filter hook output priority 0; }',
  ]);
  node.exec([
    'nft',
    'add',
    'rule',
    'inet',
    'obcount',
    'out',
    'oifname',
    'eth0',
    'tcp',
    'sport',
    String(port),
    'counter',
  ]);
  return () => {
    const listed = node.exec(['nft', 'list', 'chain', 'inet', 'obcount', 'out']);
    return Number(/counter packets \d+ bytes (\d+)/.exec(listed)?.[1] ?? Number.NaN);
  };
}

/** Why namespace nodes cannot run here (not root, no ip/tc/nft), or undefined. */
export function netnsSupport(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  for (const tool of ['ip', 'tc', 'nft']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} is not installed (scripts/setup.sh installs iproute2 and nftables)`;
    }
  }
  return undefined;
}

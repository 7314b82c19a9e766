// The TCP sockets a process listens on, read from the kernel rather than from anything the
// process reports: its descriptors (/proc/PID/fd, socket:[INODE]) matched against the LISTEN
// rows of its own network namespace's tables (/proc/PID/net/tcp and tcp6).
import { readFile, readdir, readlink } from 'node:fs/promises';

/** A listening socket: its local address (IPv4 dotted, IPv6 as the kernel's hex) and port. */
export interface Listening {
  address: string;
  port: number;
}

/** /proc/net/tcp's state column for LISTEN. */
const TCP_LISTEN = '0A';

/** The kernel's little-endian hex of an IPv4 address ("5B00007F") as "127.0.0.91"; IPv6 stays hex. */
function addressOf(hex: string): string {
  if (hex.length !== 8) return hex;
  return [6, 4, 2, 0].map((i) => parseInt(hex.slice(i, i + 2), 16)).join('.');
}

async function socketInodes(pid: number): Promise<Set<string>> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
    const m = /^socket:\[(\d+)\]$/.exec(await readlink(`/proc/${pid}/fd/${fd}`).catch(() => ''));
    if (m) inodes.add(m[1]!);
  }
  return inodes;
}

/** Every TCP socket process `pid` holds in the LISTEN state (none once it exited). */
export async function listeningSockets(pid: number): Promise<Listening[]> {
  const inodes = await socketInodes(pid);
  const out: Listening[] = [];
  for (const table of ['tcp', 'tcp6']) {
    const rows = (await readFile(`/proc/${pid}/net/${table}`, 'utf8').catch(() => ''))
      .split('\n')
      .slice(1);
    for (const row of rows) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const f = row.trim().split(/\s+/);
      if (f[3] !== TCP_LISTEN || !inodes.has(f[9] ?? '')) continue;
      const [address, port] = f[1]!.split(':') as [string, string];
      out.push({ address: addressOf(address), port: parseInt(port, 16) });
    }
  }
  return out;
}

/** Whether process `pid` listens on TCP `port` (any address). */
export async function listensOn(pid: number, port: number): Promise<boolean> {
  return (await listeningSockets(pid)).some((s) => s.port === port);
}

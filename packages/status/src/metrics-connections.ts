// Who holds the metrics listener's connections. Anyone on the node network can open one, so
// sockets that never speak, or stall after the handshake, must not keep Prometheus out:
// a share per address, and a full listener makes room for a newcomer that spoke.
//
// The peer server (agent/src/peers/peer-server.ts, ConnectionGate) solves the same problem for
// the peer port; it lives in the agent and cannot be imported from this package, so this is a
// smaller version of the same rules. They should become one module here later (SECURITY.md).
import type { Socket } from 'node:net';

export const METRICS_CONNECTION_LIMITS = {
  /** Connections past their first-bytes wait, all addresses together. */
  max: 32,
  /** Of those, from one address (an IPv6 /64 counts as one). Prometheus holds one per target. */
  perAddress: 8,
  /** How long a new connection has to send its first bytes (a client sends its ClientHello at once) before it is judged. */
  firstBytesWaitMs: 25,
} as const;

/**
 * The address a connection budget is kept for: IPv4 as it is (also when mapped into IPv6), an
 * IPv6 address by its /64 (one machine is commonly handed a whole /64).
 */
export function addressKey(address: string | undefined): string {
  if (!address) return '?';
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!address.includes(':')) return address;
  const [head = '', tail] = address.replace(/%.*$/, '').toLowerCase().split('::', 2);
  const groups = head ? head.split(':') : [];
  if (tail !== undefined) {
    const after = tail ? tail.split(':') : [];
    groups.push(...Array<string>(Math.max(0, 8 - groups.length - after.length)).fill('0'), ...after);
  }
  return `${groups.slice(0, 4).map((g) => Number.parseInt(g, 16).toString(16)).join(':')}::/64`;
}

/**
 * A new connection waits firstBytesWaitMs (as many as `max` may wait so; beyond, the one waiting
 * longest is judged at once, so a flood of new sockets never refuses a newcomer unseen), then:
 * over its address's share, a silent socket of that address is dropped for it if it spoke
 * itself, else it is refused; over `max`, the oldest silent socket is dropped for a newcomer
 * that spoke, else the address holding the most gives up its oldest if it holds more than one
 * beyond the newcomer's address, else the newcomer is refused. So a silent socket never pushes
 * out one that spoke, and a stalled one holds no more than its address's share.
 */
export class ConnectionGate {
  /** Judged connections in arrival order, with their address key. */
  private readonly placed = new Map<Socket, string>();
  private readonly byAddress = new Map<string, Set<Socket>>();
  /** Connections in their first-bytes wait, oldest first, with their timer. */
  private readonly arriving = new Map<Socket, NodeJS.Timeout>();
  dropped = 0;

  constructor(private readonly limits: { max: number; perAddress: number; firstBytesWaitMs: number } = METRICS_CONNECTION_LIMITS) {}

  get open(): number {
    return this.placed.size + this.arriving.size;
  }

  /** A new TCP connection: waits for its first bytes; when `max` already wait, the one waiting longest is judged now. */
  admit(raw: Socket): void {
    if (this.arriving.size >= this.limits.max) this.judge(this.arriving.keys().next().value!);
    // after one more poll of the sockets (setImmediate), so bytes that came in the wait are counted on a busy loop too
    this.arriving.set(raw, setTimeout(() => setImmediate(() => this.judge(raw)), this.limits.firstBytesWaitMs));
    raw.once('close', () => {
      clearTimeout(this.arriving.get(raw));
      this.arriving.delete(raw);
      this.forget(raw);
    });
  }

  private judge(raw: Socket): void {
    const timer = this.arriving.get(raw);
    if (timer === undefined) return;
    clearTimeout(timer);
    this.arriving.delete(raw);
    if (!raw.destroyed) this.place(raw, addressKey(raw.remoteAddress));
  }

  private place(raw: Socket, key: string): void {
    const spoke = raw.bytesRead > 0;
    if (this.held(key) >= this.limits.perAddress) {
      const silent = spoke ? this.oldestSilent(key) : undefined;
      if (!silent) return this.refuse(raw);
      this.refuse(silent);
    }
    if (this.placed.size >= this.limits.max) {
      const victim = (spoke ? this.oldestSilent() : undefined) ?? this.richerThan(this.held(key) + 1);
      if (!victim) return this.refuse(raw);
      this.refuse(victim);
    }
    this.placed.set(raw, key);
    this.byAddress.set(key, (this.byAddress.get(key) ?? new Set()).add(raw));
  }

  private held(key: string): number {
    return this.byAddress.get(key)?.size ?? 0;
  }

  private oldestSilent(key?: string): Socket | undefined {
    for (const s of key === undefined ? this.placed.keys() : (this.byAddress.get(key) ?? [])) if (s.bytesRead === 0) return s;
    return undefined;
  }

  /** The oldest socket of the address holding the most, if that is more than `than`. */
  private richerThan(than: number): Socket | undefined {
    let most = 0;
    for (const held of this.byAddress.values()) most = Math.max(most, held.size);
    if (most <= than) return undefined;
    for (const [s, key] of this.placed) if (this.held(key) === most) return s;
    return undefined;
  }

  private refuse(raw: Socket): void {
    this.dropped++;
    this.forget(raw);
    raw.destroy();
  }

  private forget(raw: Socket): void {
    const key = this.placed.get(raw);
    if (key === undefined) return;
    this.placed.delete(raw);
    const mine = this.byAddress.get(key);
    mine?.delete(raw);
    if (mine?.size === 0) this.byAddress.delete(key);
  }
}

// Who holds a server's connections before they have proved anything. Anyone who can reach the
// port can open one, so sockets that never speak, or stall after a first byte, must not keep out
// the clients the port is for: a share per address, and a full gate makes room for a newcomer
// that spoke. The peer port (agent/src/peers/peer-server.ts) and the metrics listener
// (packages/status/src/metrics-listener.ts) each keep one, with their own limits (SECURITY.md).

/** What the gate reads of a connection: a net.Socket, or a stand-in in a unit test. */
export interface GatedSocket {
  readonly remoteAddress?: string | undefined;
  readonly bytesRead: number;
  readonly destroyed: boolean;
  destroy(): unknown;
  once(event: 'close', listener: () => void): unknown;
}

export interface GateLimits {
  /** Places, all addresses together; as many again may be in their first-bytes wait beside them. */
  readonly max: number;
  /** Places one address holds at most (an IPv6 /64 counts as one address). */
  readonly perAddress: number;
  /** How long a new connection has to send its first bytes (a TLS client sends its ClientHello at once) before it takes a place. */
  readonly firstBytesWaitMs: number;
  /** Connections of one address in their first-bytes wait, beyond which its one waiting longest takes a place at once (unset: only `max` bounds the wait). */
  readonly arrivingPerAddress?: number;
}

/** Connections now in their first-bytes wait, holding a place, and dropped or refused for room so far. */
export interface GateCounts {
  arriving: number;
  placed: number;
  dropped: number;
}

/**
 * The address a connection budget is kept for: IPv4 as it is (also when mapped into IPv6), an
 * IPv6 address by its /64 (one machine is commonly handed a whole /64, so counting its addresses
 * one by one would give it as many budgets as it likes).
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
    groups.push(
      ...Array<string>(Math.max(0, 8 - groups.length - after.length)).fill('0'),
      ...after,
    );
  }
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

/** Connections of one stage: in arrival order, and by address. */
class Places {
  readonly all = new Map<GatedSocket, string>();
  private readonly byAddress = new Map<string, Set<GatedSocket>>();

  held(key: string): number {
    return this.byAddress.get(key)?.size ?? 0;
  }

  add(raw: GatedSocket, key: string): void {
    this.all.set(raw, key);
    this.byAddress.set(key, (this.byAddress.get(key) ?? new Set()).add(raw));
  }

  delete(raw: GatedSocket): boolean {
    const key = this.all.get(raw);
    if (key === undefined) return false;
    this.all.delete(raw);
    const mine = this.byAddress.get(key);
    mine?.delete(raw);
    if (mine?.size === 0) this.byAddress.delete(key);
    return true;
  }

  /** The oldest of `key`'s connections (any address's when undefined). */
  oldest(key?: string): GatedSocket | undefined {
    return (key === undefined ? this.all.keys() : this.byAddress.get(key)?.values())?.next().value;
  }

  /** The oldest of `key`'s connections (any address's when undefined) that has not sent a byte. */
  oldestSilent(key?: string): GatedSocket | undefined {
    for (const s of key === undefined ? this.all.keys() : (this.byAddress.get(key) ?? []))
      if (s.bytesRead === 0) return s;
    return undefined;
  }

  /** The oldest connection of the addresses holding the most, if they hold more than one beyond `than`. */
  richerThan(than: number): GatedSocket | undefined {
    let most = 0;
    for (const held of this.byAddress.values()) most = Math.max(most, held.size);
    if (most <= than + 1) return undefined;
    for (const [s, key] of this.all) if (this.held(key) === most) return s;
    return undefined;
  }
}

/**
 * A new connection first waits firstBytesWaitMs beside the places (as many as `max` may, and
 * `arrivingPerAddress` of one address; beyond, the one waiting longest takes a place at once),
 * long enough for a client's first bytes, which it sends the moment it is connected, to have
 * been read. Then it takes a place: when its address's share is full, a connection of that
 * address that never sent a byte is dropped for it if it has spoken itself, else it is refused;
 * when all places are taken, the oldest connection that never sent a byte is dropped for a
 * newcomer that has spoken, else the address holding the most gives up its oldest if it holds
 * more than one beyond the newcomer's address, else the newcomer is refused.
 *
 * Why: refusing every newcomer would let a few addresses that hold sockets open lock everyone
 * out; dropping the oldest whatever it did would let a flood that reconnects at once cycle
 * through the places and drop a client in the middle of its handshake; deciding at arrival would
 * see a client's socket as silent before its first bytes were read. So a silent connection never
 * pushes out one that spoke, and connections that stall after a first byte hold no more than a
 * share per address.
 */
export class ConnectionGate {
  private readonly arriving = new Places();
  private readonly placed = new Places();
  private dropped = 0;

  constructor(private readonly limits: GateLimits) {}

  get counts(): GateCounts {
    return {
      arriving: this.arriving.all.size,
      placed: this.placed.all.size,
      dropped: this.dropped,
    };
  }

  /** A new connection: waits for its first bytes, then takes a place or is refused (destroyed). */
  admit(raw: GatedSocket): void {
    const key = addressKey(raw.remoteAddress);
    const early =
      this.arriving.held(key) >= (this.limits.arrivingPerAddress ?? Infinity)
        ? this.arriving.oldest(key)
        : undefined;
    if (early) this.place(early);
    const first = this.arriving.all.size >= this.limits.max ? this.arriving.oldest() : undefined;
    if (first) this.place(first);
    this.arriving.add(raw, key);
    // then after one more poll of the sockets (setImmediate runs after it): bytes that arrived in the wait are counted even on a busy loop
    const timer = setTimeout(
      () => setImmediate(() => this.place(raw)),
      this.limits.firstBytesWaitMs,
    );
    raw.once('close', () => {
      clearTimeout(timer);
      this.release(raw);
    });
  }

  /** The connection leaves the gate without being dropped (it proved itself, or closed): it holds no place from now on. */
  release(raw: GatedSocket): void {
    this.arriving.delete(raw);
    this.placed.delete(raw);
  }

  /** After its first-bytes wait: the connection takes a place, making room as the class says, or is refused. */
  private place(raw: GatedSocket): void {
    const key = this.arriving.all.get(raw);
    if (key === undefined || !this.arriving.delete(raw) || raw.destroyed) return;
    const spoke = raw.bytesRead > 0;
    if (this.placed.held(key) >= this.limits.perAddress) {
      const silent = spoke ? this.placed.oldestSilent(key) : undefined;
      if (!silent) return this.refuse(raw);
      this.refuse(silent);
    }
    if (this.placed.all.size >= this.limits.max) {
      const victim =
        (spoke ? this.placed.oldestSilent() : undefined) ??
        this.placed.richerThan(this.placed.held(key));
      if (!victim) return this.refuse(raw);
      this.refuse(victim);
    }
    this.placed.add(raw, key);
  }

  private refuse(raw: GatedSocket): void {
    this.dropped++;
    this.release(raw);
    raw.destroy();
  }
}

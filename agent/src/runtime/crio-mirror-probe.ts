// Which registries.conf.d CRI-O reads is not in its running config (--registries-conf-dir,
// CONTAINER_REGISTRIES_CONF_DIR, and a registries.conf in its user's ~/.config/containers, which
// makes containers/image skip the system directory, are all outside its TOML). So it is asked
// the way the load will ask it: a mirror drop-in for a `.invalid` repository points at a
// loopback listener, and a pull of that repository must reach it. Nothing is ever served: the
// first connection that opens as a registry client does answers the question and is closed, the
// pull is cancelled.
import { createServer, type Server, type Socket } from 'node:net';

/** How long the probe pull may take to reach the mirror (CRI-O tries the mirror first, over loopback). */
export const MIRROR_PROBE_TIMEOUT_MS = 10_000;
/** How long one connection may take to send the bytes that tell a registry client. */
const FIRST_BYTES_MS = 2_000;
/**
 * The mirror drop-in says `insecure = true`: containers/image first tries HTTPS (a TLS record of
 * type handshake, 0x16, version 3.x: the ClientHello), then plain HTTP, opening with its ping.
 */
const TLS_HANDSHAKE = Buffer.from([0x16, 0x03]);
const HTTP_PING = Buffer.from('GET /v2/');

export interface MirrorProbeListener {
  /** "127.0.0.1:PORT", as a registries.conf mirror location. */
  address: string;
  /** Whether a registry client connected so far. */
  reached(): boolean;
  /** Resolves at the first connection that opens as a registry client does. */
  connected: Promise<void>;
  close(): Promise<void>;
}

/** Whether `head` (what a connection sent so far) is, or may still become, a registry client's opening. */
function registryClientOpening(head: Buffer): 'yes' | 'no' | 'more' {
  for (const want of [TLS_HANDSHAKE, HTTP_PING]) {
    const n = Math.min(head.length, want.length);
    if (head.subarray(0, n).equals(want.subarray(0, n))) return n === want.length ? 'yes' : 'more';
  }
  return 'no';
}

/** Reads `conn` until its first bytes tell; calls `onClient` when they are a registry client's. */
function sniff(conn: Socket, onClient: () => void): void {
  let head = Buffer.alloc(0);
  conn.setTimeout(FIRST_BYTES_MS, () => conn.destroy());
  conn.on('error', () => conn.destroy());
  conn.on('data', (c: Buffer) => {
    head = Buffer.concat([head, c]);
    const seen = registryClientOpening(head);
    if (seen === 'more') return;
    conn.destroy();
    if (seen === 'yes') onClient();
  });
}

/** A loopback listener that only notes whether a registry client connected. */
export async function startMirrorProbeListener(): Promise<MirrorProbeListener> {
  let seen = false;
  let onConnect!: () => void;
  const connected = new Promise<void>((resolve) => {
    onConnect = resolve;
  });
  const open = new Set<Socket>();
  const server: Server = createServer((conn) => {
    open.add(conn);
    conn.on('close', () => open.delete(conn));
    sniff(conn, () => {
      seen = true;
      onConnect();
    });
  });
  await new Promise<void>((resolve, reject) =>
    server.once('error', reject).listen(0, '127.0.0.1', () => resolve()),
  );
  const { port } = server.address() as { port: number };
  return {
    address: `127.0.0.1:${port}`,
    reached: () => seen,
    connected,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        for (const conn of open) conn.destroy();
      }),
  };
}

/**
 * Pulls `ref` through `pull` until the listener sees a registry client, the pull ends (it fails:
 * the listener serves nothing and the origin is `.invalid`), `timeoutMs` passes or `signal`
 * aborts; then cancels it. Returns whether the pull reached the listener.
 */
export async function pullReachesMirror(
  pull: (ref: string, signal: AbortSignal) => Promise<unknown>,
  ref: string,
  listener: MirrorProbeListener,
  timeoutMs = MIRROR_PROBE_TIMEOUT_MS,
  signal?: AbortSignal,
): Promise<boolean> {
  const stop = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const onAbort = () => stop.abort(signal!.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await Promise.race([
      listener.connected,
      pull(ref, stop.signal).catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
    stop.abort(new Error('the mirror probe has its answer'));
  }
  signal?.throwIfAborted();
  return listener.reached();
}

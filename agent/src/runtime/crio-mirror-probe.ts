// Which registries.conf.d CRI-O reads is not in its running config (--registries-conf-dir,
// CONTAINER_REGISTRIES_CONF_DIR, and a registries.conf in its user's ~/.config/containers, which
// makes containers/image skip the system directory, are all outside its TOML). So it is asked
// the way the load will ask it: a mirror drop-in for a `.invalid` repository points at a
// loopback listener, and a pull of that repository must connect to it. Nothing is ever served:
// the first connection answers the question and is closed, the pull is cancelled.
import { createServer, type Server } from 'node:net';

/** How long the probe pull may take to reach the mirror (CRI-O tries the mirror first, over loopback). */
export const MIRROR_PROBE_TIMEOUT_MS = 10_000;

export interface MirrorProbeListener {
  /** "127.0.0.1:PORT", as a registries.conf mirror location. */
  address: string;
  /** Whether anything connected so far. */
  reached(): boolean;
  /** Resolves at the first connection. */
  connected: Promise<void>;
  close(): Promise<void>;
}

/** A loopback listener that only counts connections. */
export async function startMirrorProbeListener(): Promise<MirrorProbeListener> {
  let seen = false;
  let onConnect!: () => void;
  const connected = new Promise<void>((resolve) => { onConnect = resolve; });
  const server: Server = createServer((conn) => {
    seen = true;
    conn.destroy();
    onConnect();
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as { port: number };
  return {
    address: `127.0.0.1:${port}`,
    reached: () => seen,
    connected,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * Pulls `ref` through `pull` until the listener sees a connection, the pull ends (it fails: the
 * listener serves nothing and the origin is `.invalid`) or `timeoutMs` passes; then cancels it.
 * Returns whether the pull reached the listener.
 */
export async function pullReachesMirror(pull: (ref: string, signal: AbortSignal) => Promise<unknown>, ref: string, listener: MirrorProbeListener, timeoutMs = MIRROR_PROBE_TIMEOUT_MS): Promise<boolean> {
  const stop = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      listener.connected,
      pull(ref, stop.signal).catch(() => undefined),
      new Promise<void>((resolve) => { timer = setTimeout(resolve, timeoutMs); }),
    ]);
  } finally {
    clearTimeout(timer);
    stop.abort(new Error('the mirror probe has its answer'));
  }
  return listener.reached();
}

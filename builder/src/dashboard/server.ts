/**
 * The dashboard's HTTP server: node:http on 127.0.0.1 only, read-only (GET/HEAD), serving the
 * page's files and one Server-Sent Events stream of snapshots. Another site in the admin's
 * browser must not read the cluster's state through it: a Host other than 127.0.0.1:PORT or
 * localhost:PORT is refused (DNS rebinding), no CORS header is ever sent, and the CSP lets
 * the page load only its own files.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { EventEmitter } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Asset } from './assets.js';
import type { Snapshot } from './snapshot.js';
import { SnapshotStream } from './sse.js';

/** Event streams open at once: a few tabs; more is a runaway page or a local attacker. */
export const MAX_SSE_CLIENTS = 16;

/** The feed: its current snapshot, 'change' (snapshot) and 'poll' (iso time) events. */
type SnapshotSource = { snapshot: Snapshot } & Pick<EventEmitter, 'on' | 'off'>;

interface DashboardServer {
  url: string;
  port: number;
  /** Open event streams. */
  clients(): number;
  /** Each open stream's bytes not yet read by its client, and whether a snapshot waits behind them. */
  backlog(): { bytes: number; waiting: boolean }[];
  close(): Promise<void>;
}

const SECURITY_HEADERS = {
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

function refuse(
  res: ServerResponse,
  status: number,
  text: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...SECURITY_HEADERS,
    'Content-Type': 'text/plain; charset=utf-8',
    ...headers,
  });
  res.end(`${text}\n`);
}

/** The Host a browser sends for this server: its own address, never a name that resolves elsewhere later. */
const allowedHosts = (port: number): Set<string> =>
  new Set([`127.0.0.1:${port}`, `localhost:${port}`]);

/** Starts the server on 127.0.0.1:`port` (0: any free port). */
export async function startDashboardServer(o: {
  port: number;
  assets: Map<string, Asset>;
  feed: SnapshotSource;
  maxClients?: number;
}): Promise<DashboardServer> {
  const maxClients = o.maxClients ?? MAX_SSE_CLIENTS;
  const streams = new Set<SnapshotStream>();
  let hosts = new Set<string>();

  const stream = (req: IncomingMessage, res: ServerResponse) => {
    const headers = { ...SECURITY_HEADERS, 'Content-Type': 'text/event-stream; charset=utf-8' };
    // HEAD gets the headers a GET would and nothing to wait for: it holds no slot
    if (req.method === 'HEAD') return void res.writeHead(200, headers).end();
    if (streams.size >= maxClients)
      return refuse(
        res,
        503,
        `too many dashboard pages open (${maxClients}): close one and reload`,
        { 'Retry-After': '10' },
      );
    res.writeHead(200, { ...headers, Connection: 'keep-alive' });
    const s = new SnapshotStream(res, o.feed.snapshot);
    const onChange = (snapshot: Snapshot) => s.state(snapshot);
    const onPoll = (at: string) => s.poll(at);
    streams.add(s);
    o.feed.on('change', onChange);
    o.feed.on('poll', onPoll);
    res.on('close', () => {
      streams.delete(s);
      o.feed.off('change', onChange);
      o.feed.off('poll', onPoll);
    });
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    if (!hosts.has(req.headers.host ?? ''))
      return refuse(
        res,
        421,
        `refused: Host ${JSON.stringify(req.headers.host ?? '')} is not this dashboard's address (a page of another site reached it through its DNS name): open http://127.0.0.1:${[...hosts][0]!.split(':')[1]}/`,
      );
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return refuse(res, 405, 'the dashboard is read-only: GET only', { Allow: 'GET, HEAD' });
    const path = (req.url ?? '/').split('?')[0]!;
    if (path === '/events') return stream(req, res);
    const asset = o.assets.get(path === '/index.html' ? '/' : path);
    if (!asset)
      return refuse(res, 404, 'not found: the dashboard serves /, /style.css, /app.js and /events');
    res.writeHead(200, {
      ...SECURITY_HEADERS,
      'Content-Type': asset.type,
      'Content-Length': String(asset.body.length),
    });
    res.end(req.method === 'HEAD' ? undefined : asset.body);
  };

  const server: Server = createServer(handle);
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  hosts = allowedHosts(port);
  return {
    url: `http://127.0.0.1:${port}/`,
    port,
    clients: () => streams.size,
    backlog: () => [...streams].map((s) => ({ bytes: s.buffered, waiting: s.waiting })),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of streams) s.end();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

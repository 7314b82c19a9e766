/**
 * The node-local status endpoint, on loopback only:
 *   GET /status   the current NodeStatus as JSON
 *   GET /metrics  Prometheus text exposition format 0.0.4
 *   GET /livez    200 while the process answers (/healthz: the same); for a liveness probe
 *   GET /readyz   200 when every readiness check passes, else 503; one line per check
 * Nothing else; no request body is read; only GET and HEAD.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { NodeStatus } from './model.js';
import { isLoopback } from '@offline-bundle/host';
import { METRICS_CONTENT_TYPE, type Metrics } from './metrics.js';
import type { Health, HealthCheck } from './health.js';

const PATHS = ['/status', '/metrics', '/livez', '/healthz', '/readyz'];
const TEXT = 'text/plain; charset=utf-8';

export interface StatusServerOptions {
  /** Where the current status comes from: a StatusTracker (its `current`) or a function. */
  status: { readonly current: NodeStatus } | (() => NodeStatus | undefined);
  metrics?: Metrics;
  /** The checks behind /livez and /readyz; without it both answer 200 while the process does. */
  health?: Health;
  /** Loopback address to bind: 127.0.0.1 (default), another 127.x.y.z, ::1 or localhost. */
  host?: string;
  /** 0 (default): a free port. */
  port?: number;
}

export interface StatusServer {
  /** "127.0.0.1:PORT" ("[::1]:PORT" for IPv6). */
  readonly address: string;
  readonly port: number;
  /** "http://127.0.0.1:PORT" */
  readonly url: string;
  close(): Promise<void>;
}

function hostOfHeader(host: string | undefined): string | undefined {
  if (!host) return undefined;
  const m = host.match(/^(\[[^\]]+\]|[^:]+)(?::\d+)?$/);
  return m?.[1];
}

function send(
  res: ServerResponse,
  req: IncomingMessage,
  code: number,
  type: string,
  body: string,
  extra: Record<string, string> = {},
): void {
  const buf = Buffer.from(body, 'utf8');
  res.writeHead(code, {
    'Content-Type': type,
    'Content-Length': String(buf.length),
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    ...extra,
  });
  res.end(req.method === 'HEAD' ? undefined : buf);
}

/** A probe's answer, as the Kubernetes API server words its own: a line per check, then the verdict. */
function probeAnswer(
  kind: 'livez' | 'readyz',
  checks: HealthCheck[],
): { code: number; body: string } {
  const ok = checks.every((c) => c.ok);
  const lines = checks.map(
    (c) =>
      `[${c.ok ? '+' : '-'}]${c.name} ${c.ok ? 'ok' : 'failed'}: ${c.detail.replace(/[\r\n]+/g, ' ')}`,
  );
  return {
    code: ok ? 200 : 503,
    body: [...lines, `${kind} check ${ok ? 'passed' : 'failed'}`].join('\n') + '\n',
  };
}

/** Answers one request: refuses a foreign Host, then serves the path asked for. */
async function answer(
  opts: StatusServerOptions,
  current: () => NodeStatus | undefined,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  // A browser on the node tricked by DNS rebinding sends a foreign Host: refuse it.
  const h = hostOfHeader(req.headers.host);
  if (h !== undefined && !isLoopback(h)) return send(res, req, 403, TEXT, 'forbidden\n');
  const path = (req.url ?? '/').split('?')[0]!;
  if (!PATHS.includes(path))
    return send(res, req, 404, TEXT, `not found: try ${PATHS.join(', ')}\n`);
  if (req.method !== 'GET' && req.method !== 'HEAD')
    return send(res, req, 405, TEXT, 'method not allowed\n', { Allow: 'GET, HEAD' });
  if (path === '/status') {
    const s = current();
    if (!s)
      return send(
        res,
        req,
        503,
        'application/json',
        JSON.stringify({ error: 'no status yet' }) + '\n',
      );
    return send(res, req, 200, 'application/json', JSON.stringify(s, null, 2) + '\n');
  }
  if (path === '/livez' || path === '/healthz' || path === '/readyz') {
    const kind = path === '/readyz' ? 'readyz' : 'livez';
    const checks = opts.health
      ? await (kind === 'readyz' ? opts.health.ready() : opts.health.live())
      : [];
    const a = probeAnswer(kind, checks);
    return send(res, req, a.code, TEXT, a.body);
  }
  if (!opts.metrics) return send(res, req, 404, TEXT, 'metrics are not enabled\n');
  return send(res, req, 200, METRICS_CONTENT_TYPE, await opts.metrics.render());
}

/** Starts the endpoint; refuses a non-loopback host. */
export async function startStatusServer(opts: StatusServerOptions): Promise<StatusServer> {
  const host = opts.host ?? '127.0.0.1';
  if (!isLoopback(host))
    throw new Error(
      `the status endpoint listens on loopback only; ${host} is not a loopback address`,
    );
  const current =
    typeof opts.status === 'function'
      ? opts.status
      : (
          (src) => () =>
            src.current
        )(opts.status);
  const server: Server = createServer((req, res) => {
    answer(opts, current, req, res).catch((err: unknown) => {
      if (!res.headersSent)
        send(
          res,
          req,
          500,
          TEXT,
          `internal error: ${String((err as Error)?.message ?? err).split('\n')[0]}\n`,
        );
      else res.destroy();
    });
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const a = server.address();
  if (!a || typeof a === 'string') throw new Error('status endpoint: no address');
  const address = a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
  return {
    address,
    port: a.port,
    url: `http://${address}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

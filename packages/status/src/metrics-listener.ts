/**
 * GET /metrics on the node's address, for the cluster's Prometheus: TLS only, and every request
 * authorised as kube-rbac-proxy does (metrics-auth.ts): no credentials or an unknown token 401,
 * a caller without get on the node's nodebundlestatuses/metrics 403, an API server that cannot
 * answer 503, unseen credentials faster than the review rate 429. Nothing else is served (no
 * /status: that stays on loopback), no request body is read, and connections (per address too:
 * METRICS_CONNECTION_LIMITS, kept by the ConnectionGate), requests under way, header bytes and
 * time are bounded (SECURITY.md).
 * A request whose answer is cached never waits for a slot, so a flood of made-up tokens cannot
 * turn Prometheus away.
 */
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Server as NetServer, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { ConnectionGate } from '@offline-bundle/host';
import { METRICS_CONTENT_TYPE } from './metrics.js';
import {
  RATE_RETRY_AFTER_S,
  type Identity,
  type MetricsAuth,
  type Verdict,
} from './metrics-auth.js';
import { addressKey, METRICS_CONNECTION_LIMITS } from './metrics-connections.js';

export const METRICS_PATH = '/metrics';
/** Request line and headers together (a bearer token fits several times). */
export const MAX_METRICS_HEADER_BYTES = 16 * 1024;
/** Open connections (the ConnectionGate decides who gives way when they are taken). */
export const MAX_METRICS_CONNECTIONS = METRICS_CONNECTION_LIMITS.max;
/** Requests being authorised with the API server at once; more get 503 at once (cached answers take none). */
export const MAX_METRICS_IN_FLIGHT = 4;
/** Headers, the whole request, and a connection without a byte either way each end by then. */
export const METRICS_REQUEST_TIMEOUT_MS = 10_000;
/** A TLS handshake not done by then is dropped (Prometheus' takes milliseconds). */
export const METRICS_HANDSHAKE_TIMEOUT_MS = 3_000;
/** How often the two request timeouts are enforced (Node's default, 30 s, would stretch them threefold). */
const METRICS_TIMEOUT_CHECK_MS = 1_000;
const METRICS_KEEPALIVE_MS = 5_000;
/** The serving certificate (and client CA) are read again this often (the kubelet's rotates; a self-signed one is renewed). */
export const TLS_RELOAD_MS = 5 * 60_000;
/** A kind of refusal is logged at most once in this time, with how many there were. */
const REFUSAL_LOG_MS = 60_000;
/** Seconds a 503 asks the caller to wait: when the API server did not answer, and when the review slots are taken. */
const UNAVAILABLE_RETRY_AFTER_S = 10;
const BUSY_RETRY_AFTER_S = 1;

const TEXT = 'text/plain; charset=utf-8';

export interface ServingTls {
  cert: string | Buffer;
  key: string | Buffer;
}

export interface MetricsListenerOptions {
  metrics: { render(): Promise<string> };
  auth: MetricsAuth;
  /** The node's address (its InternalIP); 127.0.0.1 in tests. */
  host: string;
  port: number;
  /** The serving certificate and key, read at start and every TLS_RELOAD_MS. */
  tls: () => Promise<ServingTls>;
  /** PEM, read with tls: client certificates it issued are an identity (CN user, O groups), still held to the SubjectAccessReview. */
  clientCa?: () => Promise<string | Buffer>;
  log?: (level: 'info' | 'warn', message: string) => void;
  /** How often tls and clientCa are read again (TLS_RELOAD_MS; tests: shorter). */
  reloadMs?: number;
}

export interface MetricsListener {
  readonly url: string;
  readonly host: string;
  /** Answers given, by HTTP status ("200", "401", "403", ...). */
  readonly stats: { answers: Record<string, number> };
  /** Connections open now, and dropped or refused for room so far. */
  readonly connections: { open: number; dropped: number };
  close(): Promise<void>;
}

function send(
  req: IncomingMessage,
  res: ServerResponse,
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

/**
 * The identity of a client certificate the configured CA issued (the API server's reading: CN
 * user, O groups); a certificate with several CNs is refused (the API server would not read it so).
 */
function certIdentity(req: IncomingMessage): Identity | { code: 401; why: string } | undefined {
  const sock = req.socket as TLSSocket;
  if (!sock.authorized) return undefined;
  const subject = sock.getPeerCertificate()?.subject;
  if (!subject?.CN) return undefined;
  if (Array.isArray(subject.CN))
    return {
      code: 401,
      why: `a client certificate with ${subject.CN.length} CNs (one user name is needed)`,
    };
  const o = subject.O;
  return {
    user: String(subject.CN),
    groups: [...(o === undefined ? [] : Array.isArray(o) ? o : [o]), 'system:authenticated'],
  };
}

/** Counts every answer; logs each kind of refusal at most once per REFUSAL_LOG_MS. */
class Tally {
  readonly answers: Record<string, number> = {};
  private readonly lastLog = new Map<number, { at: number; since: number }>();
  constructor(private readonly log: MetricsListenerOptions['log']) {}

  count(code: number, why?: string): void {
    this.answers[code] = (this.answers[code] ?? 0) + 1;
    if (!why) return;
    const l = this.lastLog.get(code) ?? { at: 0, since: 0 };
    l.since++;
    if (Date.now() - l.at >= REFUSAL_LOG_MS) {
      this.log?.(
        'warn',
        `metrics: refused with ${code} (${l.since} since the last such line): ${why}`,
      );
      l.at = Date.now();
      l.since = 0;
    }
    this.lastLog.set(code, l);
  }
}

class Answerer {
  private inFlight = 0;
  readonly tally: Tally;
  constructor(private readonly o: MetricsListenerOptions) {
    this.tally = new Tally(o.log);
  }

  private reply(
    req: IncomingMessage,
    res: ServerResponse,
    code: number,
    body: string,
    why?: string,
    extra?: Record<string, string>,
  ): void {
    this.tally.count(code, why);
    send(req, res, code, TEXT, body, extra);
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // a body is never read: close the connection rather than let Node drain it
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return this.reply(req, res, 405, 'method not allowed\n', undefined, {
        Allow: 'GET, HEAD',
        Connection: 'close',
      });
    if (req.headers['transfer-encoding'] || Number(req.headers['content-length'] ?? 0) > 0)
      return this.reply(req, res, 413, 'no request body is read here\n', undefined, {
        Connection: 'close',
      });
    const cert = certIdentity(req);
    if (cert && 'code' in cert) return this.verdict(req, res, cert);
    const quick = this.o.auth.cached(req.headers.authorization, cert);
    if (quick) return this.verdict(req, res, quick);
    // a request whose credentials are being reviewed already waits for that answer, on no slot of its own
    const slot = !this.o.auth.underReview(req.headers.authorization, cert);
    if (slot && this.inFlight >= MAX_METRICS_IN_FLIGHT)
      return this.reply(
        req,
        res,
        503,
        'busy\n',
        `more than ${MAX_METRICS_IN_FLIGHT} requests waiting for the API server at once`,
        { 'Retry-After': String(BUSY_RETRY_AFTER_S) },
      );
    if (slot) this.inFlight++;
    let v: Verdict;
    try {
      v = await this.o.auth.check(
        req.headers.authorization,
        cert,
        addressKey(req.socket.remoteAddress),
      );
    } catch (err) {
      return this.reply(
        req,
        res,
        503,
        'cannot check the credentials now: the API server did not answer\n',
        `TokenReview/SubjectAccessReview failed: ${String((err as Error)?.message ?? err).split('\n')[0]}`,
        { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_S) },
      );
    } finally {
      if (slot) this.inFlight--;
    }
    return this.verdict(req, res, v);
  }

  private async verdict(req: IncomingMessage, res: ServerResponse, v: Verdict): Promise<void> {
    if (v.code === 401)
      return this.reply(req, res, 401, 'Unauthorized\n', v.why, {
        'WWW-Authenticate': 'Bearer realm="bundle-agent metrics"',
      });
    if (v.code === 429)
      return this.reply(
        req,
        res,
        429,
        'too many requests with credentials not seen before\n',
        v.why,
        { 'Retry-After': String(RATE_RETRY_AFTER_S) },
      );
    if (v.code === 403)
      return this.reply(
        req,
        res,
        403,
        `Forbidden (user=${v.user}, verb=get, resource=nodebundlestatuses, subresource=metrics)\n`,
        v.why,
      );
    const path = (req.url ?? '/').split('?')[0]!;
    if (path !== METRICS_PATH)
      return this.reply(req, res, 404, `not found: only ${METRICS_PATH} is served here\n`);
    this.tally.count(200);
    send(req, res, 200, METRICS_CONTENT_TYPE, await this.o.metrics.render());
  }
}

const oneLine = (err: unknown) => String((err as Error)?.message ?? err).split('\n')[0];

/**
 * Listens; a failure to listen rejects, and any socket error after (an accept failing) is
 * logged by `log`, never thrown: an 'error' without a listener would end the daemon.
 */
export function listenLogged(
  server: NetServer,
  port: number,
  host: string,
  log: (message: string) => void,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      server.on('error', (err) => log(`the listener's socket: ${oneLine(err)}`));
      resolve();
    });
  });
}

type TlsMaterial = ServingTls & { ca?: string | Buffer };

/** The serving certificate and key, with the client CA when one is configured. */
async function readTls(o: MetricsListenerOptions): Promise<TlsMaterial> {
  return {
    ...(await o.tls()),
    ...(o.clientCa ? { ca: await o.clientCa() } : {}),
  };
}

function secureContext(t: TlsMaterial) {
  return {
    cert: t.cert,
    key: t.key,
    ...(t.ca ? { ca: t.ca } : {}),
    minVersion: 'TLSv1.2' as const,
  };
}

const sameBytes = (a?: string | Buffer, b?: string | Buffer) =>
  a === undefined || b === undefined
    ? a === b
    : Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

/**
 * Reads the certificate and client CA again every reloadMs; new connections get a changed one,
 * and a failed read keeps the old.
 */
function reloadTls(server: Server, o: MetricsListenerOptions, first: TlsMaterial): NodeJS.Timeout {
  let shown = first;
  const reload = setInterval(() => {
    readTls(o)
      .then((t) => {
        if (
          sameBytes(t.cert, shown.cert) &&
          sameBytes(t.key, shown.key) &&
          sameBytes(t.ca, shown.ca)
        )
          return;
        server.setSecureContext(secureContext(t));
        shown = t;
        o.log?.(
          'info',
          'metrics: the serving certificate or client CA changed: new connections get the new one',
        );
      })
      .catch((err: unknown) =>
        o.log?.(
          'warn',
          `metrics: cannot read the serving certificate again (the old one stays): ${oneLine(err)}`,
        ),
      );
  }, o.reloadMs ?? TLS_RELOAD_MS);
  reload.unref();
  return reload;
}

export async function startMetricsListener(o: MetricsListenerOptions): Promise<MetricsListener> {
  const answerer = new Answerer(o);
  const gate = new ConnectionGate(METRICS_CONNECTION_LIMITS);
  const first = await readTls(o);
  const server: Server = createServer(
    {
      ...secureContext(first),
      ...(o.clientCa ? { requestCert: true, rejectUnauthorized: false } : {}),
      maxHeaderSize: MAX_METRICS_HEADER_BYTES,
      handshakeTimeout: METRICS_HANDSHAKE_TIMEOUT_MS,
      headersTimeout: METRICS_REQUEST_TIMEOUT_MS,
      requestTimeout: METRICS_REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: METRICS_TIMEOUT_CHECK_MS,
      keepAliveTimeout: METRICS_KEEPALIVE_MS,
    },
    (req, res) => {
      answerer.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) send(req, res, 500, TEXT, `internal error: ${oneLine(err)}\n`);
        else res.destroy();
      });
    },
  );
  server.timeout = METRICS_REQUEST_TIMEOUT_MS;
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    gate.admit(s);
  });
  server.on('tlsClientError', (_err, sock) => sock.destroy());
  await listenLogged(server, o.port, o.host, (m) => o.log?.('warn', `metrics: ${m}`));
  const reload = reloadTls(server, o, first);
  const a = server.address();
  if (!a || typeof a === 'string') throw new Error('metrics listener: no address');
  const url = `https://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}${METRICS_PATH}`;
  return {
    url,
    host: o.host,
    stats: { answers: answerer.tally.answers },
    get connections() {
      const c = gate.counts;
      return { open: c.placed + c.arriving, dropped: c.dropped };
    },
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(reload);
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}

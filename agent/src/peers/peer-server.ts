// The peer server: mutual-TLS HTTPS on the node's peer port, serving the bundles this node
// holds verified to the other nodes, and only to them (a client without a certificate from the
// peer CA fails the handshake and is never read from). Bounded in every dimension a hostile
// client controls: connections, header bytes, path length, time, listing length, upload rate.
// A connection counts against the main cap only once its handshake passed with a peer
// certificate; before that it holds one of a few unauthenticated places (per address and in
// all), so sockets that never speak cannot starve the peers (issue #44 item 1).
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { TLSSocket } from 'node:tls';
import { ConnectionGate, addressKey } from '@offline-bundle/host';
import { PeerCounters } from './peer-counters.js';
import { MAX_HAVE_PARTIAL_BLOBS } from './piece-listing.js';
import { peerTlsOptions, type PeerCredentials } from './peer-tls.js';
import { NotHeldHere, NotOnDiskYet, type PeerOffer } from './served-bundle.js';
import { REAL_CLOCK, TokenBucket, type BucketClock } from './token-bucket.js';

/** Every bound of the peer server (SECURITY.md "Peer transfer" names each, with its test). */
export const PEER_LIMITS = {
  /** Open connections at once that passed the handshake with a peer certificate; any beyond are closed once authenticated. */
  maxConnections: 64,
  /** Connections not yet through the TLS handshake, all addresses together (never counted against maxConnections). */
  maxUnauthenticated: 128,
  /** Connections not yet through the TLS handshake from one address (an IPv6 /64 counts as one address). */
  maxUnauthenticatedPerAddress: 16,
  /**
   * How long a new connection waits for its first bytes (a peer sends its ClientHello at once)
   * before it competes for an unauthenticated place; as many again as maxUnauthenticated (and
   * per address) may wait so, beside the places.
   */
  firstBytesWaitMs: 25,
  /** Bytes of one request's headers (node's maxHeaderSize): 431 beyond. */
  maxHeaderBytes: 8 * 1024,
  /** Length of a request's path: 414 beyond (the longest valid one is about 160). */
  maxPathBytes: 256,
  /** A TLS handshake not finished in this time is dropped (a fetcher gives up after 1.5 s). */
  handshakeTimeoutMs: 3_000,
  /** A request's headers must arrive within this. */
  headersTimeoutMs: 10_000,
  /** A connection with no byte either way for this long is closed (a stalled reader, an idle keep-alive). */
  idleTimeoutMs: 30_000,
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: 5_000,
  /** Digests in one /have listing. */
  maxHaveDigests: 20_000,
  /** Seconds a 503 asks a downloader to wait (Retry-After). */
  retryAfterSeconds: 2,
} as const;

export interface PeerServerOptions {
  credentials: PeerCredentials;
  /** The node's address on the cluster network (its InternalIP), or 127.0.0.x in tests. */
  host: string;
  /** peers.port (9000-9999); 0 in tests for any free port. */
  port: number;
  /** The bundle this node serves under `manifestDigest`, if any. */
  bundle: (manifestDigest: string) => PeerOffer | undefined;
  /** Upload cap in bytes per second, for every downloader together. */
  uploadBytesPerSecond: number;
  /** Bytes the cap lets through at once (default: a quarter of a second's worth, at least 64 KiB). */
  burstBytes?: number;
  /** Blob responses at once (a fetching node opens one per peer: one slot is one downloader). */
  downloaders: number;
  clock?: BucketClock;
  counters?: PeerCounters;
  /** Tighter bounds than PEER_LIMITS (tests: a timeout proved in a second, not in thirty). */
  limits?: Partial<typeof PEER_LIMITS>;
}

/** Connections now open, by stage, and the unauthenticated ones dropped or refused for room so far. */
interface PeerConnectionCounts {
  /** Through the handshake with a peer certificate (at most maxConnections). */
  authenticated: number;
  /** Holding an unauthenticated place (at most maxUnauthenticated). */
  unauthenticated: number;
  /** In their first firstBytesWaitMs, not yet holding a place (at most maxUnauthenticated). */
  arriving: number;
  dropped: number;
}

export interface RunningPeerServer {
  /** https://HOST:PORT */
  url: string;
  port: number;
  counters: PeerCounters;
  bucket: TokenBucket;
  /** While true, blob requests get 503 and blob responses under way are cut (the fetcher resumes elsewhere). */
  setPaused(paused: boolean): void;
  /** Blob responses being sent now. */
  readonly active: number;
  readonly connections: PeerConnectionCounts;
  close(): Promise<void>;
}

const DIGEST = 'sha256:[0-9a-f]{64}';
const ROUTE = new RegExp(
  `^/v1/bundles/(${DIGEST})/(bundle\\.json|signature|have|blobs/(${DIGEST}))$`,
);
const RANGE = /^bytes=(\d{1,15})-(\d{0,15})$/;

/** The one range a fetcher asks ("bytes=A-" or "bytes=A-B"); null when unsatisfiable or another form. */
function parsePeerRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | null | undefined {
  if (header === undefined) return undefined;
  const m = RANGE.exec(header.trim());
  if (!m) return null;
  const start = Number(m[1]);
  const end = m[2] === '' ? size : Math.min(size, Number(m[2]) + 1);
  return start < size && start < end ? { start, end } : null;
}

/** What /have says: the blobs held whole, and (a newer agent) the verified pieces of those held in part. */
function haveListing(
  bundle: PeerOffer,
  maxDigests: number,
): { complete: boolean; digests: string[]; pieces?: Record<string, string> } {
  const listing = { complete: bundle.complete, digests: bundle.verifiedDigests(maxDigests) };
  const pieces = bundle.complete ? undefined : bundle.partialPieces?.(MAX_HAVE_PARTIAL_BLOBS);
  return pieces && Object.keys(pieces).length ? { ...listing, pieces } : listing;
}

/** A range (undefined: the whole blob, [0, size)) that lies within the first `verified` bytes. */
const insideVerified = (
  range: { start: number; end: number } | null | undefined,
  size: number,
  verified: number,
): boolean => range !== null && (range?.end ?? size) <= verified;

function send(
  res: ServerResponse,
  status: number,
  body: string | Buffer,
  headers: Record<string, string | number> = {},
): void {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  res.writeHead(status, {
    'content-length': bytes.length,
    'content-type':
      typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/octet-stream',
    ...headers,
  });
  res.end(res.req.method === 'HEAD' ? undefined : bytes);
}

/** Passes bytes on only as the bucket grants them, in pieces no larger than its burst. */
function throttle(bucket: TokenBucket, counters: PeerCounters, signal: AbortSignal): Transform {
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      void (async () => {
        for (let at = 0; at < chunk.length; at += bucket.burst) {
          const piece = chunk.subarray(at, at + bucket.burst);
          await bucket.take(piece.length, signal);
          // the downloader gone (its response destroyed): the rest of this chunk is not served
          if (this.destroyed) return;
          counters.bytesServed += piece.length;
          this.push(piece);
        }
      })().then(
        () => cb(),
        (err: unknown) => cb(err as Error),
      );
    },
  });
}

class PeerHandler {
  private paused = false;
  active = 0;
  private readonly streams = new Set<AbortController>();

  constructor(
    private readonly opts: PeerServerOptions,
    private readonly limits: typeof PEER_LIMITS,
    readonly bucket: TokenBucket,
    readonly counters: PeerCounters,
  ) {}

  setPaused(paused: boolean): void {
    this.paused = paused;
    if (paused) for (const s of this.streams) s.abort(new Error('paused: this node is loading'));
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.counters.requests++;
    const url = req.url ?? '';
    if (url.length > this.limits.maxPathBytes) return this.bad(res, 414, 'path too long');
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return this.bad(res, 405, 'GET or HEAD only', { allow: 'GET, HEAD' });
    const m = ROUTE.exec(url);
    if (!m)
      return this.bad(
        res,
        404,
        'no such path: /v1/bundles/<sha256:digest>/{bundle.json,signature,have,blobs/<sha256:digest>}',
      );
    const bundle = this.opts.bundle(m[1]!);
    if (!bundle) return send(res, 404, `this node does not hold bundle ${m[1]}`);
    if (m[2] === 'bundle.json')
      return void this.small(res, bundle.manifestBytes, 'application/json');
    if (m[2] === 'signature')
      return void this.small(res, bundle.signature, 'application/octet-stream');
    if (m[2] === 'have')
      return void this.small(
        res,
        Buffer.from(JSON.stringify(haveListing(bundle, this.limits.maxHaveDigests))),
        'application/json',
      );
    this.blob(req, res, bundle, m[3]!);
  }

  /** A small answer, under the upload cap as well: bundle.json may be 16 MiB, asked for again and again. */
  private async small(res: ServerResponse, body: Buffer, type: string): Promise<void> {
    try {
      if (res.req.method !== 'HEAD')
        for (let at = 0; at < body.length; at += this.bucket.burst)
          await this.bucket.take(Math.min(this.bucket.burst, body.length - at));
      send(res, 200, body, { 'content-type': type });
    } catch {
      res.destroy();
    }
  }

  private busy(res: ServerResponse, message: string): void {
    this.counters.busyRefusals++;
    send(res, 503, message, { 'retry-after': this.limits.retryAfterSeconds });
  }

  private bad(
    res: ServerResponse,
    status: number,
    message: string,
    headers: Record<string, string> = {},
  ): void {
    this.counters.badRequests++;
    send(res, status, message, { ...headers, connection: 'close' });
  }

  private blob(req: IncomingMessage, res: ServerResponse, bundle: PeerOffer, digest: string): void {
    const whole = bundle.size(digest);
    const part = whole === undefined ? bundle.partial?.(digest) : undefined;
    if (whole === undefined && !part)
      return send(res, 404, `blob ${digest} is not held verified here`);
    const size = whole ?? part!.size;
    // of a blob held in part, only a range inside its verified pieces; the rest as for a blob not held
    if (part && !insideVerified(parsePeerRange(req.headers.range, size), size, part.verified))
      return send(
        res,
        404,
        `only bytes 0-${part.verified - 1} of blob ${digest} are held verified here`,
      );
    if (this.paused || this.active >= this.opts.downloaders)
      return this.busy(
        res,
        this.paused
          ? 'this node is loading: try another peer'
          : 'every downloader slot is taken: try another peer',
      );
    const range = parsePeerRange(req.headers.range, size);
    if (range === null)
      return this.bad(res, 416, `range not satisfiable for ${size} bytes`, {
        'content-range': `bytes */${size}`,
      });
    const { start, end } = range ?? { start: 0, end: size };
    const headers = {
      'content-length': end - start,
      'content-type': 'application/octet-stream',
      'accept-ranges': 'bytes',
      ...(range ? { 'content-range': `bytes ${start}-${end - 1}/${size}` } : {}),
    };
    // a blob held in part: HEAD, as GET, finds its bytes on disk first
    if (req.method === 'HEAD' && !part) {
      res.writeHead(range ? 206 : 200, headers);
      return void res.end();
    }
    void this.stream(res, bundle, digest, start, end, range ? 206 : 200, headers);
  }

  private async stream(
    res: ServerResponse,
    bundle: PeerOffer,
    digest: string,
    start: number,
    end: number,
    status: number,
    headers: Record<string, string | number>,
  ): Promise<void> {
    const stop = new AbortController();
    this.active++;
    this.streams.add(stop);
    let data: Readable | undefined;
    try {
      data = await bundle.open(digest, start, end);
      res.writeHead(status, headers);
      if (res.req.method === 'HEAD') {
        data.destroy();
        return void res.end();
      }
      await pipeline(data, throttle(this.bucket, this.counters, stop.signal), res, {
        signal: stop.signal,
      });
    } catch (err) {
      // a client gone, a pause, a file that vanished: the client sees the response cut short
      data?.destroy();
      if (!res.headersSent && err instanceof NotHeldHere) send(res, 404, err.message);
      else if (!res.headersSent && err instanceof NotOnDiskYet) this.busy(res, err.message);
      else if (!res.headersSent) send(res, 500, 'cannot read the blob here: try another peer');
      else res.destroy();
    } finally {
      this.active--;
      this.streams.delete(stop);
    }
  }
}

/** The address a connection budget is kept for (an IPv6 address by its /64). */
export const peerAddressKey = addressKey;

/**
 * Who holds the server's connections. A TCP connection counts against maxConnections only once
 * its handshake passed with a peer certificate; before that it holds one of the gate's
 * unauthenticated places (its address's share, and the total; a silent socket never pushes out
 * one that spoke: ConnectionGate says how), so no number of sockets without a certificate can
 * take a peer's place. The gate waits firstBytesWaitMs for a peer's ClientHello, which it sends
 * the moment it is connected; as many again as the places (and per address) may wait so.
 */
class PeerConnections {
  private readonly unauthenticated: ConnectionGate;
  private readonly authenticated = new Set<Socket>();
  /** remote "address port" → its TCP socket, to find it again once the TLS socket over it is secure. */
  private readonly byRemote = new Map<string, Socket>();

  constructor(private readonly limits: typeof PEER_LIMITS) {
    const perAddress = limits.maxUnauthenticatedPerAddress;
    this.unauthenticated = new ConnectionGate({
      max: limits.maxUnauthenticated,
      perAddress,
      arrivingPerAddress: perAddress,
      firstBytesWaitMs: limits.firstBytesWaitMs,
    });
  }

  get counts(): PeerConnectionCounts {
    const gate = this.unauthenticated.counts;
    return {
      authenticated: this.authenticated.size,
      unauthenticated: gate.placed,
      arriving: gate.arriving,
      dropped: gate.dropped,
    };
  }

  /** A new TCP connection (before TLS). */
  admit(raw: Socket): void {
    this.unauthenticated.admit(raw);
    const remote = `${raw.remoteAddress} ${raw.remotePort}`;
    this.byRemote.set(remote, raw);
    raw.once('close', () => {
      this.authenticated.delete(raw);
      if (this.byRemote.get(remote) === raw) this.byRemote.delete(remote);
    });
  }

  /** A handshake passed with a peer certificate: the connection counts against maxConnections now, or is closed when they are taken. */
  secure(tls: TLSSocket): void {
    const raw = this.byRemote.get(`${tls.remoteAddress} ${tls.remotePort}`);
    if (
      !raw ||
      this.authenticated.has(raw) ||
      this.authenticated.size >= this.limits.maxConnections
    ) {
      tls.destroy();
      return;
    }
    this.unauthenticated.release(raw);
    this.authenticated.add(raw);
  }
}

function listen(server: Server, host: string, port: number): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

export async function startPeerServer(opts: PeerServerOptions): Promise<RunningPeerServer> {
  const counters = opts.counters ?? new PeerCounters();
  const burst = opts.burstBytes ?? Math.max(64 * 1024, Math.floor(opts.uploadBytesPerSecond / 4));
  const bucket = new TokenBucket(opts.uploadBytesPerSecond, burst, opts.clock ?? REAL_CLOCK);
  const limits = { ...PEER_LIMITS, ...opts.limits };
  const handler = new PeerHandler(opts, limits, bucket, counters);
  const server = createServer(
    {
      ...peerTlsOptions(opts.credentials),
      requestCert: true,
      rejectUnauthorized: true,
      handshakeTimeout: limits.handshakeTimeoutMs,
      maxHeaderSize: limits.maxHeaderBytes,
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.headersTimeoutMs,
      // how often the two above are enforced (node's default, 30 s, would stretch them)
      connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
      keepAliveTimeout: limits.keepAliveTimeoutMs,
    },
    (req, res) => handler.handle(req, res),
  );
  const gate = new PeerConnections(limits);
  server.timeout = limits.idleTimeoutMs;
  // a refused handshake or a reset connection is the client's problem, never the server's
  server.on('tlsClientError', (_err, socket: TLSSocket) => socket.destroy());
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (err.code === 'HPE_HEADER_OVERFLOW' && socket.writable)
      socket.end(
        'HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n',
      );
    else socket.destroy();
  });
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    gate.admit(s);
  });
  server.on('secureConnection', (tls: TLSSocket) => gate.secure(tls));
  const address = await listen(server, opts.host, opts.port);
  return {
    url: `https://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`,
    port: address.port,
    counters,
    bucket,
    setPaused: (p) => handler.setPaused(p),
    get active() {
      return handler.active;
    },
    get connections() {
      return gate.counts;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

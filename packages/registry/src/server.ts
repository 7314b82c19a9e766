import type { OutgoingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { finished, type Readable } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { giveBack } from '@offline-bundle/host';
import { isDigest } from '@offline-bundle/oci';
import type { BlobStore, Catalog } from './store.js';
import { REGISTRY_STALL_MS, watchClientPace, type ClientPace } from './client-pace.js';

interface RegistryServerOptions {
  store: BlobStore;
  catalog: Catalog;
  /** Loopback only by default: the registry exists for this node's runtime. */
  host?: string;
  port?: number;
  /** Called for each request served (for logs and status). */
  onRequest?: (method: string, url: string, status: number) => void;
  /** A connection that moves no byte this long is cut (default REGISTRY_IDLE_MS). */
  idleTimeoutMs?: number;
  /** A client that takes under a frame this long while others wait for the store's budget is cut (default REGISTRY_STALL_MS). */
  stallTimeoutMs?: number;
}

/**
 * A connection that moves no byte this long is cut: a client that stopped reading (or pipelined
 * requests behind one) would otherwise hold its frames of the process's budget, and with them every
 * other reader's, until it went away on its own.
 */
const REGISTRY_IDLE_MS = 120_000;

export interface RunningRegistry {
  /** "127.0.0.1:PORT" */
  address: string;
  port: number;
  /** What the registry has answered so far: proof that a client's pulls came through it. */
  served: ServedLog;
  /** Client connections open now. */
  readonly connections: number;
  close(): Promise<void>;
}

/** Manifests (by repository name and digest) and blobs the registry answered with success, and when bytes of each last went out. */
export class ServedLog {
  private readonly manifests = new Map<string, Set<string>>();
  private readonly blobDigests = new Set<string>();
  private readonly movedAt = new Map<string, number>();
  private sent = 0;

  /**
   * `n` bytes of `digest` were handed to a client's connection (0: a request for it was
   * answered), at `at` (performance.now()). What a pull watchdog reads: bytes that stop
   * coming out, from the store or into a client that stopped reading, stop these calls.
   */
  moved(digest: string, n: number, at = performance.now()): void {
    this.movedAt.set(digest, at);
    this.sent += n;
  }

  /** When bytes of any of `digests` last went out, or undefined when none has. */
  lastMoved(digests: Iterable<string>): number | undefined {
    let last: number | undefined;
    for (const d of digests) {
      const at = this.movedAt.get(d);
      if (at !== undefined && (last === undefined || at > last)) last = at;
    }
    return last;
  }

  /** Bytes of manifests and blobs sent so far. */
  get bytes(): number {
    return this.sent;
  }

  manifest(name: string, digest: string): void {
    const set = this.manifests.get(name) ?? new Set<string>();
    set.add(digest);
    this.manifests.set(name, set);
  }

  blob(digest: string): void {
    this.blobDigests.add(digest);
  }

  /** Whether a client asked for this manifest of this repository (HEAD or GET, by tag or digest). */
  servedManifest(name: string, digest: string): boolean {
    return this.manifests.get(name)?.has(digest) ?? false;
  }

  get blobs(): number {
    return this.blobDigests.size;
  }
}

type ErrorCode =
  | 'NAME_UNKNOWN'
  | 'MANIFEST_UNKNOWN'
  | 'BLOB_UNKNOWN'
  | 'UNSUPPORTED'
  | 'DIGEST_INVALID'
  | 'PAGINATION_NUMBER_INVALID'
  | 'RANGE_INVALID';

const API_HEADER = { 'docker-distribution-api-version': 'registry/2.0' };
// Repository names may hold slashes, so one regex per endpoint over the path after /v2/.
const MANIFEST_RE = /^\/v2\/(.+)\/manifests\/([^/]+)$/;
const BLOB_RE = /^\/v2\/(.+)\/blobs\/([^/]+)$/;
const TAGS_RE = /^\/v2\/(.+)\/tags\/list$/;
const RANGE_RE = /^bytes=(\d*)-(\d*)$/;

/**
 * Sends `body` (a blob or manifest the store opened) as the reply, each chunk counted as it goes
 * to the connection and handed back to the read pool once the socket has taken it (giveBack), so
 * the store reads the next units into the same buffers. An error before the first byte is the
 * handler's (a 500 JSON answer); after it the connection is cut, as the client then sees a short
 * body. A client that goes away closes the store's file. One that stops taking bytes while others
 * wait for the store's shared frame budget is cut too (client-pace.ts).
 */
function sendBody(
  reply: FastifyReply,
  body: Readable,
  digest: string,
  served: ServedLog,
  paced: Paced,
): Promise<FastifyReply | undefined> {
  const res = reply.raw;
  let started = false;
  // a store without a shared budget has nothing a slow client keeps from others
  const contended = paced.store.contended?.bind(paced.store);
  let pace: ClientPace | undefined;
  return new Promise((resolve, reject) => {
    // finished() also fires for a client already gone while the store opened the blob
    finished(res, () => body.destroy());
    body.on('error', (err) => {
      if (started) res.destroy(err);
      else reject(err);
    });
    body.on('end', () => {
      if (started) res.end();
      else resolve(reply.send());
    });
    // destroyed before its first byte because the client went away: no answer to send
    body.on('close', () => {
      if (started || body.readableEnded || body.errored) return;
      reply.hijack();
      resolve(undefined);
    });
    res.on('drain', () => body.resume());
    body.on('data', (chunk: Buffer) => {
      if (!started) {
        started = true;
        reply.hijack();
        res.writeHead(reply.statusCode, reply.getHeaders() as OutgoingHttpHeaders);
        // from the first byte: time spent waiting for the budget is not the client's
        if (contended) pace = watchClientPace(res, contended, paced.stallMs);
        resolve(undefined);
      }
      served.moved(digest, chunk.length);
      // the callback runs once the socket is done with the write; a failed one's buffer is left to the GC all the same
      if (
        res.write(chunk, (err) => {
          if (!err) {
            giveBack(chunk);
            pace?.took(chunk.length);
          }
        })
      )
        return;
      body.pause();
      pace?.backedUp();
    });
  });
}

/** What sendBody needs to bound a client's share of the store's budget. */
interface Paced {
  store: BlobStore;
  stallMs: number;
}

function fail(
  reply: FastifyReply,
  status: number,
  code: ErrorCode,
  message: string,
  detail?: unknown,
): FastifyReply {
  return reply
    .code(status)
    .headers(API_HEADER)
    .type('application/json')
    .send({ errors: [{ code, message, ...(detail !== undefined ? { detail } : {}) }] });
}

/** Parses a single "bytes=a-b" range against `size`; undefined when absent, null when unsatisfiable. */
function parseRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | null | undefined {
  if (!header) return undefined;
  const m = RANGE_RE.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return null;
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    start = Math.max(0, size - suffix);
    end = size;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size : Math.min(size, Number(m[2]) + 1);
  }
  if (start >= size || start >= end) return null;
  return { start, end };
}

/** The mirror name a requested repository name stands for, or the 404 that says which names exist. */
function resolveName(catalog: Catalog, requested: string): { name: string } | { error: string } {
  if (catalog.repositories.has(requested)) return { name: requested };
  const short = catalog.shortNames.get(requested);
  if (short) return { name: short };
  const choices = catalog.ambiguous.get(requested);
  if (choices)
    return {
      error: `repository ${requested} is in this bundle from ${choices.length} registries: ask for one of ${choices.join(', ')}`,
    };
  return { error: `repository ${requested} is not in this bundle` };
}

function paginate(
  items: string[],
  query: Record<string, string | undefined>,
): { page: string[]; next?: string } | undefined {
  const sorted = [...items].sort();
  const last = query.last;
  const from = last ? sorted.findIndex((x) => x > last) : 0;
  const rest = from < 0 ? [] : sorted.slice(from);
  if (query.n === undefined) return { page: rest };
  const n = Number(query.n);
  if (!Number.isInteger(n) || n < 0) return undefined;
  const page = rest.slice(0, n);
  return rest.length > n && page.length > 0 ? { page, next: page[page.length - 1]! } : { page };
}

/** What the endpoints answer from, and what they count. */
interface Endpoints {
  store: BlobStore;
  catalog: Catalog;
  served: ServedLog;
  paced: Paced;
}

type Query = Record<string, string | undefined>;

function serveCatalog(catalog: Catalog, query: Query, reply: FastifyReply): FastifyReply {
  const p = paginate([...catalog.repositories.keys()], query);
  if (!p) return fail(reply, 400, 'PAGINATION_NUMBER_INVALID', 'n must be a non-negative integer');
  if (p.next)
    reply.header(
      'link',
      `</v2/_catalog?last=${encodeURIComponent(p.next)}&n=${query.n}>; rel="next"`,
    );
  return reply.headers(API_HEADER).send({ repositories: p.page });
}

function serveTags(
  catalog: Catalog,
  m: RegExpExecArray,
  query: Query,
  reply: FastifyReply,
): FastifyReply {
  const name = decodeURIComponent(m[1]!);
  const found = resolveName(catalog, name);
  if ('error' in found) return fail(reply, 404, 'NAME_UNKNOWN', found.error);
  const tags = catalog.repositories.get(found.name)!;
  const p = paginate([...tags.keys()], query);
  if (!p) return fail(reply, 400, 'PAGINATION_NUMBER_INVALID', 'n must be a non-negative integer');
  if (p.next)
    reply.header(
      'link',
      `</v2/${name}/tags/list?last=${encodeURIComponent(p.next)}&n=${query.n}>; rel="next"`,
    );
  return reply.headers(API_HEADER).send({ name, tags: p.page });
}

async function serveManifest(
  e: Endpoints,
  m: RegExpExecArray,
  head: boolean,
  reply: FastifyReply,
): Promise<FastifyReply | undefined> {
  const found = resolveName(e.catalog, decodeURIComponent(m[1]!));
  if ('error' in found) return fail(reply, 404, 'NAME_UNKNOWN', found.error);
  const name = found.name;
  const ref = decodeURIComponent(m[2]!);
  const tags = e.catalog.repositories.get(name)!;
  const digest = isDigest(ref) ? ref : tags.get(ref);
  const mediaType = digest ? e.catalog.manifests.get(digest) : undefined;
  if (!digest || !mediaType)
    return fail(reply, 404, 'MANIFEST_UNKNOWN', `manifest ${ref} is not in this bundle`);
  const size = e.store.size(digest)!;
  reply.headers({
    ...API_HEADER,
    'docker-content-digest': digest,
    etag: `"${digest}"`,
    'content-type': mediaType,
    'content-length': size,
  });
  e.served.manifest(name, digest);
  e.served.moved(digest, 0);
  if (head) return reply.send();
  return sendBody(reply, await e.store.open(digest, 0, size), digest, e.served, e.paced);
}

async function serveBlob(
  e: Endpoints,
  m: RegExpExecArray,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply | undefined> {
  const found = resolveName(e.catalog, decodeURIComponent(m[1]!));
  const digest = decodeURIComponent(m[2]!);
  if ('error' in found) return fail(reply, 404, 'NAME_UNKNOWN', found.error);
  if (!isDigest(digest))
    return fail(reply, 400, 'DIGEST_INVALID', `${digest} is not a sha256 digest`);
  const size = e.store.size(digest);
  if (size === undefined)
    return fail(reply, 404, 'BLOB_UNKNOWN', `blob ${digest} is not in this bundle`);
  const range = parseRange(req.headers.range, size);
  reply.headers({
    ...API_HEADER,
    'docker-content-digest': digest,
    etag: `"${digest}"`,
    'accept-ranges': 'bytes',
    'content-type': 'application/octet-stream',
  });
  if (range === null) {
    reply.header('content-range', `bytes */${size}`);
    return fail(
      reply,
      416,
      'RANGE_INVALID',
      `range ${req.headers.range} is not satisfiable for ${size} bytes`,
    );
  }
  const { start, end } = range ?? { start: 0, end: size };
  if (range) reply.code(206).header('content-range', `bytes ${start}-${end - 1}/${size}`);
  reply.header('content-length', end - start);
  e.served.blob(digest);
  e.served.moved(digest, 0);
  if (req.method === 'HEAD') return reply.send();
  return sendBody(reply, await e.store.open(digest, start, end), digest, e.served, e.paced);
}

/** Routes one request by its path to the endpoint that answers it. */
async function handle(
  e: Endpoints,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply | undefined> {
  const head = req.method === 'HEAD';
  const path = req.url.split('?')[0]!;
  const query = req.query as Query;
  if (req.method !== 'GET' && !head)
    return fail(reply, 405, 'UNSUPPORTED', 'this registry is read-only');
  if (path === '/v2/' || path === '/v2')
    return reply
      .headers(API_HEADER)
      .type('application/json')
      .send(head ? undefined : {});
  if (path === '/v2/_catalog') return serveCatalog(e.catalog, query, reply);
  let m = TAGS_RE.exec(path);
  if (m) return serveTags(e.catalog, m, query, reply);
  m = MANIFEST_RE.exec(path);
  if (m) return serveManifest(e, m, head, reply);
  m = BLOB_RE.exec(path);
  if (m) return serveBlob(e, m, req, reply);
  return fail(reply, 404, 'NAME_UNKNOWN', `no such endpoint ${path}`);
}

/**
 * A read-only OCI distribution-spec registry over one bundle: /v2/, manifests and blobs by
 * digest (and manifests by tag) with HEAD and Range, tag lists and the catalog. Every
 * answer is computed from the trusted catalog; a request path never names a file.
 */
function buildRegistry(opts: RegistryServerOptions, served = new ServedLog()): FastifyInstance {
  const { store, catalog } = opts;
  const paced: Paced = { store, stallMs: opts.stallTimeoutMs ?? REGISTRY_STALL_MS };
  const endpoints: Endpoints = { store, catalog, served, paced };
  const app = Fastify({
    logger: false,
    exposeHeadRoutes: false,
    return503OnClosing: true,
    routerOptions: { maxParamLength: 1024 },
    connectionTimeout: opts.idleTimeoutMs ?? REGISTRY_IDLE_MS,
  });
  app.addHook('onResponse', async (req, reply) =>
    opts.onRequest?.(req.method, req.url, reply.statusCode),
  );
  app.route({
    method: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
    url: '/*',
    handler: (req, reply) => handle(endpoints, req, reply),
  });
  app.setErrorHandler((err, _req, reply) => {
    // A blob that fails verification is a server-side problem the client should not retry into.
    reply
      .code(500)
      .headers(API_HEADER)
      .type('application/json')
      .send({
        errors: [
          { code: 'UNKNOWN', message: String((err as Error).message ?? err).split('\n')[0] },
        ],
      });
  });
  return app;
}

export async function startRegistry(opts: RegistryServerOptions): Promise<RunningRegistry> {
  const served = new ServedLog();
  const app = buildRegistry(opts, served);
  const host = opts.host ?? '127.0.0.1';
  await app.listen({ host, port: opts.port ?? 0 });
  const sockets = new Set<Socket>();
  app.server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    address: `${host}:${port}`,
    port,
    served,
    get connections() {
      return sockets.size;
    },
    close: () => closeRegistry(app, sockets),
  };
}

/** How long a request still being answered at close may take before its connection is cut. */
const CLOSE_GRACE_MS = 2_000;

/**
 * Closes the listener and every connection. Node's close ends the keep-alive connections idle
 * at that moment, but not one that never carried a request: Go's HTTP client (containerd's)
 * dials spare connections it may never use, and those stayed open until the server's next
 * connection check, 30 s later, holding a load's Ready back by that much. Those and newly idle
 * ones are cut as they appear; after the grace, whatever is left.
 */
async function closeRegistry(app: FastifyInstance, sockets: Set<Socket>): Promise<void> {
  const closing = app.close();
  const cutUnused = () => {
    app.server.closeIdleConnections();
    for (const s of sockets) if (s.bytesRead === 0) s.destroy();
  };
  cutUnused();
  const idle = setInterval(cutUnused, 50);
  const cut = setTimeout(() => app.server.closeAllConnections(), CLOSE_GRACE_MS);
  try {
    await closing;
  } finally {
    clearInterval(idle);
    clearTimeout(cut);
  }
}

/**
 * The HTTP underneath client-node for every call this package makes (the admin's `bundle
 * cluster`, the agent's reporter and its ClusterVersion read). client-node's own library
 * (node-fetch) has no deadline unless the caller passes one, reads any answer whole, follows
 * redirects to any host with the same credentials, and hands a text/html page to its
 * deserializer. This one bounds each call as a whole and refuses what an API server never
 * sends, each refusal one line naming the server and the cause.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type {
  HttpLibrary,
  RequestContext,
  ResponseContext as ResponseContextType,
} from '@kubernetes/client-node';
import { isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import {
  JsonNestingGauge,
  MAX_NESTING_DEPTH,
  bypassesProxy,
  proxyFromEnv,
} from '@offline-bundle/host';
import { apiDetail } from './cluster-api.js';
import { ClusterError } from './cluster-errors.js';
import { loadK8s } from './k8s.js';

/** Whole call (connect, redirects, headers, body): an API server answers in well under this. */
export const API_DEADLINE_MS = 30_000;
/** One answer's body: a page of 500 Nodes with their image lists stays far below it. */
const MAX_API_RESPONSE_BYTES = 64 * 1024 * 1024;
/**
 * An error answer's body read (4xx, 5xx): a Status is a few hundred bytes and only its message,
 * cut to one line, is ever shown, so the rest is never read, held or parsed.
 */
export const MAX_API_ERROR_BYTES = 64 * 1024;
/** Same-server redirects followed per call (another server's are refused). */
const MAX_REDIRECTS = 5;

/** Whole command (every call of one `bundle cluster` run, all pages included). */
export const COMMAND_DEADLINE_MS = 300_000;

export interface BoundedHttpOptions {
  deadlineMs?: number;
  maxBytes?: number;
  /** Aborts every call once the whole command's time is spent (`seconds` names it in the error). */
  command?: { signal: AbortSignal; seconds: number };
}

/** A whole-command deadline for BoundedHttpOptions.command, starting now. */
export const commandDeadline = (ms = COMMAND_DEADLINE_MS) => ({
  signal: AbortSignal.timeout(ms),
  seconds: ms / 1000,
});

const origin = (u: URL) => `${u.protocol}//${u.host}`;
const JSON_TYPE = /^application\/([a-z0-9.+-]+\+)?json\s*(;|$)/i;

/**
 * Counts the elements of the arrays directly in a JSON text's root object (a list's "items")
 * as its bytes arrive, without parsing: a page holding more items than were asked for is
 * refused before client-node parses and converts it (each `{}` costs it some 200 bytes).
 */
class ListItemCounter {
  items = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private inArray = false; // the depth-2 container is an array
  private inItem = false;

  feed(b: Uint8Array): void {
    for (let i = 0; i < b.length; i++) {
      const c = b[i]!;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true;
        else if (c === 0x22) this.inString = false;
        continue;
      }
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
      if (this.depth === 2 && this.inArray && !this.inItem && c !== 0x2c && c !== 0x5d) {
        this.items++;
        this.inItem = true;
      }
      if (c === 0x22) this.inString = true;
      else if (c === 0x7b || c === 0x5b) {
        if (++this.depth === 2) {
          this.inArray = c === 0x5b;
          this.inItem = false;
        }
      } else if (c === 0x7d || c === 0x5d) {
        this.depth--;
      } else if (c === 0x2c && this.depth === 2) this.inItem = false;
    }
  }
}

/**
 * The answer's body, at most `maxBytes`, nested at most MAX_NESTING_DEPTH deep (client-node's
 * deserializer recurses per level: a 63 MiB answer of nested arrays cost it 3.5 GB and two
 * minutes), and with `maxItems` a list of at most that many items, as a Buffer.
 */
function readBody(
  res: IncomingMessage,
  maxBytes: number,
  server: string,
  maxItems?: number,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const counter = maxItems === undefined ? undefined : new ListItemCounter();
    const nesting = new JsonNestingGauge();
    let n = 0;
    // settled before the destroy, whose 'aborted' would otherwise name the cut as the cause
    const refuse = (err: ClusterError) => {
      reject(err);
      res.destroy();
    };
    res.on('data', (c: Buffer) => {
      n += c.length;
      if (n > maxBytes) {
        refuse(
          new ClusterError(
            'API_TOO_LARGE',
            `the API server ${server} sent an answer over ${maxBytes / 1024 / 1024} MiB: not an API server's answer, or a list too large to read at once; check --kubeconfig's server`,
          ),
        );
        return;
      }
      if (!nesting.feed(c)) {
        refuse(
          new ClusterError(
            'API_TOO_LARGE',
            `the API server ${server} sent an answer nested deeper than ${MAX_NESTING_DEPTH} levels (line ${nesting.overAtLine}), past any Kubernetes object's: not an API server's answer; check --kubeconfig's server`,
          ),
        );
        return;
      }
      if (counter) {
        counter.feed(c);
        if (counter.items > maxItems!) {
          refuse(
            new ClusterError(
              'API_TOO_LARGE',
              `the API server ${server} sent a list page of over ${maxItems} items when asked for ${maxItems} (limit=${maxItems} ignored): not an API server's answer; check --kubeconfig's server`,
            ),
          );
          return;
        }
      }
      chunks.push(c);
    });
    res.on('end', () => resolve(Buffer.concat(chunks)));
    res.on('error', reject);
    res.on('aborted', () => reject(new Error('the answer was cut off')));
  });
}

/**
 * An error answer's first MAX_API_ERROR_BYTES; one cut there becomes a Status carrying the start
 * of its message, so the error line still quotes what the server said.
 */
function readErrorBody(res: IncomingMessage, status: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    res.on('data', (c: Buffer) => {
      chunks.push(c);
      n += c.length;
      if (n < MAX_API_ERROR_BYTES) return;
      const text = Buffer.concat(chunks).subarray(0, MAX_API_ERROR_BYTES).toString('utf8');
      // settled before the destroy, whose 'aborted' would otherwise reject
      resolve(
        Buffer.from(JSON.stringify({ kind: 'Status', code: status, message: messageStart(text) })),
      );
      res.destroy();
    });
    res.on('end', () => resolve(Buffer.concat(chunks)));
    res.on('error', reject);
    res.on('aborted', () => reject(new Error('the answer was cut off')));
  });
}

/** The start of a Status's "message" string in JSON text cut anywhere ('' when it has none). */
export function messageStart(text: string): string {
  const at = /"message"\s*:\s*"/.exec(text);
  if (!at) return '';
  // the longest prefix of the string that parses: the cut may fall inside an escape
  const rest = text.slice(at.index + at[0].length);
  const end = rest.search(/(?<!\\)(?:\\\\)*"/);
  let body = end >= 0 ? rest.slice(0, rest.indexOf('"', end)) : rest;
  for (let i = 0; i < 6; i++, body = body.slice(0, -1)) {
    try {
      return JSON.parse(`"${body}"`) as string;
    } catch {
      /* cut inside an escape: one character shorter */
    }
  }
  return '';
}

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * A TLS connection to `url` through the proxy's CONNECT tunnel, with the TLS settings
 * client-node put in its agent (CA, client certificate, skip-verify) and the server's name.
 */
function tunnel(
  proxyUrl: string,
  url: URL,
  agent: unknown,
  signal: AbortSignal,
  server: string,
): Promise<Duplex> {
  const proxy = new URL(proxyUrl);
  const target = `${url.hostname}:${url.port || '443'}`;
  const auth = proxy.username
    ? {
        'Proxy-Authorization': `Basic ${Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString('base64')}`,
      }
    : {};
  return new Promise((resolve, reject) => {
    const send = proxy.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send({
      host: proxy.hostname,
      port: proxy.port || (proxy.protocol === 'https:' ? 443 : 80),
      method: 'CONNECT',
      path: target,
      headers: { Host: target, ...auth },
      agent: false,
      signal,
    });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        reject(
          new ClusterError(
            'UNREACHABLE',
            `the proxy ${proxy.origin} (HTTPS_PROXY) refused to connect to ${server} (${res.statusCode} ${apiDetail(res.statusMessage ?? '')}): check HTTPS_PROXY / NO_PROXY`,
          ),
        );
        return;
      }
      const tlsOptions = (agent as { options?: ConnectionOptions } | undefined)?.options ?? {};
      resolve(
        tlsConnect({
          ...tlsOptions,
          socket,
          servername: isIP(url.hostname.replace(/^\[|\]$/g, '')) ? undefined : url.hostname,
        }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** The environment's HTTPS proxy for `url`, as kubectl and `bundle create` read HTTPS_PROXY/NO_PROXY; undefined when direct. */
function proxyFor(url: URL): string | undefined {
  const p = url.protocol === 'https:' ? proxyFromEnv(process.env) : undefined;
  return p?.httpsProxy && !bypassesProxy(url.host, p.noProxy) ? p.httpsProxy : undefined;
}

function headerMap(res: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers))
    if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  return headers;
}

async function once(
  url: URL,
  ctx: RequestContext,
  signal: AbortSignal,
  maxBytes: number,
  server: string,
  maxItems?: number,
): Promise<Answer> {
  const proxy = proxyFor(url);
  const socket = proxy ? await tunnel(proxy, url, ctx.getAgent(), signal, server) : undefined;
  return new Promise((resolve, reject) => {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const body = ctx.getBody();
    const via = socket ? { createConnection: () => socket as Socket } : { agent: ctx.getAgent() };
    const req = send(
      url,
      { method: ctx.getHttpMethod(), headers: ctx.getHeaders(), ...via, signal },
      (res) => {
        const headers = headerMap(res);
        const status = res.statusCode ?? 0;
        const body =
          status >= 400 ? readErrorBody(res, status) : readBody(res, maxBytes, server, maxItems);
        body.then((b) => resolve({ status, headers, body: b }), reject);
      },
    );
    req.on('error', reject);
    if (typeof body === 'string' || body instanceof Buffer) req.end(body);
    else req.end();
  });
}

/**
 * Sends `ctx` within `deadlineMs` in all, reading at most `maxBytes`: a redirect is followed
 * only to the same scheme, host and port (the credentials go nowhere else), a 2xx answer must
 * be JSON. Throws ClusterError API_TIMEOUT, API_TOO_LARGE, API_REDIRECT or API_NOT_JSON.
 */
async function sendBounded(ctx: RequestContext, opts: BoundedHttpOptions = {}): Promise<Answer> {
  const deadlineMs = opts.deadlineMs ?? API_DEADLINE_MS;
  const maxBytes = opts.maxBytes ?? MAX_API_RESPONSE_BYTES;
  let url = new URL(ctx.getUrl());
  const server = origin(url);
  const deadline = AbortSignal.timeout(deadlineMs);
  const signal = AbortSignal.any([
    deadline,
    ...[ctx.getSignal(), opts.command?.signal].filter((x): x is AbortSignal => x !== undefined),
  ]);
  const limit = Number(url.searchParams.get('limit'));
  const maxItems = Number.isSafeInteger(limit) && limit > 0 ? limit : undefined;
  for (let hop = 0; ; hop++) {
    let a: Answer;
    try {
      if (opts.command?.signal.aborted) throw opts.command.signal.reason;
      a = await once(url, ctx, signal, maxBytes, server, maxItems);
    } catch (err) {
      if (opts.command?.signal.aborted)
        throw new ClusterError(
          'API_TIMEOUT',
          `the API server ${server} did not finish answering this command's calls within ${opts.command.seconds} s in all: check that it is not overloaded, or raise --deadline`,
          { cause: err },
        );
      if (deadline.aborted)
        throw new ClusterError(
          'API_TIMEOUT',
          `the API server ${server} gave no complete answer within ${deadlineMs / 1000} s: check that it is reachable and not overloaded, or raise --request-timeout`,
          { cause: err },
        );
      throw err;
    }
    if (a.status >= 300 && a.status < 400 && a.headers.location !== undefined) {
      const next = new URL(a.headers.location, url);
      if (origin(next) !== server) {
        throw new ClusterError(
          'API_REDIRECT',
          `the API server ${server} redirected to ${origin(next)}: refused (an API server does not send its clients elsewhere); check --kubeconfig's server`,
        );
      }
      if (hop >= MAX_REDIRECTS || ctx.getHttpMethod() !== 'GET') {
        throw new ClusterError(
          'API_REDIRECT',
          `the API server ${server} answered ${a.status} to ${ctx.getHttpMethod()} ${url.pathname}${hop ? ` after ${hop} redirects` : ''}: refused; check --kubeconfig's server`,
        );
      }
      url = next;
      continue;
    }
    if (a.status >= 200 && a.status < 300 && !JSON_TYPE.test(a.headers['content-type'] ?? '')) {
      throw new ClusterError(
        'API_NOT_JSON',
        `the API server ${server} answered ${ctx.getHttpMethod()} ${url.pathname} with ${a.headers['content-type'] ? `"${a.headers['content-type'].slice(0, 80)}"` : 'no content type'}, not JSON: is --kubeconfig's server an API server (not a proxy's or a console's page)?`,
      );
    }
    if (a.status >= 200 && a.status < 300) {
      // no Accept-Encoding is sent: an encoded or empty body is not an API server's answer
      const encoding = a.headers['content-encoding'];
      const why =
        encoding !== undefined && encoding.toLowerCase() !== 'identity'
          ? `a body encoded "${encoding.slice(0, 40)}" (none was asked for)`
          : a.body.every((c) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09)
            ? 'an empty body'
            : undefined;
      if (why)
        throw new ClusterError(
          'API_NOT_JSON',
          `the API server ${server} answered ${ctx.getHttpMethod()} ${url.pathname} with ${why}, not a JSON object: is --kubeconfig's server an API server (not a proxy)?`,
        );
    }
    return a;
  }
}

/** client-node's HttpLibrary over one of our senders: its answer as client-node's response. */
async function libraryOver(send: (ctx: RequestContext) => Promise<Answer>): Promise<HttpLibrary> {
  const { Observable, ResponseContext } = await loadK8s();
  return {
    send(ctx: RequestContext) {
      return new Observable(
        send(ctx).then(
          (a): ResponseContextType =>
            new ResponseContext(a.status, a.headers, {
              text: async () => a.body.toString('utf8'),
              binary: async () => a.body,
            }),
        ),
      );
    },
  };
}

/** client-node's HttpLibrary over sendBounded. */
export function boundedHttpLibrary(opts: BoundedHttpOptions = {}): Promise<HttpLibrary> {
  return libraryOver((ctx) => sendBounded(ctx, opts));
}

/** A long answer (a watch) as it comes: `onData` throwing ends it with that error. */
export interface StreamingHttpOptions {
  /** Until the answer's headers (the body then runs until the server ends it or the call's signal aborts). */
  deadlineMs?: number;
  /** A 2xx JSON answer's headers came: the server accepted the call (a watch: authorized, its resource served). */
  onOpen?: () => void;
  onData: (chunk: Buffer) => void;
}

/**
 * client-node's HttpLibrary for one long answer (a watch): its headers within deadlineMs, then
 * its body handed to onData a chunk at a time, never held whole; the call ends with the answer
 * (whose body then reads as `{}`). No redirect is followed; an error answer reads as
 * sendBounded's (its first MAX_API_ERROR_BYTES), so apiCall names it the same way.
 */
export function streamingHttpLibrary(opts: StreamingHttpOptions): Promise<HttpLibrary> {
  return libraryOver((ctx) => sendStreaming(ctx, opts));
}

async function sendStreaming(ctx: RequestContext, opts: StreamingHttpOptions): Promise<Answer> {
  const url = new URL(ctx.getUrl());
  const server = origin(url);
  const deadlineMs = opts.deadlineMs ?? API_DEADLINE_MS;
  const headersDue = new AbortController();
  const timer = setTimeout(() => headersDue.abort(), deadlineMs);
  const signal = AbortSignal.any([
    headersDue.signal,
    ...[ctx.getSignal()].filter((x): x is AbortSignal => x !== undefined),
  ]);
  try {
    const proxy = proxyFor(url);
    const socket = proxy ? await tunnel(proxy, url, ctx.getAgent(), signal, server) : undefined;
    return await new Promise<Answer>((resolve, reject) => {
      const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
      const via = socket ? { createConnection: () => socket as Socket } : { agent: ctx.getAgent() };
      const req = send(
        url,
        { method: ctx.getHttpMethod(), headers: ctx.getHeaders(), ...via, signal },
        (res) => {
          clearTimeout(timer);
          streamBody(res, server, url, opts).then(resolve, reject);
        },
      );
      req.on('error', reject);
      req.end();
    });
  } catch (err) {
    if (headersDue.signal.aborted)
      throw new ClusterError(
        'API_TIMEOUT',
        `the API server ${server} did not begin its answer to ${url.pathname} within ${deadlineMs / 1000} s: check that it is reachable and not overloaded`,
        { cause: err },
      );
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** The body of a long answer passed to onData; an error answer's start read as an Answer. */
function streamBody(
  res: IncomingMessage,
  server: string,
  url: URL,
  { onOpen, onData }: StreamingHttpOptions,
): Promise<Answer> {
  const headers = headerMap(res);
  const status = res.statusCode ?? 0;
  if (status >= 400) return readErrorBody(res, status).then((body) => ({ status, headers, body }));
  if (status < 200 || status >= 300) {
    res.destroy();
    return Promise.reject(
      new ClusterError(
        'API_REDIRECT',
        `the API server ${server} answered ${status} to GET ${url.pathname}: refused (a watch follows no redirect); check --kubeconfig's server`,
      ),
    );
  }
  if (!JSON_TYPE.test(headers['content-type'] ?? '')) {
    res.destroy();
    return Promise.reject(
      new ClusterError(
        'API_NOT_JSON',
        `the API server ${server} answered GET ${url.pathname} with ${headers['content-type'] ? `"${headers['content-type'].slice(0, 80)}"` : 'no content type'}, not JSON: is --kubeconfig's server an API server?`,
      ),
    );
  }
  onOpen?.();
  return new Promise((resolve, reject) => {
    res.on('data', (c: Buffer) => {
      try {
        onData(c);
      } catch (err) {
        // settled before the destroy, whose close would otherwise name the cut as the cause
        reject(err);
        res.destroy();
      }
    });
    res.on('end', () =>
      resolve({
        status,
        headers: { ...headers, 'content-type': 'application/json' },
        body: Buffer.from('{}'),
      }),
    );
    res.on('error', reject);
    res.on('close', () => {
      if (!res.complete) reject(new Error(`the API server ${server} cut its answer off`));
    });
  });
}

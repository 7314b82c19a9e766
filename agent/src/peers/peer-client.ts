// Requests to one peer: mutual TLS with the node's certificate, a short connect timeout (a
// dead peer costs 1-2 s, not a TCP timeout of minutes), an idle timeout while bytes flow, and
// every answer bounded by what the format allows it to be.
import { Agent, request } from 'node:https';
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { anyPeerIdentity, peerTlsOptions, type PeerCredentials } from './peer-tls.js';

/** How a peer failed a request: decides whether it is dropped, waited for or tried again ('slow': under the minimum rate). */
type PeerFaultKind = 'unreachable' | 'busy' | 'missing' | 'refused' | 'cut' | 'slow';

export class PeerFault extends Error {
  constructor(
    readonly kind: PeerFaultKind,
    message: string,
    readonly retryAfterMs = 0,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'PeerFault';
  }
}

interface PeerClientOptions {
  credentials: PeerCredentials;
  /** A peer that has not finished the TLS handshake in this time is dropped. */
  connectTimeoutMs?: number;
  /** A response with no byte for this long is cut (the fetcher resumes it elsewhere). */
  idleTimeoutMs?: number;
  /** Every small answer whole (headers included) within this (default smallDeadline(maxBytes)); tests: shorter. */
  smallDeadlineMs?: number;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 1500;
const DEFAULT_CLIENT_IDLE_MS = 15_000;
/** Longest Retry-After honoured: a peer cannot park a fetcher for long. */
const MAX_RETRY_AFTER_MS = 30_000;
/** Shortest wait after a 503: a Retry-After of 0 or below would bring the next request back at once. */
const MIN_RETRY_AFTER_MS = 1000;
/** A small answer's time besides its bytes: the connection, the headers, a peer busy for a moment. */
const SMALL_ANSWER_BASE_MS = 30_000;
/**
 * The least a small answer must come at: the lowest upload cap a peer may have (peers.uploadRate
 * >= 64 KiB/s), which meters its small answers too, before their headers.
 */
const SMALL_ANSWER_MIN_RATE = 64 * 1024;

/** How long a small answer of at most `maxBytes` may take in all: 30 s for a signature, 94 s for a 4 MiB listing. */
function smallDeadline(maxBytes: number): number {
  return SMALL_ANSWER_BASE_MS + Math.ceil((1000 * maxBytes) / SMALL_ANSWER_MIN_RATE);
}

/** Retry-After in ms, held between MIN_RETRY_AFTER_MS and MAX_RETRY_AFTER_MS (a date or junk: the least). */
function retryAfterMs(header: string | undefined): number {
  const seconds = Number(header);
  return Math.min(
    MAX_RETRY_AFTER_MS,
    Math.max(MIN_RETRY_AFTER_MS, Number.isFinite(seconds) ? 1000 * seconds : 0),
  );
}

export class PeerClient {
  private readonly agent: Agent;
  private readonly connectMs: number;
  private readonly idleMs: number;
  private readonly smallMs: number | undefined;

  constructor(opts: PeerClientOptions) {
    this.agent = new Agent({
      ...peerTlsOptions(opts.credentials),
      checkServerIdentity: anyPeerIdentity,
      keepAlive: true,
      maxSockets: 2,
    });
    this.connectMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.idleMs = opts.idleTimeoutMs ?? DEFAULT_CLIENT_IDLE_MS;
    this.smallMs = opts.smallDeadlineMs;
  }

  /** A GET answered 200 or 206; any other status is a PeerFault and its body is dropped. */
  get(
    url: string,
    signal: AbortSignal,
    headers: Record<string, string> = {},
  ): Promise<IncomingMessage> {
    // the directory's word, from another node's status: anything but https is not a peer
    if (!url.startsWith('https://') || !URL.canParse(url))
      return Promise.reject(
        new PeerFault(
          'unreachable',
          `${JSON.stringify(url.slice(0, 100))} is not an https:// peer address`,
        ),
      );
    return new Promise((resolve, reject) => {
      const req = request(url, { agent: this.agent, headers, signal }, (res) => {
        const status = res.statusCode ?? 0;
        if (status === 200 || status === 206) return resolve(res);
        res.resume();
        const retry = retryAfterMs(res.headers['retry-after']);
        if (status === 503) return reject(new PeerFault('busy', `${url}: busy (503)`, retry));
        if (status === 404) return reject(new PeerFault('missing', `${url}: not held there (404)`));
        reject(new PeerFault('refused', `${url}: answered ${status}`));
      });
      req.on('socket', (socket: TLSSocket) => {
        // a kept-alive socket is connected already
        if (socket.authorized) return;
        const timer = setTimeout(
          () =>
            req.destroy(
              new PeerFault('unreachable', `${url}: no TLS connection within ${this.connectMs} ms`),
            ),
          this.connectMs,
        );
        socket.once('secureConnect', () => clearTimeout(timer));
        socket.once('close', () => clearTimeout(timer));
      });
      req.setTimeout(this.idleMs, () =>
        req.destroy(new PeerFault('cut', `${url}: nothing received for ${this.idleMs} ms`)),
      );
      req.on('error', (err) =>
        reject(
          err instanceof PeerFault || signal.aborted
            ? err
            : new PeerFault(
                connectFailure(err) ? 'unreachable' : 'cut',
                `${url}: ${err.message}`,
                0,
                { cause: err },
              ),
        ),
      );
      req.end();
    });
  }

  /**
   * A small answer read whole, never more than `maxBytes`, within a deadline: the idle timeout
   * alone lets a peer that drips a byte now and then hold its caller for ever.
   */
  async small(url: string, maxBytes: number, signal: AbortSignal): Promise<Buffer> {
    const ms = this.smallMs ?? smallDeadline(maxBytes);
    const late = new AbortController();
    const timer = setTimeout(
      () => late.abort(new PeerFault('slow', `${url}: no whole answer within ${ms} ms`)),
      ms,
    );
    try {
      return await this.readSmall(url, maxBytes, AbortSignal.any([signal, late.signal]));
    } catch (err) {
      // the caller's own stop is its to report; the deadline is the peer's fault
      throw late.signal.aborted && !signal.aborted ? late.signal.reason : err;
    } finally {
      clearTimeout(timer);
    }
  }

  private async readSmall(url: string, maxBytes: number, signal: AbortSignal): Promise<Buffer> {
    const res = await this.get(url, signal);
    const declared = Number(res.headers['content-length']);
    if (declared > maxBytes) {
      res.destroy();
      throw new PeerFault('refused', `${url}: ${declared} bytes, over the ${maxBytes} allowed`);
    }
    const parts: Buffer[] = [];
    let n = 0;
    for await (const chunk of res) {
      n += (chunk as Buffer).length;
      if (n > maxBytes) {
        res.destroy();
        throw new PeerFault('refused', `${url}: over the ${maxBytes} bytes allowed`);
      }
      parts.push(chunk as Buffer);
    }
    return Buffer.concat(parts);
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Errors that mean nothing listens there (or the path to it is gone): the peer is dropped. */
function connectFailure(err: NodeJS.ErrnoException): boolean {
  return (
    [
      'ECONNREFUSED',
      'EHOSTUNREACH',
      'ENETUNREACH',
      'EHOSTDOWN',
      'ENOTFOUND',
      'EADDRNOTAVAIL',
    ].includes(err.code ?? '') || /certificate|handshake|alert/i.test(err.message)
  );
}

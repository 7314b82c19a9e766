import { Readable } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import type { AuthStore, Credentials } from './auth.js';
import {
  Connections,
  connectionError,
  isPlainHttpAnswer,
  type ConnectionOptions,
} from './connections.js';
import {
  sha256,
  OciError,
  MANIFEST_ACCEPT,
  MAX_MANIFEST_BYTES,
  parseManifest,
} from '@offline-bundle/oci';
import { withRetry } from './retry.js';
import type { FetchedManifest } from './source.js';

export interface RegistryLocation {
  registry: string;
  repository: string;
  /** Skip TLS verification, and fall back to plain http when TLS is not spoken. */
  insecure: boolean;
}

interface RegistryClientOptions {
  auth: AuthStore;
  userAgent?: string;
  /** Retries for network errors, 429 and 5xx (default 5 attempts). */
  attempts?: number;
  onRetry?: (message: string) => void;
  /** Proxy environment, certs.d directories, --cert-dir. */
  connection?: ConnectionOptions;
  /** Ctrl-C: every request in flight (connect, headers, body) is aborted, and no retry follows. */
  signal?: AbortSignal | undefined;
}

type Response = Dispatcher.ResponseData;

const TLS_FALLBACK_CODES = new Set([
  'EPROTO',
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ECONNRESET',
  'UND_ERR_SOCKET',
]);

function apiHost(registry: string): string {
  return registry === 'docker.io' ? 'registry-1.docker.io' : registry;
}

function isRetryable(err: unknown): boolean {
  if (err instanceof OciError) return err.code === 'NETWORK_ERROR' || err.code === 'REGISTRY_ERROR';
  return true;
}

function parseChallenge(header: string): { scheme: string; params: Record<string, string> } {
  const space = header.indexOf(' ');
  const scheme = (space < 0 ? header : header.slice(0, space)).toLowerCase();
  const params: Record<string, string> = {};
  const re = /(\w+)="([^"]*)"|(\w+)=([^,\s]*)/g;
  for (let m; (m = re.exec(header.slice(space + 1)));) params[(m[1] ?? m[3])!] = m[2] ?? m[4] ?? '';
  return { scheme, params };
}

function basic(c: Credentials): string {
  return 'Basic ' + Buffer.from(`${c.username ?? ''}:${c.password ?? ''}`).toString('base64');
}

/**
 * A small distribution-spec client on undici: token and basic auth, retries with backoff,
 * ranged blob reads for resume, and manifests checked against their digest. It replaces
 * oci-registry-client, which has none of those.
 */
/** The first error code of a registry's JSON error body (distribution's NAME_UNKNOWN, MANIFEST_UNKNOWN). */
function errorCode(body: string): unknown {
  try {
    return (JSON.parse(body) as { errors?: { code?: unknown }[] }).errors?.[0]?.code;
  } catch {
    return undefined; // a cut or non-JSON body: no code to tell
  }
}

export class RegistryClient {
  private readonly connections: Connections;
  private readonly schemes = new Map<string, 'https' | 'http'>();
  private readonly tokens = new Map<string, string>();

  constructor(private readonly opts: RegistryClientOptions) {
    this.connections = new Connections(opts.connection);
  }

  async close(): Promise<void> {
    await this.connections.close();
  }

  private async send(
    loc: RegistryLocation,
    path: string,
    method: 'GET' | 'HEAD',
    headers: Record<string, string>,
  ): Promise<Response> {
    const host = apiHost(loc.registry);
    const { dispatcher, tls } = await this.connections.get(host, loc.insecure);
    // Only a location marked insecure may use (or remember) the plain-http fallback.
    const scheme = loc.insecure ? (this.schemes.get(host) ?? 'https') : 'https';
    const ua = { 'user-agent': this.opts.userAgent ?? 'offline-bundle' };
    try {
      return await request(`${scheme}://${host}${path}`, {
        method,
        headers: { ...ua, ...headers },
        dispatcher,
        headersTimeout: 60_000,
        bodyTimeout: 120_000,
        signal: this.opts.signal,
      });
    } catch (err) {
      this.opts.signal?.throwIfAborted();
      const code = (err as NodeJS.ErrnoException).code ?? '';
      if (
        loc.insecure &&
        scheme === 'https' &&
        (TLS_FALLBACK_CODES.has(code) || isPlainHttpAnswer(err))
      ) {
        this.schemes.set(host, 'http');
        return this.send(loc, path, method, headers);
      }
      throw connectionError(err, host, tls);
    }
  }

  private async authorize(loc: RegistryLocation, challenge: string): Promise<string | undefined> {
    const creds = await this.opts.auth.lookup(loc.registry, loc.repository);
    const { scheme, params } = parseChallenge(challenge);
    if (scheme === 'basic') return creds ? basic(creds) : undefined;
    if (scheme !== 'bearer' || !params.realm) return undefined;
    const url = new URL(params.realm);
    if (params.service) url.searchParams.set('service', params.service);
    url.searchParams.set('scope', `repository:${loc.repository}:pull`);
    const headers: Record<string, string> = {
      'user-agent': this.opts.userAgent ?? 'offline-bundle',
    };
    let res: Response;
    // the token service may be another host: its own certs.d and proxy rules apply
    const realmHost = url.host;
    let dispatcher: Dispatcher;
    try {
      dispatcher = (await this.connections.get(realmHost, loc.insecure)).dispatcher;
      if (creds?.identityToken) {
        const form = new URLSearchParams({
          grant_type: 'refresh_token',
          refresh_token: creds.identityToken,
          client_id: 'offline-bundle',
          scope: url.searchParams.get('scope')!,
        });
        if (params.service) form.set('service', params.service);
        res = await request(params.realm, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
          body: form.toString(),
          dispatcher,
          signal: this.opts.signal,
        });
      } else {
        if (creds) headers.authorization = basic(creds);
        res = await request(url, { method: 'GET', headers, dispatcher, signal: this.opts.signal });
      }
    } catch (err) {
      this.opts.signal?.throwIfAborted();
      if (err instanceof OciError) throw err;
      const e = connectionError(err, realmHost, undefined);
      throw new OciError(e.code, `token service: ${e.message}`, { cause: err });
    }
    if (res.statusCode === 401 || res.statusCode === 403) {
      await res.body.dump();
      throw new OciError(
        'UNAUTHORIZED',
        `${loc.registry} refused the credentials for ${loc.repository}: log in with "podman login ${loc.registry}", or pass --authfile FILE or --creds USER:PASSWORD`,
      );
    }
    if (res.statusCode !== 200) {
      await res.body.dump();
      throw new OciError(
        'REGISTRY_ERROR',
        `token service ${url.host} answered HTTP ${res.statusCode}`,
      );
    }
    const body = (await res.body.json()) as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    return token ? `Bearer ${token}` : undefined;
  }

  /** One request with auth: a 401 answers with a challenge, which is met once and cached per repository. */
  private async call(
    loc: RegistryLocation,
    path: string,
    method: 'GET' | 'HEAD',
    headers: Record<string, string>,
  ): Promise<Response> {
    const key = `${loc.registry}/${loc.repository}`;
    const cached = this.tokens.get(key);
    let res = await this.send(
      loc,
      path,
      method,
      cached ? { ...headers, authorization: cached } : headers,
    );
    if (res.statusCode === 401) {
      await res.body.dump();
      const challenge = res.headers['www-authenticate'];
      const authz =
        typeof challenge === 'string' ? await this.authorize(loc, challenge) : undefined;
      if (!authz)
        throw new OciError(
          'UNAUTHORIZED',
          `${loc.registry} requires authentication for ${loc.repository}: log in with "podman login ${loc.registry}", or pass --authfile FILE or --creds USER:PASSWORD`,
        );
      this.tokens.set(key, authz);
      res = await this.send(loc, path, method, { ...headers, authorization: authz });
      if (res.statusCode === 401) {
        await res.body.dump();
        throw new OciError(
          'UNAUTHORIZED',
          `${loc.registry} refused access to ${loc.repository} with the given credentials`,
        );
      }
    }
    return res;
  }

  private async failure(loc: RegistryLocation, what: string, res: Response): Promise<OciError> {
    const text = (await res.body.text().catch(() => '')).slice(0, 300);
    const where = `${loc.registry}/${loc.repository}`;
    if (res.statusCode === 404) return new OciError('NOT_FOUND', `${what} not found in ${where}`);
    if (res.statusCode === 403)
      return new OciError('UNAUTHORIZED', `${where} denied access to ${what}`);
    if (res.statusCode === 429 || res.statusCode >= 500)
      return new OciError('REGISTRY_ERROR', `${where} answered HTTP ${res.statusCode} for ${what}`);
    return new OciError(
      'REGISTRY_ERROR',
      `${where} answered HTTP ${res.statusCode} for ${what}: ${text}`,
    );
  }

  /**
   * A missing manifest says which is unknown, the repository or the tag (or digest) in it: from
   * the registry's error code when it tells (NAME_UNKNOWN), else from its tag list (distribution
   * answers MANIFEST_UNKNOWN for both).
   */
  private async manifestMissing(
    loc: RegistryLocation,
    reference: string,
    res: Response,
  ): Promise<OciError> {
    const where = `${loc.registry}/${loc.repository}`;
    let known =
      errorCode((await res.body.text().catch(() => '')).slice(0, 4096)) === 'NAME_UNKNOWN'
        ? false
        : undefined;
    if (known === undefined) {
      const tags = await this.call(loc, `/v2/${loc.repository}/tags/list?n=1`, 'GET', {}).catch(
        () => undefined,
      );
      await tags?.body.dump();
      known = tags?.statusCode === 200 ? true : tags?.statusCode === 404 ? false : undefined;
    }
    if (known === false)
      return new OciError(
        'NOT_FOUND',
        `manifest ${reference} not found: the repository ${where} is unknown to the registry`,
      );
    if (known)
      return new OciError(
        'NOT_FOUND',
        `manifest ${reference} not found in ${where} (the repository exists; the tag or digest does not)`,
      );
    return new OciError('NOT_FOUND', `manifest ${reference} not found in ${where}`);
  }

  private retry<T>(fn: () => Promise<T>): Promise<T> {
    return withRetry(fn, {
      attempts: this.opts.attempts ?? 5,
      retryable: isRetryable,
      onRetry: (err, attempt, delay) =>
        this.opts.onRetry?.(`${(err as Error).message}; retry ${attempt} in ${delay} ms`),
      signal: this.opts.signal,
    });
  }

  /** A manifest by tag or digest; by digest, the bytes must hash to it. */
  getManifest(loc: RegistryLocation, reference: string): Promise<FetchedManifest> {
    return this.retry(async () => {
      const res = await this.call(loc, `/v2/${loc.repository}/manifests/${reference}`, 'GET', {
        accept: MANIFEST_ACCEPT,
      });
      if (res.statusCode === 404) throw await this.manifestMissing(loc, reference, res);
      if (res.statusCode !== 200) throw await this.failure(loc, `manifest ${reference}`, res);
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body) {
        size += (chunk as Buffer).length;
        if (size > MAX_MANIFEST_BYTES) {
          res.body.destroy();
          throw new OciError(
            'INVALID_MANIFEST',
            `manifest ${reference} in ${loc.registry}/${loc.repository} is larger than 4 MiB`,
          );
        }
        chunks.push(chunk as Buffer);
      }
      const bytes = Buffer.concat(chunks);
      const digest = sha256(bytes);
      const expected = reference.startsWith('sha256:') ? reference : undefined;
      if (expected && digest !== expected) {
        throw new OciError(
          'DIGEST_MISMATCH',
          `manifest from ${loc.registry}/${loc.repository} has digest ${digest}, expected ${expected}`,
        );
      }
      const contentType = res.headers['content-type'];
      const { mediaType } = parseManifest(
        bytes,
        typeof contentType === 'string' ? contentType : undefined,
      );
      return { bytes, mediaType, digest };
    });
  }

  /** A blob stream from `offset`; a registry that ignores Range gets its leading bytes skipped here. */
  getBlob(loc: RegistryLocation, digest: string, offset = 0): Promise<Readable> {
    return this.retry(async () => {
      const headers: Record<string, string> = offset > 0 ? { range: `bytes=${offset}-` } : {};
      const res = await this.call(loc, `/v2/${loc.repository}/blobs/${digest}`, 'GET', headers);
      if (res.statusCode === 200 && offset > 0) return skipBytes(res.body, offset);
      if (res.statusCode === 200 || res.statusCode === 206) return res.body;
      throw await this.failure(loc, `blob ${digest}`, res);
    });
  }
}

async function* skipping(src: AsyncIterable<Buffer>, n: number): AsyncGenerator<Buffer> {
  let left = n;
  for await (const chunk of src) {
    if (left >= chunk.length) {
      left -= chunk.length;
      continue;
    }
    yield left > 0 ? chunk.subarray(left) : chunk;
    left = 0;
  }
}

/** Drops the first `n` bytes of a stream (for sources that cannot seek). */
export function skipBytes(
  src: AsyncIterable<Buffer> & { destroy?: (err?: Error) => unknown },
  n: number,
): Readable {
  const out = Readable.from(skipping(src, n), { objectMode: false });
  // destroyed before its first read, the generator never starts and so never ends the source:
  // a response body would keep its socket and abort listener until the body timeout
  out.once('close', () => src.destroy?.());
  return out;
}

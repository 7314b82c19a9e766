// RegistryClient contract tests against an in-process node:http server on
// 127.0.0.1 that implements just enough of the OCI distribution API
// (GET /v2/<name>/manifests/<ref>, GET /v2/<name>/blobs/<digest>, Range,
// Basic and Bearer token auth). Everything is plain http, so every location is
// `insecure: true` and the client must fall back from https to http.
import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { MediaType } from '@offline-bundle/oci';
import {
  AuthStore,
  RegistryClient,
  skipBytes,
  type RegistryLocation,
} from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';

const ociErr = (code: string) => ({ name: 'OciError', code });
const sha = (b: Buffer | string) => 'sha256:' + createHash('sha256').update(b).digest('hex');
const b64 = (s: string) => Buffer.from(s).toString('base64');

interface Logged {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
}

type Handler = (
  req: http.IncomingMessage,
  res: http.ServerResponse,
  srv: Server,
) => void | Promise<void>;

interface Server {
  host: string;
  url: string;
  requests: Logged[];
  /** Connections whose first bytes were not HTTP (a TLS ClientHello). */
  clientErrors: number;
}

/** An http server on 127.0.0.1:0 that logs every request; closed at teardown. */
async function serve(t: Test, handler: Handler): Promise<Server> {
  const srv: Server = { host: '', url: '', requests: [], clientErrors: 0 };
  const server = http.createServer((req, res) => {
    srv.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    Promise.resolve(handler(req, res, srv)).catch((err) => {
      res.statusCode = 500;
      res.end(String(err));
    });
  });
  server.on('clientError', (_err, socket) => {
    srv.clientErrors++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  srv.host = `127.0.0.1:${port}`;
  srv.url = `http://${srv.host}`;
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return srv;
}

/** Only registry API calls (not token requests). */
const api = (srv: Server) => srv.requests.filter((r) => r.url.startsWith('/v2/'));

interface RegistryOpts {
  /** Manifests and blobs by repository, then by tag or digest. */
  manifests?: Record<string, Record<string, { bytes: Buffer; mediaType: string }>>;
  blobs?: Record<string, Record<string, Buffer>>;
  auth?:
    | { kind: 'basic'; user: string; password: string }
    | { kind: 'bearer'; user?: string; password?: string; service?: string };
  /** Honour `Range: bytes=N-` with 206 (default true). */
  range?: boolean;
  /** Answer the first N API requests with this status. */
  failFirst?: { count: number; status: number };
}

/**
 * A toy distribution registry. Bearer tokens are issued by GET /token on the
 * same server; a token is "tok-<n>" and only the newest one is accepted.
 */
async function registry(t: Test, o: RegistryOpts) {
  let issued = 0;
  let failures = 0;
  const srv = await serve(t, (req, res, s) => {
    const url = new URL(req.url ?? '/', s.url);
    const authz = req.headers.authorization;
    if (url.pathname === '/token' && o.auth?.kind === 'bearer') {
      if (
        o.auth.user !== undefined &&
        authz !== `Basic ${b64(`${o.auth.user}:${o.auth.password}`)}`
      ) {
        res.writeHead(401).end();
        return;
      }
      issued++;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ token: `tok-${issued}`, expires_in: 300 }));
      return;
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(url.pathname);
    if (!m) {
      res.writeHead(404).end();
      return;
    }
    if (o.auth?.kind === 'basic' && authz !== `Basic ${b64(`${o.auth.user}:${o.auth.password}`)}`) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="toy-registry"' }).end();
      return;
    }
    if (o.auth?.kind === 'bearer' && (issued === 0 || authz !== `Bearer tok-${issued}`)) {
      res
        .writeHead(401, {
          'www-authenticate': `Bearer realm="${s.url}/token",service="${o.auth.service ?? 'toy-registry'}",scope="repository:${m[1]}:pull"`,
          'content-type': 'application/json',
        })
        .end('{"errors":[{"code":"UNAUTHORIZED"}]}');
      return;
    }
    if (o.failFirst && failures < o.failFirst.count) {
      failures++;
      res.writeHead(o.failFirst.status).end('try later');
      return;
    }
    const [, name, kind, ref] = m as unknown as [string, string, string, string];
    if (kind === 'manifests') {
      const man = o.manifests?.[name]?.[ref];
      if (!man) {
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end('{"errors":[{"code":"MANIFEST_UNKNOWN"}]}');
        return;
      }
      res.writeHead(200, {
        'content-type': man.mediaType,
        'docker-content-digest': sha(man.bytes),
        'content-length': man.bytes.length,
      });
      res.end(man.bytes);
      return;
    }
    const blob = o.blobs?.[name]?.[ref];
    if (!blob) {
      res.writeHead(404).end('{"errors":[{"code":"BLOB_UNKNOWN"}]}');
      return;
    }
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    if (range && o.range !== false) {
      const start = Number(range[1]);
      res.writeHead(206, {
        'content-range': `bytes ${start}-${blob.length - 1}/${blob.length}`,
        'content-length': blob.length - start,
      });
      res.end(blob.subarray(start));
      return;
    }
    res.writeHead(200, {
      'content-length': blob.length,
      'content-type': 'application/octet-stream',
    });
    res.end(blob);
  });
  return { srv, tokensIssued: () => issued };
}

/** An auth.json holding `creds` ("user:password") for `key`, and a client using it. */
async function client(
  t: Test,
  entries: Record<string, string> = {},
  opts: { attempts?: number; onRetry?: (m: string) => void } = {},
) {
  const dir = await tmpdir(t);
  const file = path.join(dir, 'auth.json');
  const auths: Record<string, { auth: string }> = {};
  for (const [key, creds] of Object.entries(entries)) auths[key] = { auth: b64(creds) };
  await writeFile(file, JSON.stringify({ auths }));
  const c = new RegistryClient({ auth: new AuthStore([file]), ...opts });
  t.teardown(() => c.close());
  return c;
}

const loc = (srv: Server, repository: string, insecure = true): RegistryLocation => ({
  registry: srv.host,
  repository,
  insecure,
});

async function readAll(s: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(Buffer.from(c as Buffer));
  return Buffer.concat(parts);
}

const layer = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7 + (i >> 8)) & 0xff));
const layerDigest = sha(layer);
const manifestBytes = Buffer.from(
  JSON.stringify({
    schemaVersion: 2,
    mediaType: MediaType.OciManifest,
    config: { mediaType: MediaType.OciConfig, digest: sha('{}'), size: 2 },
    layers: [{ mediaType: MediaType.OciLayerGzip, digest: layerDigest, size: layer.length }],
  }),
);
const manifestDigest = sha(manifestBytes);
const oneImage = (repo: string): RegistryOpts => ({
  manifests: {
    [repo]: {
      v1: { bytes: manifestBytes, mediaType: MediaType.OciManifest },
      [manifestDigest]: { bytes: manifestBytes, mediaType: MediaType.OciManifest },
    },
  },
  blobs: { [repo]: { [layerDigest]: layer } },
});

t.test(
  'contract: anonymous pull over plain http from an insecure registry (TLS fallback)',
  async (t) => {
    const { srv } = await registry(t, oneImage('org/app'));
    const c = await client(t);
    const m = await c.getManifest(loc(srv, 'org/app'), 'v1');
    t.ok(Buffer.from(m.bytes).equals(manifestBytes), 'manifest bytes as served');
    t.equal(m.digest, manifestDigest, 'digest of the bytes');
    t.equal(m.mediaType, MediaType.OciManifest);
    t.equal(srv.clientErrors, 1, 'https was tried first (one TLS ClientHello hit the http server)');
    const [req] = api(srv);
    t.equal(req?.url, '/v2/org/app/manifests/v1');
    t.match(
      req?.headers.accept,
      /application\/vnd\.oci\.image\.index\.v1\+json/,
      'Accept lists OCI index',
    );
    t.match(
      req?.headers.accept,
      /application\/vnd\.oci\.image\.manifest\.v1\+json/,
      'Accept lists OCI manifest',
    );
    t.match(
      req?.headers.accept,
      /application\/vnd\.docker\.distribution\.manifest\.v2\+json/,
      'Accept lists Docker v2',
    );
    t.match(
      req?.headers.accept,
      /application\/vnd\.docker\.distribution\.manifest\.list\.v2\+json/,
      'Accept lists Docker list',
    );
    t.notOk(req?.headers.authorization, 'no credentials sent unasked');

    const blob = await readAll(await c.getBlob(loc(srv, 'org/app'), layerDigest));
    t.ok(blob.equals(layer), 'blob bytes');
    t.equal(srv.clientErrors, 1, 'the http fallback is remembered for the host');
  },
);

t.test('contract: a registry that is not insecure is never reached over plain http', async (t) => {
  const { srv } = await registry(t, oneImage('org/app'));
  const c = await client(t, {}, { attempts: 1 });
  await t.rejects(c.getManifest(loc(srv, 'org/app', false), 'v1'), ociErr('NETWORK_ERROR'));
  t.equal(api(srv).length, 0, 'no plain http request');

  const c2 = await client(t, {}, { attempts: 1 });
  await c2.getManifest(loc(srv, 'org/app', true), 'v1');
  const before = api(srv).length;
  await t.rejects(
    c2.getManifest(loc(srv, 'org/other', false), 'v1'),
    ociErr('NETWORK_ERROR'),
    'after an insecure location on the same host fell back to http, a secure one still requires TLS',
  );
  t.equal(api(srv).length, before, 'no plain http request for the secure location');
});

t.test('contract: bearer token flow with Basic credentials from the AuthStore', async (t) => {
  const { srv, tokensIssued } = await registry(t, {
    ...oneImage('org/app'),
    auth: { kind: 'bearer', user: 'alice', password: 's3cr:et', service: 'toy.svc' },
  });
  const c = await client(t, { [srv.host]: 'alice:s3cr:et' });
  const m = await c.getManifest(loc(srv, 'org/app'), 'v1');
  t.equal(m.digest, manifestDigest);

  const [first, tokenReq, retry] = srv.requests;
  t.equal(first?.url, '/v2/org/app/manifests/v1');
  t.notOk(first?.headers.authorization, 'first attempt is anonymous');
  const tokenUrl = new URL(tokenReq?.url ?? '/', srv.url);
  t.equal(tokenUrl.pathname, '/token', 'GET on the realm');
  t.equal(tokenReq?.method, 'GET');
  t.equal(
    tokenUrl.searchParams.get('scope'),
    'repository:org/app:pull',
    'pull scope for the repository',
  );
  t.equal(tokenUrl.searchParams.get('service'), 'toy.svc', 'service from the challenge');
  t.equal(
    tokenReq?.headers.authorization,
    `Basic ${b64('alice:s3cr:et')}`,
    'Basic credentials on the token request',
  );
  t.equal(retry?.url, '/v2/org/app/manifests/v1');
  t.equal(retry?.headers.authorization, 'Bearer tok-1', 'retried with the token');
  t.equal(srv.requests.length, 3);

  const blob = await readAll(await c.getBlob(loc(srv, 'org/app'), layerDigest));
  t.ok(blob.equals(layer));
  t.equal(tokensIssued(), 1, 'the token is reused for the same repository');
  t.equal(srv.requests.at(-1)?.headers.authorization, 'Bearer tok-1');
});

t.test(
  'contract: bearer scope follows the repository; a namespace credential is used',
  async (t) => {
    const { srv } = await registry(t, {
      ...oneImage('team/sub/app'),
      auth: { kind: 'bearer', user: 'bob', password: 'pw' },
    });
    const c = await client(t, { [`${srv.host}/team`]: 'bob:pw', [srv.host]: 'wrong:creds' });
    await c.getManifest(loc(srv, 'team/sub/app'), 'v1');
    const tokenReq = srv.requests.find((r) => r.url.startsWith('/token'));
    t.equal(
      new URL(tokenReq?.url ?? '/', srv.url).searchParams.get('scope'),
      'repository:team/sub/app:pull',
    );
    t.equal(
      tokenReq?.headers.authorization,
      `Basic ${b64('bob:pw')}`,
      'most specific auth.json key',
    );
  },
);

t.test('contract: anonymous bearer token when the AuthStore has nothing', async (t) => {
  const { srv } = await registry(t, { ...oneImage('org/app'), auth: { kind: 'bearer' } });
  const c = await client(t);
  t.equal((await c.getManifest(loc(srv, 'org/app'), 'v1')).digest, manifestDigest);
  const tokenReq = srv.requests.find((r) => r.url.startsWith('/token'));
  t.ok(tokenReq, 'a token was requested');
  t.notOk(tokenReq?.headers.authorization, 'without credentials');
});

t.test('contract: an expired bearer token is renewed', async (t) => {
  const reg = await registry(t, {
    ...oneImage('org/app'),
    auth: { kind: 'bearer', user: 'u', password: 'p' },
  });
  const c = await client(t, { [reg.srv.host]: 'u:p' });
  await c.getManifest(loc(reg.srv, 'org/app'), 'v1');
  // Issue a new token behind the client's back: tok-1 is no longer accepted.
  await fetch(`${reg.srv.url}/token`, { headers: { authorization: `Basic ${b64('u:p')}` } }).then(
    (r) => r.arrayBuffer(),
  );
  t.equal(reg.tokensIssued(), 2);
  const blob = await readAll(await c.getBlob(loc(reg.srv, 'org/app'), layerDigest));
  t.ok(blob.equals(layer), 'request succeeds after re-authorizing');
  t.equal(reg.tokensIssued(), 3, 'a fresh token was fetched');
  t.equal(reg.srv.requests.at(-1)?.headers.authorization, 'Bearer tok-3');
});

t.test('contract: token service refusing the credentials is UNAUTHORIZED', async (t) => {
  const { srv } = await registry(t, {
    ...oneImage('org/app'),
    auth: { kind: 'bearer', user: 'alice', password: 'right' },
  });
  const c = await client(t, { [srv.host]: 'alice:wrong' });
  await t.rejects(c.getManifest(loc(srv, 'org/app'), 'v1'), ociErr('UNAUTHORIZED'));
  t.equal(srv.requests.filter((r) => r.url.startsWith('/token')).length, 1, 'not retried');
});

t.test('contract: basic auth', async (t) => {
  const { srv } = await registry(t, {
    ...oneImage('org/app'),
    auth: { kind: 'basic', user: 'carol', password: 'pw' },
  });
  const c = await client(t, { [srv.host]: 'carol:pw' });
  t.equal((await c.getManifest(loc(srv, 'org/app'), 'v1')).digest, manifestDigest);
  const reqs = api(srv);
  t.notOk(reqs[0]?.headers.authorization, 'anonymous first');
  t.equal(reqs[1]?.headers.authorization, `Basic ${b64('carol:pw')}`, 'then Basic');
  t.equal(reqs.length, 2);
  await c.getBlob(loc(srv, 'org/app'), layerDigest).then(readAll);
  t.equal(
    api(srv).at(-1)?.headers.authorization,
    `Basic ${b64('carol:pw')}`,
    'cached for the repository',
  );
  t.equal(api(srv).length, 3, 'no second challenge');

  const wrong = await client(t, { [srv.host]: 'carol:nope' });
  await t.rejects(
    wrong.getManifest(loc(srv, 'org/app'), 'v1'),
    ociErr('UNAUTHORIZED'),
    'wrong password',
  );
  const none = await client(t);
  await t.rejects(
    none.getManifest(loc(srv, 'org/app'), 'v1'),
    ociErr('UNAUTHORIZED'),
    'no credentials',
  );
});

t.test('contract: 5xx and 429 are retried until success', async (t) => {
  for (const status of [503, 500, 429]) {
    const { srv } = await registry(t, { ...oneImage('org/app'), failFirst: { count: 2, status } });
    const retries: string[] = [];
    const c = await client(t, {}, { onRetry: (m) => retries.push(m) });
    const m = await c.getManifest(loc(srv, 'org/app'), 'v1');
    t.equal(m.digest, manifestDigest, `${status}: eventually succeeds`);
    t.equal(api(srv).length, 3, `${status}: two failures and one success`);
    t.equal(retries.length, 2, `${status}: onRetry reported each retry`);
  }
});

t.test('contract: retries stop after `attempts`', async (t) => {
  const { srv } = await registry(t, {
    ...oneImage('org/app'),
    failFirst: { count: 100, status: 502 },
  });
  const c = await client(t, {}, { attempts: 3 });
  await t.rejects(c.getManifest(loc(srv, 'org/app'), 'v1'), ociErr('REGISTRY_ERROR'));
  t.equal(api(srv).length, 3);
});

t.test('contract: 404 is NOT_FOUND without retries', async (t) => {
  const { srv } = await registry(t, oneImage('org/app'));
  const retries: string[] = [];
  const c = await client(t, {}, { onRetry: (m) => retries.push(m) });
  await t.rejects(c.getManifest(loc(srv, 'org/app'), 'nope'), ociErr('NOT_FOUND'), 'unknown tag');
  await t.rejects(
    c.getManifest(loc(srv, 'org/missing'), 'v1'),
    ociErr('NOT_FOUND'),
    'unknown repository',
  );
  await t.rejects(c.getBlob(loc(srv, 'org/app'), sha('nope')), ociErr('NOT_FOUND'), 'unknown blob');
  // a missing manifest also asks the tag list once, to say whether the repository or the tag is unknown
  const paths = api(srv).map((r) => r.url);
  t.equal(
    paths.filter((p) => /\/tags\/list/.test(p)).length,
    2,
    'one tag list per missing manifest',
  );
  t.equal(
    paths.filter((p) => !/\/tags\/list/.test(p)).length,
    3,
    'one request each, never retried',
  );
  t.strictSame(retries, []);
});

t.test('contract: a connection dropped mid-manifest is retried', async (t) => {
  let calls = 0;
  const srv = await serve(t, (_req, res) => {
    calls++;
    res.writeHead(200, {
      'content-type': MediaType.OciManifest,
      'content-length': manifestBytes.length,
    });
    if (calls === 1) {
      res.write(manifestBytes.subarray(0, 20));
      setTimeout(() => res.destroy(), 10);
      return;
    }
    res.end(manifestBytes);
  });
  const c = await client(t);
  t.equal((await c.getManifest(loc(srv, 'org/app'), manifestDigest)).digest, manifestDigest);
  t.equal(calls, 2);
});

t.test('contract: manifest by digest must hash to that digest', async (t) => {
  const other = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MediaType.OciManifest,
      config: { mediaType: MediaType.OciConfig, digest: sha('x'), size: 1 },
      layers: [],
    }),
  );
  const { srv } = await registry(t, {
    manifests: {
      'org/app': {
        [manifestDigest]: { bytes: other, mediaType: MediaType.OciManifest },
        v1: { bytes: other, mediaType: MediaType.OciManifest },
      },
    },
  });
  const c = await client(t);
  await t.rejects(c.getManifest(loc(srv, 'org/app'), manifestDigest), ociErr('DIGEST_MISMATCH'));
  const byTag = await c.getManifest(loc(srv, 'org/app'), 'v1');
  t.equal(byTag.digest, sha(other), 'by tag there is nothing to check; the digest is computed');

  const good = await registry(t, oneImage('org/app'));
  t.equal(
    (await c.getManifest(loc(good.srv, 'org/app'), manifestDigest)).digest,
    manifestDigest,
    'matching bytes are accepted',
  );
});

t.test('contract: invalid manifests are rejected', async (t) => {
  const { srv } = await registry(t, {
    manifests: {
      'org/app': {
        notjson: { bytes: Buffer.from('<html>'), mediaType: 'text/html' },
        huge: { bytes: Buffer.alloc(4 * 1024 * 1024 + 10, 0x20), mediaType: MediaType.OciManifest },
      },
    },
  });
  const c = await client(t, {}, { attempts: 1 });
  await t.rejects(c.getManifest(loc(srv, 'org/app'), 'notjson'), ociErr('INVALID_MANIFEST'));
  await t.rejects(
    c.getManifest(loc(srv, 'org/app'), 'huge'),
    ociErr('INVALID_MANIFEST'),
    'larger than 4 MiB',
  );
});

t.test('contract: Range resume when the registry honours Range (206)', async (t) => {
  const { srv } = await registry(t, oneImage('org/app'));
  const c = await client(t);
  const offset = 12_345;
  const rest = await readAll(await c.getBlob(loc(srv, 'org/app'), layerDigest, offset));
  t.equal(api(srv).at(-1)?.headers.range, `bytes=${offset}-`, 'Range header sent');
  t.ok(rest.equals(layer.subarray(offset)), 'the bytes from the offset');
  await readAll(await c.getBlob(loc(srv, 'org/app'), layerDigest, 0));
  t.notOk(api(srv).at(-1)?.headers.range, 'no Range header from offset 0');
});

t.test(
  'contract: Range resume when the registry ignores Range (200): the client skips the first N bytes',
  async (t) => {
    const { srv } = await registry(t, { ...oneImage('org/app'), range: false });
    const c = await client(t);
    for (const offset of [1, 16_384, 65_536, layer.length - 1]) {
      const rest = await readAll(await c.getBlob(loc(srv, 'org/app'), layerDigest, offset));
      t.equal(
        api(srv).at(-1)?.headers.range,
        `bytes=${offset}-`,
        `offset ${offset}: Range asked for`,
      );
      t.equal(rest.length, layer.length - offset, `offset ${offset}: length`);
      t.ok(rest.equals(layer.subarray(offset)), `offset ${offset}: content`);
    }
  },
);

t.test(
  'contract: blob redirects to another origin keep Range and drop Authorization',
  async (t) => {
    const storage = await serve(t, (req, res) => {
      const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
      const start = range ? Number(range[1]) : 0;
      res.writeHead(range ? 206 : 200, { 'content-length': layer.length - start });
      res.end(layer.subarray(start));
    });
    const reg = await registry(t, {
      ...oneImage('org/app'),
      auth: { kind: 'bearer', user: 'u', password: 'p' },
    });
    // Wrap: blob requests with a valid token are redirected to the storage server.
    const front = await serve(t, async (req, res) => {
      const url = req.url ?? '/';
      if (url.includes('/blobs/') && req.headers.authorization?.startsWith('Bearer ')) {
        res.writeHead(307, { location: `${storage.url}/bucket/${layerDigest}?sig=abc` }).end();
        return;
      }
      const fwd: Record<string, string> = {};
      for (const h of ['authorization', 'accept', 'range'])
        if (typeof req.headers[h] === 'string') fwd[h] = req.headers[h] as string;
      const r = await fetch(`${reg.srv.url}${url}`, { headers: fwd });
      const headers: Record<string, string> = {};
      for (const h of ['content-type', 'www-authenticate', 'content-range']) {
        const v = r.headers.get(h);
        if (v !== null) headers[h] = v;
      }
      res.writeHead(r.status, headers).end(Buffer.from(await r.arrayBuffer()));
    });
    const c = await client(t, { [front.host]: 'u:p', [reg.srv.host]: 'u:p' });
    const rest = await readAll(await c.getBlob(loc(front, 'org/app'), layerDigest, 100));
    t.ok(rest.equals(layer.subarray(100)), 'content from the storage server');
    const [hit] = storage.requests;
    t.ok(hit, 'the redirect was followed');
    t.equal(hit?.headers.range, 'bytes=100-', 'Range kept');
    t.notOk(hit?.headers.authorization, 'Authorization not sent to another origin');
  },
);

t.test(
  'skipBytes destroyed before its first read ends its source too (a response body would keep its socket until the body timeout)',
  async (t) => {
    const src = new Readable({
      read() {
        /* never answers */
      },
    });
    const out = skipBytes(src, 10);
    out.destroy();
    await new Promise((r) => out.once('close', r));
    t.ok(src.destroyed, 'the source is destroyed with it');
    const done = new Readable({
      read() {
        this.push(Buffer.from('abcdef'));
        this.push(null);
      },
    });
    t.equal(
      (await readAll(skipBytes(done, 2))).toString(),
      'cdef',
      'read to its end it still gives every byte after the skip',
    );
  },
);

t.test('skipBytes drops exactly n bytes across chunk boundaries', async (t) => {
  const chunks = [Buffer.from('abc'), Buffer.from('defg'), Buffer.from(''), Buffer.from('hij')];
  const all = Buffer.concat(chunks).toString();
  for (let n = 0; n <= all.length + 1; n++) {
    const out = await readAll(skipBytes(Readable.from(chunks.map((c) => Buffer.from(c))), n));
    t.equal(out.toString(), all.slice(n), `n=${n}`);
  }
});

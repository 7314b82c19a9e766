// The authenticated metrics listener (packages/status metrics-listener.ts, metrics-auth.ts,
// metrics-tls.ts, metrics-connections.ts) over real TLS: a site certificate or the self-signed one
// the agent keeps; 401 without credentials, 403 without the rule, 503 when the API server cannot
// answer, a client certificate from the configured CA still held to the access review; answers
// kept for their TTL; a flood of made-up tokens reviewed at a bounded rate while a cached scrape
// is still answered; silent and stalled sockets never keep a scrape out; headers, method, body and
// concurrency bounded. The API server here is a counting stand-in of the two reviews (the real
// RBAC path: metrics-prometheus.test.ts).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { randomBytes, X509Certificate } from 'node:crypto';
import { request } from 'node:https';
import { connect as tcpConnect, createServer as createNetServer, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { chmod, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  fileServingTls,
  keyMatches,
  listenLogged,
  makeSelfSigned,
  MAX_METRICS_HEADER_BYTES,
  MAX_METRICS_IN_FLIGHT,
  METRICS_CONNECTION_LIMITS,
  METRICS_HANDSHAKE_TIMEOUT_MS,
  Metrics,
  MetricsAuth,
  readClientCa,
  RENEW_BEFORE_MS,
  REVIEW_CACHE_TTL_MS,
  REVIEW_DENIED_TTL_MS,
  SELF_SIGNED_DAYS,
  selfSignedServingTls,
  siteOrSelfSigned,
  startMetricsListener,
  UNKNOWN_CREDENTIAL_RATE,
  type Identity,
  type MetricsListener,
  type Reviews,
} from '@offline-bundle/status';
import { issueClientCert, makeTestCa } from '../helpers/test-ca.mjs';
import { tmpdir } from '../helpers/tmp.mjs';

interface Got {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}
interface GetOpts {
  ca?: string | Buffer;
  token?: string;
  headers?: Record<string, string>;
  method?: string;
  cert?: Buffer;
  key?: Buffer;
  from?: string;
}

function get(url: string, opts: GetOpts = {}): Promise<Got> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: opts.method ?? 'GET',
        ca: opts.ca,
        cert: opts.cert,
        key: opts.key,
        agent: false,
        ...(opts.from ? { localAddress: opts.from } : {}),
        headers: {
          ...(opts.token ? { Authorization: `Bearer ${opts.token}` } : {}),
          ...opts.headers,
        },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Tokens and who may read the metrics, counting the reviews asked for; `down` fails both as a lost API server; `latencyMs` delays each. */
function reviews(tokens: Record<string, string>, allowed: Set<string>, latencyMs = 0) {
  const calls = { authn: 0, authz: 0 };
  let down = false;
  let hold: Promise<void> | undefined;
  const r: Reviews = {
    async authenticate(token) {
      calls.authn++;
      if (down) throw new Error('connect ECONNREFUSED');
      await hold;
      if (latencyMs) await sleep(latencyMs);
      const user = tokens[token];
      return user ? { user, groups: ['system:authenticated'] } : undefined;
    },
    async allowed(who: Identity) {
      calls.authz++;
      if (down) throw new Error('connect ECONNREFUSED');
      if (latencyMs) await sleep(latencyMs);
      return allowed.has(who.user);
    },
  };
  return {
    r,
    calls,
    setDown: (v: boolean) => {
      down = v;
    },
    setHold: (p: Promise<void> | undefined) => {
      hold = p;
    },
  };
}

async function selfSignedListener(
  t: { teardown(fn: () => unknown): void },
  rv: Reviews,
  rate?: typeof UNKNOWN_CREDENTIAL_RATE,
): Promise<{ l: MetricsListener; ca: Buffer }> {
  const dir = await tmpdir(t, 'ob-metrics-');
  const own = await selfSignedServingTls(dir, ['127.0.0.1'], 'x');
  const l = await startMetricsListener({
    metrics: new Metrics(),
    auth: new MetricsAuth(rv, Date.now, rate),
    host: '127.0.0.1',
    port: 0,
    tls: own.load,
  });
  t.teardown(() => l.close());
  return { l, ca: await readFile(own.certFile) };
}

t.test(
  'self-signed: made once under the state dir for the address, key 0600, kept across starts; 401/403/200 as reviewed; answers cached for their TTL',
  async (t) => {
    const dir = await tmpdir(t, 'ob-metrics-l-');
    const own = await selfSignedServingTls(dir, ['127.0.0.1'], 'bundle-agent metrics test');
    t.equal(own.made, true);
    t.equal(
      (await stat(join(dir, 'metrics-tls/tls.key'))).mode & 0o777,
      0o600,
      'the key is root-only',
    );
    const again = await selfSignedServingTls(dir, ['127.0.0.1'], 'bundle-agent metrics test');
    t.equal(again.made, false, 'kept: Prometheus goes on trusting it');
    t.equal(
      (await selfSignedServingTls(dir, ['10.0.0.7'], 'x')).made,
      true,
      'a new address: a new certificate',
    );
    await selfSignedServingTls(dir, ['127.0.0.1'], 'x');
    let now = 1_000_000;
    const rv = reviews({ good: 'prometheus', norbac: 'nobody' }, new Set(['prometheus']));
    const metrics = new Metrics();
    const l = await startMetricsListener({
      metrics,
      auth: new MetricsAuth(rv.r, () => now),
      host: '127.0.0.1',
      port: 0,
      tls: (await selfSignedServingTls(dir, ['127.0.0.1'], 'x')).load,
    });
    t.teardown(() => l.close());
    metrics.trackListener(l);
    const ca = await readFile(join(dir, 'metrics-tls/tls.crt'));
    t.equal((await get(l.url, { ca })).status, 401, 'no credentials');
    t.equal(
      (await get(l.url, { ca, token: 'forged' })).status,
      401,
      'a token the API server does not know',
    );
    t.equal(
      (await get(l.url, { ca, headers: { Authorization: 'Basic eDp5' } })).status,
      401,
      'not a bearer token',
    );
    const refused = await get(l.url, { ca, token: 'norbac' });
    t.equal(refused.status, 403, 'a token without get on nodebundlestatuses/metrics');
    t.match(
      refused.body,
      /user=nobody, verb=get, resource=nodebundlestatuses, subresource=metrics/,
    );
    const ok = await get(l.url, { ca, token: 'good' });
    t.equal(ok.status, 200);
    t.match(
      ok.body,
      /^bundle_agent_metrics_requests_total\{code="401"\} 3$/m,
      'the refusals are counted in the metrics themselves',
    );
    t.equal(
      (await get(`${l.url.replace('/metrics', '/status')}`, { ca, token: 'good' })).status,
      404,
      'only /metrics',
    );
    t.equal((await get(l.url, { ca })).status, 401, 'no path is open without credentials');
    const before = { ...rv.calls };
    await get(l.url, { ca, token: 'good' });
    await get(l.url, { ca, token: 'norbac' });
    t.strictSame(rv.calls, before, 'answers within their TTL are not asked again');
    now += REVIEW_DENIED_TTL_MS + 1;
    await get(l.url, { ca, token: 'norbac' });
    t.equal(
      rv.calls.authz,
      before.authz + 1,
      'a refusal is asked again after REVIEW_DENIED_TTL_MS',
    );
    await get(l.url, { ca, token: 'good' });
    t.equal(rv.calls.authz, before.authz + 1, 'an allowed caller still cached');
    now += REVIEW_CACHE_TTL_MS;
    await get(l.url, { ca, token: 'good' });
    t.equal(rv.calls.authz, before.authz + 2, '...until REVIEW_CACHE_TTL_MS');
    rv.setDown(true);
    now += REVIEW_CACHE_TTL_MS + 1;
    t.equal(
      (await get(l.url, { ca, token: 'good' })).status,
      503,
      'the API server away: 503, not an open door',
    );
    rv.setDown(false);
    t.equal(
      (await get(l.url, { ca, token: 'good' })).status,
      200,
      'and back: nothing was cached from the failure',
    );
  },
);

t.test(
  'a site certificate, and client certificates from metrics.clientCA: identity from the certificate, access still reviewed; the CA file guarded as the key',
  async (t) => {
    const dir = await tmpdir(t, 'ob-metrics-c-');
    const ca = await makeTestCa(dir, { names: ['127.0.0.1'] });
    const allowedCert = await issueClientCert(ca, dir, 'prom', {
      cn: 'system:serviceaccount:openshift-monitoring:prometheus-k8s',
      o: ['system:serviceaccounts'],
    });
    const otherCert = await issueClientCert(ca, dir, 'other', { cn: 'someone', o: [] });
    // two CNs: the API server reads no single user from it
    const two = spawnSync(
      'sh',
      [
        '-c',
        `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout two.key -out two.csr -subj '/CN=prometheus/CN=system:admin' 2>/dev/null && printf 'extendedKeyUsage=clientAuth\\n' > two.ext && openssl x509 -req -in two.csr -CA '${ca.caCert}' -CAkey '${ca.caKey}' -CAcreateserial -out two.crt -days 2 -extfile two.ext 2>/dev/null`,
      ],
      { cwd: dir },
    );
    t.equal(two.status, 0, 'a certificate with two CNs made');
    const rv = reviews(
      {},
      new Set(['system:serviceaccount:openshift-monitoring:prometheus-k8s', 'prometheus']),
    );
    const l = await startMetricsListener({
      metrics: new Metrics(),
      auth: new MetricsAuth(rv.r),
      host: '127.0.0.1',
      port: 0,
      tls: fileServingTls(ca.serverCert, ca.serverKey),
      clientCa: () => readClientCa(ca.caCert),
    });
    t.teardown(() => l.close());
    const caPem = await readFile(ca.caCert);
    const withCert = async (c: { cert: string; key: string }) =>
      get(l.url, { ca: caPem, cert: await readFile(c.cert), key: await readFile(c.key) });
    t.equal((await withCert(allowedCert)).status, 200, 'a certificate of the CA, its user allowed');
    t.equal(
      (await withCert(otherCert)).status,
      403,
      'a certificate of the CA, its user not allowed: 403',
    );
    t.equal(
      (await withCert({ cert: join(dir, 'two.crt'), key: join(dir, 'two.key') })).status,
      401,
      'a certificate with several CNs is no identity',
    );
    t.equal(rv.calls.authn, 0, 'no TokenReview for a certificate');
    const selfDir = await tmpdir(t, 'ob-metrics-c2-');
    const stranger = await makeTestCa(selfDir, { names: ['127.0.0.1'] });
    t.equal(
      (await withCert({ cert: stranger.clientCert, key: stranger.clientKey })).status,
      401,
      'a certificate of another CA is no identity',
    );

    await chmod(ca.caCert, 0o664);
    await t.rejects(
      readClientCa(ca.caCert),
      /metrics clientCA .* writable by its group .*chmod go-w/,
      'a group-writable client CA is refused: whoever writes it mints identities',
    );
    await chmod(ca.caCert, 0o644);
    await writeFile(join(dir, 'not-a-ca.pem'), 'hello\n', { mode: 0o644 });
    await t.rejects(readClientCa(join(dir, 'not-a-ca.pem')), /holds no PEM certificate/);
  },
);

t.test(
  'bounds: method and body close the connection, header size, requests waiting for the API server; a cached scrape never waits for a slot',
  async (t) => {
    const rv = reviews({ good: 'p' }, new Set(['p']));
    const { l, ca } = await selfSignedListener(t, rv.r, {
      ...UNKNOWN_CREDENTIAL_RATE,
      perAddressBurst: 100,
      burst: 100,
    });
    const post = await get(l.url, { ca, token: 'good', method: 'POST' });
    t.equal(post.status, 405);
    t.equal(post.headers.connection, 'close', 'no body is drained behind a 405');
    const body = await get(l.url, { ca, token: 'good', headers: { 'Content-Length': '5' } });
    t.equal(body.status, 413, 'a body is refused unread');
    t.equal(body.headers.connection, 'close');
    t.equal(
      (
        await get(l.url, { ca, token: 'x'.repeat(MAX_METRICS_HEADER_BYTES) }).catch((e: Error) => ({
          status: e.message,
        }))
      ).status,
      431,
      `headers over ${MAX_METRICS_HEADER_BYTES} bytes`,
    );
    t.equal((await get(l.url, { ca, token: 'good' })).status, 200, "the scraper's answer cached");
    let release!: () => void;
    rv.setHold(
      new Promise<void>((r) => {
        release = r;
      }),
    );
    // distinct tokens: none cached, each holds a slot until released
    const held = Array.from({ length: MAX_METRICS_IN_FLIGHT }, (_, i) =>
      get(l.url, { ca, token: `held-${i}` }),
    );
    await sleep(300);
    t.equal(
      (await get(l.url, { ca, token: 'unseen' })).status,
      503,
      `more than ${MAX_METRICS_IN_FLIGHT} waiting for the API server: 503`,
    );
    t.equal(
      (await get(l.url, { ca, token: 'good' })).status,
      200,
      'a cached answer takes no slot: Prometheus is served meanwhile',
    );
    release();
    t.strictSame(
      (await Promise.all(held)).map((g) => g.status),
      Array(MAX_METRICS_IN_FLIGHT).fill(401),
    );
    rv.setHold(undefined);
    t.equal((await get(l.url, { ca, token: 'unseen-2' })).status, 401, 'slots free again');
    t.equal(l.stats.answers['503'], 1);
  },
);

t.test(
  'a flood of made-up tokens (stand-in API server, 50 ms a review): reviews at a bounded rate, one review for one token however many ask, the cached scrape always 200',
  async (t) => {
    const rv = reviews({ good: 'p', fresh: 'p' }, new Set(['p']), 50);
    const { l, ca } = await selfSignedListener(t, rv.r);
    t.equal((await get(l.url, { ca, token: 'good' })).status, 200);
    const base = rv.calls.authn;
    const same = await Promise.all(
      Array.from({ length: 8 }, () => get(l.url, { ca, token: 'fresh', from: '127.0.0.9' })),
    );
    t.strictSame(
      same.map((g) => g.status),
      Array(8).fill(200),
      'eight requests with one unseen token at once',
    );
    t.equal(rv.calls.authn - base, 1, '...cost one TokenReview');
    const start = rv.calls.authn;
    const seconds = 3;
    const until = Date.now() + seconds * 1000;
    const statuses: Record<number, number> = {};
    const flood = async (from: string) => {
      while (Date.now() < until) {
        const g = await get(l.url, { ca, token: randomBytes(16).toString('hex'), from }).catch(
          () => ({ status: 0 }),
        );
        statuses[g.status] = (statuses[g.status] ?? 0) + 1;
      }
    };
    const scrapes: number[] = [];
    const scrape = async () => {
      while (Date.now() < until) {
        scrapes.push((await get(l.url, { ca, token: 'good' })).status);
        await sleep(100);
      }
    };
    await Promise.all([
      ...['127.0.0.11', '127.0.0.12', '127.0.0.13', '127.0.0.14'].map(flood),
      scrape(),
    ]);
    const reviewed = rv.calls.authn - start;
    const r = UNKNOWN_CREDENTIAL_RATE;
    const bound = r.burst + r.perSecond * (seconds + 1);
    t.ok(
      reviewed <= bound,
      `${reviewed} TokenReviews for ${Object.values(statuses).reduce((a, b) => a + b, 0)} flood requests (${JSON.stringify(statuses)}): at most ${bound}`,
    );
    t.ok((statuses[429] ?? 0) > 0, 'the rest refused with 429 unreviewed');
    t.ok(
      scrapes.length >= 10 && scrapes.every((s) => s === 200),
      `every scrape with the cached token answered 200 (${scrapes.length})`,
    );
  },
);

async function openSilent(port: number, from: string, n: number): Promise<Socket[]> {
  return Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve) => {
          const s: Socket = tcpConnect({ host: '127.0.0.1', port, localAddress: from }, () =>
            resolve(s),
          );
          s.on('error', () => {});
        }),
    ),
  );
}

async function openHandshaken(port: number, from: string, n: number): Promise<Socket[]> {
  return Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve) => {
          const s: Socket = tlsConnect(
            {
              socket: tcpConnect({ host: '127.0.0.1', port, localAddress: from }),
              rejectUnauthorized: false,
            },
            () => resolve(s),
          );
          s.on('error', () => resolve(s));
        }),
    ),
  );
}

t.test(
  'sockets that never speak, or stall after the handshake, from one address or several: a scrape is still served within 2 s; a silent one is closed after the handshake timeout',
  async (t) => {
    const rv = reviews({ good: 'p' }, new Set(['p']));
    const { l, ca } = await selfSignedListener(t, rv.r);
    const port = Number(new URL(l.url).port);
    const { max } = METRICS_CONNECTION_LIMITS;
    const silent = await openSilent(port, '127.0.0.1', max);
    const stalled: Socket[] = [];
    for (let a = 0; a < 8; a++)
      stalled.push(...(await openHandshaken(port, `127.0.0.${21 + a}`, max / 8)));
    t.teardown(() => {
      for (const s of [...silent, ...stalled]) s.destroy();
    });
    await sleep(100);
    t.ok(
      l.connections.open <= max + METRICS_CONNECTION_LIMITS.perAddress,
      `${l.connections.open} open of ${2 * max} attempted`,
    );
    for (const from of ['127.0.0.1', '127.0.0.40']) {
      const t0 = Date.now();
      const g = await get(l.url, { ca, token: 'good', from });
      t.equal(
        g.status,
        200,
        `a scrape from ${from} with ${max} silent and ${max} stalled sockets held`,
      );
      t.ok(Date.now() - t0 < 2000, `within 2 s (${Date.now() - t0} ms)`);
    }
    t.ok(l.connections.dropped > 0, `sockets dropped for room: ${l.connections.dropped}`);
    const lone = (await openSilent(port, '127.0.0.50', 1))[0]!;
    const t0 = Date.now();
    await new Promise((r) => lone.once('close', r));
    const took = Date.now() - t0;
    t.ok(
      took >= METRICS_HANDSHAKE_TIMEOUT_MS - 100 && took < METRICS_HANDSHAKE_TIMEOUT_MS + 1500,
      `a TCP connection without a ClientHello closed after ${took} ms`,
    );
  },
);

t.test(
  'the self-signed certificate: a key that does not match is remade; one near its end is renewed while the listener runs and served at the next reload',
  async (t) => {
    const dir = await tmpdir(t, 'ob-metrics-r-');
    const made: string[] = [];
    const own = await selfSignedServingTls(dir, ['127.0.0.1'], 'x', (f) => made.push(f));
    const keyFile = join(dir, 'metrics-tls/tls.key');
    const certFile = join(dir, 'metrics-tls/tls.crt');
    // a crash between the two writes: a new key beside the old certificate
    await writeFile(`${keyFile}.new`, makeSelfSigned(['127.0.0.1'], 'x').key, { mode: 0o600 });
    await rename(`${keyFile}.new`, keyFile);
    t.notOk(
      keyMatches(await readFile(certFile), await readFile(keyFile)),
      'the pair no longer matches',
    );
    t.equal((await selfSignedServingTls(dir, ['127.0.0.1'], 'x')).made, true, 'remade at start');
    t.ok(keyMatches(await readFile(certFile), await readFile(keyFile)), 'a matching pair again');

    const rv = reviews({ good: 'p' }, new Set(['p']));
    const l = await startMetricsListener({
      metrics: new Metrics(),
      auth: new MetricsAuth(rv.r),
      host: '127.0.0.1',
      port: 0,
      tls: own.load,
      reloadMs: 200,
    });
    t.teardown(() => l.close());
    const served = () =>
      new Promise<string>((resolve, reject) => {
        const s = tlsConnect(
          { host: '127.0.0.1', port: Number(new URL(l.url).port), rejectUnauthorized: false },
          () => {
            resolve(s.getPeerCertificate().serialNumber);
            s.destroy();
          },
        );
        s.on('error', reject);
      });
    const first = await served();
    // as if the daemon had run for most of the certificate's life
    const old = makeSelfSigned(
      ['127.0.0.1'],
      'x',
      new Date(Date.now() - (SELF_SIGNED_DAYS * 24 * 3600_000 - RENEW_BEFORE_MS + 3600_000)),
    );
    await writeFile(`${keyFile}.new`, old.key, { mode: 0o600 });
    await rename(`${keyFile}.new`, keyFile);
    await writeFile(certFile, old.cert);
    await sleep(600);
    const renewed = new X509Certificate(await readFile(certFile));
    t.ok(
      Date.parse(renewed.validTo) - Date.now() > RENEW_BEFORE_MS,
      `renewed while running (ends ${renewed.validTo})`,
    );
    t.ok(made.length >= 1, 'the renewal is told (the daemon logs it)');
    const now = await served();
    t.not(now, first, 'new connections get the renewed certificate');
    t.equal(now, renewed.serialNumber);
  },
);

t.test(
  'addresses in the certificate: an IPv4-mapped one as IPv4; a zone ID and the unspecified address refused',
  async (t) => {
    const { cert } = makeSelfSigned(['::ffff:10.0.0.5', 'fd00::1', '64:ff9b::10.0.0.6'], 'x');
    const x = new X509Certificate(cert);
    t.equal(x.checkIP('10.0.0.5'), '10.0.0.5', 'the mapped address names its IPv4 address');
    t.equal(x.checkIP('fd00::1'), 'fd00::1');
    t.equal(
      x.checkIP('64:ff9b::a00:6'),
      '64:ff9b::a00:6',
      'an IPv6 address written with a dotted tail',
    );
    t.throws(() => makeSelfSigned(['fe80::1%eth0'], 'x'), /fe80::1%eth0 has a zone ID/);
    t.throws(() => makeSelfSigned(['0.0.0.0'], 'x'), /0\.0\.0\.0 is the unspecified address/);
    t.throws(() => makeSelfSigned(['::'], 'x'), /:: is the unspecified address/);
  },
);

t.test(
  "a configured certificate missing (another distribution's kubelet path): the self-signed one serves, said once; back to the site's when it is there",
  async (t) => {
    const dir = await tmpdir(t, 'ob-metrics-f-');
    const ca = await makeTestCa(dir, { names: ['127.0.0.1'] });
    const certPath = join(dir, 'site.crt');
    const keyPath = join(dir, 'site.key');
    const said: string[] = [];
    const load = siteOrSelfSigned(
      fileServingTls(certPath, keyPath),
      async () => (await selfSignedServingTls(dir, ['127.0.0.1'], 'x')).load,
      (self, why) => said.push(`${self} ${why}`),
    );
    const a = await load();
    await load();
    t.match(new X509Certificate(a.cert).subject, /CN=x/, 'the self-signed one');
    t.equal(said.length, 1, 'said once, not at every reload');
    t.match(said[0], /^true cannot read the metrics cert .*site\.crt/);
    await writeFile(certPath, await readFile(ca.serverCert));
    await writeFile(keyPath, await readFile(ca.serverKey), { mode: 0o600 });
    const b = await load();
    t.match(
      new X509Certificate(b.cert).subject,
      /CN=server/,
      "the site's certificate once it is there",
    );
    t.equal(said.length, 2);
    await chmod(keyPath, 0o644);
    await t.rejects(
      load(),
      /readable by others/,
      'a file that is there but unsafe stays an error (no fallback)',
    );
  },
);

t.test(
  'an error on the listening socket after listen (an accept failing: EMFILE) is logged, and the listener goes on',
  async (t) => {
    const server = createNetServer();
    const said: string[] = [];
    await listenLogged(server, 0, '127.0.0.1', (m) => said.push(m));
    t.teardown(() => server.close());
    server.emit('error', Object.assign(new Error('accept EMFILE'), { code: 'EMFILE' }));
    t.strictSame(said, ["the listener's socket: accept EMFILE"], 'logged, not thrown');
    t.ok(server.listening, 'still listening');
    const taken = createNetServer();
    await t.rejects(
      listenLogged(taken, (server.address() as { port: number }).port, '127.0.0.1', () => {}),
      /EADDRINUSE/,
      'a port taken still fails the start',
    );
  },
);

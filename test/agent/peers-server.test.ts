// The peer server (issue #22 items 3-4): mutual TLS or nothing, every limit SECURITY.md names,
// downloader slots with 503 + Retry-After, the pause switch, and the upload cap proved with an
// injected clock (tokens granted against time the bucket waited), never a timed transfer.
import t from 'tap';
import { request, Agent } from 'node:https';
import { connect } from 'node:tls';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import {
  MAX_PEER_PEM_BYTES,
  PEER_LIMITS,
  peerServerOptions,
  PeerClient,
  PeerFault,
  TokenBucket,
  loadPeerCredentials,
  parseConfig,
  peerSlots,
  type BucketClock,
  type PeerCredentials,
} from '@offline-bundle/agent';
import { FixedDirectory, MiB, altered, endpoint, peerWorld } from './peers-setup.js';
import { makeTestCa } from '../helpers/test-ca.mjs';
import { until } from '../helpers/until.js';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** One HTTPS request as any client would make it: `creds` undefined sends no certificate. */
function raw(
  url: string,
  creds: Partial<PeerCredentials> & { ca: Buffer },
  opts: { headers?: Record<string, string>; method?: string; agent?: Agent } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        ca: creds.ca,
        cert: creds.cert,
        key: creds.key,
        checkServerIdentity: () => undefined,
        method: opts.method ?? 'GET',
        headers: opts.headers ?? {},
        ...(opts.agent ? { agent: opts.agent } : { agent: false }),
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** A clock a test moves: the bucket "sleeps" by advancing it. */
class FakeClock implements BucketClock {
  t = 0;
  now = () => this.t;
  sleep = async (ms: number) => {
    this.t += ms;
    await new Promise((r) => setImmediate(r));
  };
}

const w = await peerWorld(t, [3 * MiB]);

const blobOf = (w: Awaited<ReturnType<typeof peerWorld>>, i = 0) =>
  w.manifest.blobs.filter((b) => b.mediaType.includes('layer')).sort((a, b) => b.size - a.size)[i]!;

t.test(
  'no client certificate, or one from another CA: the handshake fails and nothing is served',
  async (t) => {
    const s = await w.server();
    const url = `${s.url}/v1/bundles/${w.approval.manifestDigest}/bundle.json`;
    t.equal(
      (await raw(url, w.credentials)).status,
      200,
      'a peer with the node certificate is served',
    );
    const before = s.counters.requests;
    await t.rejects(raw(url, { ca: w.credentials.ca }), undefined, 'no certificate: refused');
    await mkdir(join(w.b.dir, 'other-ca'));
    const other = await makeTestCa(join(w.b.dir, 'other-ca'), { names: ['127.0.0.1'] });
    const foreign = {
      ca: w.credentials.ca,
      cert: await readFile(other.clientCert),
      key: await readFile(other.clientKey),
    };
    await t.rejects(raw(url, foreign), undefined, 'a certificate from another CA: refused');
    t.equal(s.counters.requests, before, 'neither request was read');
    t.equal(s.counters.bytesServed, 0);
    // and the other way: a "peer" with a certificate from another CA is not talked to
    const impostor = await w.server({
      credentials: {
        ca: await readFile(other.caCert),
        cert: await readFile(other.serverCert),
        key: await readFile(other.serverKey),
      },
    });
    const { result } = w.fetch(
      join(w.b.dir, 'impostor-fetch', 'upgrade'),
      new FixedDirectory([w.approval], [endpoint('impostor', impostor.url)]),
    );
    const err = await result.catch((e: Error & { reason?: string }) => e);
    t.equal((err as { reason?: string }).reason, 'NoPeerHasBundle', (err as Error).message);
    t.equal(impostor.counters.requests, 0);
  },
);

t.test(
  'downloader slots: 503 with Retry-After beyond them; one on a control-plane node by default',
  async (t) => {
    const config = parseConfig('trust:\n  keys: [/k.pub]\n');
    t.equal(peerSlots(config, true), 1, 'control plane: one slot');
    t.equal(peerSlots(config, false), 4, 'worker: four');
    const fromConfig = peerServerOptions(config, w.credentials, {
      host: '127.0.0.1',
      port: 9000,
      controlPlane: true,
      bundle: () => undefined,
    });
    t.equal(fromConfig.downloaders, 1);
    t.equal(fromConfig.uploadBytesPerSecond, 50 * MiB, 'peers.uploadRate, 50MiB by default');
    // slow enough that the first download holds its slot for the whole test
    const s = await w.server({
      downloaders: peerSlots(config, true),
      uploadBytesPerSecond: 64 * 1024,
    });
    const blob = blobOf(w);
    const url = `${s.url}/v1/bundles/${w.approval.manifestDigest}/blobs/${blob.digest}`;
    const client = new PeerClient({ credentials: w.credentials });
    t.teardown(() => client.close());
    const first = await client.get(url, new AbortController().signal);
    t.equal(s.active, 1);
    const second = await raw(url, w.credentials);
    t.equal(second.status, 503);
    t.equal(second.headers['retry-after'], String(PEER_LIMITS.retryAfterSeconds));
    const busy = await client.get(url, new AbortController().signal).catch((e: unknown) => e);
    t.ok(
      busy instanceof PeerFault &&
        busy.kind === 'busy' &&
        busy.retryAfterMs === PEER_LIMITS.retryAfterSeconds * 1000,
      'the fetcher reads it as busy, with the wait',
    );
    t.equal(
      (await raw(`${s.url}/v1/bundles/${w.approval.manifestDigest}/have`, w.credentials)).status,
      200,
      'the small answers are not held by the slots',
    );
    first.destroy();
    await until('the slot is freed', () => s.active === 0);
    const range = await raw(url, w.credentials, { headers: { range: 'bytes=100-199' } });
    t.equal(range.status, 206, 'the slot is free again');
    t.equal(range.body.length, 100);
    t.equal(range.headers['content-range'], `bytes 100-199/${blob.size}`);
    t.equal(s.counters.busyRefusals, 2);
  },
);

t.test(
  'paused (this node loading): blob responses under way are cut, new ones get 503; bundle.json is still served',
  async (t) => {
    const s = await w.server({ uploadBytesPerSecond: 64 * 1024 });
    const url = `${s.url}/v1/bundles/${w.approval.manifestDigest}/blobs/${blobOf(w).digest}`;
    const client = new PeerClient({ credentials: w.credentials });
    t.teardown(() => client.close());
    const under = await client.get(url, new AbortController().signal);
    const ended = new Promise((resolve) => {
      under.on('error', () => resolve('cut'));
      under.on('end', () => resolve('end'));
      under.resume();
    });
    s.setPaused(true);
    t.equal(await ended, 'cut', 'the response under way was cut');
    const again = await raw(url, w.credentials);
    t.equal(again.status, 503);
    t.match(again.body.toString(), /loading/);
    t.equal(
      (await raw(`${s.url}/v1/bundles/${w.approval.manifestDigest}/bundle.json`, w.credentials))
        .status,
      200,
    );
    s.setPaused(false);
    t.equal((await raw(url, w.credentials, { headers: { range: 'bytes=0-9' } })).status, 206);
  },
);

t.test(
  'the upload cap holds: tokens granted never exceed burst + rate x time waited (injected clock)',
  async (t) => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(1000, 100, clock);
    let ahead = 0;
    const takes = Array.from({ length: 200 }, (_, i) =>
      bucket.take(1 + ((i * 37) % 100)).then(() => {
        if (bucket.granted > 100 + (clock.t / 1000) * 1000 + 1e-6) ahead++;
      }),
    );
    await Promise.all(takes);
    t.equal(ahead, 0, 'after every grant: granted <= burst + rate x elapsed');
    const asked = Array.from({ length: 200 }, (_, i) => 1 + ((i * 37) % 100)).reduce(
      (a, b) => a + b,
      0,
    );
    t.equal(bucket.granted, asked);
    t.ok(
      clock.t >= ((asked - 100) / 1000) * 1000 - 1,
      `the bucket waited ${clock.t} ms (fake) for ${asked} tokens`,
    );

    const serverClock = new FakeClock();
    const s = await w.server({
      uploadBytesPerSecond: MiB,
      burstBytes: 64 * 1024,
      clock: serverClock,
    });
    const blob = blobOf(w);
    const got = await raw(
      `${s.url}/v1/bundles/${w.approval.manifestDigest}/blobs/${blob.digest}`,
      w.credentials,
    );
    t.equal(got.body.length, blob.size);
    t.equal(s.bucket.granted, blob.size, 'every byte sent went through the bucket');
    const floor = ((blob.size - 64 * 1024) / MiB) * 1000;
    t.ok(
      serverClock.t >= floor - 1,
      `a ${blob.size}-byte blob at 1 MiB/s took ${serverClock.t} ms of the server's clock (at least ${Math.round(floor)})`,
    );
  },
);

t.test(
  'limits: path length 414, header bytes 431, method 405, unknown route 404, bad range 416, /have bounded',
  async (t) => {
    let asked = 0;
    const many = altered(w.served, (_d, data) => data);
    many.verifiedDigests = (n) => {
      asked = n;
      return Array.from({ length: n }, (_, i) => `sha256:${i.toString(16).padStart(64, '0')}`);
    };
    const s = await w.server({ offer: many });
    const base = `${s.url}/v1/bundles/${w.approval.manifestDigest}`;
    t.equal(
      (await raw(`${base}/${'x'.repeat(PEER_LIMITS.maxPathBytes)}`, w.credentials)).status,
      414,
    );
    const big = await raw(`${base}/bundle.json`, w.credentials, {
      headers: { 'x-pad': 'y'.repeat(PEER_LIMITS.maxHeaderBytes + 1) },
    }).catch((e: Error) => e);
    t.ok(
      big instanceof Error || big.status === 431,
      'headers over the limit: 431 or the connection closed',
    );
    t.equal((await raw(`${base}/bundle.json`, w.credentials, { method: 'DELETE' })).status, 405);
    t.equal((await raw(`${s.url}/v2/_catalog`, w.credentials)).status, 404);
    t.equal(
      (
        await raw(`${base}/blobs/${w.manifest.blobs[0]!.digest}`, w.credentials, {
          headers: { range: 'bytes=99999999-' },
        })
      ).status,
      416,
    );
    const have = await raw(`${base}/have`, w.credentials);
    t.equal(asked, PEER_LIMITS.maxHaveDigests);
    t.equal(
      (JSON.parse(have.body.toString()) as { digests: string[] }).digests.length,
      PEER_LIMITS.maxHaveDigests,
    );
    t.ok(have.body.length < 2 * MiB, `the listing is bounded (${have.body.length} bytes)`);
  },
);

/** Resolves 'closed' once the server closes `sock`, or 'open' if it has not within `ms` (a bound on the test, not on the server). */
const closedWithin = (sock: NodeJS.EventEmitter & { destroy(): void }, ms: number) =>
  new Promise<string>((resolve) => {
    const timer = setTimeout(() => {
      sock.destroy();
      resolve('open');
    }, ms);
    sock.on('error', () => undefined);
    sock.on('close', () => {
      clearTimeout(timer);
      resolve('closed');
    });
  });

t.test(
  'time limits: a handshake never begun, headers never finished, a connection left idle are all closed',
  async (t) => {
    const s = await w.server({
      limits: {
        handshakeTimeoutMs: 500,
        headersTimeoutMs: 500,
        idleTimeoutMs: 800,
        keepAliveTimeoutMs: 300,
      },
    });
    const { hostname: host, port } = new URL(s.url);
    const tcp = tcpConnect(Number(port), host);
    t.equal(
      await closedWithin(tcp, 10_000),
      'closed',
      'no ClientHello: closed (handshakeTimeoutMs)',
    );
    const tls = (onReady: (sock: ReturnType<typeof connect>) => void) => {
      const sock = connect({
        host,
        port: Number(port),
        ca: w.credentials.ca,
        cert: w.credentials.cert,
        key: w.credentials.key,
        checkServerIdentity: () => undefined,
      });
      sock.on('secureConnect', () => onReady(sock));
      return sock;
    };
    t.equal(
      await closedWithin(
        tls((sock) => sock.write('GET /v1/bundles HTTP/1.1\r\nHost: x\r\nX-Slow: ')),
        10_000,
      ),
      'closed',
      'headers never finished: closed (headersTimeoutMs)',
    );
    t.equal(
      await closedWithin(
        tls(() => undefined),
        10_000,
      ),
      'closed',
      'nothing sent after the handshake: closed (idleTimeoutMs)',
    );
    t.equal(s.counters.requests, 0);
  },
);

t.test(
  'credentials: a key others can read, a file over the limit, or one that is not PEM is refused in one line',
  async (t) => {
    const dir = join(w.b.dir, 'creds');
    await mkdir(dir, { mode: 0o700 });
    const key = join(dir, 'node.key');
    await copyFile(w.ca.key, key);
    await chmod(key, 0o644);
    const refused = (paths: { ca: string; cert: string; key: string }) =>
      loadPeerCredentials(paths).then(
        () => undefined,
        (e: { reason: string; message: string }) => e,
      );
    const open = await refused({ ca: w.ca.ca, cert: w.ca.cert, key });
    t.equal(open?.reason, 'InvalidConfig');
    t.match(open?.message, /readable by others .*chmod 600/);
    const big = join(dir, 'big.crt');
    await writeFile(big, '-----BEGIN CERTIFICATE-----\n' + 'A'.repeat(MAX_PEER_PEM_BYTES));
    t.match(
      (await refused({ ca: big, cert: w.ca.cert, key: w.ca.key }))?.message,
      /over 65536 bytes/,
    );
    const junk = join(dir, 'junk.crt');
    await writeFile(junk, 'not a certificate');
    t.match((await refused({ ca: w.ca.ca, cert: junk, key: w.ca.key }))?.message, /is not PEM/);
    t.ok(await loadPeerCredentials(w.ca), 'the files peer-ca.mjs wrote are taken');
  },
);

t.test(
  'deploy/openshift/peer-ca.mjs: MachineConfigs per role with the key root-only, the CA key not shipped',
  async (t) => {
    const out = join(w.b.dir, 'peer-keys');
    const script = new URL('../../deploy/openshift/peer-ca.mjs', import.meta.url).pathname;
    const r = spawnSync(process.execPath, [script, '--out', out], { encoding: 'utf8' });
    t.equal(r.status, 0, r.stderr);
    for (const role of ['master', 'worker']) {
      const mc = JSON.parse(
        await readFile(join(out, `99-${role}-bundle-agent-peers.yaml`), 'utf8'),
      ) as {
        metadata: { labels: Record<string, string> };
        spec: {
          config: {
            storage: { files: { path: string; mode: number; contents: { source: string } }[] };
          };
        };
      };
      t.equal(mc.metadata.labels['machineconfiguration.openshift.io/role'], role);
      const files = mc.spec.config.storage.files;
      t.same(
        files.map((f) => [f.path, f.mode]),
        [
          ['/etc/bundle-agent/peers/ca.crt', 0o644],
          ['/etc/bundle-agent/peers/node.crt', 0o644],
          ['/etc/bundle-agent/peers/node.key', 0o600],
        ],
      );
      const shipped = files.map((f) =>
        Buffer.from(f.contents.source.replace(/^data:;base64,/, ''), 'base64').toString(),
      );
      t.equal(shipped[2], await readFile(join(out, 'node.key'), 'utf8'));
      t.notOk(
        shipped.some((x) => x === readFileSync(join(out, 'peer-ca.key'), 'utf8')),
        'the CA key is not in it',
      );
    }
    const bad = spawnSync(process.execPath, [script], { encoding: 'utf8' });
    t.equal(bad.status, 2);
    t.match(bad.stderr, /--out DIR is required/);
  },
);

// The peer port against sockets that never show a certificate (issue #44 item 1): hundreds of
// TCP connections that never speak (or stall after one byte), reopened the moment the server
// closes them, from one address and from many, while a good peer opens a new connection for
// every request: every one of its requests is served, the unauthenticated connections never pass
// their budget, and none of them is counted against the peers' own cap.
import t from 'tap';
import { request } from 'node:https';
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { PEER_LIMITS, type PeerCredentials, type RunningPeerServer } from '@offline-bundle/agent';
import { peerAddressKey } from '../../agent/dist/peers/peer-server.js';
import { MiB, peerWorld } from './peers-setup.js';
import { until } from '../helpers/until.js';

/** One GET on a connection of its own (agent: false): the handshake is what a flood would deny. */
function get(url: string, creds: PeerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        ca: creds.ca,
        cert: creds.cert,
        key: creds.key,
        checkServerIdentity: () => undefined,
        agent: false,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
        res.on('error', reject);
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', reject);
    req.end();
  });
}

interface Flood {
  connects: number;
  stop(): void;
}

/**
 * `count` sockets from `addresses` (round robin) to host:port that send `say` (nothing by
 * default) and then hold still; each one closed by the server is opened again at once.
 */
function flood(
  host: string,
  port: number,
  count: number,
  addresses: string[],
  say?: Buffer,
): Flood {
  const open = new Set<Socket>();
  let running = true;
  const f: Flood = {
    connects: 0,
    stop: () => {
      running = false;
      for (const s of open) s.destroy();
    },
  };
  const one = (i: number) => {
    if (!running) return;
    f.connects++;
    const s = tcpConnect({ host, port, localAddress: addresses[i % addresses.length] });
    open.add(s);
    if (say) s.once('connect', () => s.write(say));
    s.on('error', () => undefined);
    s.once('close', () => {
      open.delete(s);
      setImmediate(one, i);
    });
  };
  for (let i = 0; i < count; i++) one(i);
  return f;
}

const w = await peerWorld(t, [1 * MiB]);
const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `n` good requests, two at a time (a fetcher's PeerClient holds two connections to a peer), each on a new connection, while the flood runs; samples the server's counts. */
async function goodPeerUnder(s: RunningPeerServer, n: number) {
  const url = `${s.url}/v1/bundles/${w.approval.manifestDigest}/bundle.json`;
  let most = 0;
  let arriving = 0;
  const sampler = setInterval(() => {
    most = Math.max(most, s.connections.unauthenticated);
    arriving = Math.max(arriving, s.connections.arriving);
  }, 5);
  const statuses: (number | string)[] = [];
  const started = Date.now();
  const queue = Array.from({ length: n }, (_, i) => i);
  const worker = async () => {
    for (let i = queue.shift(); i !== undefined; i = queue.shift())
      statuses.push(await get(url, w.credentials).catch((e: Error) => e.message));
  };
  await Promise.all(Array.from({ length: 2 }, worker));
  clearInterval(sampler);
  return {
    served: statuses.filter((x) => x === 200).length,
    failures: statuses.filter((x) => x !== 200),
    most,
    arriving,
    ms: Date.now() - started,
  };
}

t.test("no flood: the good peer's requests, for comparison", async (t) => {
  const s = await w.server();
  const r = await goodPeerUnder(s, 100);
  t.equal(r.served, 100);
  t.comment(`no flood: 100 good requests in ${r.ms} ms`);
});

const addresses = (from: number, n: number) =>
  Array.from({ length: n }, (_, i) => `127.0.0.${from + i}`);

for (const [label, count, from] of [
  ['64 silent sockets from one address', PEER_LIMITS.maxConnections, addresses(200, 1)],
  ['200 silent sockets from one address', 200, addresses(200, 1)],
  ['200 silent sockets from 50 addresses', 200, addresses(150, 50)],
  ['200 silent sockets from 200 addresses', 200, addresses(20, 200)],
  [
    '200 sockets from 50 addresses that send one byte of a ClientHello and stall',
    200,
    addresses(150, 50),
  ],
] as const) {
  t.test(`${label}, reopened when closed: every good request is served`, async (t) => {
    const s = await w.server();
    const { hostname, port } = new URL(s.url);
    const f = flood(
      hostname,
      Number(port),
      count,
      [...from],
      label.includes('one byte') ? Buffer.from([0x16]) : undefined,
    );
    t.teardown(() => f.stop());
    // the flood holds its places before the good peer comes
    await settle(500);
    const held = s.connections.unauthenticated;
    const perAddress = Math.min(count, PEER_LIMITS.maxUnauthenticatedPerAddress * from.length);
    t.ok(
      held > 0 && held <= Math.min(perAddress, PEER_LIMITS.maxUnauthenticated),
      `${held} unauthenticated connections held (${f.connects} opened so far)`,
    );
    const n = 100;
    const r = await goodPeerUnder(s, n);
    t.equal(
      r.served,
      n,
      `${r.served} of ${n} good requests served in ${r.ms} ms (${JSON.stringify(r.failures.slice(0, 3))})`,
    );
    t.ok(
      r.most <= PEER_LIMITS.maxUnauthenticated,
      `at most ${r.most} unauthenticated places taken at once (limit ${PEER_LIMITS.maxUnauthenticated})`,
    );
    t.ok(
      r.arriving <= PEER_LIMITS.maxUnauthenticated,
      `at most ${r.arriving} connections arriving at once (limit ${PEER_LIMITS.maxUnauthenticated})`,
    );
    await until(
      'the good connections, closed, leave no authenticated place taken',
      () => s.connections.authenticated === 0,
    );
    t.ok(
      s.connections.dropped > 0,
      `${s.connections.dropped} unauthenticated connections dropped or refused for room; ${f.connects} opened by the flood`,
    );
    t.equal(s.counters.requests, n, 'no request was read from the flood');
    t.comment(
      `${label}: ${n} good requests in ${r.ms} ms; the flood opened ${f.connects} connections, ${s.connections.dropped} dropped or refused`,
    );
  });
}

t.test(
  'the flood never takes an authenticated place: 64 peer connections held open, then 200 silent sockets',
  async (t) => {
    const s = await w.server();
    const { hostname, port } = new URL(s.url);
    const peers = await Promise.all(
      Array.from(
        { length: PEER_LIMITS.maxConnections },
        (_, i) =>
          new Promise<ReturnType<typeof tlsConnect>>((resolve, reject) => {
            // four addresses: sixty-four handshakes at once from one would pass its unauthenticated share
            const sock = tlsConnect({
              host: hostname,
              port: Number(port),
              localAddress: `127.0.0.${100 + (i % 4)}`,
              ca: w.credentials.ca,
              cert: w.credentials.cert,
              key: w.credentials.key,
              checkServerIdentity: () => undefined,
            });
            sock.once('secureConnect', () => resolve(sock));
            sock.once('error', reject);
          }),
      ),
    );
    t.teardown(() => {
      for (const p of peers) p.destroy();
    });
    await settle(200);
    t.equal(
      s.connections.authenticated,
      PEER_LIMITS.maxConnections,
      'every place of the peers taken by peers',
    );
    const f = flood(hostname, Number(port), 200, addresses(150, 50));
    t.teardown(() => f.stop());
    await settle(1000);
    t.ok(
      peers.every((p) => !p.destroyed),
      'no peer connection was closed for the flood',
    );
    t.equal(s.connections.authenticated, PEER_LIMITS.maxConnections);
    t.ok(
      s.connections.unauthenticated <= PEER_LIMITS.maxUnauthenticated,
      `${s.connections.unauthenticated} unauthenticated beside them`,
    );
    // one more peer is closed once authenticated: the cap holds after the handshake
    const extra = await new Promise<string>((resolve) => {
      const sock = tlsConnect({
        host: hostname,
        port: Number(port),
        ca: w.credentials.ca,
        cert: w.credentials.cert,
        key: w.credentials.key,
        checkServerIdentity: () => undefined,
      });
      sock.on('error', () => undefined);
      sock.once('close', () => resolve('closed'));
      setTimeout(() => {
        sock.destroy();
        resolve('open');
      }, 3000);
    });
    t.equal(extra, 'closed', 'a 65th peer connection is closed after its handshake');
    peers[0]!.destroy();
    await settle(200);
    t.equal(
      await get(`${s.url}/v1/bundles/${w.approval.manifestDigest}/have`, w.credentials),
      200,
      "a place freed by a peer is a peer's again, flood or not",
    );
  },
);

t.test('unauthenticated budgets are kept per IPv4 address and per IPv6 /64', async (t) => {
  t.equal(peerAddressKey('10.0.0.7'), '10.0.0.7');
  t.equal(
    peerAddressKey('::ffff:10.0.0.7'),
    '10.0.0.7',
    'an IPv4-mapped address is its IPv4 address',
  );
  t.equal(peerAddressKey('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
  t.equal(
    peerAddressKey('2001:db8:1:2:ffff:ffff:ffff:ffff'),
    '2001:db8:1:2::/64',
    'every address of one /64 is one budget',
  );
  t.equal(peerAddressKey('2001:DB8::1'), '2001:db8:0:0::/64');
  t.equal(peerAddressKey('fe80::1%eth0'), 'fe80:0:0:0::/64');
  t.equal(peerAddressKey('::1'), '0:0:0:0::/64');
  t.equal(peerAddressKey(undefined), '?');
});

// The peer server against a hostile client that holds a node certificate (a compromised node,
// or a stolen key): connections beyond the limit are closed, and 10,000 requests of every kind
// leave the heap flat and the server serving a good client.
import t from 'tap';
import { Agent, request } from 'node:https';
import { connect } from 'node:tls';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { PEER_LIMITS, type PeerCredentials } from '@offline-bundle/agent';
import { MiB, peerWorld } from './peers-setup.js';

interface Answer {
  status: number;
  body: Buffer;
}

function raw(
  url: string,
  creds: PeerCredentials,
  opts: { headers?: Record<string, string>; agent?: Agent } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        ca: creds.ca,
        cert: creds.cert,
        key: creds.key,
        checkServerIdentity: () => undefined,
        headers: opts.headers ?? {},
        agent: opts.agent ?? false,
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(parts) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const w = await peerWorld(t, [1 * MiB]);
const blob = w.manifest.blobs.filter((b) => b.mediaType.includes('layer'))[0]!;
const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test(
  'connections: at most maxConnections are held open; then a good client is served again',
  async (t) => {
    const s = await w.server();
    const port = Number(new URL(s.url).port);
    const host = new URL(s.url).hostname;
    const open = await Promise.all(
      Array.from(
        { length: PEER_LIMITS.maxConnections + 16 },
        () =>
          new Promise<{ ok: boolean; close: () => void }>((resolve) => {
            const sock = connect({
              host,
              port,
              ca: w.credentials.ca,
              cert: w.credentials.cert,
              key: w.credentials.key,
              checkServerIdentity: () => undefined,
            });
            let settled = false;
            const done = (ok: boolean) => {
              if (!settled) {
                settled = true;
                resolve({ ok, close: () => sock.destroy() });
              }
            };
            sock.on('secureConnect', () => setTimeout(() => done(!sock.destroyed), 300));
            sock.on('error', () => done(false));
            sock.on('close', () => done(false));
          }),
      ),
    );
    const held = open.filter((o) => o.ok).length;
    t.ok(
      held > 0 && held <= PEER_LIMITS.maxConnections,
      `${held} connections held of ${open.length} attempted`,
    );
    t.ok(open.length - held >= 16, 'those beyond the limit were closed');
    for (const o of open) o.close();
    await settle(200);
    t.equal(
      (await raw(`${s.url}/v1/bundles/${w.approval.manifestDigest}/bundle.json`, w.credentials))
        .status,
      200,
    );
  },
);

t.test(
  '10,000 requests from a hostile client: memory flat, the server still serves a good client',
  async (t) => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const s = await w.server();
    const base = `${s.url}/v1/bundles/${w.approval.manifestDigest}`;
    const agent = new Agent({
      keepAlive: true,
      maxSockets: 16,
      ca: w.credentials.ca,
      cert: w.credentials.cert,
      key: w.credentials.key,
      checkServerIdentity: () => undefined,
    });
    t.teardown(() => agent.destroy());
    const hostile = (i: number): [string, Record<string, string>] => {
      switch (i % 5) {
        case 0:
          return [`${s.url}/v1/bundles/sha256:${i.toString(16).padStart(64, '0')}/bundle.json`, {}];
        case 1:
          return [`${base}/blobs/sha256:${i.toString(16).padStart(64, 'f')}`, {}];
        case 2:
          return [
            `${base}/blobs/${blob.digest}`,
            { range: `bytes=${i % blob.size}-${i % blob.size}` },
          ];
        case 3:
          return [`${base}/have`, {}];
        default:
          return [`${base}/signature`, { 'x-junk': 'z'.repeat(i % 4000) }];
      }
    };
    const run = async (from: number, to: number) => {
      const queue = Array.from({ length: to - from }, (_, k) => from + k);
      const worker = async () => {
        for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
          const [url, headers] = hostile(i);
          await raw(url, w.credentials, { headers, agent });
        }
      };
      await Promise.all(Array.from({ length: 16 }, worker));
    };
    await run(0, 1000);
    gc();
    const before = process.memoryUsage().heapUsed;
    await run(1000, 10_000);
    gc();
    const grown = process.memoryUsage().heapUsed - before;
    t.ok(grown < 32 * MiB, `heap grew ${Math.round(grown / 1024)} KiB over 9,000 requests`);
    t.equal(s.counters.requests, 10_000);
    const good = await raw(`${base}/blobs/${blob.digest}`, w.credentials);
    t.equal(good.status, 200);
    t.equal(good.body.length, blob.size);
  },
);

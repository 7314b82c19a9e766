// Cluster API answers bounded in what they cost, not only in bytes (issue #44 item 8): an answer
// nesting past MAX_NESTING_DEPTH is refused while it arrives, before client-node's deserializer
// (which recurses per level: a 63 MiB answer of nested arrays in one node took 3.56 GB and
// 117 s), and what a list keeps over all its pages is bounded (MAX_LIST_KEPT_BYTES: 20,000
// NodeBundleStatuses of 70 KB kept took 2.3 GB under the 200,000-item bound).
import t from 'tap';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { MAX_NESTING_DEPTH } from '@offline-bundle/host';
import { ClusterError, MAX_LIST_KEPT_BYTES, adminApis, listAll } from '@offline-bundle/kube';
import { tmpdir, writeKubeconfig } from './lib.js';

const MiB = 1024 * 1024;
const HEAD =
  '{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"n"},"spec":{"taints":';
/** Bytes the server got out before the client hung up, per answer. */
let sent = 0;
let answer: (res: ServerResponse) => void = () => undefined;

const server = createServer((_req, res) => {
  sent = 0;
  res.writeHead(200, { 'Content-Type': 'application/json' });
  answer(res);
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
t.teardown(
  () =>
    new Promise((r) => {
      server.closeAllConnections();
      server.close(r);
    }),
);
const work = await tmpdir(t, 'ob-api-cost-');
const kubeconfig = await writeKubeconfig(
  path.join(work, 'kubeconfig'),
  (server.address() as AddressInfo).port,
  'admin-token',
  'http',
);
const apis = await adminApis(kubeconfig);
const listNodes = () =>
  listAll(
    'list nodes',
    (q) => apis.core.listNode(q),
    (n) => n,
  );

/** An answer of `total` bytes: one node whose taints are arrays nested half as deep, a MiB at a time as the client takes them. */
function nestedArrays(total: number) {
  return (res: ServerResponse) => {
    const half = Math.floor((total - HEAD.length - 4) / 2);
    const chunks = [
      ...Array(Math.floor(half / MiB)).fill('['),
      ...Array(Math.floor(half / MiB)).fill(']'),
    ].map((c: string) => Buffer.alloc(MiB, c));
    res.write(HEAD);
    const more = () => {
      for (let c = chunks.shift(); c && !res.destroyed; c = chunks.shift()) {
        sent += c.length;
        if (!res.write(c)) return;
      }
      if (!res.destroyed) res.end('}}]}');
    };
    res.on('drain', more);
    more();
  };
}

t.test(
  'an answer of 63 MiB of nested arrays inside one node: refused while it arrives, in seconds',
  async (t) => {
    answer = nestedArrays(63 * MiB);
    const start = Date.now();
    const err = await listNodes().then(
      () => undefined,
      (e: unknown) => e,
    );
    const seconds = (Date.now() - start) / 1000;
    t.ok(err instanceof ClusterError, String(err));
    t.equal((err as ClusterError).code, 'API_TOO_LARGE');
    t.match(
      (err as Error).message,
      `sent an answer nested deeper than ${MAX_NESTING_DEPTH} levels`,
    );
    t.match((err as Error).message, /127\.0\.0\.1/, 'names the server');
    t.notMatch((err as Error).message, /\n/, 'one line');
    t.ok(seconds < 10, `${seconds.toFixed(1)} s`);
    t.ok(sent <= 16 * MiB, `cut after ${(sent / MiB).toFixed(0)} MiB sent`);
  },
);

t.test('an item nested to the bound is read', async (t) => {
  // the answer, its items, the item and its spec are 4 levels
  answer = (res) =>
    res.end(HEAD + '['.repeat(MAX_NESTING_DEPTH - 4) + ']'.repeat(MAX_NESTING_DEPTH - 4) + '}}]}');
  const nodes = await listNodes();
  t.equal(nodes.length, 1);
});

t.test(
  `what a list keeps over its pages is bounded: ${MAX_LIST_KEPT_BYTES / 1024 / 1024} MiB, whatever the item count allows`,
  async (t) => {
    // every page 500 statuses of 70 KB kept whole, and always another page
    const status = {
      metadata: { name: 'n' },
      status: {
        history: Array.from({ length: 735 }, (_, i) => ({
          version: `4.15.${i}`.padEnd(60, 'x'),
          state: 'Completed',
        })),
      },
    };
    const kept = JSON.stringify(status).length;
    t.ok(kept > 60_000 && kept < 80_000, `${kept} bytes each`);
    const items = Array.from({ length: 500 }, () => status);
    let pages = 0;
    const err = await listAll(
      'list nodebundlestatuses',
      async () => {
        pages++;
        return { items, metadata: { continue: 'more' } };
      },
      (s) => s,
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof ClusterError, String(err));
    t.equal((err as ClusterError).code, 'API_TOO_LARGE');
    t.match(
      (err as Error).message,
      `the API server's answer to list nodebundlestatuses holds over ${MAX_LIST_KEPT_BYTES / 1024 / 1024} MiB in the fields read`,
    );
    t.equal(
      pages,
      Math.ceil(MAX_LIST_KEPT_BYTES / kept / 500),
      'refused on the page that crossed the bound',
    );
  },
);

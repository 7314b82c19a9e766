// The registry serving from a bundle file (media mode) under the process's frame budget (issue
// #24): 16 clients in parallel get the signed bytes while the decoded frames held stay within
// FRAME_BUDGET_BYTES; clients that stop reading hold at most the budget, and once they go away
// (connections cut) every share comes back and the next client is served.
import t from 'tap';
import { request, type ClientRequest } from 'node:http';
import {
  FRAME_BUDGET_BYTES,
  FRAME_BYTES,
  openBundleFile,
  processFrameBudget,
  verifyBundle,
} from '@offline-bundle/format';
import {
  BundleFileStore,
  catalogOf,
  startRegistry,
  type RunningRegistry,
} from '@offline-bundle/registry';
import { mirrorPath } from '@offline-bundle/oci';
import { makeBundle, sha256, type MadeBundle } from '../format/craft.js';
import { until } from '../helpers/until.js';

// more frames than a loopback connection's buffers take in, so a client that stops reading stalls its stream mid-blob
const BIG = 4 * FRAME_BYTES + 999;
const CLIENTS = 16;

let b: MadeBundle;
let big: Buffer;
let url: string;
let cutUrl: string;
let cutting: RunningRegistry;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: [BIG, 700] });
  big = b.blobs.find((x) => x.size === BIG)!.data;
  const source = await openBundleFile(b.path);
  const v = await verifyBundle(source, { trust: b.trust, frameDigests: true });
  const store = await BundleFileStore.open(source, v.manifest, catalogOf(v.manifest), {
    seekIndex: v.seekIndex,
    frameDigests: v.frameDigests!,
  });
  const reg = await startRegistry({
    store,
    catalog: catalogOf(v.manifest),
    host: '127.0.0.1',
    port: 0,
  });
  t.teardown(async () => {
    await reg.close();
    await store.close();
    await source.close();
  });
  url = `http://${reg.address}/v2/${mirrorPath('example.com/test/app')}/blobs/${sha256(big)}`;
  // the same store behind a registry that cuts idle connections after a second (REGISTRY_IDLE_MS in the agent)
  cutting = await startRegistry({
    store,
    catalog: catalogOf(v.manifest),
    host: '127.0.0.1',
    port: 0,
    idleTimeoutMs: 1000,
  });
  t.teardown(() => cutting.close());
  cutUrl = `http://${cutting.address}/v2/${mirrorPath('example.com/test/app')}/blobs/${sha256(big)}`;
});

function get(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        res.statusCode === 200 && res.complete
          ? resolve(Buffer.concat(parts))
          : reject(new Error(`status ${res.statusCode}, complete ${res.complete}`)),
      );
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

/**
 * A GET whose client stops reading at its answer's first bytes, its connection kept open: the
 * server's stream runs on only until the connection's buffers are full. (Not awaited: a stream
 * waiting for the budget sends not even its headers.)
 */
function stalled(at = url): ClientRequest {
  const req = request(at, (res) => res.pause());
  req.on('error', () => undefined);
  req.end();
  return req;
}

t.test(
  `${CLIENTS} clients in parallel: the signed bytes, never more than the budget held`,
  async (t) => {
    const bodies = await Promise.all(Array.from({ length: CLIENTS }, get));
    t.same(
      bodies.map((x) => x.equals(big)),
      bodies.map(() => true),
      'every client got the blob',
    );
    t.ok(
      processFrameBudget.peak <= FRAME_BUDGET_BYTES,
      `at most ${processFrameBudget.peak} of ${FRAME_BUDGET_BYTES} bytes held`,
    );
    t.ok(processFrameBudget.peak > 0, 'the frames went through the budget');
    await until('all released', () => processFrameBudget.inUse === 0);
  },
);

t.test(
  'clients that stop reading hold at most the budget; gone, they give it all back',
  async (t) => {
    const clients = Array.from({ length: CLIENTS }, stalled);
    t.ok(
      await until('streams wait for the budget', () => processFrameBudget.waiting > 0),
      `streams wait for the budget (${processFrameBudget.waiting} waiting)`,
    );
    t.ok(
      processFrameBudget.inUse <= FRAME_BUDGET_BYTES,
      `${processFrameBudget.inUse} bytes held by stalled streams`,
    );
    t.ok(processFrameBudget.inUse > 0);
    for (const c of clients) c.destroy();
    await until(
      'every share back, nobody waiting',
      () => processFrameBudget.inUse === 0 && processFrameBudget.waiting === 0,
    );
    t.ok((await get()).equals(big), 'the next client is served in full');
    t.equal(processFrameBudget.inUse, 0);
  },
);

t.test(
  'clients that stop reading and never go away: the registry cuts their idle connections, every share comes back',
  async (t) => {
    const clients = Array.from({ length: CLIENTS }, () => stalled(cutUrl));
    t.ok(
      await until('every client connected', () => cutting.connections === CLIENTS),
      `every client connected (${cutting.connections})`,
    );
    await until('the stalled streams hold frames', () => processFrameBudget.inUse > 0);
    // a stalled client never reads the server's close: the server's count says it cut them (one whose
    // answer fit whole in the connection's buffers ends on its own and stays open, keep-alive)
    t.ok(
      await until('the server cut stalled connections', () => cutting.connections < CLIENTS),
      `the server cut stalled connections (${CLIENTS - cutting.connections} of ${CLIENTS})`,
    );
    await until(
      'every share back, nobody waiting, with no client gone on its own',
      () => processFrameBudget.inUse === 0 && processFrameBudget.waiting === 0,
    );
    t.ok((await get()).equals(big), 'the next client is served in full');
    for (const c of clients) c.destroy();
  },
);

// Each connection's share of the frame budget (issue #44 item 11): local clients that stop
// reading (eight in the issue) held the registry's whole budget (media mode: blobs served from the bundle file)
// until the 120 s idle cut, and a pull behind them waited that long. Now a client backed up
// for REGISTRY_STALL_MS while others wait for the budget is cut, and the pull goes through.
import t from 'tap';
import { request, type ClientRequest } from 'node:http';
import { setTimeout } from 'node:timers/promises';
import {
  FRAME_BYTES,
  openBundleFile,
  processFrameBudget,
  verifyBundle,
} from '@offline-bundle/format';
import {
  BundleFileStore,
  catalogOf,
  REGISTRY_STALL_MS,
  startRegistry,
} from '@offline-bundle/registry';
import { mirrorPath } from '@offline-bundle/oci';
import { makeBundle, sha256 } from '../format/craft.js';
import { until } from '../helpers/until.js';

// more than a stalled client's reads and its connection's buffers take in
const BIG = 6 * FRAME_BYTES + 999;
/** Eight did in the issue; here each holds one or two frames, so eight or fewer. */
const MAX_STALLED = 32;
/** The pull must finish well inside the 120 s idle cut: two rounds of stalled clients cut, and the transfer. */
const PULL_BOUND_MS = 2 * REGISTRY_STALL_MS + 15_000;

function get(url: string, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    // its own connection, closed after the answer: what stays open is the stalled clients'
    const req = request(url, { agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        res.statusCode === 200 && res.complete
          ? resolve(Buffer.concat(parts))
          : reject(new Error(`status ${res.statusCode}, complete ${res.complete}`)),
      );
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () =>
      req.destroy(new Error(`no whole answer within ${timeoutMs / 1000} s`)),
    );
    req.on('error', reject).end();
  });
}

/**
 * A GET whose client reads the first `reads` bytes and then stops, never going away. A loopback
 * connection's buffers take in about one frame here: a client that reads nothing stalls with its
 * stream between frames, holding none, where one with small buffers (the issue's) holds one.
 * Reading a part of a frame first puts the stall mid-frame, as small buffers do.
 */
function stalled(url: string, reads: number): ClientRequest {
  const req = request(url, (res) => {
    let got = 0;
    res.on('data', (c: Buffer) => {
      got += c.length;
      if (got >= reads) res.pause();
    });
  });
  req.on('error', () => undefined);
  req.end();
  return req;
}

t.test(
  'clients that stop reading mid-frame do not hold a pull behind them until the idle cut',
  async (t) => {
    const b = await makeBundle(t, { layerSizes: [BIG, 700] });
    const big = b.blobs.find((x) => x.size === BIG)!.data;
    const source = await openBundleFile(b.path);
    const v = await verifyBundle(source, { trust: b.trust, frameDigests: true });
    const store = await BundleFileStore.open(source, v.manifest, catalogOf(v.manifest), {
      seekIndex: v.seekIndex,
      frameDigests: v.frameDigests!,
    });
    // the agent's defaults: REGISTRY_IDLE_MS, REGISTRY_STALL_MS
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
    const url = `http://${reg.address}/v2/${mirrorPath('example.com/test/app')}/blobs/${sha256(big)}`;

    // as many stalled clients as it takes for one to wait (eight of full frames fill the budget)
    const clients: ClientRequest[] = [];
    t.teardown(() => {
      for (const c of clients) c.destroy();
    });
    while (processFrameBudget.waiting === 0 && clients.length < MAX_STALLED) {
      clients.push(stalled(url, ((clients.length % 4) + 1) * (FRAME_BYTES / 5)));
      await until(
        'the stalled client is answered or waits',
        () =>
          reg.connections === clients.length &&
          (processFrameBudget.waiting > 0 || reg.served.bytes > 0),
      ).catch(() => undefined);
      await setTimeout(300);
    }
    t.ok(
      processFrameBudget.waiting > 0,
      `${clients.length} stalled clients took the budget (${processFrameBudget.inUse} bytes held, ${processFrameBudget.waiting} waiting)`,
    );

    const started = performance.now();
    const body = await get(url, PULL_BOUND_MS);
    const took = performance.now() - started;
    t.comment(
      `the pull behind ${clients.length} stalled clients took ${(took / 1000).toFixed(1)} s (stall bound ${REGISTRY_STALL_MS / 1000} s, idle cut 120 s)`,
    );
    t.ok(body.equals(big), 'the pull got the signed bytes');
    t.ok(took < PULL_BOUND_MS, `within ${PULL_BOUND_MS / 1000} s`);
    // a stalled client reads nothing more, so only the server's count shows it was cut
    await until('stalled connections cut', () => reg.connections < clients.length, {
      timeoutMs: 5000,
    }).catch(() => undefined);
    t.ok(
      reg.connections < clients.length,
      `the registry cut ${clients.length - reg.connections} of the ${clients.length} stalled clients`,
    );
  },
);

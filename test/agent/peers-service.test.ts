// The node's side of bundles between nodes (PeerService): an approved bundle this node lacks is
// fetched from a peer and loaded (runLayoutLoad), then offered onwards, so a third node fetches it
// from the second alone (fan-out: the seed sends it once). Real mutual-TLS servers on 127.0.0.x
// with certificates from deploy/openshift/peer-ca.mjs; the runtime is a stand-in that accepts
// every call (preload.method none): what is under test is the fetch-load-offer cycle.
import t from 'tap';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { PeerService, createLogger, parseConfig, startPeerServer } from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, MiB, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

/** A node with its PeerService (staging kept, so it can pass the bundle on) over `directory`. */
async function peerNode(name: string, directory: FixedDirectory) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(w.b.dir, `svc-node-${++nodes}`, 'node');
  const configFile = await nodeRoot(root, pub, 'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n');
  await chmod(w.b.dir, 0o755);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus(name));
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const address = `127.0.0.${100 + nodes}`;
  const service = new PeerService({ directory, credentials: w.credentials, address, port: 9470, context: { config, log, tracker }, runtime: acceptingRuntime });
  return { name, config, tracker, service, address };
}

t.test('fetched from the seed, loaded, offered onwards: a third node gets it from the second alone', async (t) => {
  const b = await peerNode('node-b', new FixedDirectory([w.approval], [endpoint('seed', seed.url)]));
  const loaded = await b.service.syncOnce();
  t.equal(loaded?.version, '1.2.3', 'node-b loaded the approved bundle');
  t.equal(b.tracker.current.phase, 'Ready');
  t.same(b.service.serving(), { manifestDigest: w.approval.manifestDigest, complete: true, verifiedBlobs: w.manifest.blobs.length + 1, address: b.address, port: 9470 }, 'status.serving: complete, on its own address');
  t.equal(await b.service.syncOnce(), undefined, 'held now: nothing more to fetch');
  const served = seed.counters.bytesServed;

  const bServer = await startPeerServer({ credentials: w.credentials, host: '127.0.0.50', port: 0, uploadBytesPerSecond: 1024 * MiB, downloaders: 4, bundle: (d) => b.service.offer(d) });
  t.teardown(() => bServer.close());
  const c = await peerNode('node-c', new FixedDirectory([w.approval], [endpoint('node-b', bServer.url)]));
  t.equal((await c.service.syncOnce())?.version, '1.2.3', 'node-c loaded it from node-b');
  t.equal(c.tracker.current.phase, 'Ready');
  t.equal(seed.counters.bytesServed, served, 'the seed sent nothing more');
  t.ok(bServer.counters.bytesServed > 0, 'node-b sent it');
});

t.test('no peer holds it: Failed NoPeerHasBundle in the status; not tried again at once', async (t) => {
  const n = await peerNode('node-d', new FixedDirectory([w.approval], []));
  t.equal(await n.service.syncOnce(), undefined);
  t.equal(n.tracker.current.phase, 'Failed');
  const failed = n.tracker.current.conditions.find((c) => c.type === 'Failed');
  t.equal(failed?.reason, 'NoPeerHasBundle');
  t.match(failed?.message, /no other node holds bundle 1\.2\.3/);
  const before = n.tracker.current.conditions.find((c) => c.type === 'Failed')?.lastTransitionTime;
  t.equal(await n.service.syncOnce(), undefined, 'a second look right after: nothing tried');
  t.equal(n.tracker.current.conditions.find((c) => c.type === 'Failed')?.lastTransitionTime, before);
});

t.test('nothing approved: nothing fetched, nothing offered', async (t) => {
  const n = await peerNode('node-e', new FixedDirectory([], [endpoint('seed', seed.url)]));
  t.equal(await n.service.syncOnce(), undefined);
  t.equal(n.service.serving(), undefined);
  t.equal(n.tracker.current.phase, emptyStatus('x').phase);
});

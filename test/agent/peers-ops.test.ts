// What a node tells of bundles between nodes while and after it fetches (issue #22, items 5 and
// the reviewer's leftovers): its status shows the fetch (phase Staging, bytes of the total, a
// rate) and then the nodes it came from; the counters of a transfer between two in-process peers
// reach the status and /metrics; the seed counts the other nodes' complete copies through the
// same directory a fetch uses; and a bundle this node would refuse (arch, version policy) is
// refused right after its verified bundle.json, before a single blob is asked for. Real
// mutual-TLS servers on 127.0.0.x; the runtime is a stand-in that accepts every call
// (preload.method none): what is under test is what the node reports.
import t from 'tap';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { PeerService, createLogger, parseConfig } from '@offline-bundle/agent';
import { Metrics, StatusTracker, emptyStatus, technicianLine, type NodeStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

async function peerNode(name: string, directory: FixedDirectory) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(w.b.dir, `ops-node-${++nodes}`, 'node');
  const configFile = await nodeRoot(root, pub, `runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n`);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus(name));
  const seen: NodeStatus[] = [];
  tracker.onChange((s) => seen.push(s));
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const service = new PeerService({ directory, credentials: w.credentials, address: `127.0.0.${120 + nodes}`, port: 9470, context: { config, log, tracker }, runtime: acceptingRuntime });
  return { name, config, tracker, service, seen };
}

t.test('a fetch shows in the status as it runs (bytes of the total, a rate), then names the node it came from; its counters reach /metrics', async (t) => {
  const b = await peerNode('node-b', new FixedDirectory([w.approval], [endpoint('seed', seed.url)]));
  const servedBefore = seed.counters.bytesServed;
  t.equal((await b.service.syncOnce())?.version, '1.2.3');
  const fetching = b.seen.filter((s) => s.phase === 'Staging');
  t.ok(fetching.length > 0, 'the fetch showed as Staging');
  const last = fetching.at(-1)!;
  t.equal(last.bundle?.media, 'peers');
  t.equal(last.progress.bytesTotal, w.layoutBytes, 'the total is the layout\'s size');
  t.equal(last.progress.bytesDone, last.progress.bytesTotal, 'every byte counted');
  t.ok((last.progress.rate ?? 0) > 0, `a rate: ${last.progress.rate}`);
  t.match(last.message, /^Fetching the update 1\.2\.3 from other nodes \(/);
  t.same(b.seen.filter((s) => /USB stick/.test(s.message) && s.bundle?.media === 'peers').map((s) => s.message), [], 'never a word about a stick this node does not have');
  const ready = b.tracker.current;
  t.equal(ready.phase, 'Ready');
  t.same(ready.bundle?.fromPeers, ['seed'], 'the source: the node it came from');
  t.match(ready.message, /^Checked: update 1\.2\.3 is valid, but it was NOT loaded on this node \(loading is turned off in the node's settings\)\.$/, 'preload.method none here: said so, and no stick');

  // the counters of both sides, as the daemon publishes them (status.peers.transfer), and /metrics from that
  const sent = seed.counters.bytesServed - servedBefore;
  const fetched = b.service.counters.snapshot();
  t.ok(sent > 0);
  t.same(fetched.fetchedFrom.map((f) => f.node), ['seed']);
  t.equal(fetched.bytesFetched, sent, 'what the seed sent is what node-b fetched (verified)');
  b.tracker.update((s) => { s.peers = { up: true, transfer: fetched }; });
  const m = new Metrics();
  m.observe(b.tracker.current);
  const text = await m.render();
  t.match(text, new RegExp(`^bundle_agent_peer_bytes_fetched_total\\{peer="seed"\\} ${sent}$`, 'm'));
  t.match(text, /^bundle_agent_peer_bytes_served_total 0$/m, 'node-b served nothing');

  // the seed's view: node-b now publishes a complete copy; the seed counts it through the directory
  const seedNode = await peerNode('seed', new FixedDirectory([w.approval], [{ ...endpoint('node-b', 'https://127.0.0.9:9470'), complete: true }]));
  t.same(await seedNode.service.copies('1.2.3'), { version: '1.2.3', nodes: 1, serving: false }, 'one other node holds it whole');
  const none = await peerNode('seed2', new FixedDirectory([w.approval], [{ ...endpoint('node-c', 'https://127.0.0.9:9470', false), verifiedBlobs: 2 }]));
  t.equal((await none.service.copies('1.2.3')).nodes, 0, 'a node still fetching is no complete copy');
  const status: NodeStatus = { ...b.tracker.current, conditions: [], bundle: { file: '/media/u.bundle', version: '1.2.3', media: 'USB stick UPDATE' }, peers: { up: true, transfer: fetched, copies: await seedNode.service.copies('1.2.3') } };
  t.equal(technicianLine(status), 'Done: update 1.2.3 is loaded on this node. You may remove the USB stick: 1 other node has a complete copy.');
});

for (const [what, reason] of [
  ['an arm64 node', 'WrongArch'],
  ['a node running a newer release (a downgrade)', 'Downgrade'],
] as const) {
  t.test(`the policy is checked right after the verified bundle.json: ${what} refuses it before any blob`, async (t) => {
    const n = await peerNode(`node-p${nodes}`, new FixedDirectory([w.approval], [endpoint('seed', seed.url)]));
    if (reason === 'Downgrade') n.config.version.current = '2.0.0';
    if (reason === 'WrongArch') n.config.arch = 'arm64';
    const served = seed.counters.bytesServed;
    t.equal(await n.service.syncOnce(), undefined);
    t.equal(n.tracker.current.phase, 'Failed');
    t.equal(n.tracker.current.conditions.find((c) => c.type === 'Failed')?.reason, reason);
    t.equal(seed.counters.bytesServed, served, 'not one blob byte was sent');
    t.same(await readdir(n.config.paths.upgradeDir).catch(() => []), [], 'nothing staged, no partial directory');
    t.notOk(n.seen.some((s) => s.phase === 'Staging'), 'the fetch never showed as under way');
  });
}

// The node's side of bundles between nodes (PeerService): an approved bundle this node lacks is
// fetched from a peer and loaded (runLoad of the staged layout), then offered onwards, so a third node fetches it
// from the second alone (fan-out: the seed sends it once). Real mutual-TLS servers on 127.0.0.x
// with certificates from deploy/openshift/peer-ca.mjs; the runtime is a stand-in that accepts
// every call (preload.method none): what is under test is the fetch-load-offer cycle.
import t from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  PeerService,
  addForgotten,
  createLogger,
  parseConfig,
  startPeerServer,
  type LoadStep,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, MiB, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

/** A node with its PeerService (staging kept, so it can pass the bundle on) over `directory`. */
async function peerNode(
  name: string,
  directory: FixedDirectory,
  onServingChanged?: () => void,
  runtime = acceptingRuntime,
  onStep?: (s: LoadStep) => void,
) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(w.b.dir, `svc-node-${++nodes}`, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n',
  );
  await chmod(w.b.dir, 0o755);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus(name));
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        if (process.env.PEER_DEBUG) process.stderr.write(c);
        cb();
      },
    }),
  );
  const address = `127.0.0.${100 + nodes}`;
  const service = new PeerService({
    directory,
    credentials: w.credentials,
    address,
    port: 9470,
    context: { config, log, tracker, ...(onStep ? { onStep } : {}) },
    runtime,
    ...(onServingChanged ? { onServingChanged } : {}),
  });
  return { name, config, tracker, service, address };
}

t.test(
  'fetched from the seed, loaded, offered onwards: a third node gets it from the second alone',
  async (t) => {
    const b = await peerNode(
      'node-b',
      new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
    );
    const loaded = await b.service.syncOnce();
    t.equal(loaded?.version, '1.2.3', 'node-b loaded the approved bundle');
    t.equal(b.tracker.current.phase, 'Ready');
    t.same(
      b.service.serving(),
      {
        manifestDigest: w.approval.manifestDigest,
        complete: true,
        verifiedBlobs: w.manifest.blobs.length + 1,
        address: b.address,
        port: 9470,
      },
      'status.serving: complete, on its own address',
    );
    t.equal(await b.service.syncOnce(), undefined, 'held now: nothing more to fetch');
    const served = seed.counters.bytesServed;

    const bServer = await startPeerServer({
      credentials: w.credentials,
      host: '127.0.0.50',
      port: 0,
      uploadBytesPerSecond: 1024 * MiB,
      downloaders: 4,
      bundle: (d) => b.service.offer(d),
    });
    t.teardown(() => bServer.close());
    const c = await peerNode(
      'node-c',
      new FixedDirectory([w.approval], [endpoint('node-b', bServer.url)]),
    );
    t.equal((await c.service.syncOnce())?.version, '1.2.3', 'node-c loaded it from node-b');
    t.equal(c.tracker.current.phase, 'Ready');
    t.equal(seed.counters.bytesServed, served, 'the seed sent nothing more');
    t.ok(bServer.counters.bytesServed > 0, 'node-b sent it');
  },
);

t.test(
  'the fetch and the load of what it fetched are one turn of the load lock: nothing slips in between',
  async (t) => {
    // the lock file at the fetch's first write and at the pulls: one turn, the same holder and file
    const lockAt = new Map<LoadStep, { text: string; ino: number }>();
    const n = await peerNode(
      'node-lock',
      new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
      undefined,
      acceptingRuntime,
      (s) => {
        const file = join(n.config.paths.stateDir, 'load.lock');
        if (s === 'write-entries' || s === 'load-images')
          lockAt.set(s, { text: readFileSync(file, 'utf8'), ino: statSync(file).ino });
      },
    );
    t.equal((await n.service.syncOnce())?.version, '1.2.3');
    t.match(
      lockAt.get('write-entries')?.text,
      new RegExp(`^${process.pid} `),
      'held by this process while it fetched',
    );
    t.same(
      lockAt.get('load-images'),
      lockAt.get('write-entries'),
      'and still the same lock when the load pulled: not released after the fetch',
    );
    t.notOk(existsSync(join(n.config.paths.stateDir, 'load.lock')), 'released once the load ended');
  },
);

t.test(
  'no peer holds it yet (the seed still loading): not a failure of this node; looked for again at the next look',
  async (t) => {
    const directory = new FixedDirectory([w.approval], []);
    const n = await peerNode('node-d', directory);
    t.equal(await n.service.syncOnce(), undefined);
    t.notOk(
      n.tracker.current.conditions.some((c) => c.type === 'Failed'),
      'no Failed condition',
    );
    t.not(n.tracker.current.phase, 'Failed');
    directory.peers = [endpoint('seed', seed.url)];
    t.equal(
      (await n.service.syncOnce())?.version,
      '1.2.3',
      'the next look fetches it once a peer has it',
    );
  },
);

t.test(
  'a refused bundle (signed by a key this node does not trust) is Failed and not tried again for a while',
  async (t) => {
    const n = await peerNode(
      'node-f',
      new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
    );
    // another factory's key in the node's trust: the seed's bundle.json is signed by a key it does not hold
    await writeFile(
      n.config.trust.keys[0]!,
      generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({
        type: 'spki',
        format: 'pem',
      }),
    );
    t.equal(await n.service.syncOnce(), undefined);
    const failed = n.tracker.current.conditions.find((c) => c.type === 'Failed');
    t.equal(n.tracker.current.phase, 'Failed');
    t.match(failed?.reason, /UntrustedKey|NoTrust|BadSignature/);
    const at = failed?.lastTransitionTime;
    t.equal(await n.service.syncOnce(), undefined, 'a second look right after: nothing tried');
    t.equal(n.tracker.current.conditions.find((c) => c.type === 'Failed')?.lastTransitionTime, at);
  },
);

t.test(
  'a release forgotten on this node is not fetched again while its approval stands',
  async (t) => {
    const n = await peerNode(
      'node-g',
      new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
    );
    await addForgotten(n.config.paths.stateDir, '1.2.3', 'amd64');
    const served = seed.counters.bytesServed;
    t.equal(await n.service.syncOnce(), undefined);
    t.equal(seed.counters.bytesServed, served, 'nothing fetched');
    t.not(n.tracker.current.phase, 'Ready', 'nothing loaded');
  },
);

t.test('nothing approved: nothing fetched, nothing offered', async (t) => {
  const n = await peerNode('node-e', new FixedDirectory([], [endpoint('seed', seed.url)]));
  t.equal(await n.service.syncOnce(), undefined);
  t.equal(n.service.serving(), undefined);
  t.equal(n.tracker.current.phase, emptyStatus('x').phase);
});

t.test(
  'while it fetches, a node offers what it verified: serving() says complete false and its count, and each change is signalled',
  async (t) => {
    const slow = await w.server({ uploadBytesPerSecond: 2 * MiB });
    const seen: Array<ReturnType<PeerService['serving']>> = [];
    let service: PeerService | undefined;
    const n = await peerNode(
      'node-h',
      new FixedDirectory([w.approval], [endpoint('seed', slow.url)]),
      () => seen.push(service?.serving()),
    );
    service = n.service;
    t.equal((await n.service.syncOnce())?.version, '1.2.3');
    const total = w.manifest.blobs.length + 1;
    t.ok(
      seen.length >= w.manifest.blobs.length,
      `signalled at the start and at each verified entry (${seen.length} times)`,
    );
    t.match(
      seen[0],
      {
        manifestDigest: w.approval.manifestDigest,
        complete: false,
        address: n.address,
        port: 9470,
      },
      'published as soon as the fetch began, incomplete',
    );
    const partial = seen.filter(
      (s) => s && !s.complete && s.verifiedBlobs > 0 && s.verifiedBlobs < total,
    );
    t.ok(
      partial.length > 0,
      `published while still fetching with a count of verified blobs: ${seen.map((s) => s?.verifiedBlobs).join(' ')}`,
    );
    const counts = seen.map((s) => s?.verifiedBlobs ?? -1);
    t.same(
      counts,
      [...counts].sort((a, b) => a - b),
      'the count only grows',
    );
    t.match(n.service.serving(), { complete: true, verifiedBlobs: total }, 'complete once loaded');
  },
);

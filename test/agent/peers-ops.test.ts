// What a node tells of bundles between nodes while and after it fetches (issue #22, items 5 and
// the reviewer's leftovers): its status shows the fetch (phase Staging, bytes of the total, a
// rate) and then the nodes it came from; the counters of a transfer between two in-process peers
// reach the status and /metrics; the seed counts the other nodes' complete copies through the
// same directory a fetch uses; and a bundle this node would refuse (arch, version policy) is
// refused right after its verified bundle.json, before a single blob is asked for. Real
// mutual-TLS servers on 127.0.0.x; the runtime is a stand-in that accepts every call
// (preload.method none): what is under test is what the node reports.
import t from 'tap';
import { readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  PeerService,
  createLogger,
  parseConfig,
  readReleases,
  removeLeftovers,
} from '@offline-bundle/agent';
import { RESUME_MARKER, partialBundle } from '@offline-bundle/format';
import {
  Metrics,
  StatusTracker,
  emptyStatus,
  technicianLine,
  type NodeStatus,
} from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

async function peerNode(
  name: string,
  directory: FixedDirectory,
  runtime: () => ReturnType<typeof acceptingRuntime> = acceptingRuntime,
) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(w.b.dir, `ops-node-${++nodes}`, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    `runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n`,
  );
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus(name));
  const seen: NodeStatus[] = [];
  tracker.onChange((s) => seen.push(s));
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const service = new PeerService({
    directory,
    credentials: w.credentials,
    address: `127.0.0.${120 + nodes}`,
    port: 9470,
    context: { config, log, tracker },
    runtime,
  });
  return { name, config, tracker, service, seen, log };
}

t.test(
  'a fetch shows in the status as it runs (bytes of the total, a rate), then names the node it came from; its counters reach /metrics',
  async (t) => {
    const b = await peerNode(
      'node-b',
      new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
    );
    const servedBefore = seed.counters.bytesServed;
    t.equal((await b.service.syncOnce())?.version, '1.2.3');
    const fetching = b.seen.filter((s) => s.phase === 'Staging');
    t.ok(fetching.length > 0, 'the fetch showed as Staging');
    const last = fetching.at(-1)!;
    t.equal(last.bundle?.media, 'peers');
    t.equal(last.progress.bytesTotal, w.layoutBytes, "the total is the layout's size");
    t.equal(last.progress.bytesDone, last.progress.bytesTotal, 'every byte counted');
    t.ok((last.progress.rate ?? 0) > 0, `a rate: ${last.progress.rate}`);
    t.match(last.message, /^Fetching the update 1\.2\.3 from other nodes \(/);
    t.same(
      b.seen
        .filter((s) => /USB stick/.test(s.message) && s.bundle?.media === 'peers')
        .map((s) => s.message),
      [],
      'never a word about a stick this node does not have',
    );
    const ready = b.tracker.current;
    t.equal(ready.phase, 'Ready');
    t.same(ready.bundle?.fromPeers, ['seed'], 'the source: the node it came from');
    t.match(
      ready.message,
      /^Checked: update 1\.2\.3 is valid, but it was NOT loaded on this node \(loading is turned off in the node's settings\)\.$/,
      'preload.method none here: said so, and no stick',
    );

    // the counters of both sides, as the daemon publishes them (status.peers.transfer), and /metrics from that
    const sent = seed.counters.bytesServed - servedBefore;
    const fetched = b.service.counters.snapshot();
    t.ok(sent > 0);
    t.same(
      fetched.fetchedFrom.map((f) => f.node),
      ['seed'],
    );
    t.equal(fetched.bytesFetched, sent, 'what the seed sent is what node-b fetched (verified)');
    b.tracker.update((s) => {
      s.peers = { up: true, transfer: fetched };
    });
    const m = new Metrics();
    m.observe(b.tracker.current);
    const text = await m.render();
    t.match(
      text,
      new RegExp(`^bundle_agent_peer_bytes_fetched_total\\{peer="seed"\\} ${sent}$`, 'm'),
    );
    t.match(text, /^bundle_agent_peer_bytes_served_total 0$/m, 'node-b served nothing');

    // the seed's view: node-b now publishes a complete copy; the seed counts it through the directory
    const seedNode = await peerNode(
      'seed',
      new FixedDirectory(
        [w.approval],
        [{ ...endpoint('node-b', 'https://127.0.0.9:9470'), complete: true }],
      ),
    );
    t.same(
      await seedNode.service.copies('1.2.3'),
      { version: '1.2.3', nodes: 1, serving: false },
      'one other node holds it whole',
    );
    const none = await peerNode(
      'seed2',
      new FixedDirectory(
        [w.approval],
        [{ ...endpoint('node-c', 'https://127.0.0.9:9470', false), verifiedBlobs: 2 }],
      ),
    );
    t.equal(
      (await none.service.copies('1.2.3')).nodes,
      0,
      'a node still fetching is no complete copy',
    );
    // the seed serves nothing of its own here: the bundle is named by its approval, and two
    // approvals of 1.2.3 (another arch, a rebuilt bundle) name none, so no copy is counted
    const other = { ...w.approval, manifestDigest: `sha256:${'e'.repeat(64)}` };
    const twice = await peerNode(
      'seed3',
      new FixedDirectory(
        [w.approval, other],
        [{ ...endpoint('node-b', 'https://127.0.0.9:9470'), complete: true }],
      ),
    );
    t.equal(
      (await twice.service.copies('1.2.3')).nodes,
      0,
      'two approvals of the version: the copy is not counted',
    );
    const status: NodeStatus = {
      ...b.tracker.current,
      conditions: [],
      bundle: { file: '/media/u.bundle', version: '1.2.3', media: 'USB stick UPDATE' },
      peers: { up: true, transfer: fetched, copies: await seedNode.service.copies('1.2.3') },
    };
    t.equal(
      technicianLine(status),
      'Done: update 1.2.3 is loaded on this node. You may remove the USB stick: 1 other node has a complete copy.',
    );
  },
);

for (const [what, reason] of [
  ['an arm64 node', 'WrongArch'],
  ['a node running a newer release (a downgrade)', 'Downgrade'],
] as const) {
  t.test(
    `the policy is checked right after the verified bundle.json: ${what} refuses it before any blob`,
    async (t) => {
      const n = await peerNode(
        `node-p${nodes}`,
        new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
      );
      if (reason === 'Downgrade') n.config.version.current = '2.0.0';
      if (reason === 'WrongArch') n.config.arch = 'arm64';
      const served = seed.counters.bytesServed;
      const before = n.tracker.current.phase;
      t.equal(await n.service.syncOnce(), undefined);
      // approved for the cluster, meant for other nodes: this node keeps what it said, no Failed
      t.equal(n.tracker.current.phase, before, 'the phase it had before the look');
      t.notOk(
        n.tracker.current.conditions.some((c) => c.type === 'Failed'),
        `no Failed condition (${reason} is not this node failing)`,
      );
      t.equal(await n.service.syncOnce(), undefined, 'not fetched again at the next look');
      t.equal(seed.counters.bytesServed, served, 'not one blob byte was sent');
      t.same(
        await readdir(n.config.paths.upgradeDir).catch(() => []),
        [],
        'nothing staged, no partial directory',
      );
      t.notOk(
        n.seen.some((s) => s.phase === 'Staging'),
        'the fetch never showed as under way',
      );
      t.same(
        n.seen,
        [],
        'not one write to the status: it is as it was by construction, not put back',
      );
    },
  );
}

t.test(
  'a look that only waits (no node holds the approved bundle yet) leaves the status untouched: not one write',
  async (t) => {
    const n = await peerNode(`node-p${nodes}`, new FixedDirectory([w.approval], []));
    const before = n.tracker.current;
    t.equal(await n.service.syncOnce(), undefined);
    t.equal(await n.service.syncOnce(), undefined, 'and again at the next look');
    t.same(n.seen, [], 'no change was written, not even the same status again');
    t.same(n.tracker.current, before, 'the status as it was, to its updatedAt');
  },
);

/**
 * What a fetch whose load never ran leaves (the agent killed between its last blob and the load
 * putting it in place): the fetch alone (fetchFromPeers, the same staging steps), its layout left
 * whole under its resume marker.
 */
const fetchedNotLoaded = (n: Awaited<ReturnType<typeof peerNode>>, directory: FixedDirectory) =>
  w.fetch(n.config.paths.upgradeDir, directory, {}, { leaveStaged: true }).result;
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

t.test(
  'a layout fetched whole whose load has not run yet survives the restart cleanup by its own resume marker, and is loaded without a second fetch',
  async (t) => {
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    const first = await peerNode('node-k', directory);
    await fetchedNotLoaded(first, directory);
    const layout = join(first.config.paths.upgradeDir, '1.2.3-amd64');
    t.same(
      await readdir(first.config.paths.upgradeDir),
      ['1.2.3-amd64.partial'],
      "whole in the staging place, not put in place: that is the load's",
    );
    t.equal(
      await partialBundle(`${layout}.partial`),
      w.approval.manifestDigest,
      "its resume marker names the bundle, as a stick's staging cut short does",
    );
    t.notOk(await exists(join(first.config.paths.stateDir, 'fetched')), 'no record of its own');
    // the daemon's start-up cleanup, as after a restart
    await removeLeftovers(first.config, acceptingRuntime(), first.log, []);
    t.ok(await exists(join(`${layout}.partial`, RESUME_MARKER)), 'kept by the cleanup');
    const served = seed.counters.bytesServed;
    const again = await peerNode('node-k2', directory);
    again.config.paths = first.config.paths;
    t.equal((await again.service.syncOnce())?.version, '1.2.3', 'loaded');
    t.equal(seed.counters.bytesServed, served, 'not one byte fetched again');
    t.same(
      await readdir(first.config.paths.upgradeDir),
      ['1.2.3-amd64'],
      'put in place by its load, no partial left',
    );
  },
);

t.test(
  "what keeps it is the staging's resume marker: without it the same cleanup removes the staging",
  async (t) => {
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    const n = await peerNode('node-l', directory);
    await fetchedNotLoaded(n, directory);
    const partial = join(n.config.paths.upgradeDir, '1.2.3-amd64.partial');
    await rm(join(partial, RESUME_MARKER));
    await removeLeftovers(n.config, acceptingRuntime(), n.log, []);
    t.notOk(await exists(partial), 'removed');
  },
);

t.test(
  'a fetched layout whose approval was withdrawn before its load is not loaded; approved again, it loads with no byte fetched again',
  async (t) => {
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    const n = await peerNode('node-m', directory);
    await fetchedNotLoaded(n, directory);
    directory.approvals = [];
    const ok = await peerNode('node-m2', directory);
    ok.config.paths = n.config.paths;
    t.equal(await ok.service.syncOnce(), undefined, 'nothing to load without an approval');
    t.same(await readReleases(n.config.paths.stateDir), [], 'nothing loaded');
    t.notOk(await exists(join(n.config.paths.upgradeDir, '1.2.3-amd64')), 'nothing put in place');
    const served = seed.counters.bytesServed;
    directory.approvals = [w.approval];
    t.equal((await ok.service.syncOnce())?.version, '1.2.3', 'loaded once approved again');
    t.equal(seed.counters.bytesServed, served, 'from the staging kept: not one byte fetched again');
  },
);

t.test(
  "a peer fetch whose approval is withdrawn after it showed progress leaves the stick's Ready as it was (the stick's load is a stand-in: its status written directly)",
  async (t) => {
    // slow enough that the fetch's approval watch (every 5 s) finds the withdrawal mid-transfer
    const slow = await w.server({ uploadBytesPerSecond: 512 * 1024 });
    // the nodes still offer it after the withdrawal (their offers are not the approval): only the approval watch stops the fetch
    const directory = new FixedDirectory([w.approval], [endpoint('slow-seed', slow.url)]);
    directory.peersFor = async () => directory.peers;
    const n = await peerNode('node-r', directory);
    n.tracker.update((s) => {
      s.phase = 'Ready';
      s.bundle = {
        file: '/media/stick/update.bundle',
        media: 'USB stick UPDATE',
        version: '1.2.2',
        arch: 'amd64',
      };
    });
    n.tracker.condition(
      'Ready',
      'True',
      'Loaded',
      'update 1.2.2 loaded: you may remove the USB stick',
    );
    // the admin deletes the BundleApproval once the fetch shows bytes
    n.tracker.onChange((s) => {
      if (s.phase === 'Staging' && s.progress.bytesDone > 0) directory.approvals = [];
    });
    t.equal(await n.service.syncOnce(), undefined, 'not loaded');
    t.ok(
      n.seen.some((s) => s.phase === 'Staging' && s.progress.bytesDone > 0),
      'the fetch showed progress first',
    );
    const now = n.tracker.current;
    t.equal(now.phase, 'Ready', 'still Ready');
    t.equal(now.bundle?.version, '1.2.2', "from the stick's 1.2.2");
    t.equal(now.bundle?.media, 'USB stick UPDATE', 'the stick named');
    t.notOk(
      now.conditions.some((c) => c.type === 'Failed'),
      'no Failed condition: the withdrawal is not this node failing',
    );
    t.ok(
      now.conditions.some((c) => c.type === 'Ready' && c.status === 'True'),
      'the Ready condition as it was',
    );
  },
);

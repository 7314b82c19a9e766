// One door into a load (issue #41 item 1): a stick's load and a load from peers (runLoad of a
// PeerSource) take the same pipeline steps once the head is read, recorded by the load's own
// onStep hook: the space plan, the other partials dropped, the entries written through the
// staged-layout writer, the layout put in place, the store opened, the pulls, the records; and the
// writer itself (format's stagingProbe, called by EntryFiles and finishLayout) says every entry
// and the layout's last rename went through it on both paths. And the
// approval is watched for the whole attempt: withdrawn while the load runs, it stops the load
// before the pins, the status says again what it said before, and nothing of the bundle stays.
// Real mutual-TLS peer server on 127.0.0.x; the runtime is a stand-in (preload.method none).
import t from 'tap';
import { chmod, readFile, readdir, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  PeerSource,
  createLogger,
  parseConfig,
  peerFetchBase,
  readReleases,
  runLoad,
  type AgentError,
  type LoadStep,
  type PipelineContext,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { EntryFiles, finishLayout, layoutEntries, stagingProbe } from '@offline-bundle/format';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

async function node(name: string, runtime: RuntimeTarget = acceptingRuntime()) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(w.b.dir, `walk-node-${++nodes}`, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n',
  );
  await chmod(w.b.dir, 0o755);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus(name));
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const steps: LoadStep[] = [];
  const ctx: PipelineContext = { config, log, tracker, runtime, onStep: (s) => steps.push(s) };
  return { config, tracker, ctx, steps };
}

const peerSource = (
  n: Awaited<ReturnType<typeof node>>,
  directory: FixedDirectory,
  approvalCheckMs?: number,
) =>
  new PeerSource({
    ...peerFetchBase(n.config, w.credentials, w.b.trust),
    approval: w.approval,
    directory,
    connectTimeoutMs: 1000,
    ...(approvalCheckMs ? { approvalCheckMs } : {}),
  });

const SAME_STEPS: LoadStep[] = [
  'admit',
  'plan-space',
  'clear-partials',
  'write-entries',
  'finish-layout',
  'open-store',
  'load-images',
  'record-release',
];

/** What the staging writer itself reported during `run`: each entry it placed and each layout it finished, relative to UPGRADE. */
async function writesOf(upgradeDir: string, run: () => Promise<unknown>) {
  const placed: string[] = [];
  const finished: string[] = [];
  stagingProbe.use = (writer, path) => {
    if (writer === EntryFiles.prototype.placeNow) placed.push(relative(upgradeDir, path));
    else if (writer === finishLayout) finished.push(relative(upgradeDir, path));
  };
  try {
    await run();
  } finally {
    delete stagingProbe.use;
  }
  return { placed: placed.sort(), finished };
}

t.test(
  "a stick's load and a load from peers pass through the same steps, in the same order, and write through the same writer",
  async (t) => {
    const stick = await node('stick-node');
    const stickWrites = await writesOf(stick.config.paths.upgradeDir, async () =>
      t.equal((await runLoad(w.b.path, stick.ctx)).version, '1.2.3'),
    );
    const peers = await node('peer-node');
    const peerWrites = await writesOf(peers.config.paths.upgradeDir, async () => {
      const r = await runLoad(
        peerSource(peers, new FixedDirectory([w.approval], [endpoint('seed', seed.url)])),
        peers.ctx,
      );
      t.equal(r.version, '1.2.3');
    });
    t.same(stick.steps, SAME_STEPS, `the stick: ${stick.steps.join(' → ')}`);
    t.same(peers.steps, stick.steps, `from peers: ${peers.steps.join(' → ')}`);
    // the writer's own word, not a label: every entry of the layout was put in place by EntryFiles, the layout by finishLayout
    const every = layoutEntries(w.manifest)
      .map((e) => join('1.2.3-amd64.partial', e.path))
      .sort();
    t.same(
      stickWrites.placed,
      every,
      'the stick: every entry placed by the staging writer (EntryFiles)',
    );
    t.same(peerWrites.placed, every, 'from peers: every entry placed by the same writer');
    t.same(
      stickWrites.finished,
      ['1.2.3-amd64'],
      'the stick: the layout put in place by finishLayout',
    );
    t.same(peerWrites.finished, ['1.2.3-amd64'], 'from peers: by the same finishLayout');
    t.equal(peers.tracker.current.phase, 'Ready');
    t.same(
      peers.tracker.current.bundle?.fromPeers,
      ['seed'],
      'the nodes that sent its bytes, in the status',
    );
    t.equal(
      peers.tracker.current.conditions.find((c) => c.type === 'SpaceAvailable')?.reason,
      'FitsOnDisk',
      'the space plan said as for a stick',
    );
    t.match(
      peers.tracker.current.conditions.find((c) => c.type === 'SpaceAvailable')?.message,
      /^room for .* of layout/,
    );
  },
);

t.test(
  'an approval withdrawn while the load runs (after the fetch) stops it: nothing pinned, the status as before, nothing of it kept',
  async (t) => {
    const pins: string[][] = [];
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    // the pulls take a while, as real ones do: the watch looks every 50 ms meanwhile
    const slowPulls = {
      ...acceptingRuntime(),
      preload: async () => {
        await sleep(600);
      },
      pin: async (refs: string[]) => {
        pins.push(refs);
      },
    } as unknown as RuntimeTarget;
    const n = await node('revoke-node', slowPulls);
    const before = n.tracker.current;
    n.ctx.onStep = (s) => {
      n.steps.push(s);
      // the fetch is over: the admin withdraws the approval as the pulls begin
      if (s === 'load-images') directory.approvals = [];
    };
    const err = await runLoad(peerSource(n, directory, 50), n.ctx).then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'ApprovalRevoked', err?.message ?? '');
    t.ok(n.steps.includes('finish-layout'), 'the fetch had ended and its layout was put in place');
    t.same(pins, [], 'nothing pinned after the withdrawal');
    t.notOk(n.steps.includes('record-release'), 'no release recorded');
    t.same(await readReleases(n.config.paths.stateDir), [], 'no release record');
    const now = n.tracker.current;
    t.equal(now.phase, before.phase, 'the phase as before the attempt, not Failed');
    t.same(now.conditions, before.conditions, 'no Failed condition: the conditions as before');
    t.notOk(
      now.history.some((e) => e.version === '1.2.3'),
      `no history entry for the withdrawn bundle: ${JSON.stringify(now.history)}`,
    );
    t.same(
      await readdir(n.config.paths.upgradeDir),
      [],
      'neither the layout nor a partial staging of it stays',
    );
  },
);

t.test(
  'an approval withdrawn during the fetch: the partial of the withdrawn bundle is removed, the status as before',
  async (t) => {
    const directory = new FixedDirectory(
      [w.approval],
      [endpoint('slow', (await w.server({ uploadBytesPerSecond: 1024 * 1024 })).url)],
    );
    const n = await node('revoke-fetch-node');
    const before = n.tracker.current;
    n.ctx.onStep = (s) => {
      n.steps.push(s);
      if (s === 'write-entries')
        setTimeout(() => {
          directory.approvals = [];
        }, 100);
    };
    const err = await runLoad(peerSource(n, directory, 50), n.ctx).then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'ApprovalRevoked', err?.message ?? '');
    t.notOk(n.steps.includes('load-images'), 'stopped before the pulls');
    t.equal(n.tracker.current.phase, before.phase);
    t.same(n.tracker.current.conditions, before.conditions);
    t.same(await readdir(n.config.paths.upgradeDir), [], 'no partial staging left');
  },
);

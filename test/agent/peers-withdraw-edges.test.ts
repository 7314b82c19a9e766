// A withdrawn approval at the edges of a load from peers (runLoad of a PeerSource, issue #41
// review r3): withdrawn once the pins began, the load completes and records (no pins without a
// release record); a partial of a withdrawn bundle is removed when the withdrawal is found at the
// head or by the daemon's look, a stick's partial stays; a bundle the version policy refuses only
// after its fetch leaves nothing staged; a withdrawal gives back the status as it stood when the
// attempt showed itself, and leaves a status another writer changed since.
// Real mutual-TLS peer server on 127.0.0.x; the runtime is a stand-in (preload.method none).
import t from 'tap';
import { chmod, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeResumeMarker } from '@offline-bundle/format';
import {
  PeerService,
  PeerSource,
  createLogger,
  parseConfig,
  peerFetchBase,
  readReleases,
  runLoad,
  showLoadedBefore,
  type AgentError,
  type LoadStep,
  type PipelineContext,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { removeWithdrawnPeerPartials } from '../../agent/dist/load/peer-partials.js';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

async function node(
  name: string,
  runtime: RuntimeTarget = acceptingRuntime(),
  version = 'version:\n  current: "1.2.2"\n',
) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(w.b.dir, `edge-node-${++nodes}`, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    `runtime: crio\n${version}space:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n`,
  );
  await chmod(w.b.dir, 0o755);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus(name));
  const lines: string[] = [];
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        lines.push(String(c));
        cb();
      },
    }),
  );
  const steps: LoadStep[] = [];
  const ctx: PipelineContext = { config, log, tracker, runtime, onStep: (s) => steps.push(s) };
  return { config, tracker, ctx, steps, lines, log };
}

type Node = Awaited<ReturnType<typeof node>>;

const source = (n: Node, directory: FixedDirectory, extra: { signal?: AbortSignal } = {}) =>
  new PeerSource({
    ...peerFetchBase(n.config, w.credentials, w.b.trust),
    approval: w.approval,
    directory,
    connectTimeoutMs: 1000,
    approvalCheckMs: 50,
    ...extra,
  });

/** A fetch cut short mid-way (a stick's load wants the node): its partial stays under its resume marker. */
async function cutShortFetch(n: Node, directory: FixedDirectory): Promise<void> {
  const yieldToStick = new AbortController();
  const onStep = n.ctx.onStep;
  n.ctx.onStep = (s) => {
    if (s === 'write-entries') setTimeout(() => yieldToStick.abort(new Error('a stick')), 700);
  };
  const err = await runLoad(source(n, directory, { signal: yieldToStick.signal }), n.ctx).then(
    () => undefined,
    (e: AgentError) => e,
  );
  n.ctx.onStep = onStep;
  t.equal(err?.reason, 'Interrupted', `the fetch was cut short: ${err?.message}`);
}

const slowServer = async () =>
  endpoint('slow', (await w.server({ uploadBytesPerSecond: 1024 * 1024 })).url);

t.test(
  'an approval withdrawn while the runtime applies the pins (pin stand-in): the load completes and records its pins',
  async (t) => {
    const pins: string[][] = [];
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    // the admin withdraws the approval while the pins are being written; the watch looks every 50 ms
    const rt = {
      ...acceptingRuntime(),
      pin: async (refs: string[]) => {
        directory.approvals = [];
        await sleep(300);
        pins.push(refs);
      },
    } as unknown as RuntimeTarget;
    const n = await node('withdraw-pin-node', rt);
    const r = await runLoad(source(n, directory), n.ctx);
    t.equal(r.version, '1.2.3', 'the load completed');
    t.equal(pins.length, 1, 'the pins were applied');
    const releases = await readReleases(n.config.paths.stateDir);
    t.same(
      releases.map((x) => x.version),
      ['1.2.3'],
      'a release record names the pinned images: a later load releases them',
    );
    t.same(
      releases[0]!.refs,
      pins[0]!.filter((ref) => releases[0]!.refs.includes(ref)),
      'the record holds the refs pinned',
    );
    t.equal(n.tracker.current.phase, 'Ready');
    t.ok(
      n.lines.some((l) =>
        l.includes(
          'approval withdrawn after pinning began: the load completes; revoke takes effect for the next bundle',
        ),
      ),
      'the log says why it went on',
    );
  },
);

t.test(
  'a partial of a fetch cut short, its approval found withdrawn at the next head: removed',
  async (t) => {
    const directory = new FixedDirectory([w.approval], [await slowServer()]);
    const n = await node('withdraw-head-node');
    await cutShortFetch(n, directory);
    t.same(
      await readdir(n.config.paths.upgradeDir),
      ['1.2.3-amd64.partial'],
      'the cut-short fetch kept its partial',
    );
    directory.approvals = [];
    const err = await runLoad(source(n, directory), n.ctx).then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'ApprovalRevoked', err?.message ?? '');
    t.same(await readdir(n.config.paths.upgradeDir), [], 'nothing of the withdrawn bundle is kept');
  },
);

t.test(
  "the daemon's look: a fetch's partial whose approval is gone is removed; a stick's partial (stand-in marker) stays",
  async (t) => {
    const directory = new FixedDirectory([w.approval], [await slowServer()]);
    const n = await node('withdraw-look-node');
    await cutShortFetch(n, directory);
    // a stick's partial of a bundle no admin approved (a marker naming another bundle.json, written as a stick's staging writes it)
    const stick = join(n.config.paths.upgradeDir, '9.9.9-amd64.partial');
    await mkdir(stick, { recursive: true });
    await writeResumeMarker(stick, Buffer.from('{"another":"bundle"}'));
    await removeWithdrawnPeerPartials(n.config, new Set([w.approval.manifestDigest]), n.log);
    t.same(
      (await readdir(n.config.paths.upgradeDir)).sort(),
      ['1.2.3-amd64.partial', '9.9.9-amd64.partial'],
      'still approved: both stay',
    );
    await removeWithdrawnPeerPartials(n.config, new Set(), n.log);
    t.same(
      await readdir(n.config.paths.upgradeDir),
      ['9.9.9-amd64.partial'],
      "the fetch's partial went with its approval; the stick's stays",
    );
  },
);

t.test(
  "a stick's staging that took over a fetch's partial keeps it when the approval goes",
  async (t) => {
    const directory = new FixedDirectory([w.approval], [await slowServer()]);
    const n = await node('withdraw-stick-node');
    await cutShortFetch(n, directory);
    // the stick's load of the same bundle, stopped once it took the partial over
    const stop = new AbortController();
    n.ctx.onStep = (s) => {
      if (s === 'clear-partials') stop.abort(new Error('stop'));
    };
    await runLoad(w.b.path, { ...n.ctx, signal: stop.signal }).catch(() => undefined);
    const left = await readdir(n.config.paths.upgradeDir);
    t.same(left, ['1.2.3-amd64.partial'], 'the stick kept the partial it took over');
    await removeWithdrawnPeerPartials(n.config, new Set(), n.log);
    t.same(
      await readdir(n.config.paths.upgradeDir),
      left,
      `the stick's staging stays: ${left.join(', ')}`,
    );
  },
);

t.test(
  'refused by the version policy only after the fetch (the running version learnt meanwhile): nothing staged stays; the log says it was fetched',
  async (t) => {
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    const n = await node(
      'policy-after-node',
      acceptingRuntime(),
      'version:\n  allowUnknown: true\n',
    );
    // unknown at the head (the fetch goes on), known as newer once the entries are written
    n.ctx.onStep = (s) => {
      if (s === 'write-entries') n.config.version.current = '1.2.4';
    };
    const err = await runLoad(source(n, directory), n.ctx).then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'Downgrade', err?.message ?? '');
    t.same(
      await readdir(n.config.paths.upgradeDir),
      [],
      'no partial of the refused bundle is kept',
    );

    const m = await node(
      'policy-after-service',
      acceptingRuntime(),
      'version:\n  allowUnknown: true\n',
    );
    const service = new PeerService({
      directory,
      credentials: w.credentials,
      address: '127.0.0.150',
      port: 9470,
      context: {
        config: m.config,
        log: m.log,
        tracker: m.tracker,
        onStep: (s) => {
          if (s === 'write-entries') m.config.version.current = '1.2.4';
        },
      },
      runtime: acceptingRuntime,
    });
    t.equal(await service.syncOnce(), undefined);
    t.same(await readdir(m.config.paths.upgradeDir), [], "the service's load left nothing either");
    const said = m.lines.find((l) => l.includes('is approved but not for this node'));
    t.match(said, /fetched, then refused: its staging is removed/, 'the log says it was fetched');
    t.notMatch(said, /not fetched/);
  },
);

t.test(
  'a withdrawal gives back the status as it stood when the attempt showed itself (another writer changed it before)',
  async (t) => {
    const n = await node('withdraw-snapshot-node');
    // a bundle loaded before, said by the daemon while this attempt waited for its head
    const loadedBefore = {
      file: '/media/stick/old.bundle',
      media: 'USB stick OLD',
      version: '1.2.1',
      arch: 'amd64',
    };
    const directory = new FixedDirectory([w.approval], [await slowServer()]);
    const approved = directory.approved.bind(directory);
    let first = true;
    directory.approved = async () => {
      if (first) showLoadedBefore(n.ctx, loadedBefore);
      first = false;
      return approved();
    };
    n.ctx.onStep = (s) => {
      if (s === 'write-entries')
        setTimeout(() => {
          directory.approvals = [];
        }, 100);
    };
    const err = await runLoad(source(n, directory), n.ctx).then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'ApprovalRevoked', err?.message ?? '');
    t.equal(
      n.tracker.current.bundle?.file,
      loadedBefore.file,
      'the status says what the other writer said, not what it said before the attempt began',
    );
    t.equal(n.tracker.current.phase, 'Ready');
  },
);

t.test(
  'a withdrawal leaves a status another writer changed after the attempt showed itself',
  async (t) => {
    const n = await node('withdraw-later-writer-node');
    const directory = new FixedDirectory([w.approval], [await slowServer()]);
    const note = {
      file: '/media/stick/old.bundle',
      media: 'USB stick OLD',
      version: '1.2.1',
      arch: 'amd64',
    };
    n.ctx.onStep = (s) => {
      if (s !== 'write-entries') return;
      setTimeout(() => {
        showLoadedBefore(n.ctx, note);
        directory.approvals = [];
      }, 100);
    };
    const err = await runLoad(source(n, directory), n.ctx).then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'ApprovalRevoked', err?.message ?? '');
    const now = n.tracker.current;
    t.equal(now.bundle?.file, note.file, "the other writer's status stays");
    t.equal(now.phase, 'Ready');
    t.ok(
      now.conditions.some((c) => c.type === 'Ready' && c.message.includes(note.file)),
      `its conditions too: ${JSON.stringify(now.conditions.map((c) => c.type + ':' + c.reason))}`,
    );
  },
);

// A layout fetched from peers (peers/peer-fetch.ts) loaded as a stick's staged layout is (runLoad
// of a StagedLayout): the fetch leaves it whole in the staging place under its resume marker, the
// load checks its bundle.json against the node's keys and the version policy again, puts it in
// place as a stick's extraction ends, then Ready; a copy kept in place (no head) is read back and
// hashed again. The runtime is a stand-in that accepts every call (preload.method none): what is
// under test is the admission of a layout that no stick vouches for.
import t from 'tap';
import { chmod, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  createLogger,
  parseConfig,
  runLoad,
  type PipelineContext,
  type StagedLayout,
} from '@offline-bundle/agent';
import { finishLayout } from '@offline-bundle/format';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld, treeOf } from './peers-setup.js';

const w = await peerWorld(t);
const seedServer = await w.server();
let nodes = 0;

/** A node whose upgrade directory holds the staging fetched from the seed, whole, as the fetch leaves it; `trust` is its trust block. */
async function fetchedNode(trust: string, current = '1.2.2') {
  const dir = join(w.b.dir, `load-node-${++nodes}`);
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const root = join(dir, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    `runtime: crio\nversion:\n  current: "${current}"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n`,
  );
  await chmod(w.b.dir, 0o755);
  let text = await readFile(configFile, 'utf8');
  if (trust) text = text.replace(/trust:\n( {2}.*\n)+/, trust);
  await writeFile(configFile, text);
  const config = parseConfig(text, configFile);
  const r = await w.fetch(
    config.paths.upgradeDir,
    new FixedDirectory([w.approval], [endpoint('seed', seedServer.url)]),
    {},
    { leaveStaged: true },
  ).result;
  const layout: StagedLayout = {
    target: r.target,
    manifestDigest: w.approval.manifestDigest,
    head: { manifest: r.manifest, manifestBytes: r.manifestBytes, signature: r.signature },
  };
  return { config, target: r.target, layout };
}

type Node = Awaited<ReturnType<typeof fetchedNode>>;

/** The staging put in place and loaded no further: a copy kept on this node, which the load reads back (no head). */
async function keptCopy(n: Node): Promise<Node> {
  await finishLayout(`${n.target}.partial`, n.target, n.layout.head!);
  return { ...n, layout: { target: n.target, manifestDigest: n.layout.manifestDigest } };
}

async function load(n: Node) {
  const tracker = new StatusTracker(emptyStatus('node-b'));
  let journal = '';
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        journal += String(c);
        cb();
      },
    }),
  );
  const ctx: PipelineContext = {
    config: n.config,
    log,
    tracker,
    runtime: acceptingRuntime(),
    media: 'peers',
  };
  const ok = await runLoad(n.layout, ctx).then(
    () => true,
    () => false,
  );
  const c = (type: string) => tracker.current.conditions.find((x) => x.type === type);
  return {
    ok,
    phase: tracker.current.phase,
    ready: c('Ready'),
    failed: c('Failed'),
    staged: c('Staged'),
    journal,
  };
}

t.test(
  "a fetched layout loads: put in place as a stick's staging is, then Ready, said without a stick to remove",
  async (t) => {
    const n = await fetchedNode('');
    t.same(
      await readdir(n.config.paths.upgradeDir),
      ['1.2.3-amd64.partial'],
      'the fetch left its whole staging under its resume marker',
    );
    const r = await load(n);
    t.ok(r.ok, JSON.stringify(r.failed));
    t.equal(r.phase, 'Ready');
    // preload.method none here: the journal does not call it loaded
    t.match(
      r.journal,
      /update 1\.2\.3 verified, but NOT loaded on this node \(preload\.method is none\)/,
    );
    t.notMatch(r.journal, /USB stick/, 'no stick to remove');
    t.match(r.staged?.message, n.target);
    t.same(
      await readdir(n.config.paths.upgradeDir),
      ['1.2.3-amd64'],
      'the staging is in place, no partial left',
    );
    t.same(
      await treeOf(n.target),
      await treeOf(w.seed),
      'the layout a stick stages, byte for byte (bundle.json and signature included)',
    );
  },
);

t.test(
  'a fetched staging held to another bundle.json than the approved one is refused, nothing put in place',
  async (t) => {
    const n = await fetchedNode('');
    const r = await load({
      ...n,
      layout: { ...n.layout, manifestDigest: `sha256:${'1'.repeat(64)}` },
    });
    t.notOk(r.ok);
    t.equal(r.failed?.reason, 'Corrupt', r.failed?.message);
    t.same(
      await readdir(n.config.paths.upgradeDir),
      ['1.2.3-amd64.partial'],
      'not renamed into place',
    );
  },
);

t.test(
  'a kept copy whose bundle.json was changed on disk afterwards: refused, nothing loaded',
  async (t) => {
    const n = await keptCopy(await fetchedNode(''));
    const file = join(n.target, 'bundle.json');
    await writeFile(file, (await readFile(file, 'utf8')).replace('"1.2.3"', '"1.2.4"'));
    const r = await load(n);
    t.notOk(r.ok);
    t.equal(r.phase, 'Failed');
    t.match(r.failed?.reason, /BadSignature|Corrupt/);
  },
);

t.test(
  'the version policy holds for peers too: a node running a newer release refuses the fetched older one',
  async (t) => {
    const n = await fetchedNode('', '2.0.0');
    const r = await load(n);
    t.notOk(r.ok);
    t.equal(r.failed?.reason, 'Downgrade');
  },
);

t.test(
  'a node trusting only a file digest cannot load a layout from peers: NoTrust names the fix',
  async (t) => {
    const n = await fetchedNode('');
    const digestOnly = {
      ...n.config,
      trust: { keys: [], digest: `sha256:${'0'.repeat(64)}` },
    } as typeof n.config;
    const r = await load({ ...n, config: digestOnly });
    t.notOk(r.ok);
    t.equal(r.failed?.reason, 'NoTrust');
    t.match(r.failed?.message, /trust\.keys/);
  },
);

t.test(
  'a layout the fetch found already staged (a kept copy) is hashed again: a damaged blob refuses the load',
  async (t) => {
    const n = await keptCopy(await fetchedNode(''));
    const layer = w.manifest.blobs.reduce((a, b) => (b.size > a.size ? b : a));
    const file = join(n.target, 'blobs', 'sha256', layer.digest.slice('sha256:'.length));
    const bytes = await readFile(file);
    bytes[0] = bytes[0]! ^ 0xff;
    await writeFile(file, bytes);
    const r = await load(n);
    t.notOk(r.ok, 'refused');
    t.equal(r.phase, 'Failed');
    t.match(r.failed?.reason, /StagingFailed|Corrupt|DigestMismatch/);
  },
);

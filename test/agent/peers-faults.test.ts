// Fetching from peers when things go wrong on the fetching node's side (issue #22 "bad input and
// faults"): the disk full (the real space check refuses first; or the disk fills anyway), the
// approval withdrawn mid-transfer, a bundle signed by a key this node does not pin. Each ends
// with its reason in one line and nothing left behind. And fan-out: a node that is itself still
// fetching serves what it verified to a third.
import t from 'tap';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ServedBundle, parseConfig, planSpace, type AgentError } from '@offline-bundle/agent';
import { makeKey } from '../format/craft.js';
import { nodeRoot, smallFs } from './fixtures.js';
import { FixedDirectory, MiB, endpoint, peerWorld, treeOf } from './peers-setup.js';

const w = await peerWorld(t, [3 * MiB, 2 * MiB, 2 * MiB, 1 * MiB]);
const seed = await w.server({ uploadBytesPerSecond: 4 * MiB });
const fromSeed = () => new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
const failure = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: AgentError) => e,
  );

t.test('disk full: the real space check refuses before a byte is fetched', async (t) => {
  const root = join(w.b.dir, 'full-node');
  const up = join(root, 'var/lib/upgrade');
  if (!smallFs(up, 2048, t)) return t.skip('cannot mount a tmpfs here');
  const configFile = await nodeRoot(
    root,
    undefined,
    'trust:\n  digest: sha256:0000000000000000000000000000000000000000000000000000000000000000\nruntime: containerd\nspace:\n  reserveBytes: 0\n',
  );
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  t.equal(config.paths.upgradeDir, up);
  const served = seed.counters.bytesServed;
  const err = await failure(
    w.fetch(up, fromSeed(), { planSpace: (m, credit) => planSpace(m, config, credit) }).result,
  );
  t.equal(err?.reason, 'InsufficientSpace', err?.message);
  t.notMatch(err?.message ?? '', /\n/);
  t.match(err?.message ?? '', new RegExp(`free space on ${up}`));
  t.same(await readdir(up), [], 'nothing written');
  t.equal(seed.counters.bytesServed, served, 'no blob was asked for');
});

t.test(
  'disk full mid-fetch (a check that said it fits, another writer filled the disk): one line, nothing left',
  async (t) => {
    const up = join(w.b.dir, 'fills-up');
    if (!smallFs(up, 3 * 1024, t)) return t.skip('cannot mount a tmpfs here');
    const err = await failure(w.fetch(up, fromSeed()).result);
    t.equal(err?.reason, 'InsufficientSpace', err?.message);
    t.match(err?.message ?? '', /disk filled up while fetching/);
    t.notMatch(err?.message ?? '', /\n/);
    t.same(await readdir(up), [], 'no partial directory, no temp file');
  },
);

t.test(
  'approval withdrawn mid-transfer: stops, ApprovalRevoked, nothing of the bundle kept',
  async (t) => {
    const up = join(w.b.dir, 'revoked', 'upgrade');
    const dir = fromSeed();
    let placed = 0;
    const err = await failure(
      w.fetch(up, dir, {
        approvalCheckMs: 100,
        streams: 1,
        // the admin deletes the BundleApproval once the first blob is in
        onVerified: (e) => {
          if (e.path.startsWith('blobs/') && ++placed === 1) dir.approvals = [];
        },
      }).result,
    );
    t.equal(err?.reason, 'ApprovalRevoked', err?.message);
    t.ok(
      placed < w.manifest.blobs.length,
      `stopped after ${placed} of ${w.manifest.blobs.length} blobs`,
    );
    t.same(await readdir(up), [], 'nothing of it kept');
    const again = await failure(w.fetch(up, dir).result);
    t.equal(again?.reason, 'ApprovalRevoked', 'not approved: not fetched at all');
  },
);

t.test('signed by a key this node does not pin: UntrustedKey, nothing written', async (t) => {
  const up = join(w.b.dir, 'untrusted', 'upgrade');
  const err = await failure(
    w.fetch(up, fromSeed(), { trust: { keys: [makeKey().trusted] } }).result,
  );
  t.equal(err?.reason, 'UntrustedKey', err?.message);
  await t.rejects(readdir(up), { code: 'ENOENT' });
  const digestOnly = await failure(
    w.fetch(up, fromSeed(), { trust: { digest: w.approval.manifestDigest } }).result,
  );
  t.equal(digestOnly?.reason, 'NoTrust', digestOnly?.message);
});

t.test('fan-out: a node still fetching serves each verified blob to a third node', async (t) => {
  const upB = join(w.b.dir, 'node-b', 'upgrade');
  const upC = join(w.b.dir, 'node-c', 'upgrade');
  let offerB: ServedBundle | undefined;
  const serverB = await w.server({
    bundle: (d) => (d === w.approval.manifestDigest ? offerB : undefined),
  });
  let cStarted: Promise<unknown> | undefined;
  const fromB = new FixedDirectory([w.approval], [endpoint('node-b', serverB.url, false)]);
  const seedBefore = seed.counters.bytesServed;
  const b = w.fetch(upB, fromSeed(), {
    streams: 1,
    onStaging: (head, partial, target) => {
      offerB = ServedBundle.staging(partial, target, head);
    },
    onVerified: (e) => {
      offerB!.verified(e.digest);
      // C starts once B holds one blob, long before B is done
      if (e.path.startsWith('blobs/') && !cStarted)
        cStarted = w.fetch(upC, fromB, { streams: 2 }).result;
    },
  });
  const rb = await b.result;
  offerB!.staged();
  const rc = (await cStarted) as Awaited<typeof b.result>;
  t.same(await treeOf(rc.target), await treeOf(w.seed), 'C has the bundle, byte for byte');
  t.same(await treeOf(rb.target), await treeOf(w.seed), 'and so does B');
  const layout = w.layoutBytes - 30;
  t.equal(
    seed.counters.bytesServed - seedBefore,
    layout,
    'the seed sent the bundle once (to B), not twice',
  );
  t.equal(serverB.counters.bytesServed, layout, 'C got every byte from B');
});

// The fetcher in a child process (the agent), killed with SIGKILL mid-transfer: what it verified
// and renamed stays; a new process keeps it (after re-hashing) and fetches only the rest.
const CHILD = `
const { fetchFromPeers, loadPeerCredentials } = await import('@offline-bundle/agent');
const { loadTrust } = await import('@offline-bundle/format');
const a = JSON.parse(process.env.PEER_ARGS);
const directory = { approved: async () => [a.approval], peersFor: async () => a.peers };
await fetchFromPeers({
  approval: a.approval, directory, credentials: await loadPeerCredentials(a.tls), trust: await loadTrust([a.pub]),
  upgradeDir: a.up, fsync: true, streams: 1, planSpace: async () => ({ mode: 'staged', message: 'fits' }),
  onVerified: (e) => console.log('placed ' + e.path),
});
console.log('done');
`;

t.test(
  'agent killed (SIGKILL) mid-fetch: verified blobs survive, the next process fetches only the rest',
  async (t) => {
    const slow = await w.server({ uploadBytesPerSecond: 2 * MiB });
    const up = join(w.b.dir, 'killed', 'upgrade');
    const pub = join(w.b.dir, 'factory-peer.pub');
    await writeFile(pub, w.b.key.publicPem);
    const args = { approval: w.approval, peers: [endpoint('slow', slow.url)], tls: w.ca, pub, up };
    const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD], {
      cwd: new URL('../../agent/', import.meta.url).pathname,
      env: { ...process.env, PEER_ARGS: JSON.stringify(args) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d: Buffer) => {
      err += d;
    });
    const killed = new Promise<string>((resolve) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d;
        if ((out.match(/placed blobs\//g) ?? []).length >= 3 && !child.killed)
          child.kill('SIGKILL');
      });
      child.on('exit', (code, signal) => resolve(signal ?? `exit ${code}: ${err}`));
    });
    t.equal(await killed, 'SIGKILL', 'killed mid-transfer');
    t.notMatch(out, /done/);
    const placed = out
      .split('\n')
      .filter((l) => l.startsWith('placed blobs/'))
      .map((l) => l.slice('placed '.length));
    const partial = join(up, '1.2.3-amd64.partial');
    const onDisk = Object.keys(await treeOf(partial));
    t.ok(
      placed.every((p) => onDisk.includes(p)),
      'every blob it said was placed is on disk',
    );
    const served = slow.counters.bytesServed;
    const r = await w.fetch(up, new FixedDirectory([w.approval], [endpoint('slow', slow.url)]))
      .result;
    const keptLayers = w.manifest.blobs
      .filter((b) => placed.includes(`blobs/sha256/${b.digest.slice(7)}`))
      .reduce((n, b) => n + b.size, 0);
    t.ok(r.keptBytes >= keptLayers, `kept ${r.keptBytes} bytes (the placed blobs: ${keptLayers})`);
    t.ok(
      slow.counters.bytesServed - served <= w.layoutBytes - keptLayers,
      'only the rest was fetched',
    );
    t.same(await treeOf(r.target), await treeOf(w.seed));
    t.same(await readdir(up), ['1.2.3-amd64'], 'no temp file or partial left');
  },
);

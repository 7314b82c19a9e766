// The daemon's peers (agent/src/daemon/peers.ts) against the RBAC-enforcing API stand-in, each
// node as its kubelet: a peer server that cannot start (its port taken) is said in status.peers
// and started once the port is free; a control-plane node (by its Node's labels) gives one
// downloader slot, a worker peers.downloaders; no blob is served while the node's own load runs
// (pauseWhileLoading); and the stick node publishes how many other nodes hold a complete copy,
// which its technician line then says. Real mutual-TLS servers on 127.0.0.x.
import t from 'tap';
import { createServer } from 'node:net';
import { request } from 'node:https';
import type { IncomingMessage } from 'node:http';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  createLogger,
  parseConfig,
  pausesServing,
  recordRelease,
  startPeers,
  type DaemonPeers,
} from '@offline-bundle/agent';
import {
  PEER_MEDIA,
  StatusTracker,
  approvalName,
  emptyStatus,
  type NodeStatus,
} from '@offline-bundle/status';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { nodeRoot } from './fixtures.js';
import { MiB, peerWorld } from './peers-setup.js';
import { until } from '../helpers/until.js';

const w = await peerWorld(t);
const api = await startKubeStandIn();
t.teardown(() => api.close());
const IP = {
  'node-r': '127.0.0.31',
  'node-cp': '127.0.0.32',
  'node-w': '127.0.0.33',
  'node-x': '127.0.0.34',
  'node-s': '127.0.0.35',
  'node-f': '127.0.0.36',
  'node-seed': '127.0.0.37',
} as const;
type Name = keyof typeof IP;
const PORT = {
  'node-r': 9481,
  'node-cp': 9482,
  'node-w': 9483,
  'node-x': 9484,
  'node-s': 9485,
  'node-f': 9486,
  'node-seed': 9487,
} as const;
api.nodes = Object.entries(IP).map(([name, ip]) => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name,
    labels:
      name === 'node-cp'
        ? { 'node-role.kubernetes.io/control-plane': '' }
        : { 'node-role.kubernetes.io/worker': '' },
  },
  status: {
    conditions: [{ type: 'Ready', status: 'True' }],
    addresses: [{ type: 'InternalIP', address: ip }],
  },
}));

// a peer port opens only while a bundle is approved (issue #42): the one these nodes serve is
const APPROVAL = {
  apiVersion: 'bundles.offline-bundle.io/v1alpha1',
  kind: 'BundleApproval',
  metadata: { name: approvalName(w.approval.manifestDigest) },
  spec: {
    manifestDigest: w.approval.manifestDigest,
    version: '1.2.3',
    signer: w.approval.signer,
    checked: 'file',
  },
};
api.approvals = [APPROVAL];

/** A node that keeps the seed's layout (unless `holds` is false), with its daemon peers started in this process. */
async function node(name: Name, { holds = true, pollMs = 200 } = {}) {
  const root = join(w.b.dir, `dops-${name}`);
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const configFile = await nodeRoot(
    root,
    pub,
    [
      'runtime: crio',
      'staging:\n  keep: true',
      'preload:\n  method: none',
      'reload:\n  command: ["true"]',
      'status:\n  kubeconfig: /var/lib/kubelet/kubeconfig',
      `peers:\n  enabled: true\n  port: ${PORT[name]}\n  uploadRate: 64KiB\n  downloaders: 4\n  controlPlaneDownloaders: 1\n  pauseWhileLoading: true`,
      '',
    ]
      .join('\n')
      .replace('nodeName: node-a', ''),
  );
  await writeFile(
    configFile,
    (await readFile(configFile, 'utf8')).replace('nodeName: node-a', `nodeName: ${name}`),
  );
  await api.writeNodeKubeconfig(root, name, { certPaths: 'root' });
  const peersDir = join(root, 'etc/bundle-agent/peers');
  await mkdir(peersDir, { recursive: true });
  for (const [from, to] of [
    [w.ca.ca, 'ca.crt'],
    [w.ca.cert, 'node.crt'],
    [w.ca.key, 'node.key'],
  ] as const)
    await copyFile(from, join(peersDir, to));
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  if (holds)
    await recordRelease(config.paths.stateDir, {
      version: '1.2.3',
      arch: 'amd64',
      refs: [],
      loadedAt: new Date().toISOString(),
      layout: w.seed,
    });
  const tracker = new StatusTracker(emptyStatus(name));
  const stop = new AbortController();
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  let peers: DaemonPeers | undefined;
  t.teardown(async () => {
    stop.abort();
    await peers?.stop();
  });
  const start = async () =>
    (peers = await startPeers({
      config,
      log,
      tracker,
      signal: stop.signal,
      agentVersion: '0.0.0',
      exclusive: (fn) => fn(),
      retryMs: 300,
      pollMs,
    }));
  return { name, config, tracker, start, url: `https://${IP[name]}:${PORT[name]}` };
}

const BIG = w.manifest.blobs.reduce((a, b) => (b.size > a.size ? b : a));
const open: IncomingMessage[] = [];
t.teardown(() => {
  for (const r of open) r.destroy();
});

/** A blob request as another node makes it; the response is left open (slow at 64 KiB/s: its slot stays taken). */
function blob(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/v1/bundles/${w.approval.manifestDigest}/blobs/${BIG.digest}`,
      {
        ca: w.credentials.ca,
        cert: w.credentials.cert,
        key: w.credentials.key,
        agent: false,
        checkServerIdentity: () => undefined,
      },
      (res) => {
        open.push(res);
        res.pause();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end();
  });
}
const drop = () => {
  for (const r of open.splice(0)) r.destroy();
};

t.test(
  'a peer server that cannot start is said in status.peers and started once it can',
  async (t) => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(PORT['node-r'], IP['node-r'], r));
    const n = await node('node-r');
    t.ok(await n.start(), 'the daemon keeps its peers part: it tries again');
    const down = n.tracker.current.peers;
    t.equal(down?.up, false);
    t.equal(down?.problem?.reason, 'PeerPortInUse');
    t.match(
      down?.problem?.message,
      new RegExp(`port ${PORT['node-r']} is taken.*peers\\.port.*trying again`),
    );
    t.notMatch(down?.problem?.message ?? '', /\n/, 'one line');
    t.equal(n.tracker.current.serving, undefined, 'nothing published as served');
    await new Promise<void>((r) => blocker.close(() => r()));
    const serving = await until(
      'serving after the port was freed',
      () => n.tracker.current.serving,
    );
    t.same(serving, {
      manifestDigest: w.approval.manifestDigest,
      complete: true,
      verifiedBlobs: w.manifest.blobs.length + 1,
      address: IP['node-r'],
      port: PORT['node-r'],
    });
    t.equal(n.tracker.current.peers?.up, true);
    t.equal(n.tracker.current.peers?.problem, undefined, 'the problem is gone from the status');
    t.equal(await blob(n.url), 200, 'and it serves');
    drop();
  },
);

t.test(
  "downloader slots by the Node's role: one on a control-plane node, peers.downloaders on a worker",
  async (t) => {
    const cp = await node('node-cp');
    const wk = await node('node-w');
    await cp.start();
    await wk.start();
    t.equal(await blob(cp.url), 200);
    t.equal(await blob(cp.url), 503, 'control-plane: the second downloader waits');
    t.equal(await blob(wk.url), 200);
    t.equal(await blob(wk.url), 200, 'worker: a second downloader is served');
    drop();
  },
);

t.test(
  "no blob served while this node's own load runs (pauseWhileLoading), served again after it",
  async (t) => {
    const n = await node('node-x');
    await n.start();
    t.equal(await blob(n.url), 200);
    drop();
    n.tracker.update((s) => {
      s.phase = 'Preloading';
      s.bundle = { file: '/media/u.bundle', media: 'USB stick U' };
    });
    t.equal(await blob(n.url), 503, 'paused while its images load');
    n.tracker.update((s) => {
      s.phase = 'Ready';
    });
    t.equal(await blob(n.url), 200, 'served again once Ready');
    drop();
    const config = n.config;
    const at = (phase: NodeStatus['phase'], media: string) =>
      pausesServing(config, { ...emptyStatus('x'), phase, bundle: { file: 'f', media } });
    t.notOk(at('Staging', 'peers'), 'a fetch from peers keeps serving what it verified (fan-out)');
    t.ok(at('Staging', 'USB stick U'), 'a stick being copied: paused');
    t.notOk(
      pausesServing(
        { ...config, peers: { ...config.peers, pauseWhileLoading: false } },
        { ...emptyStatus('x'), phase: 'Preloading' },
      ),
      'pauseWhileLoading false: never paused',
    );
  },
);

t.test(
  "the stick node counts the other nodes' complete copies from their NodeBundleStatus, and its line follows",
  async (t) => {
    const n = await node('node-s');
    n.tracker.update((s) => {
      s.phase = 'Ready';
      s.bundle = {
        file: '/media/u.bundle',
        version: '1.2.3',
        media: 'USB stick U',
        mode: 'staged',
      };
    });
    api.statuses = [];
    await n.start();
    const none = await until('counted: none', () => n.tracker.current.peers?.copies);
    t.same(none, { version: '1.2.3', nodes: 0, serving: true });
    t.match(n.tracker.current.message, /Keep the USB stick in until another node has a copy/);
    const claim = (name: Name, complete: boolean) => ({
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'NodeBundleStatus',
      metadata: { name },
      status: {
        ...emptyStatus(name),
        node: name,
        serving: {
          manifestDigest: w.approval.manifestDigest,
          complete,
          verifiedBlobs: 3,
          address: IP[name],
          port: PORT[name],
        },
      },
    });
    // one whole copy, one still fetching, one claiming an address that is not its Node's
    api.statuses = [
      claim('node-r', true),
      claim('node-cp', false),
      {
        ...claim('node-x', true),
        status: {
          ...claim('node-x', true).status,
          serving: { ...claim('node-x', true).status.serving, address: '10.9.9.9' },
        },
      },
    ];
    await until('counted: one', () =>
      n.tracker.current.peers?.copies?.nodes === 1 ? true : undefined,
    );
    t.equal(
      n.tracker.current.message,
      'Done: update 1.2.3 is loaded on this node. You may remove the USB stick: 1 other node has a complete copy.',
    );
  },
);

t.test(
  "a node still fetching publishes status.serving (complete false, its count of verified blobs) from the fetch's start, so others take blobs from it",
  async (t) => {
    const seed = await w.server({
      host: IP['node-seed'],
      port: PORT['node-seed'],
      uploadBytesPerSecond: 1 * MiB,
    });
    api.statuses = [
      {
        apiVersion: 'bundles.offline-bundle.io/v1alpha1',
        kind: 'NodeBundleStatus',
        metadata: { name: 'node-seed' },
        status: {
          ...emptyStatus('node-seed'),
          node: 'node-seed',
          serving: {
            manifestDigest: w.approval.manifestDigest,
            complete: true,
            verifiedBlobs: w.manifest.blobs.length + 1,
            address: IP['node-seed'],
            port: PORT['node-seed'],
          },
        },
      },
    ];
    const n = await node('node-f', { holds: false, pollMs: 1000 });
    const seen: NodeStatus[] = [];
    n.tracker.onChange((s) => seen.push(structuredClone(s)));
    await n.start();
    const total = w.manifest.blobs.length + 1;
    const partial = await until('published while fetching', () => {
      const s = n.tracker.current.serving;
      return s && !s.complete && s.verifiedBlobs > 0 && s.verifiedBlobs < total ? s : undefined;
    });
    t.match(partial, {
      manifestDigest: w.approval.manifestDigest,
      complete: false,
      address: IP['node-f'],
      port: PORT['node-f'],
    });
    // the fetch shown (phase Staging from peers) and this node published as a peer in one go: the reporter sends both in one write
    const first = seen.findIndex((s) => s.phase === 'Staging' && s.bundle?.media === PEER_MEDIA);
    t.ok(first >= 0, 'the fetch was shown');
    t.match(
      seen[first + 1]?.serving,
      { manifestDigest: w.approval.manifestDigest, complete: false },
      'status.serving published right after the fetch began, not at the next look',
    );
    await until(
      'fetched whole',
      () => (seed.counters.bytesServed >= w.layoutBytes - 30 ? true : undefined),
      { timeoutMs: 30_000 },
    );
    api.approvals = [];
    api.statuses = [];
  },
);

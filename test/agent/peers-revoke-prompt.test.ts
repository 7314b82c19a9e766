// A revoke stops a fetch from peers as promptly as the approvals' watch reports it (issue #42):
// the daemon's peers (agent/src/daemon/peers.ts) tell the fetch's approval check of each change
// the watch sees, so the check no longer waits for its 5 s timer (kept as the fallback should an
// event be missed: with the events alone switched off, each revoke takes up to 5 s). Against the RBAC-enforcing API stand-in with watches (test/helpers/
// kube-standin.ts), each node as its kubelet; a real mutual-TLS seed on 127.0.0.x, slowed so the
// fetch is still under way when the admin revokes.
import t from 'tap';
import { copyFile, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, parseConfig, startPeers, type DaemonPeers } from '@offline-bundle/agent';
import { PEER_MEDIA, StatusTracker, approvalName, emptyStatus } from '@offline-bundle/status';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { until } from '../helpers/until.js';
import { nodeRoot } from './fixtures.js';
import { peerWorld } from './peers-setup.js';

/** What the test asks of a revoke: the fetch withdrawn within this (the timed check alone: up to 5 s). */
const PROMPT_MS = 1000;
const ROUNDS = 3;
const IP = { 'node-v': '127.0.0.93', 'node-seed': '127.0.0.94' } as const;
const PORT = { 'node-v': 9493, 'node-seed': 9494 } as const;

const w = await peerWorld(t);
const api = await startKubeStandIn();
t.teardown(() => api.close());
api.watchBookmarkMs = 500;
api.nodes = Object.entries(IP).map(([name, ip]) => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name },
  status: {
    conditions: [{ type: 'Ready', status: 'True' }],
    addresses: [{ type: 'InternalIP', address: ip }],
  },
}));
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
// the seed at 256 KiB/s: its 6.5 MiB take the fetch far past each revoke
const seed = await w.server({
  host: IP['node-seed'],
  port: PORT['node-seed'],
  uploadBytesPerSecond: 256 * 1024,
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

const NAME = 'node-v';
const root = join(w.b.dir, 'revoke-prompt');
const pub = join(w.b.dir, 'factory.pub');
await writeFile(pub, w.b.key.publicPem);
const configFile = await nodeRoot(
  root,
  pub,
  [
    'runtime: crio',
    'preload:\n  method: none',
    'reload:\n  command: ["true"]',
    'status:\n  kubeconfig: /var/lib/kubelet/kubeconfig',
    `peers:\n  enabled: true\n  port: ${PORT[NAME]}`,
    '',
  ].join('\n'),
);
await writeFile(
  configFile,
  (await readFile(configFile, 'utf8')).replace('nodeName: node-a', `nodeName: ${NAME}`),
);
await api.writeNodeKubeconfig(root, NAME, { certPaths: 'root' });
const peersDir = join(root, 'etc/bundle-agent/peers');
await mkdir(peersDir, { recursive: true });
for (const [from, to] of [
  [w.ca.ca, 'ca.crt'],
  [w.ca.cert, 'node.crt'],
  [w.ca.key, 'node.key'],
] as const)
  await copyFile(from, join(peersDir, to));
const config = parseConfig(await readFile(configFile, 'utf8'), configFile);

const tracker = new StatusTracker(emptyStatus(NAME));
const stop = new AbortController();
const lines: string[] = [];
const log = createLogger(
  new Writable({
    write: (c, _e, cb) => {
      lines.push(String(c));
      cb();
    },
  }),
);
let peers: DaemonPeers | undefined;
t.teardown(async () => {
  stop.abort();
  await peers?.stop();
});
const detail = () => `${JSON.stringify(tracker.current.phase)}\n${lines.slice(-5).join('')}`;
const withdrawnLines = () => lines.filter((l) => /ApprovalRevoked/.test(l)).length;
const partials = async () =>
  (await readdir(config.paths.upgradeDir).catch(() => [] as string[])).filter((n) =>
    n.endsWith('.partial'),
  );

t.test(
  `revoked mid-fetch (stand-in API server with watch): the fetch is withdrawn within ${PROMPT_MS} ms, ${ROUNDS} times`,
  async (t) => {
    api.approvals = [];
    peers = await startPeers({
      config,
      log,
      tracker,
      signal: stop.signal,
      agentVersion: '0.0.0',
      exclusive: (fn) => fn(),
      retryMs: 300,
      pollMs: 200,
      // the safety re-list out of the way: what happens within the test is the watch's doing
      relistMs: 60_000,
    });
    for (let round = 1; round <= ROUNDS; round++) {
      const servedBefore = seed.counters.bytesServed;
      const withdrawnBefore = withdrawnLines();
      api.approvals = [APPROVAL];
      await until(
        `round ${round}: the fetch under way`,
        () =>
          tracker.current.phase === 'Staging' &&
          tracker.current.bundle?.media === PEER_MEDIA &&
          seed.counters.bytesServed - servedBefore > 128 * 1024
            ? true
            : undefined,
        { timeoutMs: 30_000, stepMs: 10, detail },
      );
      t.ok(seed.counters.bytesServed - servedBefore < w.layoutBytes / 2, 'far from done');
      const revokedAt = Date.now();
      api.approvals = [];
      await until(
        `round ${round}: the fetch withdrawn`,
        async () =>
          withdrawnLines() > withdrawnBefore &&
          tracker.current.phase !== 'Staging' &&
          !(await partials()).length
            ? true
            : undefined,
        { timeoutMs: 15_000, stepMs: 10, detail },
      );
      const ms = Date.now() - revokedAt;
      t.comment(`revoke accepted → fetch withdrawn, its partial removed: ${ms} ms`);
      t.ok(ms < PROMPT_MS, `within ${PROMPT_MS} ms (${ms} ms)`);
    }
    t.ok(
      seed.counters.bytesServed < w.layoutBytes,
      'no fetch ever completed: each was withdrawn mid-way',
    );
  },
);

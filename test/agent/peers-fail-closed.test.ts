// Peers inert until approved, failing closed (issue #42, review of 8a84146): the daemon's peers
// against the RBAC-enforcing API stand-in (the approvals watched, the watch's length to the grace
// as shipped), the port's state read from the kernel (this process's sockets in LISTEN), its
// keys checked by a TLS client. Approvals that cannot be read keep the port open only for the
// grace, a refusal (403) closes it at once; keys renewed or rotated in place are taken without a
// restart, deleted ones close the port; a closed port leaves no status.peers, so the stick line
// lets the stick go; an offer that is not approved keeps no stick in; the daemon's start does
// not wait long for an API server that does not answer.
import t from 'tap';
import { request } from 'node:https';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { chmod, copyFile, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  createLogger,
  DIRECTORY_REQUEST_MS,
  FIRST_LOOK_WAIT_MS,
  parseConfig,
  recordRelease,
  startPeers,
  type DaemonPeers,
} from '@offline-bundle/agent';
import {
  StatusTracker,
  approvalName,
  emptyStatus,
  technicianLine,
  type NodeStatus,
} from '@offline-bundle/status';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { until } from '../helpers/until.js';
import { makePeerCa } from '../../deploy/openshift/peer-ca.mjs';
import { nodeRoot } from './fixtures.js';
import { listensOn } from './listening-sockets.js';
import { peerWorld } from './peers-setup.js';

const IP = '127.0.0.72';
const PORT = 9478;
const NAME = 'node-q';
/** The test's grace of failing looks (the shipped one is APPROVALS_GRACE_MS, 2 min). */
const GRACE_MS = 4000;
const POLL_MS = 200;
/**
 * The watch's length to the grace as shipped (APPROVALS_RELIST_MS 60 s to APPROVALS_GRACE_MS
 * 2 min): the approvals are read by a list every 2 to 3 s and by the watch's events in between,
 * never polled, so what closes the port here is what closes it in a cluster.
 */
const RELIST_MS = GRACE_MS / 2;
const SHIPPED_RBAC = ['deploy/rbac.yaml', 'deploy/admin-rbac.yaml', 'deploy/upgrade-gate.yaml'];

const w = await peerWorld(t);
const api = await startKubeStandIn();
t.teardown(() => api.close());
api.nodes = [
  {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NAME },
    status: {
      conditions: [{ type: 'Ready', status: 'True' }],
      addresses: [{ type: 'InternalIP', address: IP }],
    },
  },
];
const approvalOf = (digest: string, version: string) => ({
  apiVersion: 'bundles.offline-bundle.io/v1alpha1',
  kind: 'BundleApproval',
  metadata: { name: approvalName(digest) },
  spec: { manifestDigest: digest, version, signer: w.approval.signer, checked: 'file' },
});
/** The bundle this node keeps (its kept layout is offered). */
const APPROVAL = approvalOf(w.approval.manifestDigest, '1.2.3');
api.approvals = [APPROVAL];

const root = join(w.b.dir, 'fail-closed');
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
    `peers:\n  port: ${PORT}`,
    '',
  ].join('\n'),
);
await writeFile(
  configFile,
  (await readFile(configFile, 'utf8')).replace('nodeName: node-a', `nodeName: ${NAME}`),
);
await api.writeNodeKubeconfig(root, NAME, { certPaths: 'root' });
const peersDir = join(root, 'etc/bundle-agent/peers');
type CaFiles = { ca: string; cert: string; key: string };

/** Installs a CA's files as the node's peer keys, each replaced whole (as a Secret's update is). */
async function installKeys(ca: CaFiles): Promise<void> {
  await mkdir(peersDir, { recursive: true });
  for (const [from, to] of [
    [ca.ca, 'ca.crt'],
    [ca.cert, 'node.crt'],
    [ca.key, 'node.key'],
  ] as const) {
    await copyFile(from, join(peersDir, `.${to}.new`));
    await chmod(join(peersDir, `.${to}.new`), 0o600);
    await rename(join(peersDir, `.${to}.new`), join(peersDir, to));
  }
}
await installKeys(w.ca);
const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
await recordRelease(config.paths.stateDir, {
  version: '1.2.3',
  arch: 'amd64',
  refs: [],
  loadedAt: new Date().toISOString(),
  layout: w.seed,
});

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
/** This node's peers, started once (each test may run alone) and listening. */
async function running(): Promise<void> {
  peers ??= await startPeers({
    config,
    log,
    tracker,
    signal: stop.signal,
    agentVersion: '0.0.0',
    exclusive: (fn) => fn(),
    retryMs: 300,
    pollMs: POLL_MS,
    relistMs: RELIST_MS,
    approvalsGraceMs: GRACE_MS,
  });
  await until('listening', listening, { timeoutMs: 10_000, detail });
}

const listening = () => listensOn(process.pid, PORT);
const closed = async () => !(await listening());
const condition = () => tracker.current.conditions.find((c) => c.type === 'Peers');
/** When this node last read the approvals: its watch's last list (the stand-in sends no bookmark within a watch this short), the watch right after it. */
const lastRead = () =>
  api.requests
    .filter(
      (r) =>
        r.user === `system:node:${NAME}` &&
        r.resource === 'bundleapprovals' &&
        r.verb === 'watch' &&
        r.status === 200,
    )
    .at(-1)!.at;
const detail = () =>
  `phase ${tracker.current.phase}: ${tracker.current.message ?? ''}; peers ${JSON.stringify(tracker.current.peers)}; Peers condition: ${JSON.stringify(condition())}\n${lines.slice(-5).join('')}`;

/** A HEAD of the served bundle.json with `cred` as the client's keys: its status, or the TLS error. */
function head(cred: { ca: Buffer; cert: Buffer; key: Buffer }): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request(
      `https://${IP}:${PORT}/v1/bundles/${w.approval.manifestDigest}/bundle.json`,
      { method: 'HEAD', ...cred, agent: false, checkServerIdentity: () => undefined },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', (e) => resolve(`error ${(e as Error).message}`));
    req.end();
  });
}

/** A stick's bundle loaded Ready on this node (what the technician's line speaks of). */
function stickReady(version: string): void {
  tracker.update((s: NodeStatus) => {
    s.phase = 'Ready';
    s.bundle = {
      file: '/media/usb/u.bundle',
      media: '/media/usb',
      name: 'u.bundle',
      version,
      arch: 'amd64',
    };
  });
}

t.test(
  "the daemon's start (firstLookWaitMs, as the daemon sets it) waits for the first look only briefly when the API server does not answer",
  async (t) => {
    // a TCP server that accepts and never answers: the TLS handshake hangs until the client's deadline
    const held: Socket[] = [];
    const silent = createServer((s) => {
      held.push(s);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    t.teardown(() => {
      for (const s of held) s.destroy();
      silent.close();
    });
    const silentRoot = join(w.b.dir, 'silent');
    const silentConfig = await nodeRoot(
      silentRoot,
      pub,
      [
        'runtime: crio',
        'status:\n  kubeconfig: /var/lib/kubelet/kubeconfig',
        `peers:\n  port: ${PORT + 1}`,
        '',
      ].join('\n'),
    );
    await api.writeNodeKubeconfig(silentRoot, 'node-a', {
      certPaths: 'root',
      server: `https://127.0.0.1:${(silent.address() as AddressInfo).port}`,
    });
    const dir = join(silentRoot, 'etc/bundle-agent/peers');
    await mkdir(dir, { recursive: true });
    for (const [from, to] of [
      [w.ca.ca, 'ca.crt'],
      [w.ca.cert, 'node.crt'],
      [w.ca.key, 'node.key'],
    ] as const)
      await copyFile(from, join(dir, to));
    const silentStop = new AbortController();
    const started = Date.now();
    const p = await startPeers({
      config: parseConfig(await readFile(silentConfig, 'utf8'), silentConfig),
      log,
      tracker: new StatusTracker(emptyStatus('node-a')),
      signal: silentStop.signal,
      agentVersion: '0.0.0',
      exclusive: (fn) => fn(),
      pollMs: POLL_MS,
      firstLookWaitMs: FIRST_LOOK_WAIT_MS,
    });
    const tookMs = Date.now() - started;
    t.comment(`startPeers returned after ${tookMs} ms against an API server that never answers`);
    t.ok(p, 'the peers part runs');
    // the first look's wait, not the API client's deadline (a cold start loads the API client meanwhile)
    t.ok(
      tookMs >= FIRST_LOOK_WAIT_MS - 100 && tookMs < DIRECTORY_REQUEST_MS,
      `returned after the first look's wait (${FIRST_LOOK_WAIT_MS} ms), before the API client's deadline (${DIRECTORY_REQUEST_MS} ms)`,
    );
    silentStop.abort();
    for (const s of held) s.destroy();
    await p?.stop();
  },
);

t.test(
  'approvals unreadable: the port stays open for the grace only, the condition says Unknown',
  async (t) => {
    await running();
    t.equal(await head(w.credentials), 200, 'serves the approved bundle');
    await api.pause();
    const readAt = lastRead();
    const unknown = await until(
      'Peers Unknown',
      () => (condition()?.status === 'Unknown' ? condition() : undefined),
      { timeoutMs: 5000, detail },
    );
    t.match(unknown, {
      reason: 'ApprovalsUnreadable',
      message:
        /cannot read the BundleApprovals .*stays open for 4 s after the last look that read them, then closes/,
    });
    t.ok(await listening(), 'still open within the grace (an API server restarting)');
    await until(
      'closed after the grace',
      async () => (await closed()) && /opens no peer port/.test(condition()?.message ?? ''),
      {
        timeoutMs: GRACE_MS + 10_000,
        stepMs: 50,
        detail,
      },
    );
    const closedAfter = Date.now() - readAt;
    t.comment(
      `API server gone → port closed ${closedAfter} ms after the last read (grace ${GRACE_MS} ms, watches of ${RELIST_MS} to ${1.5 * RELIST_MS} ms)`,
    );
    t.ok(closedAfter >= GRACE_MS - 2 * POLL_MS, 'not before the grace, counted from the last read');
    t.ok(closedAfter < GRACE_MS + 3 * POLL_MS, 'soon after it');
    t.match(condition(), {
      status: 'Unknown',
      reason: 'ApprovalsUnreadable',
      message: /opens no peer port and fetches nothing from other nodes until they can be read/,
    });
    t.notOk(tracker.current.serving, 'nothing published as served');
    t.notOk(tracker.current.peers, 'no status.peers: nothing is passed on from this node');
    await api.resume();
    // the agent says Listening once its listen returned: the port alone comes a moment before
    await until(
      'open again once the approvals are read',
      async () => (await listening()) && condition()?.status === 'True',
      { timeoutMs: 10_000, detail },
    );
    t.match(condition(), { status: 'True', reason: 'Listening' });
  },
);

t.test('approvals refused (403): the port closes at once, not after the grace', async (t) => {
  await running();
  const rbac = (await readFile('deploy/rbac.yaml', 'utf8')).replace(
    /resources: \[bundleapprovals\]\n {4}verbs: \[get, list, watch\]/,
    'resources: [nothing]\n    verbs: [get]',
  );
  t.not(
    rbac,
    await readFile('deploy/rbac.yaml', 'utf8'),
    'the rule that lets nodes read approvals is taken out',
  );
  const file = join(w.b.dir, 'rbac-no-approvals.yaml');
  await writeFile(file, rbac);
  // a watch ended at its length and begun again: no backoff left from the outage before
  const earlier = lastRead();
  await until('a watch begun again', () => lastRead() > earlier, {
    timeoutMs: 3 * RELIST_MS,
    detail,
  });
  await api.loadRbac([file, ...SHIPPED_RBAC.slice(1)]);
  t.teardown(() => api.loadRbac(SHIPPED_RBAC));
  // the open watch outlives the change (the API server authorizes a request once): it ends, as at its timeoutSeconds
  t.ok(await listening(), 'open while the watch authorized before runs');
  const readAt = lastRead();
  api.cutWatches();
  await until(
    'closed on the refusal',
    async () => (await closed()) && condition()?.status === 'Unknown',
    { timeoutMs: GRACE_MS - 1000, stepMs: 50, detail },
  );
  const afterRead = Date.now() - readAt;
  t.comment(
    `watch ended, list 403 → port closed ${afterRead} ms after the last read (grace ${GRACE_MS} ms)`,
  );
  t.ok(afterRead < GRACE_MS / 2, 'closed on the refusal, long before the grace');
  t.match(condition(), {
    status: 'Unknown',
    reason: 'ApprovalsUnreadable',
    message: /refused.*deploy\/rbac\.yaml/,
  });
  await api.loadRbac(SHIPPED_RBAC);
  await until('open again', listening, { timeoutMs: 10_000, detail });
});

t.test(
  'keys renewed in place: the port takes the new ones at the next look, no restart',
  async (t) => {
    await running();
    const ca2 = makePeerCa(join(w.b.dir, 'peer-ca-2')) as CaFiles;
    const next = {
      ca: await readFile(ca2.ca),
      cert: await readFile(ca2.cert),
      key: await readFile(ca2.key),
    };
    const rotatedAt = Date.now();
    await installKeys(ca2);
    await until('the new keys open the port', async () => (await head(next)) === 200, {
      timeoutMs: 10_000,
      stepMs: 100,
      detail,
    });
    t.comment(`keys replaced → served with the new ones after ${Date.now() - rotatedAt} ms`);
    t.match(await head(w.credentials), /^error /, 'the old keys open nothing any more');
    t.match(condition(), { status: 'True', reason: 'Listening' });
    t.match(lines.join(''), /the peer keys changed: the peer port opens again with the new ones/);
  },
);

t.test('keys deleted: the port closes, NoPeerCredentials, no status.peers', async (t) => {
  await running();
  await rm(peersDir, { recursive: true });
  await until('closed', async () => (await closed()) && condition()?.status === 'False', {
    timeoutMs: 10_000,
    stepMs: 50,
    detail,
  });
  t.match(condition(), { status: 'False', reason: 'NoPeerCredentials' });
  t.notOk(tracker.current.peers, 'no status.peers');
  await installKeys(w.ca);
  await until('open again with keys back', listening, { timeoutMs: 10_000, detail });
});

t.test(
  'revoked: a stick loaded afterwards is let go (status.peers leaves with the port)',
  async (t) => {
    await running();
    api.approvals = [];
    await until('closed', closed, { timeoutMs: 10_000, stepMs: 50, detail });
    stickReady('2.0.0');
    await peers!.refresh();
    await sleep(3 * POLL_MS);
    t.notOk(tracker.current.peers, 'no status.peers while the port is closed');
    t.match(technicianLine(tracker.current), /You may remove the USB stick\.$/);
    tracker.update((s) => {
      s.phase = 'Idle';
      delete s.bundle;
    });
  },
);

t.test(
  'an offer that is not approved keeps no stick in: only another bundle is approved',
  async (t) => {
    // this node keeps 1.2.3 (its layout offered) and loaded it from a stick; the approval is of
    // another bundle of that version (rebuilt): one this node does not fetch, as it holds 1.2.3
    stickReady('1.2.3');
    api.approvals = [approvalOf(`sha256:${'ab'.repeat(32)}`, '1.2.3')];
    await running();
    const copies = await until('counted', () => tracker.current.peers?.copies, {
      timeoutMs: 10_000,
      detail,
    });
    t.same(
      copies,
      { version: '1.2.3', nodes: 0, serving: false },
      'not passed on: its port serves approved bundles only',
    );
    t.match(
      technicianLine(tracker.current),
      /You may remove the USB stick, but this node does not pass the update on/,
    );
    t.equal(await head(w.credentials), 404, 'and indeed the port does not serve it');
    api.approvals = [APPROVAL];
    await until('passed on once approved', () => tracker.current.peers?.copies?.serving, {
      timeoutMs: 10_000,
      detail,
    });
    t.match(technicianLine(tracker.current), /Keep the USB stick in until another node has a copy/);
  },
);

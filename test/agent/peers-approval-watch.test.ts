// The approvals as a watch (issue #42): the daemon's peers against the RBAC-enforcing API
// stand-in, which serves watches as the API server's watch cache does (resourceVersions, 410
// Expired, bookmarks, timeoutSeconds: test/helpers/kube-standin.ts). The safety re-list is left at
// 60 s, so whatever happens within a test's few seconds is the watch's doing; the port's state is
// read from the kernel (this process's sockets in LISTEN). The stand-in's bookmarks come every
// 500 ms (the API server's: about a minute) so that the test's 3 s grace measures an API that
// stops answering, not a quiet one.
import t from 'tap';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  createLogger,
  parseConfig,
  recordRelease,
  startPeers,
  type DaemonPeers,
} from '@offline-bundle/agent';
import { StatusTracker, approvalName, emptyStatus } from '@offline-bundle/status';
import {
  MAX_WATCH_BYTES_PER_SECOND,
  MAX_WATCH_EVENT_BYTES,
  MAX_WATCH_EVENTS_PER_SECOND,
} from '@offline-bundle/kube';
import { ApprovalWatch, WATCH_LENGTH_SPREAD } from '../../agent/dist/daemon/approval-watch.js';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { until } from '../helpers/until.js';
import { nodeRoot } from './fixtures.js';
import { listensOn } from './listening-sockets.js';
import { peerWorld } from './peers-setup.js';

const IP = '127.0.0.79';
const PORT = 9479;
const NAME = 'node-w';
/** The test's grace of unreadable approvals (the shipped one is APPROVALS_GRACE_MS, 2 min). */
const GRACE_MS = 3000;
/** The promptness asked of an approval and a revoke (issue #42's remaining item). */
const PROMPT_MS = 1000;
const SHIPPED_RBAC = ['deploy/rbac.yaml', 'deploy/admin-rbac.yaml', 'deploy/upgrade-gate.yaml'];

const w = await peerWorld(t);
const api = await startKubeStandIn();
t.teardown(() => api.close());
api.watchBookmarkMs = 500;
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
const OTHER = approvalOf(`sha256:${'cd'.repeat(32)}`, '9.9.9');

const root = join(w.b.dir, 'approval-watch');
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
await mkdir(peersDir, { recursive: true });
for (const [from, to] of [
  [w.ca.ca, 'ca.crt'],
  [w.ca.cert, 'node.crt'],
  [w.ca.key, 'node.key'],
] as const)
  await copyFile(from, join(peersDir, to));
await chmod(join(peersDir, 'node.key'), 0o600);
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

const listening = () => listensOn(process.pid, PORT);
const closed = async () => !(await listening());
const condition = () => tracker.current.conditions.find((c) => c.type === 'Peers');
const detail = () => `Peers condition: ${JSON.stringify(condition())}\n${lines.slice(-5).join('')}`;
const asked = (verb: string) =>
  api.requests.filter(
    (r) => r.user === `system:node:${NAME}` && r.resource === 'bundleapprovals' && r.verb === verb,
  );
/** Waits for `probe` (checked every 10 ms) and returns how long it took from `since`. */
async function within(
  what: string,
  probe: () => Promise<boolean>,
  since: number,
  timeoutMs = 15_000,
): Promise<number> {
  await until(what, probe, { timeoutMs, stepMs: 10, detail });
  return Date.now() - since;
}

/** This node's peers, started once (each test may run alone) with no approval, its watch open. */
async function running(): Promise<void> {
  if (!peers) {
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
      relistMs: 60_000,
      approvalsGraceMs: GRACE_MS,
    });
  }
  await until(
    'the watch open',
    () =>
      api.requests.some(
        (r) => r.verb === 'watch' && r.user === `system:node:${NAME}` && r.status === 200,
      ),
    { timeoutMs: 15_000, detail },
  );
}

/** A watch open and read from (a bookmark came since it began): what a cut or a flood is to reach. */
async function watchRead(): Promise<void> {
  const last = await until('a watch open', () => api.openWatches > 0 && asked('watch').at(-1), {
    timeoutMs: 15_000,
    detail,
  });
  await sleep(Math.max(0, last.at + api.watchBookmarkMs + 200 - Date.now()));
}

/**
 * The port open (closed) and the Peers condition saying so: the agent says Listening only after
 * its listen returned, and NotApproved after its close, so the port alone leaves a gap.
 */
/** Closed for approvals that cannot be read, and said so (Unknown comes after the close, as in settle). */
const closedUnreadable = async () => (await closed()) && condition()?.status === 'Unknown';

async function settle(open: boolean): Promise<void> {
  const said = () => (condition()?.status === 'True') === open;
  await until(
    open ? 'open' : 'closed',
    async () => (await (open ? listening : closed)()) && said(),
    { timeoutMs: 15_000, detail },
  );
}

t.test(
  'the watch (stand-in API server with watch): approve opens the port within 1 s of the API accepting the object, revoke closes it within 1 s, no list in between',
  async (t) => {
    await running();
    await settle(false);
    t.match(condition(), { status: 'False', reason: 'NotApproved' });
    const watch = asked('watch').at(-1)!;
    t.equal(watch.query.get('allowWatchBookmarks'), 'true', 'with bookmarks');
    const length = Number(watch.query.get('timeoutSeconds'));
    t.ok(
      length >= 60 && length <= 60 * (1 + WATCH_LENGTH_SPREAD),
      `bounded by timeoutSeconds (the safety re-list), a length of its own (${length} s)`,
    );
    t.match(watch.query.get('resourceVersion'), /^\d+$/, "from the list's resourceVersion");
    const watches = asked('watch').length;
    // the first opening also reads this node's Node and builds the peer service: timed, bounded by the old poll's 5 s
    let approvedAt = Date.now();
    api.approvals = [APPROVAL];
    const coldMs = await within('open', listening, approvedAt);
    t.comment(`approval accepted → port open, first opening: ${coldMs} ms`);
    t.ok(coldMs < 5000, 'sooner than the 5 s poll it replaces');
    api.approvals = [];
    await settle(false);
    for (let i = 0; i < 3; i++) {
      approvedAt = Date.now();
      api.approvals = [APPROVAL];
      const openMs = await within('open', listening, approvedAt);
      t.comment(`approval accepted → port open: ${openMs} ms`);
      t.ok(openMs < PROMPT_MS, `open within ${PROMPT_MS} ms (${openMs} ms)`);
      const revokedAt = Date.now();
      api.approvals = [];
      const closeMs = await within('closed', closed, revokedAt);
      t.comment(`revoke accepted → port closed: ${closeMs} ms`);
      t.ok(closeMs < PROMPT_MS, `closed within ${PROMPT_MS} ms (${closeMs} ms)`);
    }
    t.equal(
      asked('watch').length,
      watches,
      "one watch carried them all (no watch begun again, so no list of the watch's)",
    );
  },
);

t.test(
  "an open port (stand-in API server with watch): the peer service reads the watch's approvals, not a list of its own at every look",
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    await watchRead();
    const [lists, watches] = [asked('list').length, asked('watch').length];
    // the daemon looks every 200 ms here (pollMs): each look of the service used to list them
    await sleep(3000);
    t.equal(asked('watch').length, watches, 'the same watch all along');
    t.equal(asked('list').length - lists, 0, 'no list while the watch is fresh');
    t.ok(await listening(), 'still open');
  },
);

t.test(
  'the stream cut (stand-in API server with watch): the list is read again at once, and a change made meanwhile is not missed',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    await watchRead();
    const lists = asked('list').length;
    const cutAt = Date.now();
    api.cutWatches();
    // withdrawn while no watch runs: only the list after the cut can tell
    api.approvals = [];
    const closeMs = await within('closed after the cut', closed, cutAt);
    t.comment(`stream cut, approval withdrawn meanwhile → port closed: ${closeMs} ms`);
    t.ok(asked('list').length > lists, 'listed again');
    t.ok(closeMs < PROMPT_MS, `closed within ${PROMPT_MS} ms`);
    api.cutWatches();
    api.approvals = [APPROVAL];
    await settle(true);
    t.match(condition(), { status: 'True', reason: 'Listening' });
  },
);

t.test(
  "410 Gone (stand-in API server with watch): as an ERROR event in the stream and as the answer's status, each followed by a list that is right",
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    const lists = asked('list').length;
    // the next watch finds its version compacted away, and the approval withdrawn in that window
    let expired = 0;
    api.intercept = (r) => {
      if (r.verb !== 'watch' || expired++ > 0) return undefined;
      api.compactWatchHistory();
      api.approvals = [];
      return undefined;
    };
    t.teardown(() => {
      api.intercept = undefined;
    });
    api.cutWatches();
    await settle(false);
    t.equal(expired >= 2, true, 'watched again after the expiry');
    t.ok(asked('list').length >= lists + 2, 'listed after the cut and again after the 410');
    t.match(condition(), { status: 'False', reason: 'NotApproved' });

    let refused = 0;
    api.intercept = (r) => {
      if (r.verb !== 'watch' || refused++ > 0) return undefined;
      api.approvals = [APPROVAL];
      return {
        status: 410,
        body: {
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          reason: 'Gone',
          code: 410,
          message: 'too old resource version',
        },
      };
    };
    api.cutWatches();
    await settle(true);
    t.ok(refused >= 2, 'watched again after the 410 answer');
    t.match(condition(), { status: 'True', reason: 'Listening' });
  },
);

t.test(
  'refused (stand-in API server with watch): 403 and 401 close the port at once, not after the grace',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    const rbac = (await readFile('deploy/rbac.yaml', 'utf8')).replace(
      /resources: \[bundleapprovals\]\n {4}verbs: \[get, list, watch\]/,
      'resources: [nothing]\n    verbs: [get]',
    );
    const file = join(w.b.dir, 'rbac-no-approvals.yaml');
    await writeFile(file, rbac);
    await api.loadRbac([file, ...SHIPPED_RBAC.slice(1)]);
    t.teardown(() => api.loadRbac(SHIPPED_RBAC));
    // an open watch outlives an RBAC change (the API server authorizes a request once): it ends, as at timeoutSeconds
    await watchRead();
    let cutAt = Date.now();
    api.cutWatches();
    let closeMs = await within('closed on the 403', closedUnreadable, cutAt, GRACE_MS);
    t.comment(`watch ended, list refused 403 → port closed: ${closeMs} ms`);
    t.ok(closeMs < PROMPT_MS, `closed at once (${closeMs} ms; grace ${GRACE_MS} ms)`);
    t.match(condition(), {
      status: 'Unknown',
      reason: 'ApprovalsUnreadable',
      message: /refused.*403.*deploy\/rbac\.yaml/,
    });
    await api.loadRbac(SHIPPED_RBAC);
    await settle(true);

    api.intercept = (r) =>
      r.resource === 'bundleapprovals'
        ? {
            status: 401,
            body: {
              kind: 'Status',
              apiVersion: 'v1',
              status: 'Failure',
              reason: 'Unauthorized',
              code: 401,
              message: 'Unauthorized',
            },
          }
        : undefined;
    t.teardown(() => {
      api.intercept = undefined;
    });
    await watchRead();
    cutAt = Date.now();
    api.cutWatches();
    closeMs = await within('closed on the 401', closedUnreadable, cutAt, GRACE_MS);
    t.comment(`watch ended, list refused 401 → port closed: ${closeMs} ms`);
    t.ok(closeMs < PROMPT_MS, `closed at once (${closeMs} ms)`);
    t.match(condition(), {
      status: 'Unknown',
      reason: 'ApprovalsUnreadable',
      message: /refused.*401/,
    });
    api.intercept = undefined;
    await settle(true);
  },
);

t.test(
  'an API server that stops answering (stand-in API server with watch): the port stays open for the grace after the last bookmark, then closes',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    api.intercept = (r) => (r.resource === 'bundleapprovals' ? 'hang' : undefined);
    t.teardown(() => {
      api.intercept = undefined;
    });
    const stoppedAt = Date.now();
    api.cutWatches();
    await until('Peers Unknown', () => condition()?.status === 'Unknown', {
      timeoutMs: GRACE_MS + 5000,
      stepMs: 20,
      detail,
    });
    const closeMs = await within('closed after the grace', closed, stoppedAt, GRACE_MS + 5000);
    t.comment(
      `API server silent (the list hangs) → port closed after ${closeMs} ms (grace ${GRACE_MS} ms, bookmarks every ${api.watchBookmarkMs} ms)`,
    );
    t.ok(
      closeMs >= GRACE_MS - api.watchBookmarkMs - 100,
      'not before the grace (counted from the last bookmark)',
    );
    t.ok(closeMs < GRACE_MS + 1000, 'soon after it');
    t.match(condition(), {
      status: 'Unknown',
      reason: 'ApprovalsUnreadable',
      message: /sent no list, event or bookmark of them for \d+ s.*opens no peer port/,
    });
    api.intercept = undefined;
    // the hanging list ended, as an API server's restart ends it
    await api.pause();
    await api.resume();
    await settle(true);
  },
);

t.test(
  'an event over MAX_WATCH_EVENT_BYTES (stand-in API server with watch) is refused unread with one journal line; the list read after it is right',
  async (t) => {
    await running();
    api.approvals = [];
    await settle(false);
    await watchRead();
    const before = lines.length;
    // the approval that opens the port, carried by an event past the bound (an annotation no approval has)
    api.put('bundleapprovals', {
      ...APPROVAL,
      metadata: {
        ...APPROVAL.metadata,
        annotations: { padding: 'x'.repeat(MAX_WATCH_EVENT_BYTES) },
      },
    });
    await settle(true);
    const said = lines.slice(before).filter((l) => /watch event over/.test(l));
    t.equal(said.length, 1, 'said once');
    t.match(
      said[0],
      new RegExp(
        `the API server sent a watch event over ${MAX_WATCH_EVENT_BYTES / 1024 / 1024} MiB to watch bundleapprovals\\.bundles\\.offline-bundle\\.io: refused unread`,
      ),
    );
    t.equal(said[0]!.trimEnd().split('\n').length, 1, 'one line');
    t.ok(said[0]!.length < 1000, 'nothing of the event quoted');
    t.match(
      condition(),
      { status: 'True', reason: 'Listening' },
      'the list after it opened the port',
    );
  },
);

t.test(
  'events past MAX_WATCH_EVENTS_PER_SECOND (stand-in API server with watch): the watch is dropped with one journal line, the list read after it is right',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    await watchRead();
    const before = lines.length;
    for (let i = 0; i < 4 * MAX_WATCH_EVENTS_PER_SECOND; i++)
      api.put('bundleapprovals', {
        ...OTHER,
        metadata: { ...OTHER.metadata, labels: { n: String(i) } },
      });
    // the last changes of the flood withdraw every approval: the port must close
    api.delete('bundleapprovals', OTHER.metadata.name);
    api.delete('bundleapprovals', APPROVAL.metadata.name);
    await settle(false);
    const said = lines.slice(before).filter((l) => /watch events in one second/.test(l));
    t.equal(said.length, 1, 'said once');
    t.match(
      said[0],
      new RegExp(
        `over ${MAX_WATCH_EVENTS_PER_SECOND} watch events in one second to watch bundleapprovals\\.bundles\\.offline-bundle\\.io: the watch is dropped`,
      ),
    );
    t.match(condition(), { status: 'False', reason: 'NotApproved' });
  },
);

/**
 * Requests for the approvals this node makes over `ms`, the port sampled meanwhile (how often
 * seen open and closed). Each watch follows a list of the watch's own: the watches count its
 * cycles (the lists also count an open port's own reads of the approvals).
 */
async function over(
  ms: number,
): Promise<{ lists: number; watches: number; open: number; closed: number }> {
  const [lists, watches] = [asked('list').length, asked('watch').length];
  const seen = { open: 0, closed: 0 };
  for (const end = Date.now() + ms; Date.now() < end; await sleep(20))
    seen[(await listening()) ? 'open' : 'closed']++;
  return { lists: asked('list').length - lists, watches: asked('watch').length - watches, ...seen };
}
/** List-then-watch cycles in RATE_WINDOW_MS that a backoff from WATCH_RETRY_MIN_MS allows (0.5, 1, 2, 4 s: 4 or 5); one every 0.5 s makes 12. */
const RATE_WINDOW_MS = 6000;
const MAX_WATCHES_IN_WINDOW = 6;

t.test(
  'list allowed, watch refused (stand-in API server with RBAC list, no watch): the port closes and stays closed, naming the verb; the requests back off',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    const rbac = (await readFile('deploy/rbac.yaml', 'utf8')).replace(
      /resources: \[bundleapprovals\]\n {4}verbs: \[get, list, watch\]/,
      'resources: [bundleapprovals]\n    verbs: [get, list]',
    );
    t.not(
      rbac,
      await readFile('deploy/rbac.yaml', 'utf8'),
      "the watch verb is taken out of the nodes' rule",
    );
    const file = join(w.b.dir, 'rbac-list-only.yaml');
    await writeFile(file, rbac);
    await api.loadRbac([file, ...SHIPPED_RBAC.slice(1)]);
    t.teardown(() => api.loadRbac(SHIPPED_RBAC));
    await watchRead();
    const cutAt = Date.now();
    api.cutWatches();
    // at once, or after the backoff a stream past a bound left (the tests before): never the grace
    const closeMs = await within("closed on the watch's 403", closed, cutAt, GRACE_MS);
    t.ok(closeMs < GRACE_MS, `closed on the refusal, not after the grace (${closeMs} ms)`);
    const seen = await over(RATE_WINDOW_MS);
    t.comment(
      `list 200, watch 403, ${RATE_WINDOW_MS} ms: ${seen.lists} lists, ${seen.watches} watches; port sampled open ${seen.open}x, closed ${seen.closed}x`,
    );
    t.equal(seen.open, 0, 'the lists that succeed do not open it again');
    t.ok(
      seen.watches >= 2 && seen.watches <= MAX_WATCHES_IN_WINDOW,
      `tried again with a backoff (${seen.watches} watches)`,
    );
    t.ok(
      asked('watch')
        .slice(-seen.watches)
        .every((r) => r.status === 403),
      'each watch refused',
    );
    t.match(condition(), {
      status: 'Unknown',
      reason: 'ApprovalsUnreadable',
      message:
        /refused to watch bundleapprovals.*403.*needs the verb watch \(as well as list\).*deploy\/rbac\.yaml.*opens no peer port/,
    });
    await api.loadRbac(SHIPPED_RBAC);
    await settle(true);
    t.match(
      condition(),
      { status: 'True', reason: 'Listening' },
      'open again once a watch is accepted',
    );
  },
);

t.test(
  'watch answered 429, then the CRD missing (404 to list and watch) (stand-in API server): the requests back off',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    const status = (code: number, reason: string) => ({
      status: code,
      body: { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code, message: reason },
    });
    api.intercept = (r) =>
      r.resource === 'bundleapprovals' && r.verb === 'watch'
        ? status(429, 'TooManyRequests')
        : undefined;
    t.teardown(() => {
      api.intercept = undefined;
    });
    await watchRead();
    api.cutWatches();
    let seen = await over(RATE_WINDOW_MS);
    t.comment(
      `list 200, watch 429, ${RATE_WINDOW_MS} ms: ${seen.lists} lists, ${seen.watches} watches`,
    );
    t.ok(
      seen.watches >= 2 && seen.watches <= MAX_WATCHES_IN_WINDOW,
      `backed off (${seen.watches} watches)`,
    );
    api.intercept = (r) => (r.resource === 'bundleapprovals' ? status(404, 'NotFound') : undefined);
    await settle(false);
    seen = await over(RATE_WINDOW_MS);
    t.comment(
      `CRD missing (list and watch 404), ${RATE_WINDOW_MS} ms: ${seen.lists} lists, ${seen.watches} watches`,
    );
    t.ok(
      seen.lists <= MAX_WATCHES_IN_WINDOW && seen.watches <= MAX_WATCHES_IN_WINDOW,
      `backed off (${seen.lists} lists, ${seen.watches} watches)`,
    );
    t.equal(seen.open, 0, 'no approval can exist: closed');
    // NotApproved, or (the test's 3 s grace being shorter than the backoff's bound) unread for the grace
    t.match(condition(), { reason: /^(NotApproved|ApprovalsUnreadable)$/ });
    api.intercept = undefined;
    await settle(true);
  },
);

t.test(
  'a watch that ends at once (200, empty body) (stand-in API server): no tight re-list loop',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    api.intercept = (r) =>
      r.resource === 'bundleapprovals' && r.verb === 'watch' ? { status: 200 } : undefined;
    t.teardown(() => {
      api.intercept = undefined;
    });
    await watchRead();
    api.cutWatches();
    const seen = await over(RATE_WINDOW_MS);
    t.comment(
      `watch 200 and ended at once, ${RATE_WINDOW_MS} ms: ${seen.lists} lists, ${seen.watches} watches`,
    );
    t.ok(
      seen.watches >= 2 && seen.watches <= MAX_WATCHES_IN_WINDOW,
      `backed off (${seen.watches} watches)`,
    );
    api.intercept = undefined;
    await until('a watch that stays open', () => api.openWatches > 0, {
      timeoutMs: 15_000,
      detail,
    });
  },
);

t.test(
  'a watch connected but silent (stand-in API server: no events, no bookmarks): the port closes after the grace',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    await watchRead();
    api.watchBookmarkMs = 60_000;
    t.teardown(() => {
      api.watchBookmarkMs = 500;
    });
    const cutAt = Date.now();
    api.cutWatches();
    const watch = await until(
      'a silent watch open',
      () => api.openWatches > 0 && asked('watch').at(-1)!.at >= cutAt && asked('watch').at(-1),
      { timeoutMs: 15_000, detail },
    );
    // the watch's own list: the approvals' last read
    const listedAt = asked('list')
      .filter((r) => r.at <= watch.at)
      .at(-1)!.at;
    const closeMs = await within(
      'closed after the grace',
      closedUnreadable,
      listedAt,
      GRACE_MS + 5000,
    );
    t.comment(
      `watch open and silent (bookmarks every ${api.watchBookmarkMs} ms) → port closed ${closeMs} ms after the list`,
    );
    t.ok(
      closeMs >= GRACE_MS - 300 && closeMs < GRACE_MS + 1000,
      'after the grace, counted from the list',
    );
    t.equal(asked('watch').at(-1), watch, 'the same watch still open: no list or watch since');
    t.match(condition(), {
      status: 'Unknown',
      reason: 'ApprovalsUnreadable',
      message: /sent no list, event or bookmark of them for \d+ s.*opens no peer port/,
    });
    api.watchBookmarkMs = 500;
    api.cutWatches();
    await settle(true);
  },
);

t.test(
  'events past MAX_WATCH_BYTES_PER_SECOND (stand-in API server with watch): the watch is dropped with one journal line, the list read after it is right',
  async (t) => {
    await running();
    api.approvals = [APPROVAL];
    await settle(true);
    await watchRead();
    const before = lines.length;
    // large events (each under MAX_WATCH_EVENT_BYTES), few (far under the event rate), more bytes than a second's
    const padding = 'x'.repeat(Math.floor(0.75 * MAX_WATCH_EVENT_BYTES));
    for (let i = 0; i < Math.ceil(MAX_WATCH_BYTES_PER_SECOND / padding.length) + 1; i++)
      api.put('bundleapprovals', {
        ...OTHER,
        metadata: { ...OTHER.metadata, annotations: { padding, n: String(i) } },
      });
    api.delete('bundleapprovals', OTHER.metadata.name);
    api.delete('bundleapprovals', APPROVAL.metadata.name);
    await settle(false);
    const said = lines.slice(before).filter((l) => /of watch events in one second/.test(l));
    t.equal(said.length, 1, 'said once');
    t.match(
      said[0],
      new RegExp(
        `over ${MAX_WATCH_BYTES_PER_SECOND / 1024 / 1024} MiB of watch events in one second to watch bundleapprovals\\.bundles\\.offline-bundle\\.io: the watch is dropped`,
      ),
    );
    t.ok(said[0]!.length < 1000, 'nothing of the events quoted');
    t.match(condition(), { status: 'False', reason: 'NotApproved' });
  },
);

t.test(
  'stop() while a list of the approvals hangs (stand-in API server that never answers it): it ends the list and returns at once',
  async (t) => {
    await running();
    // the daemon's port closed, its watch open: no list of its own meanwhile
    api.approvals = [];
    await settle(false);
    api.intercept = (r) =>
      r.resource === 'bundleapprovals' && r.verb === 'list' ? 'hang' : undefined;
    t.teardown(() => {
      api.intercept = undefined;
    });
    const lists = asked('list').length;
    const watch = new ApprovalWatch({
      kubeconfig: config.status.kubeconfig!,
      log,
      onChange: () => undefined,
    });
    watch.start();
    await until('its list asked', () => asked('list').length > lists, {
      timeoutMs: 15_000,
      detail,
    });
    const stoppedAt = Date.now();
    await watch.stop();
    const stopMs = Date.now() - stoppedAt;
    t.comment(`stop() with its list hanging: ${stopMs} ms`);
    t.ok(stopMs < 1000, `returned at once, not at the list's deadline (${stopMs} ms)`);
  },
);

// `bundle cluster dashboard`'s server and feed without a browser: the Host check (DNS
// rebinding), read-only methods, no CORS, the cap on event streams, what a hostile string
// from the API becomes on the wire and in the page's script, and the feed against the
// RBAC-enforcing API stand-in (no API server can run here): rows from the Node list, the
// contact lost when the stand-in goes away, and found again.
import t from 'tap';
import { EventEmitter } from 'node:events';
import { request } from 'node:http';
import { connect } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { adminApis } from '@offline-bundle/kube';
import { loadAssets, pageDir } from '../../builder/dist/dashboard/assets.js';
import { startDashboardServer, MAX_SSE_CLIENTS } from '../../builder/dist/dashboard/server.js';
import { DashboardFeed } from '../../builder/dist/dashboard/feed.js';
import {
  dashboardRows,
  MAX_DASHBOARD_ROWS,
  pickStatus,
  progressOf,
  type Snapshot,
} from '../../builder/dist/dashboard/snapshot.js';
import { bundle } from '../builder/lib.js';
import { ADMIN, bindAdmin, clusterVersion, node, nodeStatus } from './lib.js';
import { SHIPPED_RBAC, startKubeStandIn } from '../helpers/kube-standin.js';
import { tmpdir } from '../status/lib.js';
import { until } from '../helpers/until.js';

const HOSTILE = '<img src=x onerror="window.pwned=1">\n\nevent: state\ndata: {"rows":[]}\n\n';

function fakeFeed(snapshot: Partial<Snapshot> = {}) {
  const f = new EventEmitter() as EventEmitter & { snapshot: Snapshot };
  f.snapshot = {
    rows: [],
    omitted: 0,
    warnings: [],
    intervalMs: 2000,
    target: { ready: false, summary: 'x' },
    api: { ok: true },
    ...snapshot,
  };
  return f;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}
/** One request, answered whole within 5 s (else an error: a test never waits on a hung answer). */
function get(
  port: number,
  p: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: p,
        method,
        headers: { Host: `127.0.0.1:${port}`, ...headers },
      },
      (res) => {
        let body = '';
        res.on('data', (c) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.setTimeout(5000, () =>
      req.destroy(new Error(`${method} ${p}: no complete answer within 5 s`)),
    );
    req.on('error', reject);
    req.end();
  });
}

/** Opens /events and resolves once the headers came: the response stays open until destroyed. */
function openStream(
  port: number,
): Promise<{ status: number; first: Promise<string>; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/events', headers: { Host: `localhost:${port}` } },
      (res) => {
        let buf = '';
        const first = new Promise<string>((r) => {
          res.on('data', (c) => {
            buf += c;
            if (buf.includes('\n\n')) r(buf);
          });
          res.on('end', () => r(buf));
        });
        resolve({ status: res.statusCode ?? 0, first, close: () => req.destroy() });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

t.test('the page files are found beside the code and all served', async (t) => {
  t.match(pageDir(), /builder\/src\/dashboard\/page\/$/);
  const assets = await loadAssets();
  t.same([...assets.keys()].sort(), ['/', '/app.js', '/style.css']);
  // until the first read there are no warnings to speak of: the page must not say "None." in green
  const html = assets.get('/')!.body.toString();
  t.match(html, '<p id="no-warnings" class="unread">Not read yet.</p>');
  t.notMatch(html, />None\.</);
});

t.test('server: Host check, read-only, no CORS, CSP', async (t) => {
  const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed: fakeFeed() });
  t.teardown(() => s.close());
  const ok = await get(s.port, '/');
  t.equal(ok.status, 200);
  t.match(ok.headers['content-type'], /^text\/html/);
  t.match(ok.headers['content-security-policy'], /default-src 'none'; script-src 'self'/);
  t.equal(
    (await get(s.port, '/app.js', { Host: `localhost:${s.port}` })).status,
    200,
    'localhost:PORT is this server too',
  );
  for (const host of [
    'attacker.example',
    `attacker.example:${s.port}`,
    `127.0.0.1:${s.port + 1}`,
    '127.0.0.1',
    `[::1]:${s.port}`,
  ]) {
    const r = await get(s.port, '/', { Host: host });
    t.equal(r.status, 421, `Host ${host} refused`);
    t.match(r.body, /not this dashboard's address/);
    t.notMatch(r.body, /<html/i, 'nothing of the page');
  }
  const ev = await get(s.port, '/events', { Host: 'rebound.example:80' });
  t.equal(ev.status, 421, 'the event stream too');
  const post = await get(s.port, '/', {}, 'POST');
  t.equal(post.status, 405);
  t.equal(post.headers.allow, 'GET, HEAD');
  const cors = await get(s.port, '/', { Origin: 'http://attacker.example' });
  t.equal(
    cors.headers['access-control-allow-origin'],
    undefined,
    'no CORS header, whatever the Origin',
  );
  t.equal((await get(s.port, '/../../etc/passwd')).status, 404);
  t.equal((await get(s.port, '/app.js?x=1')).status, 200);
});

t.test(
  `server: at most MAX_SSE_CLIENTS (${MAX_SSE_CLIENTS}) event streams, the shipped default; a freed slot is usable again`,
  async (t) => {
    const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed: fakeFeed() });
    t.teardown(() => s.close());
    const open = [];
    for (let i = 0; i < MAX_SSE_CLIENTS; i++) open.push(await openStream(s.port));
    t.same(
      open.map((o) => o.status),
      Array(MAX_SSE_CLIENTS).fill(200),
    );
    t.equal(s.clients(), MAX_SSE_CLIENTS);
    const over = await get(s.port, '/events');
    t.equal(over.status, 503);
    t.match(over.body, new RegExp(`too many dashboard pages open \\(${MAX_SSE_CLIENTS}\\)`));
    open[0]!.close();
    await until("the closed page's slot is freed", () => s.clients() < MAX_SSE_CLIENTS);
    t.equal(s.clients(), MAX_SSE_CLIENTS - 1, 'one slot freed');
    const again = await openStream(s.port);
    t.equal(again.status, 200, 'a slot freed by a closed page');
    again.close();
    for (const o of open) o.close();
  },
);

t.test('server: maxClients is honoured when set lower', async (t) => {
  const s = await startDashboardServer({
    port: 0,
    assets: await loadAssets(),
    feed: fakeFeed(),
    maxClients: 2,
  });
  t.teardown(() => s.close());
  const open = [await openStream(s.port), await openStream(s.port)];
  const third = await get(s.port, '/events');
  t.equal(third.status, 503);
  t.match(third.body, /too many dashboard pages open \(2\)/);
  for (const o of open) o.close();
});

t.test('server: HEAD /events answers the headers and ends, holding no stream slot', async (t) => {
  const s = await startDashboardServer({
    port: 0,
    assets: await loadAssets(),
    feed: fakeFeed(),
    maxClients: 2,
  });
  t.teardown(() => s.close());
  for (let i = 0; i < 4; i++) {
    const head = await get(s.port, '/events', {}, 'HEAD');
    t.equal(head.status, 200, `HEAD ${i + 1} answered`);
    t.match(head.headers['content-type'], /^text\/event-stream/);
    t.equal(head.body, '');
  }
  t.equal(s.clients(), 0, 'no stream held open');
  const st = await openStream(s.port);
  t.equal(st.status, 200, 'a GET still finds a slot');
  t.match(await st.first, /event: state/);
  st.close();
});

t.test(
  'server: a client that never reads holds at most one snapshot, and two changes behind is dropped to reload (backpressure)',
  async (t) => {
    const feed = fakeFeed();
    const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed });
    t.teardown(() => s.close());
    // a raw socket that sends the request and never reads: the kernel's buffers fill, then Node's
    const sock = connect(s.port, '127.0.0.1');
    t.teardown(() => sock.destroy());
    sock.pause();
    sock.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`);
    await until('the stalled client is counted', () => s.clients() === 1);
    t.equal(s.clients(), 1);
    const MB = 1 << 20;
    const CHANGES = 64;
    let most = 0;
    const waited: boolean[] = [];
    for (let i = 0; i < CHANGES; i++) {
      const snap: Snapshot = {
        ...feed.snapshot,
        target: { ready: false, summary: `change-${i}:${'x'.repeat(MB)}` },
      };
      feed.snapshot = snap;
      feed.emit('change', snap);
      feed.emit('poll', new Date().toISOString());
      await new Promise((r) => setImmediate(r));
      most = Math.max(most, ...s.backlog().map((b) => b.bytes));
      waited.push(...s.backlog().map((b) => b.waiting));
    }
    t.comment(
      `${CHANGES} changes of 1 MiB to a client that never reads: at most ${(most / MB).toFixed(2)} MiB buffered for it`,
    );
    t.ok(
      most <= 1.5 * MB,
      `one event's worth buffered at most (${most} bytes), not ${CHANGES} MiB`,
    );
    t.ok(
      waited.includes(true),
      'one change behind, the newest snapshot waited for the client to read',
    );
    // the client reads again: what it was sent ends with 'reload' (or, read too late, the connection was cut)
    let tail = '';
    const LAST_CHUNK = '\r\n0\r\n\r\n';
    const ended = new Promise<'answer ended' | 'connection cut'>((resolve) => {
      sock.on('data', (c: Buffer) => {
        tail = (tail + c.toString('latin1')).slice(-4096);
        if (tail.endsWith(LAST_CHUNK)) resolve('answer ended');
      });
      sock.on('close', () => resolve('connection cut'));
    });
    sock.resume();
    const how = await ended;
    t.notMatch(tail, /change-(?:[3-9]|\d\d):/, 'no change after the drop was queued for it');
    if (how === 'answer ended')
      t.match(tail, `event: reload\ndata: {}\n\n${LAST_CHUNK}`, 'the answer ends with reload');
    else t.pass('read after the grace: the connection was cut, and what it held with it');
    await until('its slot is free', () => s.clients() === 0);
    // a page that reconnects starts with the whole current snapshot
    const again = await openStream(s.port);
    t.match(await again.first, `change-${CHANGES - 1}:`);
    again.close();
  },
);

t.test(
  'escaping: a hostile string stays one JSON value in one event, and the page never parses data as HTML',
  async (t) => {
    const feed = fakeFeed({
      rows: [
        {
          node: 'worker-0',
          nodeReady: true,
          phase: 'Failed',
          ready: false,
          message: HOSTILE,
          technician: HOSTILE,
          progress: {},
          history: [],
        },
      ],
    });
    const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed });
    t.teardown(() => s.close());
    const st = await openStream(s.port);
    const first = await st.first;
    st.close();
    const events = first.split('\n\n').filter((e) => e.includes('data:'));
    t.equal(events.length, 1, 'one event: the newlines inside the string did not end it');
    const data = events[0]!.split('\n').filter((l) => l.startsWith('data: '));
    t.equal(data.length, 1, 'one data line');
    t.equal(
      JSON.parse(data[0]!.slice(6)).rows[0].technician,
      HOSTILE,
      'the string arrives as it was, as data',
    );
    const app = await readFile(path.join(pageDir(), 'app.js'), 'utf8');
    t.notMatch(
      app,
      /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/,
      'the page script writes text only',
    );
    t.match(app, /textContent/);
  },
);

t.test(
  "snapshot: rows from the Node list, progress in the CLIs' words, source, history",
  async (t) => {
    const nodes = ['a', 'b'].map((n) => ({
      metadata: { name: n },
      status: { conditions: [{ type: 'Ready', status: n === 'a' ? 'True' : 'False' }] },
    }));
    const st = nodeStatus('a', 'Staging', 'sha256:' + 'a'.repeat(64), '4.15.1') as any;
    st.status.bundle.media = 'STICK';
    st.status.progress = {
      bytesDone: 4_200_000_000,
      bytesTotal: 18_400_000_000,
      imagesDone: 0,
      imagesTotal: 10,
      rate: 52_000_000,
      etaSeconds: 275,
    };
    st.status.history = [
      { version: '4.15.0', state: 'running', at: '2026-11-20T00:00:00Z' },
      { version: '4.15.1', state: 'installing', at: '2026-11-23T00:00:00Z' },
    ];
    const { rows, target } = dashboardRows(
      nodes as any,
      [
        { metadata: { name: 'a' }, status: { ...st.status, conditions: st.status.conditions } },
      ] as any,
    );
    t.same(
      rows.map((r) => [r.node, r.phase, r.nodeReady]),
      [
        ['a', 'Staging', true],
        ['b', 'NotReported', false],
      ],
      'a silent node shows',
    );
    t.equal(target.ready, false);
    t.same(rows[0]!.progress, {
      percent: 22,
      done: '4.2 GB of 18.4 GB',
      rate: '52.0 MB/s',
      eta: 'about 5 min left',
    });
    t.equal(rows[0]!.source, 'stick STICK');
    t.same(
      rows[0]!.history.map((h) => h.state),
      ['running', 'installing'],
    );
    t.same(progressOf(undefined), {}, 'no status, no progress');
  },
);

t.test(
  'snapshot: per node, what its runtime holds of the bundle (held, pinned, which it lacks); a Ready node that lost images is not ready on the page (#38)',
  async (t) => {
    const { runtimeHoldings } = await import('@offline-bundle/status');
    const { bundleImageNames } = await import('@offline-bundle/cluster');
    const digest = 'sha256:' + 'a'.repeat(64);
    const img = (n: number) => ({
      repository: `quay.io/acme/app${n}`,
      tag: n === 1 ? 'v1' : null,
      digest: `sha256:${String(n).repeat(64)}`,
    });
    const images = [1, 2, 3, 4, 5].map(img);
    const names = [...bundleImageNames(images)];
    const listed = (held: string[], pinned: boolean) =>
      held.map((n) =>
        n.includes('@')
          ? { repoTags: [], repoDigests: [n], pinned }
          : { repoTags: [n], repoDigests: [], pinned },
      );
    const st = (name: string, runtime?: unknown) => {
      const s = nodeStatus(name, 'Ready', digest, '4.15.1') as any;
      return { metadata: { name }, status: { ...s.status, ...(runtime ? { runtime } : {}) } };
    };
    const nodes = ['a', 'b', 'c'].map((n) => ({
      metadata: { name: n },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    }));
    // a: every name, pinned; b: lost two of what it loaded (a crio-wipe, say); c: an agent publishing nothing
    const lost = names.filter(
      (n) => n.startsWith('quay.io/acme/app4') || n.startsWith('quay.io/acme/app5'),
    );
    // as the feed reads them from the API: through the page's own pick of each status
    const statuses = [
      st('a', runtimeHoldings(listed(names, true), names)),
      st(
        'b',
        runtimeHoldings(
          listed(
            names.filter((n) => !lost.includes(n)),
            true,
          ),
          names,
        ),
      ),
      st('c'),
    ].map((x) => pickStatus(x as any));
    const { rows, target } = dashboardRows(
      nodes as any,
      statuses as any,
      digest,
      undefined,
      new Date(),
      names,
    );
    t.same(
      rows.map((r) => [r.node, r.ready]),
      [
        ['a', true],
        ['b', false],
        ['c', true],
      ],
      'b is not ready on the page, as in status',
    );
    t.equal(rows[1]!.reason, 'ImagesLost');
    t.equal(target.ready, false);
    t.same(
      rows.map((r) => [
        r.node,
        r.holdings.published,
        r.holdings.names,
        r.holdings.held,
        r.holdings.pinned,
        r.holdings.missing,
      ]),
      [
        ['a', true, 6, 6, 6, 0],
        ['b', true, 6, 4, 4, 2],
        ['c', false, 0, 0, 0, 0],
      ],
      "per node: the bundle's 6 names (5 digests, 1 tag) held, pinned, missing",
    );
    t.same(rows[1]!.holdings.lacks, [...lost].sort(), 'b: which it lacks, by name');
    const { MAX_LACKS_NAMED } = await import('@offline-bundle/cluster');
    const empty = dashboardRows(
      [
        { metadata: { name: 'd' }, status: { conditions: [{ type: 'Ready', status: 'True' }] } },
      ] as any,
      [pickStatus(st('d', runtimeHoldings([], names)) as any)],
      digest,
      undefined,
      new Date(),
      names,
    ).rows[0]!;
    t.match(
      empty.holdings,
      { missing: 6, lacks: { length: MAX_LACKS_NAMED } },
      `a node lacking all 6: counted, ${MAX_LACKS_NAMED} of them named`,
    );
    const own = dashboardRows(nodes as any, statuses as any, digest, undefined, new Date()).rows;
    t.same(
      own.map((r) => [r.node, r.holdings.names, r.holdings.held, r.holdings.missing]),
      [
        ['a', 6, 6, 0],
        ['b', 6, 4, 2],
        ['c', 0, 0, 0],
      ],
      "no bundle file: counted over the agent's own loaded names",
    );
    // an honest node lacking 300 of 300: its published list keeps 100 names and says it was cut
    const cut = {
      ...runtimeHoldings([], names),
      bundle: {
        refs: 300,
        missing: Array.from({ length: 100 }, (_, i) => `quay.io/acme/x${i}:v1`),
        unpinned: [],
        truncated: true,
      },
    };
    const lacking = dashboardRows(
      [nodes[0]] as any,
      [pickStatus(st('a', cut) as any)],
      digest,
      undefined,
      new Date(),
    ).rows[0]!.holdings;
    t.match(
      lacking,
      { names: 300, held: 0, pinned: 0, missing: 100, unknown: 200 },
      'no bundle file, a cut list: the names past it not known, never held',
    );
    const app = await readFile(path.join(pageDir(), 'app.js'), 'utf8');
    t.match(app, /'Holds'/, 'the page has the column');
  },
);

t.test(
  'feed against the API stand-in: rows, then contact lost (gone, 500, silent: rows kept, marked), then found again',
  async (t) => {
    const work = await tmpdir(t, 'ob-dash-feed-');
    const api = await startKubeStandIn();
    t.teardown(() => api.close());
    const kubeconfig = await api.tokenKubeconfig(
      path.join(work, 'kubeconfig'),
      bindAdmin(api, ADMIN),
    );
    const digest = 'sha256:' + 'b'.repeat(64);
    api.nodes = [node('worker-0'), node('worker-1'), node('worker-2')];
    const long = nodeStatus('worker-1', 'Staging', digest, '4.15.1');
    long.status.message = 'x'.repeat(5000);
    api.statuses = [nodeStatus('worker-0', 'Ready', digest, '4.15.1'), long];
    api.crdInstalled = true;
    const feed = new DashboardFeed({
      apis: await adminApis(kubeconfig, undefined, { deadlineMs: 2000 }),
      intervalMs: 1000,
    });
    const changes: Snapshot[] = [];
    feed.on('change', (s: Snapshot) => changes.push(s));
    await feed.poll();
    t.equal(feed.snapshot.api.ok, true, feed.snapshot.api.error ?? '');
    t.same(
      feed.snapshot.rows.map((r) => [r.node, r.phase]),
      [
        ['worker-0', 'Ready'],
        ['worker-1', 'Staging'],
        ['worker-2', 'NotReported'],
      ],
    );
    t.match(
      feed.snapshot.warnings.map((w) => w.kind),
      ['NodesNotReady'],
    );
    t.equal(
      [...feed.snapshot.rows[1]!.technician!].length,
      1024,
      "a string past the CRD's bound (a writer that skipped it) is cut to it",
    );
    await feed.poll();
    t.equal(changes.length, 1, 'an unchanged cluster sends no change');
    await api.pause();
    await feed.poll();
    t.equal(feed.snapshot.api.ok, false);
    t.match(feed.snapshot.api.error, /cannot list nodes|did not|UNREACHABLE|ECONNREFUSED/);
    const since = feed.snapshot.api.lostSince;
    t.ok(since, 'since when');
    t.equal(feed.snapshot.rows.length, 3, 'the last known rows are kept');
    await feed.poll();
    t.equal(feed.snapshot.api.lostSince, since, 'the outage starts at its first failed read');
    await api.resume();
    api.put('nodebundlestatuses', nodeStatus('worker-1', 'Ready', digest, '4.15.1'));
    await feed.poll();
    t.equal(feed.snapshot.api.ok, true);
    t.equal(feed.snapshot.api.lostSince, undefined);
    t.equal(feed.snapshot.rows[1]!.phase, 'Ready');
    t.equal(changes.length, 3, 'changes: first read, lost, found with a new phase');
    // a server that answers 500, then one that accepts the request and never answers: lost too, within the read's deadline
    api.intercept = (r) => (r.resource === 'nodes' ? { status: 500 } : undefined);
    await feed.poll();
    t.equal(feed.snapshot.api.ok, false);
    t.match(feed.snapshot.api.error, /answered 500 to list nodes/);
    api.intercept = (r) => (r.resource === 'nodes' ? 'hang' : undefined);
    await feed.poll();
    t.match(feed.snapshot.api.error, /no complete answer within 2 s/);
    t.equal(feed.snapshot.rows.length, 3, 'the rows kept through both');
    api.intercept = undefined;
    await feed.poll();
    t.equal(feed.snapshot.api.ok, true);
  },
);

t.test(
  "feed: a kubeconfig that may list Nodes and NodeBundleStatuses but not Pods keeps the rows live; prepare's failure is a warning, retried every 30 s",
  async (t) => {
    const work = await tmpdir(t, 'ob-dash-prepare-');
    // the admin's role without the Pod list (RBAC in the stand-in refuses it with the API server's 403)
    const roleFile = path.join(work, 'no-pods.yaml');
    const admin = (await readFile(SHIPPED_RBAC[1]!, 'utf8')).split('\n---\n')[0]!;
    const noPods = admin
      .replace('name: offline-bundle-admin', 'name: dashboard-no-pods')
      .replace('  - apiGroups: [""]\n    resources: [pods]\n    verbs: [list]\n', '');
    t.not(
      noPods,
      admin.replace('name: offline-bundle-admin', 'name: dashboard-no-pods'),
      'the Pod rule was taken out',
    );
    await writeFile(roleFile, noPods);
    const api = await startKubeStandIn({ rbacFiles: [...SHIPPED_RBAC, roleFile] });
    t.teardown(() => api.close());
    api.bind({ kind: 'ClusterRole', name: 'dashboard-no-pods' }, { kind: 'User', name: 'bob' });
    api.bind(
      { kind: 'Role', name: 'offline-bundle-release-signatures' },
      { kind: 'User', name: 'bob' },
      'openshift-config-managed',
    );
    const kubeconfig = await api.tokenKubeconfig(
      path.join(work, 'kubeconfig'),
      api.addToken('bob'),
    );
    const digest = 'sha256:' + 'b'.repeat(64);
    api.nodes = [node('worker-0'), node('worker-1')];
    api.statuses = [
      nodeStatus('worker-0', 'Ready', digest, '4.15.1'),
      nodeStatus('worker-1', 'Ready', digest, '4.15.1'),
    ];
    api.crdInstalled = true;
    api.clusterVersion = clusterVersion('4.15.0');
    api.pods = [];
    let clock = Date.parse('2026-11-27T10:00:00Z');
    const b = {
      fileDigest: digest,
      version: '4.15.1',
      image: 'quay.io/openshift-release-dev/ocp-release:4.15.1-x86_64',
      digest: 'sha256:' + 'c'.repeat(64),
      upgradeFrom: ['4.15.0'],
      images: [],
      signatures: [Buffer.from('signature')],
    };
    const feed = new DashboardFeed({
      apis: await adminApis(kubeconfig, undefined, { deadlineMs: 2000 }),
      intervalMs: 1000,
      bundle: { file: '4.15.1.bundle', b },
      now: () => new Date(clock),
    });
    const podLists = () => api.requests.filter((r) => r.resource === 'pods' && r.verb === 'list');
    await feed.poll();
    t.equal(podLists().at(-1)?.status, 403, 'the stand-in refused the Pod list');
    t.equal(feed.snapshot.api.ok, true, `the API is not lost: ${feed.snapshot.api.error}`);
    t.equal(feed.snapshot.api.lostSince, undefined);
    t.same(
      feed.snapshot.rows.map((r) => [r.node, r.phase]),
      [
        ['worker-0', 'Ready'],
        ['worker-1', 'Ready'],
      ],
      'the rows are live',
    );
    const failed = feed.snapshot.warnings.find((w) => w.kind === 'PrepareFailed');
    t.match(
      failed?.message,
      /^could not run prepare's checks: .*pods.*forbidden/i,
      "prepare's failure is a warning naming the refusal",
    );
    clock += 1000;
    await feed.poll();
    t.equal(podLists().length, 1, 'within 30 s a failed prepare is not run again');
    t.ok(
      feed.snapshot.warnings.some((w) => w.kind === 'PrepareFailed'),
      'its warning stays meanwhile',
    );
    api.bind({ kind: 'ClusterRole', name: 'offline-bundle-admin' }, { kind: 'User', name: 'bob' });
    clock += 30_000;
    await feed.poll();
    t.equal(podLists().length, 2, 'after 30 s it runs again');
    t.equal(podLists().at(-1)?.status, 200);
    t.notOk(
      feed.snapshot.warnings.some((w) => w.kind === 'PrepareFailed'),
      'once allowed, the warning is gone',
    );
    t.equal(feed.snapshot.api.ok, true);
  },
);

t.test(
  `limits: at most ${MAX_DASHBOARD_ROWS} rows sent (the rest counted), the interval 1-60 s, a port`,
  async (t) => {
    const nodes = Array.from({ length: MAX_DASHBOARD_ROWS + 2 }, (_, i) => ({
      metadata: { name: `n-${String(i).padStart(5, '0')}` },
      status: { conditions: [] },
    }));
    const r = dashboardRows(nodes, []);
    t.equal(r.rows.length, MAX_DASHBOARD_ROWS);
    t.equal(r.omitted, 2);
    for (const [flag, value, why] of [
      ['--interval', '0.5', /--interval.*must be 1 to 60 seconds/],
      ['--interval', '61', /must be 1 to 60 seconds/],
      ['--port', '70000', /--port.*must be a TCP port/],
    ] as const) {
      const res = await bundle(['cluster', 'dashboard', flag, value]);
      t.equal(res.code, 2, `${flag} ${value}: a usage error`);
      t.match(res.stderr, why);
    }
  },
);

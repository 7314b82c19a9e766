// `bundle cluster dashboard`'s server and feed without a browser: the Host check (DNS
// rebinding), read-only methods, no CORS, the cap on event streams, what a hostile string
// from the API becomes on the wire and in the page's script, and the feed against the
// RBAC-enforcing API stand-in (no API server can run here): rows from the Node list, the
// contact lost when the stand-in goes away, and found again.
import t from 'tap';
import { EventEmitter } from 'node:events';
import { request } from 'node:http';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { adminApis } from '@offline-bundle/status';
import { loadAssets, pageDir } from '../../builder/dist/dashboard/assets.js';
import { startDashboardServer, MAX_SSE_CLIENTS } from '../../builder/dist/dashboard/server.js';
import { DashboardFeed } from '../../builder/dist/dashboard/feed.js';
import { dashboardRows, MAX_DASHBOARD_ROWS, progressOf, type Snapshot } from '../../builder/dist/dashboard/snapshot.js';
import { bundle } from '../builder/lib.js';
import { ADMIN, bindAdmin, node, nodeStatus } from './lib.js';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { tmpdir } from '../status/lib.js';

const HOSTILE = '<img src=x onerror="window.pwned=1">\n\nevent: state\ndata: {"rows":[]}\n\n';

function fakeFeed(snapshot: Partial<Snapshot> = {}) {
  const f = new EventEmitter() as EventEmitter & { snapshot: Snapshot };
  f.snapshot = { rows: [], omitted: 0, warnings: [], intervalMs: 2000, target: { ready: false, summary: 'x' }, api: { ok: true }, ...snapshot };
  return f;
}

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; body: string }
function get(port: number, p: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: p, method, headers: { Host: `127.0.0.1:${port}`, ...headers } }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Opens /events and resolves once the headers came: the response stays open until destroyed. */
function openStream(port: number): Promise<{ status: number; first: Promise<string>; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/events', headers: { Host: `localhost:${port}` } }, (res) => {
      let buf = '';
      const first = new Promise<string>((r) => {
        res.on('data', (c) => { buf += c; if (buf.includes('\n\n')) r(buf); });
        res.on('end', () => r(buf));
      });
      resolve({ status: res.statusCode ?? 0, first, close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('the page files are found beside the code and all served', async (t) => {
  t.match(pageDir(), /builder\/src\/dashboard\/page\/$/);
  const assets = await loadAssets();
  t.same([...assets.keys()].sort(), ['/', '/app.js', '/style.css']);
});

t.test('server: Host check, read-only, no CORS, CSP', async (t) => {
  const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed: fakeFeed() });
  t.teardown(() => s.close());
  const ok = await get(s.port, '/');
  t.equal(ok.status, 200);
  t.match(ok.headers['content-type'], /^text\/html/);
  t.match(ok.headers['content-security-policy'], /default-src 'none'; script-src 'self'/);
  t.equal((await get(s.port, '/app.js', { Host: `localhost:${s.port}` })).status, 200, 'localhost:PORT is this server too');
  for (const host of ['attacker.example', `attacker.example:${s.port}`, `127.0.0.1:${s.port + 1}`, '127.0.0.1', `[::1]:${s.port}`]) {
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
  t.equal(cors.headers['access-control-allow-origin'], undefined, 'no CORS header, whatever the Origin');
  t.equal((await get(s.port, '/../../etc/passwd')).status, 404);
  t.equal((await get(s.port, '/app.js?x=1')).status, 200);
});

t.test(`server: at most ${MAX_SSE_CLIENTS} event streams by default; a freed slot is usable again`, async (t) => {
  const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed: fakeFeed(), maxClients: 3 });
  t.teardown(() => s.close());
  const open = [];
  for (let i = 0; i < 3; i++) open.push(await openStream(s.port));
  t.same(open.map((o) => o.status), [200, 200, 200]);
  t.equal(s.clients(), 3);
  const fourth = await get(s.port, '/events');
  t.equal(fourth.status, 503);
  t.match(fourth.body, /too many dashboard pages open \(3\)/);
  open[0]!.close();
  await t.resolves(async () => { for (let i = 0; i < 100 && s.clients() > 2; i++) await new Promise((r) => setTimeout(r, 20)); });
  const again = await openStream(s.port);
  t.equal(again.status, 200, 'a slot freed by a closed page');
  again.close();
  for (const o of open) o.close();
});

t.test('escaping: a hostile string stays one JSON value in one event, and the page never parses data as HTML', async (t) => {
  const feed = fakeFeed({ rows: [{ node: 'worker-0', nodeReady: true, phase: 'Failed', ready: false, message: HOSTILE, technician: HOSTILE, progress: {}, history: [] }] });
  const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed });
  t.teardown(() => s.close());
  const st = await openStream(s.port);
  const first = await st.first;
  st.close();
  const events = first.split('\n\n').filter((e) => e.includes('data:'));
  t.equal(events.length, 1, 'one event: the newlines inside the string did not end it');
  const data = events[0]!.split('\n').filter((l) => l.startsWith('data: '));
  t.equal(data.length, 1, 'one data line');
  t.equal(JSON.parse(data[0]!.slice(6)).rows[0].technician, HOSTILE, 'the string arrives as it was, as data');
  const app = await readFile(path.join(pageDir(), 'app.js'), 'utf8');
  t.notMatch(app, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/, 'the page script writes text only');
  t.match(app, /textContent/);
});

t.test('snapshot: rows from the Node list, progress in the CLIs\' words, source, history', async (t) => {
  const nodes = ['a', 'b'].map((n) => ({ metadata: { name: n }, status: { conditions: [{ type: 'Ready', status: n === 'a' ? 'True' : 'False' }] } }));
  const st = nodeStatus('a', 'Staging', 'sha256:' + 'a'.repeat(64), '4.15.1') as any;
  st.status.bundle.media = 'STICK';
  st.status.progress = { bytesDone: 4_200_000_000, bytesTotal: 18_400_000_000, imagesDone: 0, imagesTotal: 10, rate: 52_000_000, etaSeconds: 275 };
  st.status.history = [{ version: '4.15.0', state: 'running', at: '2026-11-20T00:00:00Z' }, { version: '4.15.1', state: 'installing', at: '2026-11-23T00:00:00Z' }];
  const { rows, target } = dashboardRows(nodes as any, [{ metadata: { name: 'a' }, status: { ...st.status, conditions: st.status.conditions } }] as any);
  t.same(rows.map((r) => [r.node, r.phase, r.nodeReady]), [['a', 'Staging', true], ['b', 'NotReported', false]], 'a silent node shows');
  t.equal(target.ready, false);
  t.same(rows[0]!.progress, { percent: 22, done: '4.2 GB of 18.4 GB', rate: '52.0 MB/s', eta: 'about 5 min left' });
  t.equal(rows[0]!.source, 'stick STICK');
  t.same(rows[0]!.history.map((h) => h.state), ['running', 'installing']);
  t.same(progressOf(undefined), {}, 'no status, no progress');
});

t.test('feed against the API stand-in: rows, then contact lost (gone, 500, silent: rows kept, marked), then found again', async (t) => {
  const work = await tmpdir(t, 'ob-dash-feed-');
  const api = await startKubeStandIn();
  t.teardown(() => api.close());
  const kubeconfig = await api.tokenKubeconfig(path.join(work, 'kubeconfig'), bindAdmin(api, ADMIN));
  const digest = 'sha256:' + 'b'.repeat(64);
  api.nodes = [node('worker-0'), node('worker-1'), node('worker-2')];
  const long = nodeStatus('worker-1', 'Staging', digest, '4.15.1');
  long.status.message = 'x'.repeat(5000);
  api.statuses = [nodeStatus('worker-0', 'Ready', digest, '4.15.1'), long];
  api.crdInstalled = true;
  const feed = new DashboardFeed({ apis: await adminApis(kubeconfig, undefined, { deadlineMs: 2000 }), intervalMs: 1000 });
  const changes: Snapshot[] = [];
  feed.on('change', (s: Snapshot) => changes.push(s));
  await feed.poll();
  t.equal(feed.snapshot.api.ok, true, feed.snapshot.api.error);
  t.same(feed.snapshot.rows.map((r) => [r.node, r.phase]), [['worker-0', 'Ready'], ['worker-1', 'Staging'], ['worker-2', 'NotReported']]);
  t.match(feed.snapshot.warnings.map((w) => w.kind), ['NodesNotReady']);
  t.equal([...feed.snapshot.rows[1]!.technician!].length, 1024, 'a string past the CRD\'s bound (a writer that skipped it) is cut to it');
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
});

t.test(`limits: at most ${MAX_DASHBOARD_ROWS} rows sent (the rest counted), the interval 1-60 s, a port`, async (t) => {
  const nodes = Array.from({ length: MAX_DASHBOARD_ROWS + 2 }, (_, i) => ({ metadata: { name: `n-${String(i).padStart(5, '0')}` }, status: { conditions: [] } }));
  const r = dashboardRows(nodes, []);
  t.equal(r.rows.length, MAX_DASHBOARD_ROWS);
  t.equal(r.omitted, 2);
  for (const [flag, value, why] of [['--interval', '0.5', /--interval.*must be 1 to 60 seconds/], ['--interval', '61', /must be 1 to 60 seconds/], ['--port', '70000', /--port.*must be a TCP port/]] as const) {
    const res = await bundle(['cluster', 'dashboard', flag, value]);
    t.equal(res.code, 2, `${flag} ${value}: a usage error`);
    t.match(res.stderr, why);
  }
});

// Contract tests for the ClusterReporter: no API server can run here, so a node:http server on
// 127.0.0.1 plays it, records every request and answers as scripted; the reporter reaches it
// through a generated kubeconfig, with the real @kubernetes/client-node 1.4 underneath.
import path from 'node:path';
import { rename } from 'node:fs/promises';
import t, { type Test } from 'tap';
import { parse as parseYaml } from 'yaml';
import { ClusterReporter, emptyStatus, StatusTracker, toResource, type StatusLogger } from '@offline-bundle/status';
import { compileSchema, crdSchema, freePort, tmpdir, loadCrd, loadSequence, sleep, startFakeApi, until, writeKubeconfig, type FakeApi } from './lib.js';

const NODE = 'worker-1';
const STATUS_PATH = `/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses/${NODE}/status`;
const MAIN_PATH = `/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses/${NODE}`;

function quietLog(): StatusLogger & { lines: string[] } {
  const lines: string[] = [];
  const rec = (level: string) => (event: string, msg: string) => void lines.push(`${level} ${event} ${msg}`);
  return { lines, info: rec('info'), warn: rec('warn'), error: rec('error') };
}

async function setup(t: Test, opts: { api?: FakeApi; port?: number; minIntervalMs?: number; requestTimeoutMs?: number; maxBackoffMs?: number } = {}) {
  const dir = await tmpdir(t, 'ob-status-');
  const api = opts.api ?? (await startFakeApi());
  t.teardown(() => api.close());
  const kubeconfig = await writeKubeconfig(path.join(dir, 'kubeconfig'), opts.port ?? api.port);
  const log = quietLog();
  const reporter = new ClusterReporter({
    node: NODE,
    kubeconfig,
    minIntervalMs: opts.minIntervalMs ?? 200,
    initialBackoffMs: 40,
    maxBackoffMs: opts.maxBackoffMs ?? 250,
    requestTimeoutMs: opts.requestTimeoutMs ?? 2000,
    log,
  });
  t.teardown(() => reporter.close(100));
  return { dir, api, kubeconfig, log, reporter };
}

const bodyOf = (r: { body: string }) => parseYaml(r.body) as Record<string, any>;

t.test('contract: the reporter creates the object by apply, then server-side applies the status subresource', async (t) => {
  const { api, reporter } = await setup(t);
  const seq = loadSequence();
  const status = seq.at(-1)!;
  const t0 = Date.now();
  reporter.report(status);
  t.ok(Date.now() - t0 < 50, 'report() returns at once');
  t.equal(await reporter.flush(5000), true, 'flush: delivered');

  t.equal(api.requests.length, 2, 'two requests: object, then status');
  const [main, st] = api.requests;
  for (const r of [main!, st!]) {
    t.equal(r.method, 'PATCH');
    t.equal(r.headers['content-type'], 'application/apply-patch+yaml', 'server-side apply content type');
    t.equal(r.url.searchParams.get('fieldManager'), `bundle-agent-${NODE}`);
    t.equal(r.url.searchParams.get('force'), 'true');
    t.equal(r.headers.authorization, 'Bearer node-token', "the kubeconfig's credentials");
  }
  t.equal(main!.path, MAIN_PATH);
  t.same(bodyOf(main!), { apiVersion: 'bundles.offline-bundle.io/v1alpha1', kind: 'NodeBundleStatus', metadata: { name: NODE, labels: { 'app.kubernetes.io/managed-by': 'bundle-agent' } } }, 'main apply: metadata only');
  t.equal(st!.path, STATUS_PATH);
  const body = bodyOf(st!);
  t.same(body, JSON.parse(JSON.stringify(toResource(status, NODE, { generation: 1 }))), 'status apply: toResource of the status, generation from the created object');
  const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
  t.ok(validate(body), `the body validates against the CRD ${JSON.stringify(validate.errors)}`);
  t.match(body.status, { phase: 'Ready', observedGeneration: 1, bundle: { version: '4.15.1' } });

  reporter.report({ ...status, message: 'again' });
  t.equal(await reporter.flush(5000), true);
  t.same(api.requests.slice(2).map((r) => r.path), [STATUS_PATH], 'later writes: the status only');
  t.match(reporter.stats, { writes: 2, failures: 0, pending: false });
});

t.test('contract: API server down at first, then up: the newest state arrives', async (t) => {
  const port = await freePort();
  // Nothing listens on `port` yet.
  const { reporter, log } = await setup(t, { api: { close: async () => undefined } as FakeApi, port });
  const seq = loadSequence();
  // The pipeline goes on while nothing answers.
  const t0 = Date.now();
  for (const s of seq) reporter.report(s);
  t.ok(Date.now() - t0 < 200, `${seq.length} reports while unreachable took ${Date.now() - t0} ms`);
  await until(() => reporter.stats.failures >= 3, 5000);
  t.match(reporter.stats, { writes: 0, pending: true });
  t.match(log.lines.join('\n'), /warn cluster-status cannot write the status of worker-1 to the cluster \(API server unreachable: ECONNREFUSED\)/);
  t.equal(await reporter.flush(100), false, 'flush times out while unreachable');

  const api = await startFakeApi(port);
  t.teardown(() => api.close());
  t.equal(await reporter.flush(5000), true, 'flush: delivered once the server is up');
  const writes = api.statusRequests();
  t.equal(writes.length, 1, 'intermediate states were dropped: one status write');
  t.same(bodyOf(writes[0]!).status, JSON.parse(JSON.stringify(toResource(seq.at(-1)!, NODE, { generation: 1 }).status)), 'the final state arrived');
  t.match(log.lines.join('\n'), /info cluster-status status reaches the cluster again/);
});

t.test('contract: 500, 409 and 429 answers are retried until the state is accepted', async (t) => {
  const { api, reporter } = await setup(t, { maxBackoffMs: 2000 });
  api.statusAnswers.push({ status: 500 }, { status: 409 }, { status: 503 }, { status: 429, headers: { 'Retry-After': '1' } });
  const s = loadSequence().at(-1)!;
  const t0 = Date.now();
  reporter.report(s);
  t.equal(await reporter.flush(10_000), true);
  const tries = api.statusRequests();
  t.same(tries.map((r) => r.answered), [500, 409, 503, 429, 200]);
  t.ok(tries.every((r) => r.body === tries[0]!.body), 'the same (newest) state each time');
  t.ok(tries.at(-1)!.at - tries.at(-2)!.at >= 950, 'Retry-After honoured');
  t.ok(Date.now() - t0 < 5000);
  t.match(reporter.stats, { writes: 1, failures: 4, retrying: 0 });
  // Backoff grows between attempts (40 ms, doubled each time, less up to half of it as jitter).
  const gaps = tries.slice(1, 4).map((r, i) => r.at - tries[i]!.at);
  t.ok(gaps[0]! >= 15 && gaps[1]! >= 35 && gaps[2]! >= 75, `gaps grow: ${gaps.join(', ')} ms`);
});

t.test('contract: while retrying, newer states replace older ones; the newest arrives', async (t) => {
  const { api, reporter } = await setup(t);
  for (let i = 0; i < 4; i++) api.statusAnswers.push({ status: 503 });
  const seq = loadSequence();
  for (const [i, s] of seq.entries()) {
    reporter.report(s);
    if (i % 5 === 0) await sleep(15);
  }
  t.equal(await reporter.flush(10_000), true);
  const ok = api.accepted().filter((r) => r.path === STATUS_PATH);
  t.equal(bodyOf(ok.at(-1)!).status.phase, 'Ready');
  t.same(bodyOf(ok.at(-1)!).status.conditions.at(-1), JSON.parse(JSON.stringify(toResource(seq.at(-1)!, NODE, { generation: 1 }).status.conditions.at(-1))));
  t.ok(api.statusRequests().length < seq.length, `${api.statusRequests().length} writes for ${seq.length} states`);
});

t.test('contract: rate: progress-only changes at most once per interval, a condition change at once', async (t) => {
  const interval = 600;
  const { api, reporter } = await setup(t, { minIntervalMs: interval });
  const tracker = new StatusTracker(emptyStatus(NODE));
  tracker.onChange(reporter.sink);
  tracker.phase('Staging');
  await until(() => api.statusRequests().length === 1);
  const start = Date.now();
  // 60 progress updates over ~1.2 s: two intervals.
  for (let i = 1; i <= 60; i++) {
    tracker.progress({ bytesDone: i * 1000, bytesTotal: 60_000 });
    await sleep(20);
  }
  const elapsed = Date.now() - start;
  await sleep(50);
  const progressWrites = api.statusRequests().length - 1;
  const max = Math.ceil(elapsed / interval) + 1;
  t.ok(progressWrites >= 1 && progressWrites <= max, `${progressWrites} writes for 60 progress updates in ${elapsed} ms (at most ${max})`);
  const times = api.statusRequests().map((r) => r.at);
  for (let i = 1; i < times.length; i++) t.ok(times[i]! - times[i - 1]! >= interval - 30, `writes ${i - 1} and ${i} are ${times[i]! - times[i - 1]!} ms apart`);

  // A progress write just went out: a condition change does not wait for the interval.
  tracker.progress({ bytesDone: 61_000 });
  await until(() => api.statusRequests().length === progressWrites + 2, interval * 3);
  const before = api.statusRequests().length;
  const t0 = Date.now();
  tracker.condition('Staged', 'True', 'Staged', 'layout staged');
  await until(() => api.statusRequests().length > before, interval * 2);
  const took = api.statusRequests().at(-1)!.at - t0;
  t.ok(took < interval / 2, `condition change sent after ${took} ms (interval ${interval} ms)`);
  t.match(bodyOf(api.statusRequests().at(-1)!).status.conditions, [{ type: 'Staged', status: 'True' }]);
  // And a phase change too.
  const t1 = Date.now();
  tracker.phase('Serving');
  await until(() => bodyOf(api.statusRequests().at(-1)!).status.phase === 'Serving', interval * 2);
  t.ok(api.statusRequests().at(-1)!.at - t1 < interval / 2, 'phase change sent at once');
  // The last progress state still arrives (flush ignores the interval).
  tracker.progress({ bytesDone: 60_000 });
  t.equal(await reporter.flush(3000), true);
  t.equal(bodyOf(api.statusRequests().at(-1)!).status.progress.bytesDone, 60_000);
});

t.test('contract: a deleted object is created again (404 on the status)', async (t) => {
  const { api, reporter } = await setup(t);
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(5000), true);
  api.statusAnswers.push({ status: 404 });
  reporter.report({ ...emptyStatus(NODE), phase: 'Verifying' });
  t.equal(await reporter.flush(5000), true);
  t.same(api.requests.map((r) => `${r.path === MAIN_PATH ? 'main' : 'status'} ${r.answered}`), ['main 201', 'status 200', 'status 404', 'main 200', 'status 200']);
  t.equal(bodyOf(api.requests.at(-1)!).status.phase, 'Verifying');
});

t.test('contract: CRD not installed yet (404 on the object) is retried', async (t) => {
  const { api, reporter, log } = await setup(t);
  api.mainAnswers.push({ status: 404 }, { status: 404 });
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(5000), true);
  t.same(api.requests.map((r) => r.answered), [404, 404, 201, 200]);
  t.match(log.lines.join('\n'), /is deploy\/crd\.yaml installed\?/);
});

t.test('contract: a state the API server refuses (422) is dropped; the next one goes through', async (t) => {
  const { api, reporter, log } = await setup(t);
  api.statusAnswers.push({ status: 422, body: { kind: 'Status', message: 'status.phase: Unsupported value' } });
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(5000), false, 'flush says it was not delivered');
  t.equal(api.statusRequests().length, 1, 'not retried');
  t.match(log.lines.join('\n'), /error cluster-status the API server refused the status of worker-1: HTTP 422: status.phase: Unsupported value/);
  t.match(reporter.stats, { rejected: 1, pending: false });
  reporter.report({ ...emptyStatus(NODE), phase: 'Verifying' });
  t.equal(await reporter.flush(5000), true);
  t.equal(api.statusRequests().length, 2);
});

t.test('contract: 401 reloads the kubeconfig (rotated credentials)', async (t) => {
  const { api, reporter, kubeconfig } = await setup(t);
  // The credentials rotate on disk, then the API server refuses the old ones.
  api.statusAnswers.push(async () => {
    await writeKubeconfig(kubeconfig, api.port, 'rotated-token');
    return { status: 401 };
  });
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(5000), true);
  const st = api.statusRequests();
  t.equal(st[0]!.headers.authorization, 'Bearer node-token');
  t.equal(st.at(-1)!.headers.authorization, 'Bearer rotated-token', 'the new credentials are used');
});

t.test('contract: no kubeconfig yet: retried until it appears', async (t) => {
  const { api, reporter, kubeconfig, log } = await setup(t);
  await rename(kubeconfig, `${kubeconfig}.away`);
  reporter.report(emptyStatus(NODE));
  await until(() => reporter.stats.failures >= 2);
  t.match(log.lines.join('\n'), /cannot load kubeconfig/);
  await rename(`${kubeconfig}.away`, kubeconfig);
  t.equal(await reporter.flush(5000), true);
  t.equal(api.statusRequests().length, 1);
});

t.test('contract: a hanging API server times out and never blocks; close() gives up on time', async (t) => {
  const { api, reporter } = await setup(t, { requestTimeoutMs: 300 });
  api.mainAnswers.push('hang', 'hang');
  const t0 = Date.now();
  for (const s of loadSequence()) reporter.report(s);
  t.ok(Date.now() - t0 < 200, 'reports return at once while the server hangs');
  await until(() => api.requests.length >= 2, 5000);
  t.ok(reporter.stats.failures >= 1, 'the hanging request timed out and was retried');
  t.equal(await reporter.flush(5000), true, 'then delivered');
  api.statusAnswers.push('hang');
  reporter.report({ ...emptyStatus(NODE), phase: 'Failed' });
  const c0 = Date.now();
  t.equal(await reporter.close(150), false, 'close: not delivered within its time');
  t.ok(Date.now() - c0 < 1000, `close returned after ${Date.now() - c0} ms`);
  const n = api.requests.length;
  reporter.report(emptyStatus(NODE));
  await sleep(100);
  t.equal(api.requests.length, n, 'no request after close');
});

t.test('the reporter refuses a node name that is not an object name', async (t) => {
  t.throws(() => new ClusterReporter({ node: 'Worker_1', kubeconfig: '/nonexistent' }), TypeError);
  const long = 'n'.repeat(200);
  const r = new ClusterReporter({ node: long, kubeconfig: '/nonexistent' });
  t.ok(r.fieldManager.length <= 128 && r.fieldManager.startsWith('bundle-agent-n'), 'long node names get a field manager within 128 characters');
  await r.close(10);
});


// Contract tests for the ClusterReporter: no API server can run here, so a node:http server on
// 127.0.0.1 plays it, records every request and answers as scripted; the reporter reaches it
// through a generated kubeconfig, with the real @kubernetes/client-node 1.4 underneath.
import path from 'node:path';
import { rename } from 'node:fs/promises';
import t, { type Test } from 'tap';
import { parse as parseYaml } from 'yaml';
import {
  ClusterReporter,
  CONDITION_STATUSES,
  CONDITION_TYPES,
  emptyStatus,
  HISTORY_STATES,
  parseFieldPath,
  PHASES,
  refusedFields,
  StatusTracker,
  toResource,
  withoutRefused,
  BUNDLE_MODES,
  type NodeStatus,
  type StatusLogger,
} from '@offline-bundle/status';
import { SHIPPED_RBAC } from '../helpers/kube-standin.js';
import {
  invalidStatus,
  type Doc,
  compileSchema,
  crdSchema,
  freePort,
  tmpdir,
  loadCrd,
  loadSequence,
  sleep,
  startFakeApi,
  writeKubeconfig,
  type FakeApi,
} from './lib.js';
import { until } from '../helpers/until.js';

const NODE = 'worker-1';
const STATUS_PATH = `/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses/${NODE}/status`;
const MAIN_PATH = `/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses/${NODE}`;

function quietLog(): StatusLogger & { lines: string[] } {
  const lines: string[] = [];
  const rec = (level: string) => (event: string, msg: string) =>
    void lines.push(`${level} ${event} ${msg}`);
  return { lines, info: rec('info'), warn: rec('warn'), error: rec('error') };
}

async function setup(
  t: Test,
  opts: {
    api?: FakeApi;
    port?: number;
    minIntervalMs?: number;
    requestTimeoutMs?: number;
    maxBackoffMs?: number;
    heartbeatMs?: number;
  } = {},
) {
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
    ...(opts.heartbeatMs !== undefined ? { heartbeatMs: opts.heartbeatMs } : {}),
    log,
  });
  t.teardown(() => reporter.close(100));
  return { dir, api, kubeconfig, log, reporter };
}

const bodyOf = (r: { body: string }) => parseYaml(r.body) as Record<string, any>;

t.test(
  'contract: the reporter creates the object by apply, then server-side applies the status subresource',
  async (t) => {
    const { api, reporter } = await setup(t);
    const seq = loadSequence();
    const status = seq.at(-1)!;
    const t0 = Date.now();
    reporter.report(status);
    t.ok(Date.now() - t0 < 50, 'report() returns at once');
    t.equal(await reporter.flush(60_000), true, 'flush: delivered');

    t.equal(api.requests.length, 2, 'two requests: object, then status');
    const [main, st] = api.requests;
    for (const r of [main!, st!]) {
      t.equal(r.method, 'PATCH');
      t.equal(
        r.headers['content-type'],
        'application/apply-patch+yaml',
        'server-side apply content type',
      );
      t.equal(r.url.searchParams.get('fieldManager'), `bundle-agent-${NODE}`);
      t.equal(r.url.searchParams.get('force'), 'true');
      t.equal(r.headers.authorization, 'Bearer node-token', "the kubeconfig's credentials");
    }
    t.equal(main!.path, MAIN_PATH);
    t.same(
      bodyOf(main!),
      {
        apiVersion: 'bundles.offline-bundle.io/v1alpha1',
        kind: 'NodeBundleStatus',
        metadata: { name: NODE, labels: { 'app.kubernetes.io/managed-by': 'bundle-agent' } },
      },
      'main apply: metadata only',
    );
    t.equal(st!.path, STATUS_PATH);
    const body = bodyOf(st!);
    t.same(
      body,
      JSON.parse(JSON.stringify(toResource(status, NODE, { generation: 1, heartbeatSeconds: 60 }))),
      'status apply: toResource of the status, generation from the created object',
    );
    const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
    t.ok(validate(body), `the body validates against the CRD ${JSON.stringify(validate.errors)}`);
    t.match(body.status, { phase: 'Ready', observedGeneration: 1, bundle: { version: '4.15.1' } });

    reporter.report({ ...status, message: 'again' });
    t.equal(await reporter.flush(60_000), true);
    t.same(
      api.requests.slice(2).map((r) => r.path),
      [STATUS_PATH],
      'later writes: the status only',
    );
    t.match(reporter.stats, { writes: 2, failures: 0, pending: false });
  },
);

t.test(
  'heartbeat: with nothing new, the last state goes out again newly dated, carrying heartbeatSeconds; 0 turns it off',
  async (t) => {
    const { api, reporter } = await setup(t, { heartbeatMs: 1000 });
    const status = loadSequence().at(-1)!;
    reporter.report(status);
    t.equal(await reporter.flush(60_000), true);
    await until('two heartbeats', () => api.statusRequests().length >= 3, { timeoutMs: 15_000 });
    const [first, ...beats] = api.statusRequests().map((r) => bodyOf(r).status);
    t.equal(first.heartbeatSeconds, 1);
    for (const b of beats) {
      t.same({ ...b, updatedAt: first.updatedAt }, first, 'the same state');
      t.ok(Date.parse(b.updatedAt) > Date.parse(first.updatedAt), `dated anew: ${b.updatedAt}`);
    }
    const quiet = await setup(t, { heartbeatMs: 0 });
    quiet.reporter.report(status);
    t.equal(await quiet.reporter.flush(60_000), true);
    await sleep(2500);
    t.equal(quiet.api.statusRequests().length, 1, 'no heartbeat when turned off');
    t.notOk(
      'heartbeatSeconds' in bodyOf(quiet.api.statusRequests()[0]!).status,
      'and none announced',
    );
    // a refused state: the state before it is not re-sent as fresh (the row goes stale instead)
    const refused = await setup(t, { heartbeatMs: 1000 });
    refused.reporter.report(status);
    t.equal(await refused.reporter.flush(60_000), true);
    refused.api.statusAnswers.push({ status: 400 });
    refused.reporter.report({ ...status, phase: 'Verifying' });
    await until('the refusal', () => refused.reporter.stats.rejected === 1, { timeoutMs: 10_000 });
    const after = refused.api.statusRequests().length;
    await sleep(2500);
    t.equal(refused.api.statusRequests().length, after, 'no heartbeat after a refusal');
  },
);

t.test('contract: API server down at first, then up: the newest state arrives', async (t) => {
  const port = await freePort();
  // Nothing listens on `port` yet.
  const { reporter, log } = await setup(t, {
    api: { close: async () => undefined } as FakeApi,
    port,
  });
  const seq = loadSequence();
  // The pipeline goes on while nothing answers.
  const t0 = Date.now();
  for (const s of seq) reporter.report(s);
  t.ok(Date.now() - t0 < 200, `${seq.length} reports while unreachable took ${Date.now() - t0} ms`);
  await until('three failures', () => reporter.stats.failures >= 3, { timeoutMs: 5000 });
  t.match(reporter.stats, { writes: 0, pending: true });
  t.match(
    log.lines.join('\n'),
    /warn cluster-status cannot write the status of worker-1 to the cluster \(API server unreachable: ECONNREFUSED\)/,
  );
  t.equal(await reporter.flush(100), false, 'flush times out while unreachable');

  const api = await startFakeApi(port);
  t.teardown(() => api.close());
  t.equal(await reporter.flush(60_000), true, 'flush: delivered once the server is up');
  const writes = api.statusRequests();
  t.equal(writes.length, 1, 'intermediate states were dropped: one status write');
  t.same(
    bodyOf(writes[0]!).status,
    JSON.parse(
      JSON.stringify(toResource(seq.at(-1)!, NODE, { generation: 1, heartbeatSeconds: 60 }).status),
    ),
    'the final state arrived',
  );
  t.match(log.lines.join('\n'), /info cluster-status status reaches the cluster again/);
});

t.test('contract: 500, 409 and 429 answers are retried until the state is accepted', async (t) => {
  const { api, reporter } = await setup(t, { maxBackoffMs: 2000 });
  api.statusAnswers.push(
    { status: 500 },
    { status: 409 },
    { status: 503 },
    { status: 429, headers: { 'Retry-After': '1' } },
  );
  const s = loadSequence().at(-1)!;
  const t0 = Date.now();
  reporter.report(s);
  t.equal(await reporter.flush(10_000), true);
  const tries = api.statusRequests();
  t.same(
    tries.map((r) => r.answered),
    [500, 409, 503, 429, 200],
  );
  t.ok(
    tries.every((r) => r.body === tries[0]!.body),
    'the same (newest) state each time',
  );
  t.ok(tries.at(-1)!.at - tries.at(-2)!.at >= 950, 'Retry-After honoured');
  t.ok(Date.now() - t0 < 5000);
  t.match(reporter.stats, { writes: 1, failures: 4, retrying: 0 });
  // Backoff grows between attempts (40 ms, doubled each time, less up to half of it as jitter).
  const gaps = tries.slice(1, 4).map((r, i) => r.at - tries[i]!.at);
  t.ok(gaps[0]! >= 15 && gaps[1]! >= 35 && gaps[2]! >= 75, `gaps grow: ${gaps.join(', ')} ms`);
});

t.test(
  'contract: while retrying, newer states replace older ones; the newest arrives',
  async (t) => {
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
    t.same(
      bodyOf(ok.at(-1)!).status.conditions.at(-1),
      JSON.parse(
        JSON.stringify(
          toResource(seq.at(-1)!, NODE, {
            generation: 1,
            heartbeatSeconds: 60,
          }).status.conditions.at(-1),
        ),
      ),
    );
    t.ok(
      api.statusRequests().length < seq.length,
      `${api.statusRequests().length} writes for ${seq.length} states`,
    );
  },
);

t.test(
  'contract: rate: progress-only changes at most once per interval, a condition change at once',
  async (t) => {
    // Times are seen where the writes arrive (the API stand-in), so a loaded machine delays them:
    // the margins are a third of the interval, far from what a reporter ignoring it would show.
    const interval = 1500;
    const slack = interval / 3;
    const { api, reporter } = await setup(t, { minIntervalMs: interval });
    const tracker = new StatusTracker(emptyStatus(NODE));
    tracker.onChange(reporter.sink);
    tracker.phase('Staging');
    await until('one status request', () => api.statusRequests().length === 1);
    const start = Date.now();
    // 60 progress updates over ~2.4 s: two intervals.
    for (let i = 1; i <= 60; i++) {
      tracker.progress({ bytesDone: i * 1000, bytesTotal: 60_000 });
      await sleep(40);
    }
    const elapsed = Date.now() - start;
    await sleep(50);
    const progressWrites = api.statusRequests().length - 1;
    const max = Math.ceil(elapsed / interval) + 1;
    t.ok(
      progressWrites >= 1 && progressWrites <= max,
      `${progressWrites} writes for 60 progress updates in ${elapsed} ms (at most ${max})`,
    );
    const times = api.statusRequests().map((r) => r.at);
    for (let i = 1; i < times.length; i++)
      t.ok(
        times[i]! - times[i - 1]! >= interval - slack,
        `writes ${i - 1} and ${i} are ${times[i]! - times[i - 1]!} ms apart`,
      );

    // A progress write just went out: a condition change does not wait for the interval.
    tracker.progress({ bytesDone: 61_000 });
    await until(
      'the progress writes and two more',
      () => api.statusRequests().length === progressWrites + 2,
      { timeoutMs: interval * 3 },
    );
    const before = api.statusRequests().length;
    const t0 = Date.now();
    tracker.condition('Staged', 'True', 'Staged', 'layout staged');
    await until('another status request', () => api.statusRequests().length > before, {
      timeoutMs: interval * 2,
    });
    const took = api.statusRequests().at(-1)!.at - t0;
    t.ok(
      took < interval - slack,
      `condition change sent after ${took} ms (interval ${interval} ms)`,
    );
    t.match(bodyOf(api.statusRequests().at(-1)!).status.conditions, [
      { type: 'Staged', status: 'True' },
    ]);
    // And a phase change too.
    const t1 = Date.now();
    tracker.phase('Serving');
    await until(
      'the last request says Serving',
      () => bodyOf(api.statusRequests().at(-1)!).status.phase === 'Serving',
      { timeoutMs: interval * 2 },
    );
    t.ok(api.statusRequests().at(-1)!.at - t1 < interval - slack, 'phase change sent at once');
    // The last progress state still arrives (flush ignores the interval).
    tracker.progress({ bytesDone: 60_000 });
    t.equal(await reporter.flush(3000), true);
    t.equal(bodyOf(api.statusRequests().at(-1)!).status.progress.bytesDone, 60_000);
  },
);

t.test('contract: a deleted object is created again (404 on the status)', async (t) => {
  const { api, reporter } = await setup(t);
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(60_000), true);
  api.statusAnswers.push({ status: 404 });
  reporter.report({ ...emptyStatus(NODE), phase: 'Verifying' });
  t.equal(await reporter.flush(60_000), true);
  t.same(
    api.requests.map((r) => `${r.path === MAIN_PATH ? 'main' : 'status'} ${r.answered}`),
    ['main 201', 'status 200', 'status 404', 'main 200', 'status 200'],
  );
  t.equal(bodyOf(api.requests.at(-1)!).status.phase, 'Verifying');
});

t.test('contract: CRD not installed yet (404 on the object) is retried', async (t) => {
  const { api, reporter, log } = await setup(t);
  api.mainAnswers.push({ status: 404 }, { status: 404 });
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(60_000), true);
  t.same(
    api.requests.map((r) => r.answered),
    [404, 404, 201, 200],
  );
  t.match(log.lines.join('\n'), /is deploy\/crd\.yaml installed\?/);
});

t.test(
  'contract: a state the API server refuses (422) is dropped; the next one goes through',
  async (t) => {
    const { api, reporter, log } = await setup(t);
    api.statusAnswers.push({
      status: 422,
      body: { kind: 'Status', message: 'status.phase: Unsupported value' },
    });
    reporter.report(emptyStatus(NODE));
    t.equal(await reporter.flush(5000), false, 'flush says it was not delivered');
    t.equal(api.statusRequests().length, 1, 'not retried');
    t.match(
      log.lines.join('\n'),
      /error cluster-status the API server refused the status of worker-1: HTTP 422: status.phase: Unsupported value/,
    );
    t.match(reporter.stats, { rejected: 1, pending: false });
    reporter.report({ ...emptyStatus(NODE), phase: 'Verifying' });
    t.equal(await reporter.flush(60_000), true);
    t.equal(api.statusRequests().length, 2);
  },
);

// -----------------------------------------------------------------------------------------
// A newer agent against an older CRD: the stand-in API server checks every status write against
// the CRD as it was when its fields still had enums, and refuses (422, naming the fields) what
// it does not know, as the API server does.

async function olderCrd() {
  const schema = crdSchema(await loadCrd());
  const st = schema.properties.status.properties;
  st.phase.enum = [...PHASES];
  st.bundle.properties.mode.enum = [...BUNDLE_MODES];
  st.conditions.items.properties.type.enum = [...CONDITION_TYPES];
  st.conditions.items.properties.status.enum = [...CONDITION_STATUSES];
  st.history.items.properties.state.enum = [...HISTORY_STATES];
  return compileSchema(schema);
}

/** A status as a newer agent might write it: values this CRD has no name for. */
function newer(s: NodeStatus, change: (s: Doc) => void): NodeStatus {
  const c = structuredClone(s) as Doc;
  change(c);
  return c as NodeStatus;
}

const attested = {
  type: 'Attested',
  status: 'True',
  reason: 'Measured',
  message: 'boot measured',
  lastTransitionTime: '2026-11-21T10:06:00.000Z',
};

t.test(
  'contract: an older CRD refuses a newer condition type (422): sent again at once without that condition',
  async (t) => {
    const { api, reporter, log } = await setup(t);
    api.schema = await olderCrd();
    const s = newer(loadSequence().at(-1)!, (c) => c.conditions.splice(2, 0, attested));
    reporter.report(s);
    t.equal(await reporter.flush(60_000), true, 'delivered');
    const st = api.statusRequests();
    t.same(
      st.map((r) => r.answered),
      [422, 200],
      'one retry',
    );
    const [first, second] = st.map((r) => bodyOf(r).status);
    t.equal(first.conditions.length, s.conditions.length);
    t.same(
      second.conditions,
      first.conditions.filter((c: Doc) => c.type !== 'Attested'),
      'every other condition arrives',
    );
    t.same(
      { ...second, conditions: [] },
      { ...first, conditions: [] },
      'the rest of the status is unchanged',
    );
    t.match(
      log.lines.join('\n'),
      /warn cluster-status the cluster's NodeBundleStatus schema refused part of the status of worker-1 \(HTTP 422: .*\): sending it without status\.conditions\[2\] \(status\.conditions\[2\]\.type "Attested"\); apply this agent's deploy\/crd\.yaml/,
    );
    t.match(reporter.stats, { writes: 1, rejected: 0, reduced: 1 });
  },
);

t.test(
  'contract: a refused optional field (bundle.mode) and history entry are left out, the rest arrives',
  async (t) => {
    const { api, reporter, log } = await setup(t);
    api.schema = await olderCrd();
    // toResource only sends the modes this build knows, so the API server's answer naming
    // bundle.mode (as an older CRD would for a newer agent's mode) is scripted; the retry is
    // then checked against the older CRD.
    api.statusAnswers.push({
      status: 422,
      body: {
        kind: 'Status',
        code: 422,
        reason: 'Invalid',
        message: 'invalid',
        details: {
          causes: [{ field: 'status.bundle.mode' }, { field: 'status.history[0].state' }],
        },
      },
    });
    const s = newer(loadSequence().at(-1)!, (c) =>
      c.history.unshift({
        version: '4.14.38',
        state: 'superseded',
        at: '2026-11-21T09:00:00.000Z',
      }),
    );
    reporter.report(s);
    t.equal(await reporter.flush(60_000), true);
    t.same(
      api.statusRequests().map((r) => r.answered),
      [422, 200],
      'the reduced state passes the older CRD',
    );
    const sent = bodyOf(api.statusRequests().at(-1)!).status;
    t.notOk('mode' in sent.bundle, 'mode left out');
    t.match(
      sent.bundle,
      { version: '4.15.1', digest: String },
      'the rest of the bundle identity arrives',
    );
    t.same(
      sent.history.map((h: Doc) => h.version),
      ['4.15.1'],
      'the refused history entry is left out, the others stay',
    );
    t.match(
      log.lines.join('\n'),
      /without status\.bundle\.mode "staged", status\.history\[0\] \(status\.history\[0\]\.state "superseded"\)/,
    );
  },
);

t.test(
  'contract: a refused phase keeps the phase the cluster holds; with none accepted yet the state is dropped',
  async (t) => {
    const { api, reporter, log } = await setup(t);
    api.schema = await olderCrd();
    reporter.report({ ...emptyStatus(NODE), phase: 'Unpinning' as never });
    t.equal(await reporter.flush(5000), false, 'nothing accepted yet: nothing to keep, dropped');
    t.same(
      api.statusRequests().map((r) => r.answered),
      [422],
      'not resent',
    );
    t.match(reporter.stats, { rejected: 1, reduced: 0 });
    t.match(
      log.lines.join('\n'),
      /error cluster-status the API server refused the status of worker-1: HTTP 422: .*status\.phase/,
    );

    reporter.report({ ...emptyStatus(NODE), phase: 'Pinning' });
    t.equal(await reporter.flush(60_000), true);
    reporter.report({
      ...emptyStatus(NODE),
      phase: 'Unpinning' as never,
      progress: { bytesDone: 0, bytesTotal: 0, imagesDone: 3, imagesTotal: 4 },
      message: 'Unpinning 4.14.37.',
    });
    t.equal(await reporter.flush(60_000), true);
    t.same(
      api.statusRequests().map((r) => r.answered),
      [422, 200, 422, 200],
    );
    t.match(
      bodyOf(api.statusRequests().at(-1)!).status,
      { phase: 'Pinning', message: 'Unpinning 4.14.37.', progress: { imagesDone: 3 } },
      'the last accepted phase, the new everything else',
    );
    t.match(
      log.lines.join('\n'),
      /kept what the cluster holds for status\.phase "Pinning" \(status\.phase "Unpinning"\)/,
    );
  },
);

t.test('contract: the retry is made once: a second refusal drops the state', async (t) => {
  const { api, reporter } = await setup(t);
  const refusal = {
    status: 422,
    body: {
      kind: 'Status',
      code: 422,
      reason: 'Invalid',
      message: 'invalid',
      details: { causes: [{ field: 'status.bundle.mode' }] },
    },
  };
  api.statusAnswers.push(refusal, refusal);
  reporter.report(loadSequence().at(-1)!);
  t.equal(await reporter.flush(5000), false);
  t.same(
    api.statusRequests().map((r) => r.answered),
    [422, 422],
  );
  t.notOk(
    'mode' in bodyOf(api.statusRequests()[1]!).status.bundle,
    'the retry was the reduced state',
  );
  t.match(reporter.stats, { rejected: 1, reduced: 1 });
});

t.test('withoutRefused and the 422 causes', async (t) => {
  t.same(parseFieldPath('status.conditions[3].type'), ['status', 'conditions', 3, 'type']);
  t.same(parseFieldPath('.status.phase'), ['status', 'phase']);
  t.equal(parseFieldPath('status.conditions[type=Ready]'), undefined);
  t.same(
    refusedFields({
      details: {
        causes: [
          { field: 'status.phase' },
          { field: 'status.phase' },
          { message: 'no field' },
          null,
        ],
      },
    }),
    ['status.phase'],
  );
  t.same(refusedFields('not json'), []);

  const ready = toResource(loadSequence().at(-1)!, NODE).status;
  const unpinning = (readyCondition: 'True' | 'False') => ({
    ...ready,
    phase: 'Unpinning' as never,
    conditions: ready.conditions.map((c) =>
      c.type === 'Ready' ? { ...c, status: readyCondition } : c,
    ),
  });
  t.equal(
    withoutRefused(unpinning('False'), ['status.phase'], ready),
    undefined,
    'a stale Ready phase is never kept once the Ready condition is not True',
  );
  t.equal(
    withoutRefused(unpinning('True'), ['status.phase'], ready)?.status.phase,
    'Ready',
    'kept while Ready still holds',
  );
  t.equal(withoutRefused(ready, [], ready), undefined, 'no field named: no retry');
  t.equal(withoutRefused(ready, ['metadata.name'], ready), undefined, 'only status fields');
  t.equal(
    withoutRefused(ready, ['status.conditions[99].type'], ready),
    undefined,
    'a field that is not there',
  );
  const r = withoutRefused(
    ready,
    ['status.conditions[0].type', 'status.conditions[1].reason', 'status.observedGeneration'],
    ready,
  );
  t.equal(
    r?.status.conditions.length,
    ready.conditions.length - 2,
    'both elements dropped (indexes of the sent status)',
  );
  t.same(r?.status.conditions, ready.conditions.slice(2));
  t.same(
    ready.conditions.length,
    toResource(loadSequence().at(-1)!, NODE).status.conditions.length,
    'the input is not changed',
  );
});

t.test('the stand-in API server answers like Kubernetes for an invalid status', async (t) => {
  const v = await olderCrd();
  const obj = toResource({ ...emptyStatus(NODE), phase: 'Unpinning' as never }, NODE);
  const a = invalidStatus(v, JSON.stringify(obj))!;
  t.match(a, {
    kind: 'Status',
    code: 422,
    reason: 'Invalid',
    details: { causes: [{ field: 'status.phase', reason: 'FieldValueNotSupported' }] },
  });
  t.equal(invalidStatus(v, JSON.stringify(toResource(emptyStatus(NODE), NODE))), undefined);
});

t.test('contract: 401 reloads the kubeconfig (rotated credentials)', async (t) => {
  const { api, reporter, kubeconfig } = await setup(t);
  // The credentials rotate on disk, then the API server refuses the old ones.
  api.statusAnswers.push(async () => {
    await writeKubeconfig(kubeconfig, api.port, 'rotated-token');
    return { status: 401 };
  });
  reporter.report(emptyStatus(NODE));
  t.equal(await reporter.flush(60_000), true);
  const st = api.statusRequests();
  t.equal(st[0]!.headers.authorization, 'Bearer node-token');
  t.equal(st.at(-1)!.headers.authorization, 'Bearer rotated-token', 'the new credentials are used');
});

t.test(
  'contract: RBAC refuses the writes (rbac.yaml not applied): retried, the log names the rule; applied, the state arrives',
  async (t) => {
    const { api, reporter, log } = await setup(t);
    await api.server.loadRbac([]);
    reporter.report(emptyStatus(NODE));
    await until('two failures', () => reporter.stats.failures >= 2);
    t.equal(api.requests[0]!.answered, 403, 'refused by the stand-in, as by the API server');
    t.match(
      log.lines.join('\n'),
      'nodebundlestatuses.bundles.offline-bundle.io "worker-1" is forbidden: User "system:node:worker-1" cannot patch resource "nodebundlestatuses" in API group "bundles.offline-bundle.io" at the cluster scope: apply deploy/rbac.yaml (ClusterRole offline-bundle:node-status-writer',
    );
    await api.server.loadRbac(SHIPPED_RBAC);
    t.equal(await reporter.flush(60_000), true, 'delivered once the rule is there');
  },
);

t.test('contract: the admission policy keeps a node to its own object', async (t) => {
  const dir = await tmpdir(t);
  const api = await startFakeApi(0, 'worker-2');
  t.teardown(() => api.close());
  const log = quietLog();
  const reporter = new ClusterReporter({
    node: NODE,
    kubeconfig: await writeKubeconfig(path.join(dir, 'kubeconfig'), api.port),
    initialBackoffMs: 40,
    maxBackoffMs: 250,
    log,
  });
  t.teardown(() => reporter.close(100));
  reporter.report(emptyStatus(NODE));
  await until('a failure', () => reporter.stats.failures >= 1);
  t.match(
    log.lines.join('\n'),
    "ValidatingAdmissionPolicy 'offline-bundle-node-writes-own-status' with binding 'offline-bundle-node-writes-own-status' denied request: system:node:worker-2 may only write the NodeBundleStatus named after its own node, not worker-1",
  );
  t.equal(api.server.get('nodebundlestatuses', NODE), undefined, 'nothing written');
});

t.test('contract: no kubeconfig yet: retried until it appears', async (t) => {
  const { api, reporter, kubeconfig, log } = await setup(t);
  await rename(kubeconfig, `${kubeconfig}.away`);
  reporter.report(emptyStatus(NODE));
  await until('two failures', () => reporter.stats.failures >= 2);
  t.match(log.lines.join('\n'), /cannot load kubeconfig/);
  await rename(`${kubeconfig}.away`, kubeconfig);
  t.equal(await reporter.flush(60_000), true);
  t.equal(api.statusRequests().length, 1);
});

t.test(
  'contract: a hanging API server times out and never blocks; close() gives up on time',
  async (t) => {
    const { api, reporter } = await setup(t, { requestTimeoutMs: 300 });
    api.mainAnswers.push('hang', 'hang');
    const t0 = Date.now();
    for (const s of loadSequence()) reporter.report(s);
    t.ok(Date.now() - t0 < 200, 'reports return at once while the server hangs');
    await until('two requests', () => api.requests.length >= 2, { timeoutMs: 5000 });
    t.ok(reporter.stats.failures >= 1, 'the hanging request timed out and was retried');
    t.equal(await reporter.flush(60_000), true, 'then delivered');
    api.statusAnswers.push('hang');
    reporter.report({ ...emptyStatus(NODE), phase: 'Failed' });
    const c0 = Date.now();
    t.equal(await reporter.close(150), false, 'close: not delivered within its time');
    t.ok(Date.now() - c0 < 1000, `close returned after ${Date.now() - c0} ms`);
    const n = api.requests.length;
    reporter.report(emptyStatus(NODE));
    await sleep(100);
    t.equal(api.requests.length, n, 'no request after close');
  },
);

t.test('the reporter refuses a node name that is not an object name', async (t) => {
  t.throws(() => new ClusterReporter({ node: 'Worker_1', kubeconfig: '/nonexistent' }), TypeError);
  const long = 'n'.repeat(200);
  const r = new ClusterReporter({ node: long, kubeconfig: '/nonexistent' });
  t.ok(
    r.fieldManager.length <= 128 && r.fieldManager.startsWith('bundle-agent-n'),
    'long node names get a field manager within 128 characters',
  );
  await r.close(10);
});

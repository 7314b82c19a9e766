// The node-local endpoint: GET /status (JSON) and GET /metrics (Prometheus text format 0.0.4),
// on loopback only, fed by a StatusTracker through Metrics.
import { request } from 'node:http';
import t, { type Test } from 'tap';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  agentHealth,
  emptyStatus,
  Metrics,
  PHASES,
  startStatusServer,
  StatusFileWriter,
  StatusTracker,
  writeStatusFile,
  type NodeStatus,
} from '@offline-bundle/status';
import { isLoopback } from '@offline-bundle/host';
import { fixedClock, loadSequence } from './lib.js';

function get(
  url: string,
  opts: { method?: string; host?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; type: string; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: opts.method ?? 'GET',
        headers: { ...opts.headers, ...(opts.host ? { Host: opts.host } : {}) },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (body += c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            type: String(res.headers['content-type']),
            body,
            headers: res.headers,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

// Text exposition format 0.0.4: metric name, optional labels, value, optional timestamp.
const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"';
const VALUE = '(?:[-+]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|[-+]Inf)';
const SAMPLE = new RegExp(
  `^(${NAME})(\\{(?:${LABEL}(?:,${LABEL})*)?\\})? (${VALUE})(?: -?[0-9]+)?$`,
);

interface Parsed {
  types: Map<string, string>;
  samples: { name: string; labels: Record<string, string>; value: number }[];
}

/** Parses exposition text, failing `t` on any line that does not follow the format. */
function parseMetrics(t: Test, text: string): Parsed {
  const types = new Map<string, string>();
  const helps = new Set<string>();
  const samples: Parsed['samples'] = [];
  t.ok(text.endsWith('\n'), 'ends with a line feed');
  for (const line of text.split('\n').slice(0, -1)) {
    let m: RegExpMatchArray | null;
    if ((m = line.match(new RegExp(`^# HELP (${NAME}) (.*)$`)))) {
      t.notOk(helps.has(m[1]!), `one HELP for ${m[1]}`);
      helps.add(m[1]!);
    } else if (
      (m = line.match(new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`)))
    ) {
      t.notOk(types.has(m[1]!), `one TYPE for ${m[1]}`);
      t.notOk(
        samples.some(
          (s) =>
            s.name === m![1] ||
            (s.name.startsWith(`${m![1]}_`) && /_(bucket|sum|count)$/.test(s.name)),
        ),
        `TYPE of ${m[1]} before its samples`,
      );
      types.set(m[1]!, m[2]!);
    } else if ((m = line.match(SAMPLE))) {
      const labels: Record<string, string> = {};
      for (const lm of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
        labels[lm[1]!] = lm[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
      samples.push({ name: m[1]!, labels, value: Number(m[3]) });
      // a histogram's or summary's samples are NAME_bucket, NAME_sum and NAME_count
      const base = m[1]!.replace(/_(bucket|sum|count)$/, '');
      t.ok(
        types.has(m[1]!) || /^(histogram|summary)$/.test(types.get(base) ?? ''),
        `${m[1]} has a TYPE line`,
      );
    } else {
      t.fail(`not exposition format: ${JSON.stringify(line)}`);
    }
  }
  for (const [name, type] of types)
    if (type === 'counter') t.match(name, /_total$/, `counter ${name} ends in _total`);
  return { types, samples };
}

const value = (p: Parsed, name: string, labels: Record<string, string> = {}) =>
  p.samples.find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  )?.value;

t.test('GET /status and GET /metrics on loopback', async (t) => {
  let now = Date.parse('2026-11-21T10:00:00Z');
  const clock = () => new Date((now += 1000));
  const tracker = new StatusTracker(emptyStatus('worker-1', new Date(now)), clock);
  const metrics = new Metrics(() => now);
  tracker.onChange(metrics.sink);
  const seen: NodeStatus[] = [];
  tracker.onChange((s) => seen.push(s));
  tracker.update(() => undefined);
  const server = await startStatusServer({ status: tracker, metrics });
  t.teardown(() => server.close());
  t.match(server.address, /^127\.0\.0\.1:\d+$/);

  const st = await get(`${server.url}/status`);
  t.equal(st.status, 200);
  t.equal(st.type, 'application/json');
  t.same(JSON.parse(st.body) as NodeStatus, tracker.current, '/status is the current NodeStatus');

  const m0 = await get(`${server.url}/metrics`);
  t.equal(m0.status, 200);
  t.equal(m0.type, 'text/plain; version=0.0.4; charset=utf-8');
  const p0 = parseMetrics(t, m0.body);
  for (const name of [
    'bundle_agent_bytes_staged_total',
    'bundle_agent_images_pulled_total',
    'bundle_agent_failures_total',
  ])
    t.equal(p0.types.get(name), 'counter', `${name} is a counter`);
  for (const name of ['bundle_agent_phase_duration_seconds', 'bundle_agent_phase'])
    t.equal(p0.types.get(name), 'gauge', `${name} is a gauge`);
  t.same(
    PHASES.map((ph) => value(p0, 'bundle_agent_phase', { phase: ph })),
    PHASES.map((ph) => (ph === 'Idle' ? 1 : 0)),
    'phase gauge: Idle is 1',
  );
  t.equal(value(p0, 'bundle_agent_bytes_staged_total'), 0);

  // A full load, then a second bundle that fails.
  for (const s of loadSequence({ start: tracker.current }).slice(1)) {
    tracker.update((x) => Object.assign(x, structuredClone(s)));
  }
  t.equal(tracker.current.phase, 'Ready');
  const p1 = parseMetrics(t, (await get(`${server.url}/metrics`)).body);
  t.equal(value(p1, 'bundle_agent_bytes_staged_total'), 18_400_000_000, 'bytes staged counted');
  t.equal(value(p1, 'bundle_agent_images_pulled_total'), 4, 'images pulled counted');
  t.equal(value(p1, 'bundle_agent_bundles_ready_total'), 1);
  t.equal(value(p1, 'bundle_agent_phase', { phase: 'Ready' }), 1);
  t.equal(value(p1, 'bundle_agent_phase', { phase: 'Idle' }), 0);
  t.equal(value(p1, 'bundle_agent_condition', { type: 'Ready', status: 'True' }), 1);
  t.equal(
    value(p1, 'bundle_agent_bundle_info', { version: '4.15.1', arch: 'amd64', mode: 'staged' }),
    1,
  );
  for (const ph of ['Verifying', 'Staging', 'Serving', 'Preloading', 'Pinning']) {
    const d = value(p1, 'bundle_agent_phase_duration_seconds', { phase: ph });
    t.ok(d !== undefined && d > 0, `duration of ${ph}: ${d} s`);
  }
  const stagingStart = Date.parse(seen.find((s) => s.phase === 'Staging')!.updatedAt);
  const stagingEnd = Date.parse(seen.find((s) => s.phase === 'Serving')!.updatedAt);
  t.equal(
    value(p1, 'bundle_agent_phase_duration_seconds', { phase: 'Staging' }),
    (stagingEnd - stagingStart) / 1000,
    "Staging: from its first status to the next phase's",
  );

  for (const s of loadSequence({
    start: tracker.current,
    fail: 'Preloading',
    version: '4.15.2',
  }).slice(1)) {
    tracker.update((x) => Object.assign(x, structuredClone(s)));
  }
  const p2 = parseMetrics(t, (await get(`${server.url}/metrics`)).body);
  t.equal(
    value(p2, 'bundle_agent_failures_total', { reason: 'PullFailed' }),
    1,
    'failure counted by reason',
  );
  t.ok(
    value(p2, 'bundle_agent_bytes_staged_total')! > value(p1, 'bundle_agent_bytes_staged_total')!,
    'bytes counter increased',
  );
  t.equal(value(p2, 'bundle_agent_images_pulled_total'), 6, 'images counter increased (4 + 2)');
  for (const s of p1.samples.filter((x) => p1.types.get(x.name) === 'counter')) {
    const after = value(p2, s.name, s.labels);
    t.ok(after !== undefined && after >= s.value, `${s.name} never decreases`);
  }
  t.equal(value(p2, 'bundle_agent_phase', { phase: 'Failed' }), 1);
});

t.test('label values and odd reasons are escaped', async (t) => {
  const metrics = new Metrics(() => Date.parse('2026-11-21T10:00:00Z'));
  const clock = fixedClock();
  const tracker = new StatusTracker(emptyStatus('worker-1'), clock);
  tracker.onChange(metrics.sink);
  tracker.update((s) => {
    s.phase = 'Verifying';
    s.bundle = { file: 'x', version: 'v"1\\2\n3' };
  });
  tracker.condition('Failed', 'True', 'Odd"Reason', 'x');
  tracker.phase('Failed');
  const p = parseMetrics(t, await metrics.render());
  t.equal(value(p, 'bundle_agent_failures_total', { reason: 'Odd"Reason' }), 1);
  t.equal(value(p, 'bundle_agent_bundle_info', { version: 'v"1\\2\n3' }), 1);
});

t.test('only GET/HEAD on /status and /metrics; loopback only', async (t) => {
  const server = await startStatusServer({ status: () => emptyStatus('worker-1') });
  t.teardown(() => server.close());
  t.equal((await get(`${server.url}/`)).status, 404);
  t.equal((await get(`${server.url}/status/../etc/passwd`)).status, 404);
  t.equal((await get(`${server.url}/metrics`)).status, 404, 'no Metrics given: /metrics is off');
  const post = await get(`${server.url}/status`, { method: 'POST' });
  t.equal(post.status, 405);
  t.equal(post.headers.allow, 'GET, HEAD');
  const head = await get(`${server.url}/status`, { method: 'HEAD' });
  t.equal(head.status, 200);
  t.equal(head.body, '');
  t.equal(
    (await get(`${server.url}/status`, { host: 'evil.example:80' })).status,
    403,
    'a foreign Host header (DNS rebinding) is refused',
  );
  t.equal((await get(`${server.url}/status`, { host: `localhost:${server.port}` })).status, 200);
  await t.rejects(startStatusServer({ status: () => undefined, host: '0.0.0.0' }), /loopback only/);
  await t.rejects(
    startStatusServer({ status: () => undefined, host: '192.168.1.10' }),
    /loopback only/,
  );
  t.ok(
    isLoopback('127.0.0.2') && isLoopback('::1') && isLoopback('[::1]') && isLoopback('localhost'),
  );
  t.notOk(isLoopback('::') || isLoopback('10.0.0.1') || isLoopback('example.com'));
  const none = await startStatusServer({ status: () => undefined });
  t.teardown(() => none.close());
  t.equal((await get(`${none.url}/status`)).status, 503, 'no status yet: 503');
});

t.test(
  '/metrics with build info: bundle_agent_build_info and the process metrics (prom-client), in the same format',
  async (t) => {
    const metrics = new Metrics(Date.now, { build: { version: '9.8.7' } });
    const server = await startStatusServer({ status: () => emptyStatus('worker-1'), metrics });
    t.teardown(() => server.close());
    const p = parseMetrics(t, (await get(`${server.url}/metrics`)).body);
    t.equal(
      value(p, 'bundle_agent_build_info', {
        version: '9.8.7',
        nodejs: process.version,
        arch: process.arch,
      }),
      1,
      'build info',
    );
    t.equal(p.types.get('bundle_agent_build_info'), 'gauge');
    t.ok(value(p, 'process_resident_memory_bytes')! > 0, 'resident memory');
    t.equal(p.types.get('process_cpu_seconds_total'), 'counter', 'CPU time');
    t.ok(value(p, 'process_open_fds')! > 0, 'open file descriptors');
    t.ok(p.types.has('nodejs_eventloop_lag_seconds'), 'event loop lag');
    t.equal(p.types.get('bundle_agent_phase'), 'gauge', 'the status families are still there');
  },
);

t.test('/livez, /healthz and /readyz: what a DaemonSet probe asks', async (t) => {
  const dir = await tmpdir(t, 'ob-health-');
  const statusFile = join(dir, 'status.json');
  const stateDir = dir;
  const tracker = new StatusTracker(emptyStatus('worker-1'));
  const writer = new StatusFileWriter(statusFile, { command: 'run', heartbeatSeconds: 30 });
  tracker.onChange(writer.sink, { replay: true });
  writer.start();
  t.teardown(() => writer.stop());
  let now = Date.now();
  const health = agentHealth({ statusFile, stateDir, now: () => now });
  const server = await startStatusServer({ status: tracker, health });
  t.teardown(() => server.close());

  for (const path of ['/livez', '/healthz']) {
    const r = await get(`${server.url}${path}`);
    t.equal(r.status, 200, `${path}: 200 while the process answers`);
    t.match(r.body, /^\[\+\]ping ok: .*\nlivez check passed\n$/);
  }
  await writer.stop(); // flushes the first write
  const ready = await get(`${server.url}/readyz`);
  t.equal(ready.status, 200, ready.body);
  t.match(
    ready.body,
    /\[\+\]status-heartbeat ok: beat at .*\n\[\+\]state-dir-writable ok: .*\nreadyz check passed\n$/,
  );

  // the daemon loop stops beating: the file's writer is a process that is gone
  const s = JSON.parse(await (await import('node:fs/promises')).readFile(statusFile, 'utf8'));
  await writeStatusFile(statusFile, { ...s, writer: { ...s.writer, pid: 4_000_000 } });
  const stale = await get(`${server.url}/readyz`);
  t.equal(stale.status, 503, "not ready once the heartbeat's writer is gone");
  t.match(
    stale.body,
    /\[-\]status-heartbeat failed: the daemon loop stopped beating: .*\(stopped\)\n.*readyz check failed\n$/s,
  );
  t.equal(
    (await get(`${server.url}/livez`)).status,
    200,
    'still live: a restart would not bring the beat back any sooner',
  );
  await writeStatusFile(statusFile, s);

  // a state directory the agent cannot write: not ready (probed at most every few seconds)
  await writeFile(join(dir, 'a-file'), '');
  const blocked = agentHealth({ statusFile, stateDir: join(dir, 'a-file'), now: () => now });
  const server2 = await startStatusServer({ status: tracker, health: blocked });
  t.teardown(() => server2.close());
  const r2 = await get(`${server2.url}/readyz`);
  t.equal(r2.status, 503);
  t.match(r2.body, /\[-\]state-dir-writable failed: cannot write .*a-file: ENOTDIR/);
  now += 1;
  t.equal((await get(`${server2.url}/readyz`)).status, 503, 'the cached probe says the same');

  t.equal(
    (await get(`${server.url}/readyz`, { host: 'evil.example' })).status,
    403,
    'a foreign Host is refused on the probes too',
  );
  t.equal(
    (await get(`${server.url}/healthz`, { headers: { 'x-big': 'a'.repeat(20_000) } })).status,
    431,
    'oversized headers: 431',
  );
  t.equal((await get(`${server.url}/readyz`, { method: 'POST' })).status, 405);
  t.equal((await get(`${server.url}/readyz`, { method: 'HEAD' })).body, '', 'HEAD: no body');
  const nf = await get(`${server.url}/nope`);
  t.match(nf.body, /\/livez.*\/readyz/, 'a 404 names the probes');
});

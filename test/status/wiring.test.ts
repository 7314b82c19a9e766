// The wiring the agent does (packages/status/README.md): one StatusTracker feeding the cluster
// reporter, the metrics, the console file and the local endpoint. After a bundle load, all four
// say the same thing.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { parse as parseYaml } from 'yaml';
import {
  ClusterReporter,
  consoleText,
  ConsoleWriter,
  emptyStatus,
  Metrics,
  startStatusServer,
  StatusTracker,
  toResource,
} from '@offline-bundle/status';
import { loadSequence, startFakeApi, tmpdir, writeKubeconfig } from './lib.js';

t.test('contract: one tracker, four outputs', async (t) => {
  const dir = await tmpdir(t);
  const api = await startFakeApi();
  t.teardown(() => api.close());
  const node = 'worker-1';

  const tracker = new StatusTracker(emptyStatus(node));
  tracker.update(() => undefined); // as the agent's statusTracker() does before the sinks below exist
  const metrics = new Metrics();
  const consoleWriter = new ConsoleWriter({ root: dir });
  const reporter = new ClusterReporter({
    node,
    kubeconfig: await writeKubeconfig(path.join(dir, 'kubeconfig'), api.port),
    minIntervalMs: 200,
  });
  metrics.trackReporter(reporter);
  for (const sink of [metrics.sink, consoleWriter.sink, reporter.sink])
    tracker.onChange(sink, { replay: true });
  const server = await startStatusServer({ status: tracker, metrics });
  t.teardown(() => server.close());

  await consoleWriter.idle();
  t.equal(
    await readFile(consoleWriter.path, 'utf8'),
    consoleText('Waiting for a USB stick with an update bundle.'),
    'replay: the console shows the idle line at once',
  );

  for (const s of loadSequence().slice(1))
    tracker.update((x) => Object.assign(x, structuredClone(s)));
  t.equal(await reporter.close(60_000), true, 'the final state reached the cluster'); // the first write loads client-node: slow on a busy machine
  await consoleWriter.idle();

  const final = tracker.current;
  t.equal(final.phase, 'Ready');
  const last = parseYaml(api.statusRequests().at(-1)!.body);
  t.same(
    last,
    JSON.parse(JSON.stringify(toResource(final, node, { generation: 1, heartbeatSeconds: 60 }))),
    'cluster object',
  );
  t.same(JSON.parse(await (await fetch(`${server.url}/status`)).text()), final, '/status');
  const text = await (await fetch(`${server.url}/metrics`)).text();
  t.match(text, /^bundle_agent_phase\{phase="Ready"\} 1$/m, '/metrics phase');
  t.match(
    text,
    new RegExp(`^bundle_agent_cluster_writes_total ${reporter.stats.writes}$`, 'm'),
    '/metrics cluster writes',
  );
  t.equal(await readFile(consoleWriter.path, 'utf8'), consoleText(final.message), 'console file');
});

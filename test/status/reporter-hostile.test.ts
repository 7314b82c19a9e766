// The agent's own reporter against the hostile API stand-in (test/cluster/hostile-api.ts): it
// reads every answer through the same bounded client as `bundle cluster` (cluster-http.ts), so
// an endless answer is cut at 64 MiB, a redirect to another server is refused and an HTML page
// is not taken for the object; each is a failed write with one line saying why, retried later.
import path from 'node:path';
import t from 'tap';
import { ClusterReporter, emptyStatus, type StatusLogger } from '@offline-bundle/status';
import { HostileApi, type Attack } from '../cluster/hostile-api.js';
import { tmpdir, writeKubeconfig } from './lib.js';
import { until } from '../helpers/until.js';

const h = await HostileApi.start();
t.teardown(() => h.close());
const dir = await tmpdir(t, 'ob-reporter-hostile-');
const kubeconfig = await writeKubeconfig(
  path.join(dir, 'kubeconfig'),
  h.port,
  'node-token',
  'http',
);

const cases: [Attack, RegExp][] = [
  ['huge', /sent an answer over 64 MiB/],
  ['redirect', /redirected to http:\/\/127\.0\.0\.1:\d+: refused/],
  ['html-page', /not JSON/],
];

for (const [attack, why] of cases) {
  t.test(
    `reporter, ${attack}: a failed write saying why, nothing buffered past the bound`,
    async (t) => {
      h.attack = attack;
      const lines: string[] = [];
      const log: StatusLogger = {
        info: () => undefined,
        warn: (_e, m) => void lines.push(m),
        error: (_e, m) => void lines.push(m),
      };
      const reporter = new ClusterReporter({
        node: 'worker-1',
        kubeconfig,
        minIntervalMs: 50,
        initialBackoffMs: 10_000,
        maxBackoffMs: 10_000,
        requestTimeoutMs: 20_000,
        log,
      });
      t.teardown(() => reporter.close(100));
      reporter.report(emptyStatus('worker-1'));
      await until('a failure', () => reporter.stats.failures >= 1, { timeoutMs: 60_000 });
      t.match(reporter.stats.lastError, why);
      t.match(lines.join('\n'), why);
      t.equal(h.elsewhereHits, 0, 'the other server was never asked');
    },
  );
}

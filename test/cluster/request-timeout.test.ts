// --request-timeout bounds the writes too: `prepare`'s ConfigMap apply and `upgrade`'s
// ClusterVersion patch against the RBAC stand-in (test/helpers/kube-standin.ts) answering
// every read and never the write: API_TIMEOUT at the option's deadline (31 s: the writes had
// a hard-coded 30 s that cut them as UNREACHABLE), one line.
import t from 'tap';
import { errorCode, type RunResult } from '../builder/lib.js';
import { clusterFixture } from './lib.js';

const { api, b, trust, cluster, allReady } = await clusterFixture(t);
const hangPatch = () => { api.intercept = (r) => (r.method === 'PATCH' ? 'hang' : undefined); };

t.test('stand-in API server that never answers a PATCH: prepare and upgrade end with API_TIMEOUT after --request-timeout', async (t) => {
  const timedOut = (name: string, r: RunResult) => {
    t.equal(r.code, 1, `${name}: exit 1`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, `${name}: one line: ${r.stderr}`);
    t.equal(errorCode(r.stderr), 'API_TIMEOUT', `${name}: ${r.stderr}`);
    t.match(r.stderr, /gave no complete answer within 31 s/, name);
  };
  allReady();
  t.teardown(() => { api.intercept = undefined; });
  hangPatch();
  timedOut('prepare', await cluster(['prepare', b.file, ...trust, '--request-timeout', '31']));
  api.intercept = undefined;
  t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0, 'prepared once PATCH is answered');
  hangPatch();
  timedOut('upgrade', await cluster(['upgrade', b.file, ...trust, '--request-timeout', '31']));
});

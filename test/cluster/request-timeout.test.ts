// --request-timeout bounds the writes too: `prepare`'s ConfigMap apply and `upgrade`'s
// ClusterVersion patch against the RBAC stand-in (test/helpers/kube-standin.ts) answering
// every read and never the write: API_TIMEOUT at the option's deadline (31 s: the writes had
// a hard-coded 30 s that cut them as UNREACHABLE), one line.
// The 31 s is what is asserted, so it is not shortened: the prepare and the upgrade wait it
// out at the same time instead, each against its own stand-in (the upgrade needs a prepared
// cluster, the hung prepare a cluster whose prepare never landed, then lands once answered).
import t from 'tap';
import { errorCode, type RunResult } from '../builder/lib.js';
import { clusterFixture } from './lib.js';

const [forPrepare, forUpgrade] = await Promise.all([clusterFixture(t), clusterFixture(t)]);
const hangPatch = (api: typeof forPrepare.api) => {
  api.intercept = (r) => (r.method === 'PATCH' ? 'hang' : undefined);
};

t.test(
  'stand-in API server that never answers a PATCH: prepare and upgrade end with API_TIMEOUT after --request-timeout',
  async (t) => {
    const timedOut = (name: string, r: RunResult) => {
      t.equal(r.code, 1, `${name}: exit 1`);
      t.equal(r.stderr.trimEnd().split('\n').length, 1, `${name}: one line: ${r.stderr}`);
      t.equal(errorCode(r.stderr), 'API_TIMEOUT', `${name}: ${r.stderr}`);
      t.match(r.stderr, /gave no complete answer within 31 s/, name);
    };
    for (const f of [forPrepare, forUpgrade]) {
      f.allReady();
      t.teardown(() => {
        f.api.intercept = undefined;
      });
    }
    const prepare = (async () => {
      const { b, trust, cluster } = forPrepare;
      hangPatch(forPrepare.api);
      const hung = await cluster(['prepare', b.file, ...trust, '--request-timeout', '31']);
      forPrepare.api.intercept = undefined;
      return { hung, prepared: await cluster(['prepare', b.file, ...trust]).then((x) => x.code) };
    })();
    const upgrade = (async () => {
      const { b, trust, cluster } = forUpgrade;
      const ready = await cluster(['prepare', b.file, ...trust]).then((x) => x.code);
      hangPatch(forUpgrade.api);
      return {
        ready,
        upgraded: await cluster(['upgrade', b.file, ...trust, '--request-timeout', '31']),
      };
    })();
    const { hung, prepared } = await prepare;
    timedOut('prepare', hung);
    t.equal(prepared, 0, 'prepared once PATCH is answered');
    const { ready, upgraded } = await upgrade;
    t.equal(ready, 0, "the upgrade's own cluster prepared first");
    timedOut('upgrade', upgraded);
  },
);

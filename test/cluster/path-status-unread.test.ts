// The update path on `bundle cluster status` and the dashboard's poll is best-effort: a read of
// the upgrade gate or of the admin gates that fails (a 500 here, scripted on the API stand-in
// after the shipped admin RBAC let it through) is said as "path: not read (…)" and the table and
// the page go on; before, it failed the whole command and the page showed "Lost contact".
import t from 'tap';
import path from 'node:path';
import { adminApis } from '@offline-bundle/kube';
import { readDashboard } from '../../builder/dist/dashboard/snapshot.js';
import { signRelease } from '../builder/release-signing.js';
import { clusterFixture, clusterVersion, makeBundle, nodeStatus } from './lib.js';

const { work, api, key, kubeconfig, cluster, allReady } = await clusterFixture(t);
const p = await makeBundle(path.join(work, 'path'), {
  version: '4.16.2',
  upgradeFrom: ['4.15.40'],
  via: [{ version: '4.15.40', upgradeFrom: ['4.14.30'] }],
  sign: async (d, ref) => [await signRelease(key, ref, d)],
});
allReady();
api.statuses = api.nodes.map((n) => nodeStatus(n.metadata.name, 'Ready', p.fileDigest, p.version));
api.clusterVersion = clusterVersion('4.14.30');
t.equal(
  (await cluster(['prepare', p.file, '--key', p.pub])).code,
  0,
  'prepare writes the gate with the path',
);
t.teardown(() => {
  api.intercept = undefined;
});

const gateFails = () => {
  api.intercept = (r) =>
    r.resource === 'upgradegates' && r.verb === 'get' ? { status: 500 } : undefined;
};
const adminGatesFail = () => {
  api.intercept = (r) =>
    r.resource === 'configmaps' && r.name === 'admin-gates' ? { status: 500 } : undefined;
};

t.test(
  'status: the gate read fails with 500: the table and its exit stand, the path is said not read',
  async (t) => {
    gateFails();
    const r = await cluster(['status']);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stdout,
      /^path: not read \(the API server answered 500 to read upgradegates[^\n]*\)$/m,
    );
    const j = await cluster(['status', '--json']);
    t.equal(j.code, 0, j.stderr);
    t.match(JSON.parse(j.stdout).path, { unread: /answered 500/, releases: [] });
  },
);

t.test(
  'status: the admin gates read fails: the path is shown, the acks said not read',
  async (t) => {
    adminGatesFail();
    const r = await cluster(['status']);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stdout,
      /path 4\.14\.30 → 4\.15\.40 → 4\.16\.2: hop 1 of 2 \(4\.14\.30 → 4\.15\.40\) next; admin gates not read \(the API server answered 500/,
    );
  },
);

t.test("the dashboard's poll: a failed path read leaves the rows and says why", async (t) => {
  const apis = await adminApis(kubeconfig);
  gateFails();
  const s = await readDashboard(apis);
  t.equal(s.rows.length, 3, 'the rows are read');
  t.match(s.path, { line: /^path: not read \(the API server answered 500/, releases: [] });
  api.intercept = undefined;
  const ok = await readDashboard(apis);
  t.match(ok.path, {
    line: /hop 1 of 2/,
    releases: [{ version: '4.15.40' }, { version: '4.16.2' }],
  });
});

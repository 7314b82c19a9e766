// The RBAC-enforcing API stand-in refuses what kube-apiserver refuses: unauthenticated callers,
// certificates of another CA, calls no rule allows (with the server's message), writes the
// admission policy forbids; and it lets through what the shipped rules allow.
import t from 'tap';
import { request } from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { readClusterRelease } from '@offline-bundle/status';
import { SHIPPED_RBAC, startKubeStandIn, type KubeApiStandIn } from './kube-standin.js';
import { makeTestCa } from './test-ca.mjs';
import { until } from './until.js';

const dir = await mkdtemp(path.join(os.tmpdir(), 'ob-standin-test-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const api = await startKubeStandIn({ clusterVersion: '4.15.1' });
t.teardown(() => api.close());
await api.writeNodeKubeconfig(path.join(dir, 'w1'), 'w1', { certPaths: 'root' });
const nodeKc = parseYaml(await readFile(path.join(dir, 'w1/var/lib/kubelet/kubeconfig'), 'utf8'));
const pem = await readFile(
  path.join(dir, 'w1/var/lib/kubelet/pki/kubelet-client-current.pem'),
  'utf8',
);

interface Call {
  method?: string;
  path: string;
  body?: string;
  contentType?: string;
  cert?: string;
  key?: string;
  token?: string;
}
function call(api: KubeApiStandIn, c: Call): Promise<{ status: number; body: any }> {
  const u = new URL(c.path, api.url);
  return new Promise((resolve, reject) => {
    const req = request(
      u,
      {
        method: c.method ?? 'GET',
        ca: nodeKc.clusters[0].cluster['certificate-authority-data']
          ? Buffer.from(nodeKc.clusters[0].cluster['certificate-authority-data'], 'base64')
          : undefined,
        ...(c.cert ? { cert: c.cert, key: c.key } : {}),
        headers: {
          ...(c.token ? { Authorization: `Bearer ${c.token}` } : {}),
          ...(c.contentType ? { 'Content-Type': c.contentType } : {}),
        },
      },
      (res) => {
        let b = '';
        res.on('data', (d) => {
          b += d;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: b ? JSON.parse(b) : undefined }),
        );
      },
    );
    req.on('error', reject);
    req.end(c.body);
  });
}
const asNode = (c: Call) => call(api, { cert: pem, key: pem, ...c });
const NBS = '/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses';
const apply = (name: string, sub = '', body?: object) => ({
  method: 'PATCH',
  path: `${NBS}/${name}${sub}?fieldManager=bundle-agent-${name}&force=true`,
  contentType: 'application/apply-patch+yaml',
  body: JSON.stringify(
    body ?? {
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'NodeBundleStatus',
      metadata: { name },
    },
  ),
});

t.test(
  'RHCOS-shaped node kubeconfig: one PEM file for certificate and key, CA inline',
  async (t) => {
    t.same(nodeKc.users[0].user, {
      'client-certificate': path.join(dir, 'w1/var/lib/kubelet/pki/kubelet-client-current.pem'),
      'client-key': path.join(dir, 'w1/var/lib/kubelet/pki/kubelet-client-current.pem'),
    });
    t.match(pem, /BEGIN CERTIFICATE[\s\S]*BEGIN PRIVATE KEY/);
    await api.writeNodeKubeconfig(path.join(dir, 'as-node'), 'w9', {
      server: 'https://api-int.example:6443',
    });
    const kc = parseYaml(
      await readFile(path.join(dir, 'as-node/var/lib/kubelet/kubeconfig'), 'utf8'),
    );
    t.equal(
      kc.users[0].user['client-certificate'],
      '/var/lib/kubelet/pki/kubelet-client-current.pem',
      'paths as on the node by default',
    );
    t.equal(kc.clusters[0].cluster.server, 'https://api-int.example:6443');
  },
);

t.test('authentication: no credentials, a foreign CA or an unknown token is 401', async (t) => {
  t.equal((await call(api, { path: '/api/v1/nodes' })).status, 401);
  t.equal((await call(api, { path: '/api/v1/nodes', token: 'nope' })).status, 401);
  const other = await mkdtemp(path.join(os.tmpdir(), 'ob-other-ca-'));
  t.teardown(() => rm(other, { recursive: true, force: true }));
  const foreign = await makeTestCa(other);
  const r = await call(api, {
    path: '/api/v1/nodes',
    cert: await readFile(foreign.clientCert, 'utf8'),
    key: await readFile(foreign.clientKey, 'utf8'),
  });
  t.same([r.status, r.body.reason], [401, 'Unauthorized']);
  const seen = api.requests.at(-1)!;
  t.same([seen.user, seen.status], ['', 401]);
});

t.test('the node identity: Node authorizer and the shipped rules', async (t) => {
  const nodes = await asNode({ path: '/api/v1/nodes' });
  t.equal(nodes.status, 200, 'nodes list (Node authorizer)');
  t.match(api.requests.at(-1), {
    user: 'system:node:w1',
    groups: ['system:nodes', 'system:authenticated'],
    verb: 'list',
    resource: 'nodes',
  });
  t.equal(
    (await asNode({ path: '/apis/config.openshift.io/v1/clusterversions/version' })).status,
    200,
    'ClusterVersion "version": rbac.yaml\'s rule',
  );
  t.equal(
    (await asNode({ path: '/apis/config.openshift.io/v1/clusterversions/other' })).status,
    403,
    'by that name only',
  );
  // OpenShift's node permissions alone
  await api.loadRbac([]);
  t.teardown(() => api.loadRbac(SHIPPED_RBAC));
  const cv = await asNode({ path: '/apis/config.openshift.io/v1/clusterversions/version' });
  t.equal(cv.status, 403, 'no ClusterVersion rule granted to nodes by OpenShift');
  t.equal(
    cv.body.message,
    'clusterversions.config.openshift.io "version" is forbidden: User "system:node:w1" cannot get resource "clusterversions" in API group "config.openshift.io" at the cluster scope',
  );
  t.match(cv.body, {
    kind: 'Status',
    status: 'Failure',
    reason: 'Forbidden',
    code: 403,
    details: { name: 'version', group: 'config.openshift.io', kind: 'clusterversions' },
  });
  await api.loadRbac(SHIPPED_RBAC);
  t.equal(
    (await asNode(apply('w1', '/status'))).status,
    404,
    'status of a missing object: 404 (the status subresource does not create)',
  );
  t.equal((await asNode(apply('w1'))).status, 201, 'own object created by apply (create + patch)');
  const st = await asNode(
    apply('w1', '/status', {
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'NodeBundleStatus',
      metadata: { name: 'w1' },
      status: { node: 'w1', phase: 'Idle' },
    }),
  );
  t.equal(st.status, 200);
  t.equal(api.get('nodebundlestatuses', 'w1')?.status.phase, 'Idle');
  const other = await asNode(apply('w2'));
  t.equal(other.status, 403, "another node's object: the admission policy refuses");
  t.match(
    other.body.message,
    /ValidatingAdmissionPolicy 'offline-bundle-node-writes-own-status' with binding 'offline-bundle-node-writes-own-status' denied request: system:node:w1 may only write the NodeBundleStatus named after its own node, not w2/,
  );
  // peer discovery (issue #22) reads every node's status.serving: rbac.yaml's offline-bundle:peer-discovery
  t.equal(
    (await asNode({ path: NBS })).status,
    200,
    'nodes list every status (peer discovery), writing only their own',
  );
  const approve = await asNode({
    method: 'POST',
    path: '/apis/bundles.offline-bundle.io/v1alpha1/bundleapprovals',
    contentType: 'application/json',
    body: '{}',
  });
  t.equal(approve.status, 403, 'nodes may not create a BundleApproval');
  t.equal(
    (
      await asNode({
        path: '/api/v1/namespaces/openshift-config-managed/configmaps/mirrored-release-signatures',
      })
    ).status,
    403,
  );
});

t.test(
  'readClusterRelease through client-node: the node is refused, the admin reads',
  async (t) => {
    t.match(
      await readClusterRelease(path.join(dir, 'w1/var/lib/kubelet/kubeconfig')),
      { version: '4.15.1' },
      'the node, with rbac.yaml',
    );
    await api.loadRbac([SHIPPED_RBAC[1]!]);
    t.teardown(() => api.loadRbac(SHIPPED_RBAC));
    await t.rejects(
      readClusterRelease(path.join(dir, 'w1/var/lib/kubelet/kubeconfig')),
      { code: 403 },
      'the node, without it',
    );
    const admin = await api.adminKubeconfig(path.join(dir, 'admin.kubeconfig'));
    t.match(await readClusterRelease(admin), { version: '4.15.1' });
  },
);

t.test('rules: resourceNames, Roles in their namespace, apply-create needs create', async (t) => {
  const token = api.addToken('alice');
  t.equal((await call(api, { path: '/api/v1/nodes', token })).status, 403, 'unbound user');
  // as deploy/admin-rbac.yaml's header says
  api.bind({ kind: 'ClusterRole', name: 'offline-bundle-admin' }, { kind: 'User', name: 'alice' });
  api.bind(
    { kind: 'Role', name: 'offline-bundle-release-signatures' },
    { kind: 'User', name: 'alice' },
    'openshift-config-managed',
  );
  t.equal(
    (await call(api, { path: '/api/v1/nodes', token })).status,
    200,
    'offline-bundle-admin: list nodes',
  );
  t.equal(
    (await call(api, { path: '/apis/config.openshift.io/v1/clusterversions/version', token }))
      .status,
    200,
    'version by name',
  );
  api.put('clusterversions', { metadata: { name: 'other' } });
  t.equal(
    (await call(api, { path: '/apis/config.openshift.io/v1/clusterversions/other', token })).status,
    403,
    'another name',
  );
  t.equal(
    (await call(api, { path: '/apis/config.openshift.io/v1/clusterversions', token })).status,
    403,
    'list with resourceNames: refused',
  );
  const cm = (ns: string) => ({
    method: 'PATCH',
    path: `/api/v1/namespaces/${ns}/configmaps/mirrored-release-signatures?fieldManager=x`,
    contentType: 'application/apply-patch+yaml',
    token,
    body: JSON.stringify({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'mirrored-release-signatures', namespace: ns },
      data: { a: 'b' },
    }),
  });
  t.equal((await call(api, cm('default'))).status, 403, 'the Role holds in its namespace only');
  t.equal(
    (await call(api, cm('openshift-config-managed'))).status,
    201,
    'in its namespace, bound by the RoleBinding',
  );
});

t.test(
  'a watch of the approvals: set again unchanged emits nothing (as the API server), changed MODIFIED, gone DELETED',
  async (t) => {
    const AP = '/apis/bundles.offline-bundle.io/v1alpha1/bundleapprovals';
    const approval = (version: string) => ({
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'BundleApproval',
      metadata: { name: 'sha256-ab' },
      spec: { manifestDigest: `sha256:${'ab'.repeat(32)}`, version },
    });
    api.approvals = [approval('1')];
    const from = (await asNode({ path: AP })).body.metadata.resourceVersion as string;
    const events: { type: string; rv: string; version?: string }[] = [];
    const u = new URL(`${AP}?watch=true&resourceVersion=${from}`, api.url);
    const req = request(
      u,
      {
        ca: Buffer.from(nodeKc.clusters[0].cluster['certificate-authority-data'], 'base64'),
        cert: pem,
        key: pem,
      },
      (res) => {
        let buf = '';
        res.on('data', (d) => {
          buf += d;
          for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
            const e = JSON.parse(buf.slice(0, nl));
            buf = buf.slice(nl + 1);
            events.push({
              type: e.type,
              rv: e.object.metadata.resourceVersion,
              version: e.object.spec?.version,
            });
          }
        });
      },
    );
    req.on('error', () => undefined);
    req.end();
    t.teardown(() => req.destroy());
    await until('the watch open', () => api.openWatches > 0);
    const rvBefore = api.approvals[0]!.metadata.resourceVersion;
    const stored = api.approvals;
    api.approvals = stored;
    api.approvals = [approval('1')];
    await new Promise((r) => setTimeout(r, 200));
    t.same(events, [], 'the same object, or an equal one, set again: no event');
    t.equal(api.approvals[0]!.metadata.resourceVersion, rvBefore, 'and no new resourceVersion');
    api.approvals = [approval('2')];
    api.approvals = [];
    await until('two events', () => events.length >= 2);
    t.match(events, [{ type: 'MODIFIED', version: '2' }, { type: 'DELETED' }]);
    t.ok(Number(events[1]!.rv) > Number(events[0]!.rv), 'each a new resourceVersion');
  },
);

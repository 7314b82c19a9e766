// `bundle cluster rbac`: the per-node RBAC fallback for clusters without ValidatingAdmissionPolicy.
import t from 'tap';
import path from 'node:path';
import { writeFile } from 'node:fs/promises';
import { errorCode, bundle } from '../builder/lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import {
  ART_REPO,
  RELEASE_REPO,
  clusterFixture,
  clusterVersion,
  makeBundle,
  nodeStatus,
  node,
} from './lib.js';

const { work, api, kubeconfig, key, keyring, b, trust, cluster, allReady } =
  await clusterFixture(t);
const cm = 'openshift-config-managed/mirrored-release-signatures';
void [
  api,
  b,
  trust,
  clusterVersion,
  path,
  writeFile,
  bundle,
  releaseKey,
  signRelease,
  ART_REPO,
  RELEASE_REPO,
  makeBundle,
  nodeStatus,
  node,
  work,
  kubeconfig,
  key,
  keyring,
  cm,
];

t.test('rbac: the fallback without ValidatingAdmissionPolicy', async (t) => {
  const { parseAllDocuments } = await import('yaml');
  const { compileSchema, crdSchema, loadCrd } = await import('../status/lib.js');
  allReady();
  const r = await cluster(['rbac']);
  t.equal(r.code, 0, r.stderr);
  const docs = parseAllDocuments(r.stdout).map((d) => d.toJS());
  t.same(
    docs.filter((d) => d.kind === 'NodeBundleStatus').map((d) => d.metadata.name),
    ['master-0', 'worker-0', 'worker-1'],
    'one empty object per Node of the cluster',
  );
  const validate = compileSchema(crdSchema(await loadCrd()));
  for (const d of docs.filter((x) => x.kind === 'NodeBundleStatus'))
    t.ok(validate(d), `${d.metadata.name} fits the CRD: ${JSON.stringify(validate.errors)}`);
  const role = docs.find((d) => d.kind === 'ClusterRole' && d.metadata.name.endsWith(':worker-0'));
  t.same(
    role.rules,
    [
      {
        apiGroups: ['bundles.offline-bundle.io'],
        resources: ['nodebundlestatuses'],
        resourceNames: ['worker-0'],
        verbs: ['get', 'patch'],
      },
      {
        apiGroups: ['bundles.offline-bundle.io'],
        resources: ['nodebundlestatuses/status'],
        resourceNames: ['worker-0'],
        verbs: ['get', 'patch'],
      },
      {
        apiGroups: ['config.openshift.io'],
        resources: ['clusterversions'],
        resourceNames: ['version'],
        verbs: ['get'],
      },
      {
        apiGroups: ['bundles.offline-bundle.io'],
        resources: ['bundleapprovals'],
        verbs: ['get', 'list', 'watch'],
      },
      {
        apiGroups: ['bundles.offline-bundle.io'],
        resources: ['nodebundlestatuses'],
        verbs: ['list', 'watch'],
      },
      { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
    ],
    'its own object only, no create; the running version; peer discovery, read-only',
  );
  const binding = docs.find(
    (d) => d.kind === 'ClusterRoleBinding' && d.metadata.name.endsWith(':worker-0'),
  );
  t.same(binding.subjects, [
    { apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'system:node:worker-0' },
  ]);
  const sa = JSON.parse(
    (await cluster(['rbac', '--nodes', 'edge-1', '--identity', 'serviceaccount', '--json'])).stdout,
  );
  t.same(sa.items[2].subjects, [
    { kind: 'ServiceAccount', name: 'bundle-agent-edge-1', namespace: 'offline-bundle' },
  ]);
  const bad = await cluster(['rbac', '--nodes', 'Not_A_Node']);
  t.equal(errorCode(bad.stderr), 'INVALID_NODE_NAME');
});

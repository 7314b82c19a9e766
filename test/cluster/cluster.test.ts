// `bundle cluster status|prepare|upgrade` against the stand-in API server (a contract test:
// test/cluster/apiserver.ts keeps the semantics of the real one the commands rely on). The real
// CLI runs; bundles carry release signatures made with openpgp.js in the OpenShift format.
import t from 'tap';
import path from 'node:path';
import { tmpdir } from '../status/lib.js';
import { bundle, errorCode } from '../builder/lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import { StandInApi } from './apiserver.js';
import { ART_REPO, RELEASE_REPO, clusterVersion, makeBundle, node, nodeStatus } from './lib.js';
import { writeFile } from 'node:fs/promises';

const work = await tmpdir(t, 'ob-cluster-');
const api = await StandInApi.start();
t.teardown(() => api.close());
const kubeconfig = await api.kubeconfig(path.join(work, 'kubeconfig'));
const key = await releaseKey();
const keyring = path.join(work, 'release.asc');
await writeFile(keyring, key.armored);
const b = await makeBundle(path.join(work, 'b1'), { version: '4.15.1', upgradeFrom: ['4.15.0'], sign: async (d, ref) => [await signRelease(key, ref, d)] });
const cm = 'openshift-config-managed/mirrored-release-signatures';

const cluster = (args: string[]) => bundle(['cluster', ...args, '--kubeconfig', kubeconfig]);
const trust = ['--key', b.pub];

function allReady() {
  api.nodes = ['master-0', 'worker-0', 'worker-1'].map((n) => node(n, n.startsWith('master') ? { 'node-role.kubernetes.io/master': '' } : { 'node-role.kubernetes.io/worker': '' }));
  api.statuses = api.nodes.map((n) => nodeStatus(n.metadata.name, 'Ready', b.fileDigest, b.version));
  api.clusterVersion = clusterVersion('4.15.0');
  api.pods = [];
  api.machineAutoscalers = undefined;
  api.clusterAutoscalers = undefined;
  api.deny.clear();
  api.configMaps.clear();
}

t.test('status', async (t) => {
  allReady();
  t.test('every node Ready for the same digest: exit 0', async (t) => {
    const r = await cluster(['status', '--json']);
    t.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    t.equal(j.ready, true);
    t.equal(j.digest, b.fileDigest);
    t.same(j.nodes.map((n: { node: string; phase: string; pinned: string; heartbeat: string }) => [n.node, n.phase, n.pinned, n.heartbeat]), [
      ['master-0', 'Ready', 'True', '2026-11-23T10:00:00.000Z'], ['worker-0', 'Ready', 'True', '2026-11-23T10:00:00.000Z'], ['worker-1', 'Ready', 'True', '2026-11-23T10:00:00.000Z'],
    ]);
    const text = await cluster(['status']);
    t.equal(text.code, 0);
    t.match(text.stdout, /^NODE\s+NODE READY\s+PHASE\s+VERSION\s+DIGEST\s+PINNED\s+LAST HEARTBEAT/);
    t.match(text.stdout, `3 of 3 nodes Ready for bundle ${b.fileDigest}`);
  });
  t.test('a node that never reported shows up (from the Node list): exit 1', async (t) => {
    allReady();
    api.nodes.push(node('worker-2'));
    const r = await cluster(['status', '--json']);
    t.equal(r.code, 1);
    const j = JSON.parse(r.stdout);
    t.equal(j.ready, false, 'one JSON document, ready false');
    t.match(j.nodes.find((n: { node: string }) => n.node === 'worker-2'), { phase: 'NotReported', ready: false });
    t.match(j.summary, /3 of 4 nodes Ready .*worker-2 never reported/);
    t.equal(errorCode(r.stderr), 'NODES_NOT_READY');
    const sel = await cluster(['status', '-l', 'node-role.kubernetes.io/master']);
    t.equal(sel.code, 0, `a selector leaving it out: exit 0 (${sel.stderr})`);
  });
  t.test('a node Failed', async (t) => {
    allReady();
    api.statuses[1] = nodeStatus('worker-0', 'Failed', b.fileDigest, b.version, { reason: 'PullFailed' });
    const r = await cluster(['status']);
    t.equal(r.code, 1);
    t.match(r.stdout, /worker-0\s+True\s+Failed \(PullFailed\)/);
    t.match(r.stderr, /bundle: NODES_NOT_READY: 2 of 3 nodes Ready .*worker-0 Failed \(PullFailed\)/);
  });
  t.test('a node Ready for another bundle (wrong digest)', async (t) => {
    allReady();
    const other = 'sha256:' + 'ee'.repeat(32);
    api.statuses[2] = nodeStatus('worker-1', 'Ready', other, '4.15.0');
    const r = await cluster(['status', '--json', '--bundle-digest', b.fileDigest]);
    t.equal(r.code, 1);
    t.match(JSON.parse(r.stdout).summary, `worker-1 Ready for ${other} (4.15.0), not this one`);
  });
  t.test('RBAC refuses listing nodes: FORBIDDEN', async (t) => {
    allReady();
    api.deny.add('list nodes');
    const r = await cluster(['status']);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'FORBIDDEN', r.stderr);
    t.match(r.stderr, /admin-rbac\.yaml/);
  });
  t.test('an unreachable API server: UNREACHABLE; a missing kubeconfig: KUBECONFIG', async (t) => {
    const dead = path.join(work, 'dead-kubeconfig');
    await writeFile(dead, (await import('node:fs')).readFileSync(kubeconfig, 'utf8').replace(`127.0.0.1:${api.port}`, '127.0.0.1:1'));
    const r = await bundle(['cluster', 'status', '--kubeconfig', dead]);
    t.equal(errorCode(r.stderr), 'UNREACHABLE', r.stderr);
    const k = await bundle(['cluster', 'status', '--kubeconfig', path.join(work, 'nope')]);
    t.equal(errorCode(k.stderr), 'KUBECONFIG', k.stderr);
  });
});

t.test('prepare', async (t) => {
  t.test('applies the signature ConfigMap exactly as oc-mirror lays it out, by server-side apply', async (t) => {
    allReady();
    const r = await cluster(['prepare', b.file, ...trust, '--release-keyring', keyring]);
    t.equal(r.code, 0, r.stderr);
    const obj = api.configMap('openshift-config-managed', 'mirrored-release-signatures');
    const sig = await signatureBytes();
    t.same(obj, {
      apiVersion: 'v1', kind: 'ConfigMap',
      metadata: { name: 'mirrored-release-signatures', namespace: 'openshift-config-managed', labels: { 'release.openshift.io/verification-signatures': '' }, annotations: { createdBy: 'offline-bundle' } },
      binaryData: { [`sha256-${b.releaseDigest.slice(7)}-1`]: sig.toString('base64') },
    });
    const apply = api.requests.find((q) => q.method === 'PATCH' && q.path.endsWith('/configmaps/mirrored-release-signatures'))!;
    t.equal(apply.contentType, 'application/apply-patch+yaml');
    t.equal(apply.query.get('fieldManager'), `offline-bundle-sha256-${b.releaseDigest.slice(7)}`);
    t.match(r.stdout, `applied ConfigMap ${cm}: sha256-${b.releaseDigest.slice(7)}-1`);
    t.match(r.stdout, 'version graph: the cluster runs 4.15.0; 4.15.1 accepts 4.15.0');
    const again = await cluster(['prepare', b.file, ...trust]);
    t.match(again.stdout, `${cm} already holds`, 'a second run changes nothing');
  });
  t.test('another release\'s keys stay (one field manager per release)', async (t) => {
    const b2 = await makeBundle(path.join(work, 'b2'), { version: '4.15.2', upgradeFrom: ['4.15.0'], sign: async (d, ref) => [await signRelease(key, ref, d), await signRelease(key, `${RELEASE_REPO}@${d}`, d)] });
    const r = await cluster(['prepare', b2.file, '--key', b2.pub, '--json']);
    t.equal(r.code, 0, r.stderr);
    t.same(Object.keys(api.configMap('openshift-config-managed', 'mirrored-release-signatures')!.binaryData).sort(), [
      `sha256-${b.releaseDigest.slice(7)}-1`, `sha256-${b2.releaseDigest.slice(7)}-1`, `sha256-${b2.releaseDigest.slice(7)}-2`,
    ].sort());
  });
  t.test('warns about Always pods using bundle images and about autoscaling', async (t) => {
    allReady();
    api.pods = [
      { metadata: { namespace: 'openshift-marketplace', name: 'catalog-abc', ownerReferences: [{ kind: 'Deployment', name: 'catalog', controller: true }] }, spec: { containers: [{ name: 'c', image: `${ART_REPO}@${b.payloadDigest}`, imagePullPolicy: 'Always' }] } },
      { metadata: { namespace: 'app', name: 'fine' }, spec: { containers: [{ name: 'c', image: `${ART_REPO}@${b.payloadDigest}`, imagePullPolicy: 'IfNotPresent' }] } },
      { metadata: { namespace: 'app', name: 'other' }, spec: { containers: [{ name: 'c', image: 'docker.io/library/busybox:1', imagePullPolicy: 'Always' }] } },
    ];
    api.machineAutoscalers = [{ metadata: { namespace: 'openshift-machine-api', name: 'worker-us-east-1a' } }];
    api.clusterAutoscalers = [{ metadata: { name: 'default' }, spec: { resourceLimits: { maxNodesTotal: 10 } } }];
    const r = await cluster(['prepare', b.file, ...trust, '--json']);
    t.equal(r.code, 0, r.stderr);
    const w = JSON.parse(r.stdout).warnings as { kind: string; object: string }[];
    t.same(w.map((x) => [x.kind, x.object]), [
      ['Autoscaling', 'openshift-machine-api/MachineAutoscaler/worker-us-east-1a'],
      ['Autoscaling', '/ClusterAutoscaler/default'],
      ['PullAlways', 'openshift-marketplace/Deployment/catalog'],
    ]);
    const text = await cluster(['prepare', b.file, ...trust]);
    t.match(text.stdout, /warning: PullAlways: openshift-marketplace\/Deployment\/catalog: pulls .* imagePullPolicy: Always/);
  });
  t.test('a bad signature is refused before anything is applied', async (t) => {
    allReady();
    const other = await releaseKey('Not The Release Key');
    const wrong = await makeBundle(path.join(work, 'wrong'), { version: '4.15.1', upgradeFrom: ['4.15.0'], sign: async (_d, ref) => [await signRelease(key, ref, 'sha256:' + '12'.repeat(32))] });
    const r = await cluster(['prepare', wrong.file, '--key', wrong.pub]);
    t.equal(errorCode(r.stderr), 'BAD_RELEASE_SIGNATURE', r.stderr);
    const untrusted = await makeBundle(path.join(work, 'untrusted'), { version: '4.15.1', upgradeFrom: ['4.15.0'], sign: async (d, ref) => [await signRelease(other, ref, d)] });
    const u = await cluster(['prepare', untrusted.file, '--key', untrusted.pub, '--release-keyring', keyring]);
    t.equal(errorCode(u.stderr), 'UNTRUSTED_RELEASE_SIGNATURE', u.stderr);
    t.equal(api.configMaps.size, 0, 'nothing applied');
    const unsigned = await makeBundle(path.join(work, 'unsigned'), { version: '4.15.1', upgradeFrom: ['4.15.0'] });
    const n = await cluster(['prepare', unsigned.file, '--key', unsigned.pub]);
    t.equal(errorCode(n.stderr), 'NO_RELEASE_SIGNATURES', n.stderr);
    const badKey = await cluster(['prepare', b.file, '--key', wrong.pub]);
    t.equal(errorCode(badKey.stderr), 'UNTRUSTED_KEY', 'the bundle itself must be trusted');
  });
  t.test('the running version is not an accepted source', async (t) => {
    allReady();
    api.clusterVersion = clusterVersion('4.14.9');
    const r = await cluster(['prepare', b.file, ...trust]);
    t.equal(errorCode(r.stderr), 'NOT_AN_UPGRADE_SOURCE', r.stderr);
    api.clusterVersion = undefined;
    const k = await cluster(['prepare', b.file, ...trust]);
    t.equal(errorCode(k.stderr), 'NOT_OPENSHIFT', k.stderr);
  });
  t.test('RBAC refuses the apply: FORBIDDEN', async (t) => {
    allReady();
    api.deny.add('patch configmaps');
    const r = await cluster(['prepare', b.file, ...trust]);
    t.equal(errorCode(r.stderr), 'FORBIDDEN', r.stderr);
  });
});

t.test('upgrade', async (t) => {
  const image = `${RELEASE_REPO}@${b.releaseDigest}`;
  t.test('refused before prepare, and while a node is not Ready', async (t) => {
    allReady();
    const r = await cluster(['upgrade', b.file, ...trust]);
    t.equal(errorCode(r.stderr), 'NOT_PREPARED', r.stderr);
    t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0);
    api.statuses[0] = nodeStatus('master-0', 'Preloading', b.fileDigest, b.version);
    const n = await cluster(['upgrade', b.file, ...trust]);
    t.equal(errorCode(n.stderr), 'NODES_NOT_READY', n.stderr);
    t.notOk(api.requests.some((q) => q.method === 'PATCH' && q.path.includes('clusterversions')), 'ClusterVersion untouched');
  });
  t.test('--dry-run prints the change and the oc command, changes nothing', async (t) => {
    allReady();
    t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0);
    const before = api.requests.length;
    const r = await cluster(['upgrade', b.file, ...trust, '--dry-run']);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, `equivalent: oc adm upgrade --allow-explicit-upgrade --to-image=${image}`);
    t.match(r.stdout, 'would set ClusterVersion/version spec.desiredUpdate');
    t.notOk(api.requests.slice(before).some((q) => q.method !== 'GET'), 'only reads');
  });
  t.test('sets desiredUpdate to the release image by digest, never force', async (t) => {
    allReady();
    t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0);
    const r = await cluster(['upgrade', b.file, '--digest', b.fileDigest, '--json']);
    t.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    t.equal(j.ocCommand, `oc adm upgrade --allow-explicit-upgrade --to-image=${image}`);
    t.same(api.clusterVersion!.spec.desiredUpdate, { version: '4.15.1', image, force: false });
    t.equal(api.clusterVersion!.spec.clusterID, 'c0ffee', 'the rest of the spec stays');
    const patch = api.requests.find((q) => q.method === 'PATCH' && q.path.includes('clusterversions'))!;
    t.equal(patch.contentType, 'application/merge-patch+json');
    const again = await cluster(['upgrade', b.file, ...trust]);
    t.match(again.stdout, `ClusterVersion/version already asks for ${image}`);
  });
});

async function signatureBytes(): Promise<Buffer> {
  const { readReleaseSignatures, loadTrust } = await import('@offline-bundle/format');
  return (await readReleaseSignatures(b.file, await loadTrust([b.pub]))).signatures[0]!.bytes;
}

// `bundle cluster status` against the stand-in API server (contract test: test/cluster/apiserver.ts):
// every Node listed, a node missing, Failed, Ready for another digest, a selector, RBAC denial, no server.
import t from 'tap';
import path from 'node:path';
import { writeFile } from 'node:fs/promises';
import { errorCode, bundle } from '../builder/lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import { ART_REPO, RELEASE_REPO, clusterFixture, clusterVersion, makeBundle, nodeStatus, node } from './lib.js';

const { work, api, kubeconfig, key, keyring, b, trust, cluster, allReady } = await clusterFixture(t);
const cm = 'openshift-config-managed/mirrored-release-signatures';
void [api, b, trust, clusterVersion, path, writeFile, bundle, releaseKey, signRelease, ART_REPO, RELEASE_REPO, makeBundle, nodeStatus, node, work, kubeconfig, key, keyring, cm];

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
    api.put('nodes', node('worker-2'));
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
    api.put('nodebundlestatuses', nodeStatus('worker-0', 'Failed', b.fileDigest, b.version, { reason: 'PullFailed' }));
    const r = await cluster(['status']);
    t.equal(r.code, 1);
    t.match(r.stdout, /worker-0\s+True\s+Failed \(PullFailed\)/);
    t.match(r.stderr, /bundle: NODES_NOT_READY: 2 of 3 nodes Ready .*worker-0 Failed \(PullFailed\)/);
  });
  t.test('a node Ready for another bundle (wrong digest)', async (t) => {
    allReady();
    const other = 'sha256:' + 'ee'.repeat(32);
    api.put('nodebundlestatuses', nodeStatus('worker-1', 'Ready', other, '4.15.0'));
    const r = await cluster(['status', '--json', '--bundle-digest', b.fileDigest]);
    t.equal(r.code, 1);
    t.match(JSON.parse(r.stdout).summary, `worker-1 Ready for ${other} (4.15.0), not this one`);
  });
  t.test('RBAC refuses listing nodes (a user with no binding): FORBIDDEN', async (t) => {
    allReady();
    const kc = await api.tokenKubeconfig(path.join(work, 'unbound.kubeconfig'), api.addToken('mallory'));
    const r = await bundle(['cluster', 'status', '--kubeconfig', kc]);
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


t.test('rollup: a node created after the running release completed, without it, is missing it', async (t) => {
  const { rollup } = await import('@offline-bundle/cluster');
  const at = (name: string, created?: string) => ({ metadata: { name, ...(created ? { creationTimestamp: created } : {}) }, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
  const st = (name: string, history: { version: string; state: string }[]) => ({ metadata: { name }, status: { phase: 'Idle', history } });
  const running = { version: '4.15.1', completionTime: '2026-11-01T01:00:00Z' };
  const nodes = [at('old', '2026-10-01T00:00:00Z'), at('new', '2026-11-20T00:00:00Z'), at('loaded', '2026-11-20T00:00:00Z'), at('seen', '2026-11-20T00:00:00Z'), at('unknown')];
  const statuses = [st('loaded', [{ version: '4.15.1', state: 'complete' }]), st('seen', [{ version: '4.15.1', state: 'running' }])];
  const r = rollup(nodes, statuses, undefined, running);
  t.same(r.rows.filter((x) => x.missingRunning).map((x) => x.node).sort(), ['new', 'seen'], 'joined later and never loaded it (seeing it run is not holding it)');
  t.match(r.summary, 'new is missing the running release 4.15.1: load the 4.15.1 bundle on it');
  t.notOk(rollup(nodes, statuses, undefined, { version: '4.15.1' }).rows.some((x) => x.missingRunning), 'no completion time (or not OpenShift): nothing claimed');
});

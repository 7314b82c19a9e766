// `bundle cluster upgrade` against the stand-in API server (contract test: test/cluster/apiserver.ts):
// refused before prepare and while a node is not Ready, --dry-run, desiredUpdate by digest.
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

t.test('upgrade', async (t) => {
  const image = `${RELEASE_REPO}@${b.releaseDigest}`;
  t.test('refused before prepare, and while a node is not Ready', async (t) => {
    allReady();
    const r = await cluster(['upgrade', b.file, ...trust]);
    t.equal(errorCode(r.stderr), 'NOT_PREPARED', r.stderr);
    t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0);
    api.put('nodebundlestatuses', nodeStatus('master-0', 'Preloading', b.fileDigest, b.version));
    const n = await cluster(['upgrade', b.file, ...trust]);
    t.equal(errorCode(n.stderr), 'NODES_NOT_READY', n.stderr);
    t.notOk(
      api.requests.some((q) => q.method === 'PATCH' && q.path.includes('clusterversions')),
      'ClusterVersion untouched',
    );
  });
  t.test(
    "refused while a Ready node's agent is stale or its Node is NotReady (the gate counts neither)",
    async (t) => {
      allReady();
      t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0);
      const quiet = nodeStatus('worker-0', 'Ready', b.fileDigest, b.version);
      quiet.status.updatedAt = '2020-01-01T00:00:00.000Z';
      api.put('nodebundlestatuses', quiet);
      const s = await cluster(['upgrade', b.file, ...trust]);
      t.equal(errorCode(s.stderr), 'NODES_NOT_READY', s.stderr);
      t.match(s.stderr, /worker-0's agent last reported \d+ days ago \(stale/);
      allReady();
      api.put('nodes', {
        ...node('worker-1'),
        status: { conditions: [{ type: 'Ready', status: 'False' }] },
      });
      const n = await cluster(['upgrade', b.file, ...trust]);
      t.equal(errorCode(n.stderr), 'NODES_NOT_READY', n.stderr);
      t.match(n.stderr, /worker-1's Node is not Ready/);
      t.notOk(
        api.requests.some((q) => q.method === 'PATCH' && q.path.includes('clusterversions')),
        'ClusterVersion untouched',
      );
    },
  );
  t.test('--dry-run names every blocker at once (a real run stops at the first)', async (t) => {
    allReady();
    api.put('nodebundlestatuses', nodeStatus('worker-0', 'Preloading', b.fileDigest, b.version));
    api.clusterVersion = clusterVersion('4.14.9');
    const r = await cluster(['upgrade', b.file, ...trust, '--dry-run']);
    t.equal(errorCode(r.stderr), 'NODES_NOT_READY', r.stderr);
    t.match(
      r.stderr,
      /3 things stand in the way: NODES_NOT_READY: .*worker-0 Preloading.*; NOT_PREPARED: .*; NOT_AN_UPGRADE_SOURCE: the cluster runs 4\.14\.9/,
    );
    const real = await cluster(['upgrade', b.file, ...trust]);
    t.notMatch(real.stderr, /things stand in the way/, 'the real run: the first alone');
  });
  t.test('--dry-run prints the change and the oc command, changes nothing', async (t) => {
    allReady();
    t.equal(await cluster(['prepare', b.file, ...trust]).then((x) => x.code), 0);
    const before = api.requests.length;
    const r = await cluster(['upgrade', b.file, ...trust, '--dry-run']);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, `equivalent: oc adm upgrade --allow-explicit-upgrade --to-image=${image}`);
    t.match(r.stdout, 'would set ClusterVersion/version spec.desiredUpdate');
    t.notOk(
      api.requests.slice(before).some((q) => q.method !== 'GET'),
      'only reads',
    );
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
    const patch = api.requests.find(
      (q) => q.method === 'PATCH' && q.path.includes('clusterversions'),
    )!;
    t.equal(patch.contentType, 'application/merge-patch+json');
    const again = await cluster(['upgrade', b.file, ...trust]);
    t.match(again.stdout, `ClusterVersion/version already asks for ${image}`);
  });
});

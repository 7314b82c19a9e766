// The upgrade gate, enforced by the cluster: deploy/upgrade-gate.yaml's ValidatingAdmissionPolicy
// evaluated by the API stand-in as the API server does (its CEL by a CEL library, its UpgradeGate
// parameter found through the binding's paramRef), against a client that is not ours: a
// cluster-admin's merge patch of ClusterVersion, as `oc adm upgrade` sends it.
import t from 'tap';
import { clusterFixture, nodeStatus, node, ocPatchClusterVersion, RELEASE_REPO } from './lib.js';

const { api, b, trust, cluster, allReady } = await clusterFixture(t);
/** What `oc adm upgrade` (or `oc annotate`) sends: a merge patch of ClusterVersion "version" by a cluster-admin. */
const oc = (patch: unknown) => ocPatchClusterVersion(api, patch);

// oc adm upgrade --to replaces desiredUpdate whole: in a merge patch, the other field goes (null)
const byVersion = { spec: { desiredUpdate: { version: '4.15.1', image: null } } };

function reset(): void {
  allReady();
  api.delete('upgradegates', 'cluster');
}

t.test(
  'no gate written yet: a move to a new release is refused; every other change passes (--clear, channel, the waiver)',
  async (t) => {
    reset();
    const r = await oc(byVersion);
    t.equal(r.status, 403);
    t.match(
      r.message,
      /ValidatingAdmissionPolicy 'offline-bundle-upgrade-gate' .*no upgrade gate has been written yet .*bundle cluster status --update-gate/,
    );
    t.equal(
      (await oc({ spec: { channel: 'stable-4.16' } })).status,
      200,
      'a change that leaves desiredUpdate alone',
    );
    t.equal((await oc({ spec: { desiredUpdate: null } })).status, 200, 'oc adm upgrade --clear');
    t.equal(
      (await oc({ spec: { desiredUpdate: { acceptRisks: [] } } })).status,
      200,
      'a desiredUpdate with no target',
    );
    t.equal(
      (await oc({ metadata: { annotations: { 'offline-bundle.io/skip-upgrade-gate': '4.15.1' } } }))
        .status,
      200,
      'the waiver itself',
    );
    t.equal((await oc(byVersion)).status, 200, 'and what it waives');
  },
);

t.test(
  'a node not ready: status --update-gate closes the gate, oc adm upgrade is refused with the reason, the waiver opens it for its target only',
  async (t) => {
    reset();
    api.put('nodebundlestatuses', nodeStatus('worker-0', 'Preloading', b.fileDigest, b.version));
    const s = await cluster(['status', '--update-gate']);
    t.equal(s.code, 1);
    t.match(s.stdout, /upgrade gate: closed/);
    t.match(api.get('upgradegates', 'cluster')!.spec, {
      ready: false,
      version: '4.15.1',
      checkedBy: 'bundle cluster status',
    });
    const r = await oc(byVersion);
    t.equal(r.status, 403);
    t.match(
      r.message,
      /the nodes are not ready to upgrade to 4\.15\.1 without a registry: 2 of 3 nodes Ready .*worker-0 Preloading.*skip-upgrade-gate=4\.15\.1/,
    );
    t.equal(api.clusterVersion!.spec.desiredUpdate.version, '4.15.0', 'ClusterVersion unchanged');
    t.equal(
      (await oc({ metadata: { annotations: { 'offline-bundle.io/skip-upgrade-gate': '4.15.2' } } }))
        .status,
      200,
      'annotating is no update of desiredUpdate',
    );
    t.equal((await oc(byVersion)).status, 403, 'a waiver for another target does not open it');
    t.equal(
      (await oc({ metadata: { annotations: { 'offline-bundle.io/skip-upgrade-gate': '4.15.1' } } }))
        .status,
      200,
    );
    t.equal((await oc(byVersion)).status, 200, 'waived for 4.15.1');
    t.equal(
      (await oc({ spec: { desiredUpdate: { version: '4.15.0', image: null } } })).status,
      200,
      'back to the release it ran (status.history): never gated',
    );
  },
);

t.test('a stale agent or a NotReady Node closes it as well', async (t) => {
  reset();
  const quiet = nodeStatus('worker-1', 'Ready', b.fileDigest, b.version);
  quiet.status.updatedAt = '2020-01-01T00:00:00.000Z';
  api.put('nodebundlestatuses', quiet);
  t.equal((await cluster(['status', '--update-gate'])).code, 1);
  t.match((await oc(byVersion)).message, /worker-1's agent last reported .* \(stale/);
  reset();
  api.put('nodes', {
    ...node('master-0', { 'node-role.kubernetes.io/master': '' }),
    status: { conditions: [{ type: 'Ready', status: 'False' }] },
  });
  t.equal((await cluster(['status', '--update-gate'])).code, 1);
  t.match((await oc(byVersion)).message, /master-0's Node is not Ready/);
});

t.test(
  'every node ready: open by version from status; by image only once prepare (which read the bundle) wrote it',
  async (t) => {
    reset();
    const s = await cluster(['status', '--update-gate', '--json']);
    t.equal(s.code, 0, s.stderr);
    t.match(JSON.parse(s.stdout).gate, {
      written: true,
      spec: { ready: true, version: '4.15.1', bundleDigest: b.fileDigest },
    });
    const img = `${RELEASE_REPO}@${b.releaseDigest}`;
    const byImage = { spec: { desiredUpdate: { image: img, version: null } } };
    const refused = await oc(byImage);
    t.equal(refused.status, 403, 'oc adm upgrade --to-image: the gate does not know the image yet');
    t.match(
      refused.message,
      /knows 4\.15\.1 but not its release image: run "bundle cluster prepare BUNDLE" first/,
    );
    const p = await cluster(['prepare', b.file, ...trust]);
    t.equal(p.code, 0, p.stderr);
    t.match(p.stdout, `upgrade gate: open for 4.15.1 (${img})`);
    t.equal(
      (await cluster(['status', '--update-gate'])).code,
      0,
      'status again keeps the image prepare wrote',
    );
    t.equal(api.get('upgradegates', 'cluster')!.spec.image, img);
    t.equal((await oc(byImage)).status, 200, 'oc adm upgrade --to-image passes');
    const other = await oc({
      spec: {
        desiredUpdate: {
          image: img.replace(/@sha256:.*/, `@sha256:${'1'.repeat(64)}`),
          version: null,
        },
      },
    });
    t.equal(other.status, 403, 'another image does not');
    t.match(other.message, `the nodes are ready for ${img}, not for sha256:${'1'.repeat(64)}`);
    t.equal(
      (
        await oc({
          spec: {
            desiredUpdate: {
              image: img.replace(/^[^@]*/, 'mirror.example.com/ocp/release'),
              version: null,
            },
          },
        })
      ).status,
      200,
      "the same digest under a mirror's name (oc adm upgrade --to copies the graph's pullspec)",
    );
    const multi = await oc({
      spec: { desiredUpdate: { version: '4.15.1', image: null, architecture: 'Multi' } },
    });
    t.equal(multi.status, 403, 'a move to another architecture');
    t.match(multi.message, /not a move to architecture Multi/);
  },
);

t.test(
  'a ClusterVersion with no desiredUpdate yet (a fresh install): the first move is gated as any',
  async (t) => {
    reset();
    api.clusterVersion = {
      ...api.clusterVersion!,
      spec: { clusterID: 'c0ffee', channel: 'stable-4.15' },
    };
    t.equal((await oc(byVersion)).status, 403, 'no gate: refused');
    t.equal((await cluster(['status', '--update-gate'])).code, 0);
    t.equal((await oc(byVersion)).status, 200, 'gate open: through');
  },
);

t.test(
  '--update-gate speaks for every node: not with --selector; without it, status writes nothing',
  async (t) => {
    reset();
    const r = await cluster(['status', '--update-gate', '-l', 'node-role.kubernetes.io/master']);
    t.equal(r.code, 2, r.stderr);
    t.match(r.stderr, /--update-gate.*cannot be used with option '-l, --selector/);
    t.equal((await cluster(['status'])).code, 0);
    t.equal(api.get('upgradegates', 'cluster'), undefined, 'a plain status is read-only');
  },
);

t.test(
  'bundle cluster upgrade writes the gate from the roll-up it just read, then passes its own policy',
  async (t) => {
    reset();
    t.equal((await cluster(['prepare', b.file, ...trust])).code, 0);
    api.delete('upgradegates', 'cluster');
    const r = await cluster(['upgrade', b.file, ...trust]);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /upgrade gate: open for 4\.15\.1/);
    t.equal(api.clusterVersion!.spec.desiredUpdate.version, '4.15.1');
  },
);

t.test(
  "the gate's summary is cut to the CRD's 1,024 characters; the image only for the version every node holds",
  async (t) => {
    const { gateSpec } = await import('@offline-bundle/cluster');
    const rows = [
      {
        node: 'n',
        nodeReady: true,
        phase: 'Ready',
        ready: true,
        digest: b.fileDigest,
        version: '4.15.1',
      },
    ];
    const s = gateSpec(
      { rows, ready: true, digest: b.fileDigest, summary: 'x'.repeat(5000) },
      { by: 'test', release: { version: '4.15.0', image: 'r@sha256:1' } },
    );
    t.equal(Array.from(s.summary).length, 1024);
    t.equal(s.image, undefined, 'a release other than the one the nodes hold gives no image');
    t.equal(
      gateSpec(
        { rows, ready: true, digest: b.fileDigest, summary: '' },
        { by: 'test', release: { version: '4.15.1', image: 'r@sha256:1' } },
      ).image,
      'r@sha256:1',
    );
  },
);

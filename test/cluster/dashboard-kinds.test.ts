// The dashboard's warnings name their kind in one style (#40 item 8): prepare's refusals come as
// ClusterError codes (NO_RELEASE_SIGNATURES) but are shown beside PullAlways and NodesNotReady,
// so the page names them NoReleaseSignatures. The CLIs keep the code (error: CODE, --json).
import t from 'tap';
import { adminApis } from '@offline-bundle/kube';
import { findingKind, prepareWarnings } from '../../builder/dist/dashboard/warnings.js';
import { bindAdmin, ADMIN, clusterVersion } from './lib.js';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { tmpdir } from '../status/lib.js';

t.test('codes read as the other kinds', async (t) => {
  t.equal(findingKind('NO_RELEASE_SIGNATURES'), 'NoReleaseSignatures');
  t.equal(findingKind('NOT_OPENSHIFT'), 'NotOpenshift');
  t.equal(findingKind('NOT_AN_UPGRADE_SOURCE'), 'NotAnUpgradeSource');
  t.equal(findingKind('NO_RELEASE_IMAGE'), 'NoReleaseImage');
});

t.test(
  "a bundle without release signatures: the page's warning is NoReleaseSignatures, the message the CLI's",
  async (t) => {
    const work = await tmpdir(t, 'ob-dash-kinds-');
    const api = await startKubeStandIn();
    t.teardown(() => api.close());
    const kubeconfig = await api.tokenKubeconfig(`${work}/kubeconfig`, bindAdmin(api, ADMIN));
    api.clusterVersion = clusterVersion('4.15.0');
    api.pods = [];
    const b = {
      fileDigest: 'sha256:' + 'a'.repeat(64),
      version: '4.15.1',
      image: 'quay.io/openshift-release-dev/ocp-release:4.15.1-x86_64',
      digest: 'sha256:' + 'c'.repeat(64),
      upgradeFrom: ['4.15.0'],
      images: [],
      signatures: [],
    };
    const warnings = await prepareWarnings(
      await adminApis(kubeconfig, undefined, { deadlineMs: 5000 }),
      b,
    );
    t.same(
      warnings.map((w) => w.kind),
      ['NoReleaseSignatures'],
    );
    t.equal(warnings[0]?.object, 'bundle');
    t.match(warnings[0]?.message, /the bundle carries no release signature/);
    t.notOk(
      warnings.some((w) => /^[A-Z_]+$/.test(w.kind)),
      'no UPPER_CASE kind on the page',
    );
  },
);

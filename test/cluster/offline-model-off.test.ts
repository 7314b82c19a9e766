// The offline cluster model of offline-model.test.ts with item 3 of issue 38 turned off
// (staging.serveUntilComplete: false: once Ready the node serves nothing), and the same two
// upgrades in a row. 4.15.0 → 4.15.1 with PinnedImageSets (item 2 on): the MCD applies the OS
// image from containers-storage and succeeds, the CVO and the IfNotPresent pods start from the
// pinned store, and the Always pod fails. 4.15.1 → 4.15.2 on a cluster without the
// PinnedImageSet kind (item 2 off as well): the MCD pulls through registries.conf and fails,
// and so does the Always pod. Each failing step is asserted by its name.
import t from 'tap';
import { WEB } from './offline-model-release.js';
import {
  checkGaps,
  clusterVersionSays,
  components,
  recordCluster,
  startModel,
  stickToReady,
  type Model,
} from './offline-model-flow.js';
import { failedPods } from './offline-model-standins.js';

const MCO_SETS = 'machineconfiguration.openshift.io/pinnedimagesets';
const m = await startModel(t, { serve: false, pinnedImageSets: true });
const [r1, r2] = m.releases as [Model['releases'][0], Model['releases'][0]];

async function toUpgrade(t: any, r: typeof r1) {
  const s = await stickToReady(m, r, false);
  t.notOk(
    s.conditions.some((c: any) => c.type === 'Serving' && c.status === 'True'),
    'Ready, and nothing served after Ready',
  );
  recordCluster(m, r);
  const p = await m.cluster(['prepare', r.file]);
  t.equal(p.code, 0, `prepare exits 0 (${p.stderr.trim()})`);
  t.same(
    (await checkGaps(m, r)).gaps,
    [['PullAlways', WEB]],
    'check names the Always workload before the upgrade starts',
  );
  const u = await m.cluster(['upgrade', r.file]);
  t.equal(u.code, 0, `upgrade exits 0 (${u.stderr.trim()})`);
  clusterVersionSays(m, r, 'Partial');
  return { prepare: p, upgrade: u };
}

t.test(
  'serving off, PinnedImageSets on (4.15.0 → 4.15.1): the MCD succeeds from containers-storage, the Always pod fails',
  async (t) => {
    await toUpgrade(t, r1);
    const c = await components(m, r1);
    t.match(
      c.mcd,
      {
        step: 'MCD: apply the OS image',
        ok: true,
        via: /^containers-storage \(PinnedImageSet offline-bundle-4\.15\.1-worker-1\)$/,
      },
      `${c.mcd.step}: ${c.mcd.via ?? c.mcd.error}`,
    );
    t.match(
      c.cvo,
      { ok: true, via: /^CRI \(present\), signature .* verified$/ },
      `${c.cvo.step}: from the pinned store (its version pod pulls only when absent)`,
    );
    t.same(
      failedPods(c.kubelet),
      ['shop/web-7b9d-4hj (Always)'],
      'kubelet: the Always pod is the one that fails',
    );
    t.match(
      c.kubelet.find((s) => s.policy === 'Always')?.error,
      /quay\.io|registry\.example\.com|lookup|dial|no such host/,
      'its pull went to a registry this site cannot reach',
    );
    clusterVersionSays(m, r1, 'Completed');
  },
);

t.test(
  'serving off, no PinnedImageSet kind (4.15.1 → 4.15.2): the MCD fails pulling through registries.conf, and the Always pod fails',
  async (t) => {
    m.api.absent.add(MCO_SETS);
    t.teardown(() => m.api.absent.delete(MCO_SETS));
    const { prepare } = await toUpgrade(t, r2);
    t.match(
      prepare.stdout,
      /PinnedImageSets: none written: the cluster has no PinnedImageSet/,
      'prepare says the cluster has no PinnedImageSet',
    );
    const c = await components(m, r2);
    t.match(
      c.mcd,
      { step: 'MCD: apply the OS image', ok: false, via: 'registries.conf' },
      `the failing step is "${c.mcd.step}"`,
    );
    t.match(
      c.mcd.error,
      /quay\.io.*(no such host|lookup|dial)|pinging container registry quay\.io/,
      `no registry answers: ${c.mcd.error?.split('\n')[0]}`,
    );
    t.equal(c.cvo.ok, true, 'the CVO finds the release image in the pinned store');
    t.same(failedPods(c.kubelet), ['shop/web-7b9d-4hj (Always)'], 'kubelet: the Always pod fails');
  },
);

// The offline cluster model (issue 38, item 5), with no registry anywhere: OpenShift 4.15.0 →
// 4.15.1 → 4.15.2 on one worker node whose runtime is the CRI-O contract stand-in, its agent the
// real bundle-agent daemon (staging.serveUntilComplete on), the API server the RBAC- and
// admission-enforcing stand-in, the admin's tool the real `bundle cluster`. The components that
// pull by themselves are stand-ins keeping the real ones' rules (offline-model-standins.ts):
// "MCD" (OS image from containers-storage when a PinnedImageSet of its pool lists it, else
// through registries.conf), "CVO" (release image by digest, signature ConfigMap verified),
// "kubelet" (every pod, each with its pull policy). Each upgrade: stick → Ready → prepare →
// check → upgrade → CVO, MCD, kubelet → ClusterVersion Completed → the node stops serving.
// The second one has a cold start in the middle (agent and runtime killed, the store wiped as
// crio-wipe does, both started again). Not booted nodes: one node root on this host.
import t from 'tap';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { DB, OLM, WEB, podsOf } from './offline-model-release.js';
import {
  POOL,
  checkGaps,
  clusterVersionSays,
  components,
  recordCluster,
  startModel,
  stickToReady,
  type Model,
} from './offline-model-flow.js';
import { failedPods, kubeletStartPods, mcdApplyOsImage } from './offline-model-standins.js';

const m = await startModel(t, { serve: true, pinnedImageSets: true });
const [r1, r2] = m.releases as [Model['releases'][0], Model['releases'][0]];

async function prepareCheckUpgrade(t: any, r: typeof r1) {
  recordCluster(m, r);
  const p = await m.cluster(['prepare', r.file, '--json']);
  t.equal(p.code, 0, `prepare exits 0 (${p.stderr.trim()})`);
  t.match(
    JSON.parse(p.stdout).pinnedImageSets,
    {
      applied: [
        { pool: 'master' },
        { pool: 'worker', sets: [`offline-bundle-${r.version}-worker-1`] },
      ],
    },
    'PinnedImageSets for every pool',
  );
  t.ok(
    m.api
      .get('pinnedimagesets', `offline-bundle-${r.version}-worker-1`)
      ?.spec.pinnedImages.some((i: any) => i.name === r.os),
    'the OS image is pinned for the worker pool',
  );
  // the one gap check names: the Always workload (served now; not after the upgrade completed)
  const c = await checkGaps(m, r);
  t.same(
    c.gaps,
    [['PullAlways', WEB]],
    'check names the Always workload and nothing else: every other image is in the bundle, the node is ready',
  );
  const u = await m.cluster(['upgrade', r.file]);
  t.equal(u.code, 0, `upgrade exits 0 through the admission gate (${u.stderr.trim()})`);
  t.equal(
    m.api.clusterVersion!.spec.desiredUpdate.image,
    r.release,
    'desiredUpdate names the release image by digest',
  );
  clusterVersionSays(m, r, 'Partial');
}

async function componentsSucceed(t: any, r: typeof r1) {
  const c = await components(m, r);
  t.match(
    c.cvo,
    { ok: true, via: /^CRI \(present\), signature sha256-.* verified$/ },
    `${c.cvo.step}: ${c.cvo.via ?? c.cvo.error}`,
  );
  t.match(
    c.mcd,
    { ok: true, via: /^containers-storage \(PinnedImageSet offline-bundle-/ },
    `${c.mcd.step}: ${c.mcd.via ?? c.mcd.error}`,
  );
  t.same(failedPods(c.kubelet), [], 'kubelet: every pod starts');
  t.same(
    c.kubelet.filter((s) => s.policy === 'Always').map((s) => [s.image, s.action]),
    [[WEB, 'pulled']],
    'the Always pod pulled, answered by the node',
  );
  // item 2 off, item 3 on (a cluster without PinnedImageSets): the MCD pulls through registries.conf, and the node answers
  m.api.absent.add('machineconfiguration.openshift.io/pinnedimagesets');
  const pulled = await mcdApplyOsImage(m.api, m.node, POOL, r.os).finally(() =>
    m.api.absent.delete('machineconfiguration.openshift.io/pinnedimagesets'),
  );
  t.match(
    pulled,
    { ok: true, via: 'registries.conf' },
    `without a PinnedImageSet, ${pulled.step} through registries.conf: the node's mirror answers (${pulled.error ?? 'ok'})`,
  );
  return c;
}

async function completeAndStopServing(t: any, r: typeof r1) {
  clusterVersionSays(m, r, 'Completed');
  const s = await m.node.agent.until(`serving ${r.version} ends`, (x: any) =>
    x?.conditions?.some(
      (c: any) =>
        c.type === 'Serving' &&
        c.reason === 'ServingEnded' &&
        String(c.message).includes(`stopped serving ${r.version}`) &&
        String(c.message).includes('completed'),
    ),
  );
  t.match(
    s.conditions.find((c: any) => c.type === 'Serving').message,
    new RegExp(`the cluster's upgrade to ${r.version.replace(/\./g, '\\.')} completed`),
  );
  t.same(
    (await readdir(path.join(m.node.root, 'etc/containers/registries.conf.d'))).filter((f) =>
      f.startsWith('offline-bundle'),
    ),
    [],
    'the mirror drop-in is gone',
  );
  const starts = await kubeletStartPods(m.node, podsOf(r));
  t.same(
    failedPods(starts),
    ['shop/web-7b9d-4hj (Always)'],
    'after the upgrade, the Always pod is the one pod that cannot start again: the gap check named',
  );
}

t.test('N → N+1 (4.15.0 → 4.15.1) offline: every pull is answered on the node', async (t) => {
  const s = await stickToReady(m, r1, true);
  t.equal(s.phase, 'Ready');
  await prepareCheckUpgrade(t, r1);
  await componentsSucceed(t, r1);
  await completeAndStopServing(t, r1);
});

t.test(
  'N+1 → N+2 (4.15.1 → 4.15.2) offline, with a cold start (crio-wipe) under way',
  async (t) => {
    await stickToReady(m, r2, true);
    await prepareCheckUpgrade(t, r2);
    await m.node.coldStart();
    const s = await m.node.agent.until(
      'serving 4.15.2 again after the cold start',
      (x: any, log: string) =>
        /serving 4\.15\.2 on 127/.test(log) &&
        x?.conditions?.some(
          (c: any) =>
            c.type === 'Serving' && c.status === 'True' && String(c.message).startsWith('4.15.2 '),
        ),
    );
    t.equal(s.phase, 'Ready', 'Ready after the restore');
    const cri = m.node.cri();
    t.teardown(() => cri.close());
    for (const ref of [r2.release, r2.os, `${OLM}:v4.15`, DB])
      t.ok(await cri.imageStatus(ref), `${ref} restored into the wiped store from the kept layout`);
    await componentsSucceed(t, r2);
    await completeAndStopServing(t, r2);
  },
);

// After the upgrades completed the layout kept to be served is gone (staging.keep false): a
// crio-wipe then takes the running release's images, which only the stick brings back. The node
// says so at once (not an old Ready), and the stick plugged in again restores it.
t.test(
  'a cold start after the upgrades completed (crio-wipe, the stick long gone): the node says what is lost, the stick brings it back',
  async (t) => {
    await m.node.coldStart();
    const s = await m.node.agent.until(
      'the new agent says the running release is gone',
      (x: any) => x?.writer?.pid === m.node.agent.child.pid && x.phase === 'Failed',
    );
    const failed = s.conditions.find((c: any) => c.type === 'Failed');
    t.equal(failed?.reason, 'RestoreFailed');
    t.match(
      failed?.message,
      /of 4\.15\.2 are gone from the runtime .* and this node kept no copy of it: plug the USB stick with 4\.15\.2 in again/,
    );
    t.match(
      s.message,
      /^Failed: Parts of the update went missing on this node and could not be put back\. Plug the USB stick in again\./,
    );
    t.ok(
      failedPods(await kubeletStartPods(m.node, podsOf(r2))).length > 1,
      'the kubelet stand-in finds the images gone, as the node said',
    );
    const again = await stickToReady(m, r2, false);
    t.equal(again.phase, 'Ready');
    t.same(
      failedPods(await kubeletStartPods(m.node, podsOf(r2))),
      ['shop/web-7b9d-4hj (Always)'],
      'with the stick plugged in again every pod but the Always one starts',
    );
  },
);

// The offline cluster model (offline-model-flow.ts) with more than one node: node-a and node-b,
// each a node root with its CRI-O contract stand-in and its own real bundle-agent daemon, and a
// third Node, node-c, whose agent is a stand-in: its NodeBundleStatus is node-a's report copied
// under its name, dated as the test needs (no runtime of its own). OpenShift 4.15.0 → 4.15.1
// with no registry anywhere (issue 38, items 2 and 4):
// - node-c's agent went quiet (its last report ten minutes old) or its kubelet is NotReady:
//   `status` and `check` count it not ready, `bundle cluster upgrade` refuses, and so does the
//   cluster itself (the upgrade gate's ValidatingAdmissionPolicy, CEL evaluated by the stand-in)
//   when a cluster-admin sends what `oc adm upgrade` sends;
// - node-c Ready again with the bundle: the upgrade goes through, and on both working nodes the
//   CVO, the MCD and the kubelet stand-ins succeed offline;
// - the MCD stand-in writes the MCO's own pins drop-in (crio.conf.d/50-pinned-images) from the
//   pool's PinnedImageSets beside the agent's (offline-bundle-pins.conf): CRI-O takes the list of
//   the file sorting last (crio.conf.d(5)), ours, which carries the union; with ours removed
//   the MCO's still pins every image it lists.
import t from 'tap';
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { node, ocPatchClusterVersion } from './lib.js';
import { WEB } from './offline-model-release.js';
import {
  clusterVersionSays,
  components,
  recordCluster,
  startModel,
  stickToReady,
  type Model,
} from './offline-model-flow.js';
import { failedPods, MCO_PINS_DROP_IN } from './offline-model-standins.js';
import type { ModelNode } from './offline-model-node.js';

const STANDIN = 'node-c';
const OURS = 'offline-bundle-pins.conf';
const m = await startModel(t, {
  serve: true,
  pinnedImageSets: true,
  nodes: ['node-a', 'node-b'],
  releases: 1,
});
const [a, b] = m.nodes as [ModelNode, ModelNode];
const r1 = m.releases[0] as Model['releases'][0];
const toR1 = { spec: { desiredUpdate: { version: r1.version, image: r1.release } } };

/** node-c's report: node-a's as it is in the API, under node-c's name, written `ageSeconds` ago. */
function standInReport(ageSeconds: number): void {
  const s = structuredClone(m.api.get('nodebundlestatuses', a.name)!);
  s.metadata = { name: STANDIN };
  s.status = {
    ...s.status,
    node: STANDIN,
    updatedAt: new Date(Date.now() - ageSeconds * 1000).toISOString(),
  };
  m.api.put('nodebundlestatuses', s);
}

const kubelet = (ready: boolean) =>
  m.api.put('nodes', {
    ...node(STANDIN),
    status: { conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  });

/** `status` (and, `all`, `check` and `upgrade`) and the cluster's own gate refuse while node-c is not ready; `why` is what they say of it. */
async function allRefuse(t: any, why: RegExp, all: boolean) {
  const s = await m.admin(['status', '--json', '--update-gate']);
  t.equal(s.code, 1, 'status exits 1');
  const st = JSON.parse(s.stdout);
  t.same(
    st.nodes.map((r: any) => [r.node, r.ready]),
    [
      ['node-a', true],
      ['node-b', true],
      [STANDIN, false],
    ],
    'status: node-a and node-b ready, node-c not',
  );
  t.match(st.summary, new RegExp(`^2 of 3 nodes Ready .*${why.source}`), 'status names why');
  t.match(st.gate, { written: true, spec: { ready: false } }, 'the gate it wrote is closed');
  if (all) await cliRefuses(t, why);
  const oc = await ocPatchClusterVersion(m.api, toR1);
  t.equal(oc.status, 403, 'oc adm upgrade: refused by the admission policy');
  t.match(oc.message, why, 'its refusal names node-c');
  t.equal(
    m.api.clusterVersion!.spec.desiredUpdate,
    undefined,
    'ClusterVersion unchanged: no desiredUpdate',
  );
}

async function cliRefuses(t: any, why: RegExp) {
  const c = await m.cluster(['check', r1.file, '--json']);
  t.not(c.code, 0, 'check exits non-zero');
  const ck = JSON.parse(c.stdout);
  t.equal(ck.complete, false);
  t.same(
    ck.nodes.map((r: any) => r.node),
    [STANDIN],
    'check: node-c is the node not ready',
  );
  const u = await m.cluster(['upgrade', r1.file]);
  t.not(u.code, 0, 'bundle cluster upgrade refuses');
  t.match(u.stderr, why, 'and says why');
}

t.test(
  "two nodes loaded by their agents; node-c's agent quiet for ten minutes: not ready everywhere, the upgrade refused",
  async (t) => {
    await Promise.all([stickToReady(m, r1, true, a), stickToReady(m, r1, true, b)]);
    recordCluster(m, r1);
    kubelet(true);
    standInReport(600);
    const p = await m.cluster(['prepare', r1.file, '--json']);
    t.equal(p.code, 0, `prepare exits 0 (${p.stderr.trim()})`);
    t.match(
      JSON.parse(p.stdout),
      {
        gate: { spec: { ready: false } },
        pinnedImageSets: { applied: [], skipped: /^not every node holds the images yet/ },
      },
      'prepare: the gate closed, no PinnedImageSet yet',
    );
    await allRefuse(t, /node-c's agent last reported 10 min ago \(stale/, true);
  },
);

t.test('node-c reporting again, but its kubelet NotReady: still refused', async (t) => {
  kubelet(false);
  standInReport(0);
  await allRefuse(t, /node-c's Node is not Ready/, false);
});

t.test(
  "node-c Ready with the bundle: the upgrade goes through, and both nodes' CVO, MCD and kubelet succeed offline",
  async (t) => {
    kubelet(true);
    standInReport(0);
    const c = await m.cluster(['check', r1.file, '--json']);
    t.same(JSON.parse(c.stdout).nodes, [], 'check: every node ready');
    t.same(
      JSON.parse(c.stdout).gaps.map((g: any) => [g.why, g.image]),
      [['PullAlways', WEB]],
      'check names the Always workload and nothing else',
    );
    const p = await m.cluster(['prepare', r1.file, '--json']);
    const prep = JSON.parse(p.stdout);
    const names = prep.holdings[0].names;
    t.ok(names >= 11, `the bundle's ${names} image names`);
    t.same(
      prep.holdings.map((h: any) => [h.node, h.published, h.held, h.pinned, h.missing, h.lacks]),
      ['node-a', 'node-b', STANDIN].map((n) => [n, true, names, names, 0, []]),
      'prepare: what each agent published of its runtime, counted against the bundle: every name held and pinned',
    );
    t.match(
      prep.pinnedImageSets,
      {
        applied: [
          { pool: 'master' },
          { pool: 'worker', sets: [`offline-bundle-${r1.version}-worker-1`] },
        ],
      },
      'prepare: PinnedImageSets for every pool',
    );
    const u = await m.cluster(['upgrade', r1.file]);
    t.equal(u.code, 0, `upgrade exits 0 through the admission gate (${u.stderr.trim()})`);
    t.equal(
      m.api.clusterVersion!.spec.desiredUpdate.image,
      r1.release,
      'desiredUpdate names the release image by digest',
    );
    clusterVersionSays(m, r1, 'Partial');
    for (const n of [a, b]) {
      const c = await components(m, r1, n);
      t.match(
        c.cvo,
        { ok: true, via: /^CRI \(present\), signature sha256-.* verified$/ },
        `${n.name}: ${c.cvo.step}: ${c.cvo.via ?? c.cvo.error}`,
      );
      t.match(
        c.mcd,
        {
          ok: true,
          via: /^containers-storage \(PinnedImageSet offline-bundle-4\.15\.1-worker-1\)$/,
        },
        `${n.name}: ${c.mcd.step}: ${c.mcd.via ?? c.mcd.error}`,
      );
      t.same(
        failedPods(c.kubelet),
        [],
        `${n.name}: kubelet: every pod starts (the Always one answered by the node)`,
      );
    }
  },
);

/** Whether the CRI says each of `refs` is pinned, as [ref, pinned]. */
async function pins(n: ModelNode, refs: string[]): Promise<[string, boolean][]> {
  const cri = n.cri();
  try {
    return await Promise.all(
      refs.map(async (r) => [r, (await cri.imageStatus(r))?.pinned === true] as [string, boolean]),
    );
  } finally {
    cri.close();
  }
}

t.test(
  "the MCO's pins drop-in beside ours: every image pinned; ours gone, the MCO's still pins what it lists",
  async (t) => {
    const payload = [r1.release, r1.os, ...Object.values(r1.operators), r1.olm];
    const listed: string[] = m.api
      .get('pinnedimagesets', `offline-bundle-${r1.version}-worker-1`)!
      .spec.pinnedImages.map((p: any) => p.name);
    t.ok(
      payload.every((p) => listed.includes(p)),
      "the worker pool's PinnedImageSet lists the payload, the OS image and the operator",
    );
    for (const n of [a, b]) {
      const dir = path.join(n.root, 'etc/crio/crio.conf.d');
      t.same(
        (await readdir(dir)).filter((f) => !f.startsWith('.')).sort(),
        [MCO_PINS_DROP_IN, OURS],
        `${n.name}: the MCD's drop-in and the agent's, the agent's sorting last`,
      );
      const reload = await n.reloadCrio();
      t.same(
        reload.files.map((f) => path.basename(f)).slice(-2),
        [MCO_PINS_DROP_IN, OURS],
        'CRI-O reads them in that order',
      );
      t.same(
        listed.filter((i) => !reload.pinnedImages.includes(i)),
        [],
        `${n.name}: the list CRI-O applies (the last file's) holds every image the MCO lists`,
      );
      t.same(
        await pins(n, payload),
        payload.map((p) => [p, true]),
        `${n.name}: every payload image pinned`,
      );
    }
    clusterVersionSays(m, r1, 'Completed');
    // the agent gone (uninstalled, say) and its drop-in with it: the MCO's file is the last one setting pinned_images
    await b.agent.stop();
    await rm(path.join(b.root, 'etc/crio/crio.conf.d', OURS));
    const reload = await b.reloadCrio();
    t.same(reload.files.map((f) => path.basename(f)).slice(-1), [MCO_PINS_DROP_IN]);
    t.same(
      [...reload.pinnedImages].sort(),
      [...listed].sort(),
      "node-b: CRI-O applies the MCO's list",
    );
    t.same(
      await pins(b, payload),
      payload.map((p) => [p, true]),
      'node-b: nothing the MCO lists was unpinned',
    );
  },
);

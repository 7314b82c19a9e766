// EUS to EUS from one stick, the cluster side (#43): a bundle of the path 4.14.30 → 4.15.40 →
// 4.16.2 against the API stand-in with the shipped admin RBAC and admission policy, the CVO's
// history moves scripted by the test as the CVO would write them. prepare hands over both
// releases' signatures and names both in the gate; upgrade shows the whole plan first, pauses
// every pool but master, sets hop one, waits while it is under way, refuses hop two without the
// admin-ack admin-gates asks for and goes with it, and unpauses what it paused after the last hop.
import t from 'tap';
import path from 'node:path';
import { runtimeHoldings, toResource, emptyStatus } from '@offline-bundle/status';
import { signatureKey } from '@offline-bundle/cluster';
import { errorCode } from '../builder/lib.js';
import { signRelease } from '../builder/release-signing.js';
import {
  ART_REPO,
  RELEASE_REPO,
  clusterFixture,
  clusterVersion,
  makeBundle,
  nodeStatus,
  ocPatchClusterVersion,
} from './lib.js';

const { work, api, key, trust: _t, cluster, allReady } = await clusterFixture(t);
void _t;
const p = await makeBundle(path.join(work, 'path'), {
  version: '4.16.2',
  upgradeFrom: ['4.15.40'],
  via: [{ version: '4.15.40', upgradeFrom: ['4.14.30'] }],
  sign: async (d, ref) => [await signRelease(key, ref, d)],
});
const trust = ['--key', p.pub];
const hop1 = p.via[0]!;
const image1 = `${RELEASE_REPO}@${hop1.releaseDigest}`;
const image2 = `${RELEASE_REPO}@${p.releaseDigest}`;
const GATE = 'ack-4.15-kube-1.29-api-removals-in-4.16';
const MCO = 'machineconfiguration.openshift.io';
const pool = (name: string, paused: boolean) => ({
  apiVersion: `${MCO}/v1`,
  kind: 'MachineConfigPool',
  metadata: { name },
  spec: { paused, pinnedImageSets: [] },
});
const cm = (namespace: string, name: string, data: Record<string, string>) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { namespace, name },
  data,
});
const writes = (from: number) => api.requests.slice(from).filter((q) => q.method !== 'GET');

/** Every node Ready for the path bundle; the cluster on 4.14.30; pools master, worker and a canary the admin paused; 4.15's admin gate. */
function seed(): void {
  allReady();
  api.statuses = api.nodes.map((n) =>
    nodeStatus(n.metadata.name, 'Ready', p.fileDigest, p.version),
  );
  api.clusterVersion = clusterVersion('4.14.30');
  api.replaceAll('machineconfigpools', [
    pool('master', false),
    pool('worker', false),
    pool('canary', true),
  ]);
  api.replaceAll('pinnedimagesets', []);
  api.put(
    'configmaps',
    cm('openshift-config-managed', 'admin-gates', {
      [GATE]:
        'Kubernetes 1.29 and therefore OpenShift 4.16 remove several APIs which require admin consideration.',
    }),
  );
  api.put('configmaps', cm('openshift-config', 'admin-acks', {}));
}

/** What the CVO writes into ClusterVersion's history as it takes `version`. */
function cvo(version: string, image: string, state: 'Partial' | 'Completed'): void {
  const cv = api.clusterVersion!;
  const history = cv.status.history.filter((h: { version: string }) => h.version !== version);
  api.clusterVersion = {
    ...cv,
    status: {
      ...cv.status,
      history: [
        {
          state,
          version,
          image,
          startedTime: new Date().toISOString(),
          ...(state === 'Completed' ? { completionTime: new Date().toISOString() } : {}),
        },
        ...history,
      ],
    },
  };
}

const paused = (name: string) => api.get('machineconfigpools', name)!.spec.paused;

t.test(
  "prepare hands over every release's signatures, and the gate names both releases",
  async (t) => {
    seed();
    const r = await cluster(['prepare', p.file, ...trust]);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /update path: 4\.14\.30 → 4\.15\.40 → 4\.16\.2 \(2 releases/);
    const keys = Object.keys(
      api.configMap('openshift-config-managed', 'mirrored-release-signatures')!.binaryData,
    ).sort();
    t.same(
      keys,
      [signatureKey(hop1.releaseDigest, 1), signatureKey(p.releaseDigest, 1)].sort(),
      "each release's signature, as oc-mirror lays them out",
    );
    t.match(api.get('upgradegates', 'cluster')!.spec, {
      ready: true,
      version: '4.16.2',
      image: image2,
      path: [
        { version: '4.15.40', image: image1 },
        { version: '4.16.2', image: image2 },
      ],
    });
    t.match(r.stdout, /upgrade gate: open for the path 4\.15\.40 → 4\.16\.2/);
    const pinned = (name: string) =>
      api
        .get('pinnedimagesets', name)!
        .spec.pinnedImages.map((i: { name: string }) => i.name)
        .sort();
    t.same(
      pinned('offline-bundle-4.15.40-worker-1'),
      [`${ART_REPO}@${hop1.payloadDigest}`, image1].sort(),
      'each release a series of its own, as the head lists its payload',
    );
    t.same(
      pinned('offline-bundle-4.16.2-worker-1'),
      [`${ART_REPO}@${p.payloadDigest}`, image2].sort(),
    );
    t.match(api.get('pinnedimagesets', 'offline-bundle-4.15.40-worker-1')!.metadata, {
      labels: { 'offline-bundle.io/release': '4.15.40' },
      annotations: { 'offline-bundle.io/path': '4.15.40,4.16.2' },
    });
  },
);

t.test('a cluster on no release the path starts from is refused by name', async (t) => {
  seed();
  api.clusterVersion = clusterVersion('4.13.9');
  const r = await cluster(['prepare', p.file, ...trust]);
  t.equal(errorCode(r.stderr), 'NOT_AN_UPGRADE_SOURCE');
  t.match(
    r.stderr,
    /the cluster runs 4\.13\.9, which no release of the bundle's path 4\.15\.40 → 4\.16\.2 accepts as a source \(it starts from 4\.14\.30\)/,
  );
});

t.test(
  '--dry-run prints the whole plan, in order, with the oc commands, and changes nothing',
  async (t) => {
    seed();
    t.equal((await cluster(['prepare', p.file, ...trust])).code, 0);
    const from = api.requests.length;
    const r = await cluster(['upgrade', p.file, ...trust, '--dry-run']);
    t.equal(r.code, 0, r.stderr);
    const steps = [...r.stdout.matchAll(/^ +\d+\. \[(\w+)\] +(.*)\n +(.*)$/gm)].map((m) => [
      m[1],
      m[2]!.split(' (')[0],
      m[3],
    ]);
    t.same(
      steps,
      [
        [
          'now',
          'pause MachineConfigPool worker',
          `oc patch mcp/worker --type=merge -p '{"spec":{"paused":true}}'`,
        ],
        [
          'now',
          'hop 1 of 2: set ClusterVersion spec.desiredUpdate to 4.15.40',
          `oc adm upgrade --allow-explicit-upgrade --to-image=${image1}`,
        ],
        ['later', "wait until ClusterVersion's history says 4.15.40 Completed", steps[2]?.[2]],
        [
          'later',
          'acknowledge what ConfigMap openshift-config-managed/admin-gates asks for once 4.15.40 runs',
          'oc -n openshift-config-managed get cm admin-gates -o yaml',
        ],
        [
          'later',
          'hop 2 of 2: set ClusterVersion spec.desiredUpdate to 4.16.2',
          `oc adm upgrade --allow-explicit-upgrade --to-image=${image2}`,
        ],
        ['later', "wait until ClusterVersion's history says 4.16.2 Completed", steps[2]?.[2]],
        [
          'later',
          'unpause MachineConfigPool worker',
          `oc patch mcp/worker --type=merge -p '{"spec":{"paused":false}}'`,
        ],
      ],
      'every pool but master (and but the one the admin paused himself) paused before hop one, unpaused after the last',
    );
    t.match(steps[2]![2], /^oc get clusterversion version/);
    t.match(
      r.stdout,
      /path 4\.14\.30 → 4\.15\.40 → 4\.16\.2: hop 1 of 2 \(4\.14\.30 → 4\.15\.40\)/,
    );
    t.same(writes(from), [], 'only reads');
    const j = JSON.parse(
      (await cluster(['upgrade', p.file, ...trust, '--dry-run', '--json'])).stdout,
    );
    t.match(j, { dryRun: true, hop: 1, state: 'started', running: '4.14.30', blockers: [] });
    t.equal(j.steps.length, 7);
  },
);

t.test(
  'hop by hop: pause and hop one; a run while it is under way waits; hop two refused without the admin-ack, through with it; the pools unpaused after',
  async (t) => {
    seed();
    t.equal((await cluster(['prepare', p.file, ...trust])).code, 0);
    let from = api.requests.length;
    const one = await cluster(['upgrade', p.file, ...trust]);
    t.equal(one.code, 0, one.stderr);
    t.match(one.stdout, /started hop 1 of 2: ClusterVersion asks for 4\.15\.40/);
    t.ok(
      one.stdout.indexOf('plan') < one.stdout.indexOf('started hop'),
      'the plan is shown before',
    );
    t.same(
      api.clusterVersion!.spec.desiredUpdate,
      { version: '4.15.40', image: image1, force: false },
      'hop one: the first release not yet run, by digest',
    );
    t.equal(paused('worker'), true, 'the worker pool paused');
    t.equal(
      api.get('machineconfigpools', 'worker')!.metadata.annotations['offline-bundle.io/paused-for'],
      '4.16.2',
    );
    t.equal(paused('master'), false, 'never the control plane');
    const order = writes(from).map((q) => q.path.split('/').slice(-2).join('/'));
    t.ok(
      order.indexOf('machineconfigpools/worker') < order.indexOf('clusterversions/version'),
      `paused before the hop: ${order.join(', ')}`,
    );
    const patch = writes(from).find((q) => q.path.endsWith('machineconfigpools/worker'))!;
    t.equal(patch.contentType, 'application/merge-patch+json');

    cvo('4.15.40', image1, 'Partial');
    api.clusterVersion = {
      ...api.clusterVersion!,
      status: {
        ...api.clusterVersion!.status,
        conditions: [
          { type: 'Failing', status: 'True', message: 'Cluster operator etcd is degraded' },
        ],
      },
    };
    from = api.requests.length;
    const wait = await cluster(['upgrade', p.file, ...trust]);
    t.equal(wait.code, 0, wait.stderr);
    t.match(wait.stdout, /waiting: hop 1 of 2 \(to 4\.15\.40\) is under way; nothing changed/);
    t.match(
      wait.stdout,
      /\[waiting\] +wait until ClusterVersion's history says 4\.15\.40 Completed \(it says Partial; the CVO: Failing: Cluster operator etcd is degraded\)/,
      'what the CVO says in the way',
    );
    t.same(writes(from), [], 'changes nothing');
    const st = await cluster(['status']);
    t.match(
      st.stdout,
      /^path 4\.14\.30 → 4\.15\.40 → 4\.16\.2: hop 1 of 2 \(4\.14\.30 → 4\.15\.40\) under way$/m,
      'status shows the path and the hop',
    );

    cvo('4.15.40', image1, 'Completed');
    t.match((await cluster(['status', '--json'])).stdout, /"hop": 2,\s+"underWay": false/);
    from = api.requests.length;
    const refused = await cluster(['upgrade', p.file, ...trust]);
    t.equal(errorCode(refused.stderr), 'ADMIN_ACK_REQUIRED', refused.stderr);
    t.match(
      refused.stderr,
      `oc -n openshift-config patch cm admin-acks --type=merge -p '{"data":{"${GATE}":"true"}}'`,
    );
    t.match(refused.stderr, `--ack ${GATE}`);
    t.match(
      refused.stdout,
      new RegExp(`\\[blocked\\] +acknowledge admin gate ${GATE} \\("Kubernetes 1\\.29`),
    );
    t.same(writes(from), [], 'nothing changed');
    t.equal(api.clusterVersion!.spec.desiredUpdate.version, '4.15.40');

    const two = await cluster(['upgrade', p.file, ...trust, '--ack', GATE]);
    t.equal(two.code, 0, two.stderr);
    t.match(two.stdout, /started hop 2 of 2: ClusterVersion asks for 4\.16\.2/);
    t.equal(
      api.configMap('openshift-config', 'admin-acks')!.data[GATE],
      'true',
      'acknowledged as the oc patch would',
    );
    t.same(api.clusterVersion!.spec.desiredUpdate, {
      version: '4.16.2',
      image: image2,
      force: false,
    });
    t.equal(paused('worker'), true, 'still paused through hop two');

    cvo('4.16.2', image2, 'Partial');
    t.match((await cluster(['upgrade', p.file, ...trust])).stdout, /waiting: hop 2 of 2/);
    t.equal(paused('worker'), true);
    cvo('4.16.2', image2, 'Completed');
    const fin = await cluster(['upgrade', p.file, ...trust]);
    t.equal(fin.code, 0, fin.stderr);
    t.match(fin.stdout, /every hop completed: the cluster runs 4\.16\.2; unpaused mcp\/worker/);
    t.equal(paused('worker'), false, 'unpaused');
    t.equal(
      api.get('machineconfigpools', 'worker')!.metadata.annotations?.[
        'offline-bundle.io/paused-for'
      ],
      undefined,
    );
    t.equal(paused('canary'), true, 'a pool the admin paused stays so');
    t.match((await cluster(['status'])).stdout, /every hop completed; the cluster runs 4\.16\.2/);
    from = api.requests.length;
    const again = await cluster(['upgrade', p.file, ...trust, '--json']);
    t.match(JSON.parse(again.stdout), { state: 'done', hop: 3 });
    t.same(writes(from), [], 'once done, a run changes nothing');
  },
);

t.test(
  "the admission gate refuses hop two while a node lacks the second release's images",
  async (t) => {
    seed();
    t.equal((await cluster(['prepare', p.file, ...trust])).code, 0);
    // on 4.14.30 with every node ready: hop two first (4.14 → 4.16, no such edge) is refused, by image or by version
    const skip = await ocPatchClusterVersion(api, {
      spec: { desiredUpdate: { image: image2, version: '4.16.2' } },
    });
    t.equal(skip.status, 403);
    t.match(
      skip.message,
      /sha256:[0-9a-f]+ is a later hop of the path 4\.15\.40 → 4\.16\.2: the cluster takes it once ClusterVersion's history says the release before it Completed/,
    );
    t.equal(
      (
        await ocPatchClusterVersion(api, {
          spec: { desiredUpdate: { version: '4.16.2', image: null } },
        })
      ).status,
      403,
      'by version too',
    );
    t.equal((await cluster(['upgrade', p.file, ...trust])).code, 0);
    cvo('4.15.40', image1, 'Completed');
    // worker-1's runtime lost 4.16.2's payload image (a crio-wipe), though its agent says Ready
    const refs = [
      image1,
      `${ART_REPO}@${hop1.payloadDigest}`,
      image2,
      `${ART_REPO}@${p.payloadDigest}`,
    ];
    const h = runtimeHoldings(
      refs.slice(0, 3).map((n) => ({ repoTags: [], repoDigests: [n], pinned: true })),
      refs,
    );
    const doc = api.statuses.find(
      (s: { metadata: { name: string } }) => s.metadata.name === 'worker-1',
    )!;
    doc.status.runtime = toResource(
      { ...emptyStatus('worker-1'), runtime: h },
      'worker-1',
    ).status.runtime;
    t.equal((await cluster(['status', '--update-gate'])).code, 1);
    const oc = await ocPatchClusterVersion(api, {
      spec: { desiredUpdate: { image: image2, version: '4.16.2' } },
    });
    t.equal(oc.status, 403, 'oc adm upgrade to hop two refused by the cluster');
    t.match(
      oc.message,
      /the nodes are not ready to upgrade to sha256:[0-9a-f]+ without a registry: .*worker-1's runtime no longer holds/,
    );
    const ours = await cluster(['upgrade', p.file, ...trust, '--ack', GATE]);
    t.equal(errorCode(ours.stderr), 'NODES_NOT_READY', ours.stderr);
    t.equal(api.clusterVersion!.spec.desiredUpdate.version, '4.15.40', 'still on hop one');
    // every node whole again: the gate opens for hop two, by its image digest, to oc as well
    doc.status.runtime = undefined;
    t.equal((await cluster(['status', '--update-gate'])).code, 0);
    t.equal(
      (
        await ocPatchClusterVersion(api, {
          spec: { desiredUpdate: { image: image2, version: '4.16.2' } },
        })
      ).status,
      200,
    );
  },
);

t.test("check: the closure counts both releases' images as in the bundle", async (t) => {
  seed();
  for (const r of [
    'deployments',
    'daemonsets',
    'statefulsets',
    'replicasets',
    'jobs',
    'cronjobs',
    'clusterserviceversions',
  ])
    api.replaceAll(r, []);
  const pod = (name: string, image: string) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { namespace: 'openshift-etcd', name },
    spec: { containers: [{ name: 'c', image, imagePullPolicy: 'IfNotPresent' }] },
  });
  api.pods = [
    pod('hop-1', `${ART_REPO}@${hop1.payloadDigest}`),
    pod('hop-2', `${ART_REPO}@${p.payloadDigest}`),
  ];
  const r = await cluster(['check', p.file, ...trust]);
  t.equal(r.code, 0, r.stdout + r.stderr);
  t.match(r.stdout, /2 images the cluster asks for, 2 of them in the bundle/);
});

t.test(
  'what the cluster says is bounded: at most 32 admin gates read, each reason cut at 300 characters',
  async (t) => {
    seed();
    t.equal((await cluster(['prepare', p.file, ...trust])).code, 0);
    cvo('4.15.40', image1, 'Completed');
    api.put(
      'configmaps',
      cm(
        'openshift-config-managed',
        'admin-gates',
        Object.fromEntries(
          Array.from({ length: 40 }, (_, i) => [`ack-4.15-gate-${i}`, 'x'.repeat(5000)]),
        ),
      ),
    );
    const r = await cluster(['upgrade', p.file, ...trust, '--dry-run', '--json']);
    const acks = JSON.parse(r.stdout).steps.filter((s: { kind: string }) => s.kind === 'ack');
    t.equal(acks.length, 32);
    t.ok(
      acks.every((s: { text: string }) => s.text.length < 400),
      'each reason cut',
    );
    t.equal(errorCode(r.stderr), 'ADMIN_ACK_REQUIRED');
  },
);

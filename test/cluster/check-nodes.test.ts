// `bundle cluster check` per node (issue #38 item 1): the stand-in API server holds
// NodeBundleStatuses whose status.runtime is what the agent writes (runtimeHoldings from a CRI
// image list, through toResource); check names, per gap, which nodes hold the image anyway and
// how bad it is, per node what it holds of the closure, and an image of the bundle missing or
// unpinned on a node that says Ready. A node publishing garbage, or nothing, is "not known".
import t from 'tap';
import { runtimeHoldings, toResource, emptyStatus, type ListedImage } from '@offline-bundle/status';
import { errorCode } from '../builder/lib.js';
import { ART_REPO, RELEASE_REPO, clusterFixture } from './lib.js';

const { api, b, trust, cluster, allReady } = await clusterFixture(t);
const payload = `${ART_REPO}@${b.payloadDigest}`;
const release = `${RELEASE_REPO}@${b.releaseDigest}`;
const releaseTag = `${RELEASE_REPO}:${b.version}-x86_64`;
const BUNDLE_REFS = [release, releaseTag, payload];
const WEB = 'registry.example.com/team/web:v3';
const DB = 'registry.example.com/team/db:v1';
const CACHE = 'registry.example.com/team/cache:v2';

const pod = (ns: string, name: string, image: string) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace: ns, name },
  spec: { containers: [{ name: 'c', image, imagePullPolicy: 'IfNotPresent' }] },
});
const listed = (name: string, pinned: boolean): ListedImage =>
  name.includes('@')
    ? { repoTags: [], repoDigests: [name], pinned }
    : { repoTags: [name], repoDigests: [], pinned };

/** Sets `node`'s status.runtime to what its agent would publish for a runtime holding `images` (name → pinned). */
function holds(node: string, images: Record<string, boolean>): void {
  const h = runtimeHoldings(
    Object.entries(images).map(([n, p]) => listed(n, p)),
    BUNDLE_REFS,
  );
  const doc = api.statuses.find((s: { metadata: { name: string } }) => s.metadata.name === node)!;
  // through toResource, as the reporter sends it
  doc.status.runtime = toResource({ ...emptyStatus(node), runtime: h }, node).status.runtime;
}

function seeded(): void {
  allReady();
  api.pods = [
    pod('openshift-cluster-version', 'cvo', release),
    pod('openshift-etcd', 'etcd-0', payload),
    pod('shop', 'web', WEB),
    pod('shop', 'db', DB),
    pod('shop', 'cache', CACHE),
  ];
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
  const bundle = { [release]: true, [releaseTag]: true, [payload]: true };
  holds('master-0', { ...bundle, [WEB]: true, [DB]: true, [CACHE]: true });
  // worker-0: its release image is not pinned (says Ready); db held, unpinned
  holds('worker-0', { ...bundle, [release]: false, [WEB]: true, [DB]: false });
  // worker-1: the payload gone (says Ready)
  holds('worker-1', { [release]: true, [releaseTag]: true, [WEB]: true, [DB]: true });
}

t.test(
  'per gap: which nodes hold it, and how bad; per node: present, pinned, missing and why',
  async (t) => {
    seeded();
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'CLOSURE_INCOMPLETE', r.stderr);
    // the node that lacks its bundle's images is not counted ready either (the roll-up reads the same status.runtime)
    t.match(
      r.stderr,
      /3 image gaps and 2 images missing or unpinned on nodes that say Ready and nodes not ready \(worst: high\)/,
    );
    const j = JSON.parse(r.stdout);
    t.equal(j.severity, 'high');
    const gap = (image: string) => j.gaps.find((g: { image: string }) => g.image === image);
    t.match(gap(WEB), {
      why: 'InNoBundle',
      severity: 'low',
      nodes: {
        pinned: ['master-0', 'worker-0', 'worker-1'],
        unpinned: [],
        missing: [],
        unknown: [],
      },
    });
    t.match(gap(WEB).held, /held pinned by every node: a lesser gap/);
    t.match(gap(DB), {
      why: 'InNoBundle',
      severity: 'medium',
      nodes: { pinned: ['master-0', 'worker-1'], unpinned: ['worker-0'] },
    });
    t.match(gap(DB).held, /not pinned on worker-0: the image GC may take it/);
    t.match(gap(CACHE), {
      why: 'InNoBundle',
      severity: 'high',
      nodes: { pinned: ['master-0'], missing: ['worker-0', 'worker-1'] },
    });
    t.equal(j.gaps.length, 3, "the bundle's images are no gap of the closure");
    t.same(
      j.nodeGaps.map((g: { node: string; image: string; state: string; severity: string }) => [
        g.node,
        g.image,
        g.state,
        g.severity,
      ]),
      [
        ['worker-0', release, 'unpinned', 'medium'],
        ['worker-1', payload, 'missing', 'high'],
      ],
      'an image of the bundle missing or unpinned on a node that says Ready, and nothing else',
    );
    const per = Object.fromEntries(j.perNode.map((n: { node: string }) => [n.node, n]));
    t.match(per['master-0'], {
      published: true,
      needed: { pinned: 5, unpinned: 0, missing: 0, unknown: 0 },
      missing: [],
      unpinned: [],
      bundleMissing: [],
      bundleUnpinned: [],
    });
    t.match(per['worker-0'], {
      published: true,
      needed: { pinned: 2, unpinned: 2, missing: 1 },
      missing: [{ image: CACHE, why: 'InNoBundle' }],
      bundleUnpinned: [release],
    });
    t.same(
      per['worker-0'].unpinned,
      [
        { image: DB, why: 'InNoBundle' },
        { image: release, why: 'UnpinnedOnReady' },
      ].sort((a, b) => a.image.localeCompare(b.image)),
    );
    t.match(per['worker-1'], { needed: { pinned: 3, missing: 2 }, bundleMissing: [payload] });
    t.same(
      per['worker-1'].missing.map((m: { image: string; why: string }) => [m.image, m.why]).sort(),
      [
        [payload, 'MissingOnReady'],
        [CACHE, 'InNoBundle'],
      ].sort(),
    );
    t.match(per['master-0'], { images: 6, pinnedImages: 6, digest: /^sha256:/ });
    const text = await cluster(['check', b.file, ...trust]);
    t.match(
      text.stdout,
      /^InNoBundle: registry\.example\.com\/team\/cache:v2: in no bundle given: .*asked for by shop\/Pod\/cache\n {2}severity high: missing on worker-0, worker-1; held by 1 node$/m,
    );
    t.match(text.stdout, /^ {2}severity low: held pinned by every node/m);
    t.match(
      text.stdout,
      /^node worker-1: 3 of 5 images the cluster asks for held \(3 pinned\); missing 2: .*quay\.io\/openshift-release-dev\/ocp-v4\.0-art-dev@sha256:[0-9a-f]+ \(MissingOnReady\).*; its runtime: 4 images, 4 pinned, read .* ago$/m,
    );
    t.match(
      text.stdout,
      /^node worker-1: MissingOnReady \(severity high\): says Ready, but its runtime does not hold .*ocp-v4\.0-art-dev@sha256:[0-9a-f]+ of the bundle it loaded \(should not happen/m,
    );
    t.match(
      text.stdout,
      /^node worker-0: UnpinnedOnReady \(severity medium\): says Ready, but its runtime does not pin .*ocp-release@sha256/m,
    );
    t.match(text.stdout, /3 of 3 nodes publish what their runtime holds; worst gap: high$/m);
  },
);

t.test(
  'two nodes holding the same names say so; only lesser gaps: still exit 1, named low',
  async (t) => {
    seeded();
    api.pods = api.pods.filter(
      (p: { metadata: { name: string } }) =>
        p.metadata.name !== 'cache' && p.metadata.name !== 'db',
    );
    const same = { [release]: true, [releaseTag]: true, [payload]: true, [WEB]: true };
    for (const n of ['master-0', 'worker-0', 'worker-1']) holds(n, same);
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(r.code, 1, 'a gap is a gap: exit 0 only with none');
    t.match(r.stderr, /1 image gap \(worst: low\)/);
    const j = JSON.parse(r.stdout);
    t.equal(j.severity, 'low');
    t.same(j.nodeGaps, []);
    t.same(
      j.perNode.map((n: { node: string; sameAs?: string }) => [n.node, n.sameAs ?? null]),
      [
        ['master-0', null],
        ['worker-0', 'master-0'],
        ['worker-1', 'master-0'],
      ],
    );
    // and with WEB in no pod: the closure holds
    api.pods = api.pods.filter((p: { metadata: { name: string } }) => p.metadata.name !== 'web');
    const ok = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(ok.code, 0, ok.stderr);
    t.match(JSON.parse(ok.stdout), { complete: true, severity: null, gaps: [], nodeGaps: [] });
  },
);

t.test(
  'a node publishing garbage, or nothing, is not known (never "holds it"), and breaks nothing',
  async (t) => {
    seeded();
    const st = (n: string) =>
      api.statuses.find((s: { metadata: { name: string } }) => s.metadata.name === n)!.status;
    // stored as is (as by a CRD without the schema): wrong types, oversized lists
    st('worker-0').runtime = {
      observedAt: 'yesterday',
      images: 'many',
      pinned: -1,
      references: 1,
      digest: 'md5:0',
      held: { pinned: 'everything' },
    };
    st('worker-1').runtime = {
      ...st('master-0').runtime,
      held: { pinned: [...Array.from({ length: 9000 }, () => 'zz'), 42], unpinned: { x: 1 } },
      bundle: { missing: 'all', unpinned: [null] },
    };
    delete st('master-0').runtime;
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(r.code, 1);
    const j = JSON.parse(r.stdout);
    const per = Object.fromEntries(j.perNode.map((n: { node: string }) => [n.node, n]));
    t.match(
      per['master-0'],
      { published: false, needed: { unknown: 5 } },
      'an older agent: nothing published',
    );
    t.match(per['worker-0'], { published: false }, 'a malformed core: ignored whole');
    t.match(
      per['worker-1'],
      { published: true, needed: { unknown: 5, pinned: 0 }, bundleMissing: [], bundleUnpinned: [] },
      'malformed lists: nothing of them believed, what is held not known',
    );
    t.match(
      j.gaps.find((g: { image: string }) => g.image === WEB),
      { severity: 'high', nodes: { unknown: ['master-0', 'worker-0', 'worker-1'] } },
    );
    t.same(j.nodeGaps, [], 'no claim about a node from what it did not say');
    const text = await cluster(['check', b.file, ...trust]);
    t.match(text.stdout, /^node master-0: publishes nothing of its runtime/m);
    t.match(text.stdout, /1 of 3 nodes publish what their runtime holds/);
  },
);

t.test(
  'a runtime that reports no pins (containerd before 1.6.22): its images count as not known pinned, no UnpinnedOnReady claimed',
  async (t) => {
    seeded();
    api.pods = api.pods.filter(
      (p: { metadata: { name: string } }) =>
        p.metadata.name === 'cvo' || p.metadata.name === 'etcd-0',
    );
    const all = { [release]: false, [releaseTag]: false, [payload]: false };
    for (const n of ['master-0', 'worker-0', 'worker-1']) holds(n, all);
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    t.same(j.nodeGaps, []);
    t.match(j.perNode[0], { pinsReported: false, needed: { pinned: 0, unpinned: 2, missing: 0 } });
    const text = await cluster(['check', b.file, ...trust]);
    t.match(
      text.stdout,
      /^node master-0: 2 of 2 images the cluster asks for held \(0 pinned, 2 not pinned: the image GC may take them\); not pinned: .*\(PinsNotReported\).*; its runtime: 3 images, 0 pinned \(it reports no pins: CRI-O before 1\.28, containerd before 1\.6\.22\)/m,
    );
  },
);

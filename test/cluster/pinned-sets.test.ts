// PinnedImageSets from prepare and upgrade (stand-in API server, the shipped admin RBAC): one
// series per MachineConfigPool, listed in the pool's spec.pinnedImageSets beside what others
// listed there; written only once every node holds the images; an older release's sets (not
// the running one's) taken out and deleted; a cluster without the kind is told so.
import t from 'tap';
import { pinnedSets, MAX_PINNED_PER_SET } from '@offline-bundle/cluster';
import { ART_REPO, RELEASE_REPO, clusterFixture, nodeStatus } from './lib.js';

const { api, b, trust, cluster, allReady } = await clusterFixture(t);
const MCO = 'machineconfiguration.openshift.io';
const pool = (name: string, sets: string[]) => ({
  apiVersion: `${MCO}/v1`,
  kind: 'MachineConfigPool',
  metadata: { name },
  spec: { pinnedImageSets: sets.map((n) => ({ name: n })) },
});
const ours = (name: string, release: string) => ({
  apiVersion: `${MCO}/v1`,
  kind: 'PinnedImageSet',
  metadata: { name, labels: { 'offline-bundle.io/release': release } },
  spec: { pinnedImages: [{ name: `${ART_REPO}@sha256:${'9'.repeat(64)}` }] },
});

function seed(): void {
  allReady();
  api.absent.delete(`${MCO}/pinnedimagesets`);
  api.replaceAll('pinnedimagesets', [
    ours('offline-bundle-4.15.0-worker-1', '4.15.0'),
    ours('offline-bundle-4.14.9-worker-1', '4.14.9'),
    { ...ours('site-extras', ''), metadata: { name: 'site-extras' } },
  ]);
  api.replaceAll('machineconfigpools', [
    pool('master', []),
    pool('worker', [
      'site-extras',
      'offline-bundle-4.15.0-worker-1',
      'offline-bundle-4.14.9-worker-1',
    ]),
  ]);
}

t.test('not every node holds the images: prepare writes no set and says why', async (t) => {
  seed();
  api.put('nodebundlestatuses', nodeStatus('worker-0', 'Preloading', b.fileDigest, b.version));
  const r = await cluster(['prepare', b.file, ...trust]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /PinnedImageSets: none written: not every node holds the images yet/);
  t.same(
    api
      .list('pinnedimagesets')
      .map((s) => s.metadata.name)
      .sort(),
    ['offline-bundle-4.14.9-worker-1', 'offline-bundle-4.15.0-worker-1', 'site-extras'],
  );
});

t.test(
  "every node ready: a set per pool with every image by digest, listed in the pool beside the others; the older release's set goes, the running one's stays",
  async (t) => {
    seed();
    const r = await cluster(['prepare', b.file, ...trust, '--json']);
    t.equal(r.code, 0, r.stderr);
    t.match(JSON.parse(r.stdout).pinnedImageSets, {
      applied: [
        { pool: 'master', sets: ['offline-bundle-4.15.1-master-1'] },
        { pool: 'worker', sets: ['offline-bundle-4.15.1-worker-1'] },
      ],
      removed: ['offline-bundle-4.14.9-worker-1'],
    });
    const set = api.get('pinnedimagesets', 'offline-bundle-4.15.1-worker-1')!;
    t.same(
      set.spec.pinnedImages,
      [
        { name: `${ART_REPO}@${b.payloadDigest}` },
        { name: `${RELEASE_REPO}@${b.releaseDigest}` },
      ].sort((x, y) => x.name.localeCompare(y.name)),
    );
    t.match(set.metadata.labels, {
      'offline-bundle.io/release': '4.15.1',
      'machineconfiguration.openshift.io/role': 'worker',
    });
    t.same(
      api
        .get('machineconfigpools', 'worker')!
        .spec.pinnedImageSets.map((s: { name: string }) => s.name),
      ['site-extras', 'offline-bundle-4.15.0-worker-1', 'offline-bundle-4.15.1-worker-1'],
    );
    t.same(api.get('machineconfigpools', 'master')!.spec.pinnedImageSets, [
      { name: 'offline-bundle-4.15.1-master-1' },
    ]);
    t.equal(api.get('pinnedimagesets', 'offline-bundle-4.14.9-worker-1'), undefined, 'deleted');
    t.ok(api.get('pinnedimagesets', 'site-extras'), 'a set that is not ours is never touched');
    const again = await cluster(['prepare', b.file, ...trust, '--json']);
    t.same(
      api
        .get('machineconfigpools', 'worker')!
        .spec.pinnedImageSets.map((s: { name: string }) => s.name),
      ['site-extras', 'offline-bundle-4.15.0-worker-1', 'offline-bundle-4.15.1-worker-1'],
      'again: the same list',
    );
    t.match(JSON.parse(again.stdout).pinnedImageSets, { removed: [] });
  },
);

t.test('a cluster without the PinnedImageSet kind: said, and nothing fails', async (t) => {
  seed();
  api.absent.add(`${MCO}/pinnedimagesets`);
  const r = await cluster(['prepare', b.file, ...trust]);
  t.equal(r.code, 0, r.stderr);
  t.match(
    r.stdout,
    /PinnedImageSets: none written: the cluster has no PinnedImageSet \(OpenShift before 4\.16/,
  );
  api.absent.delete(`${MCO}/pinnedimagesets`);
});

t.test('upgrade writes them before it sets desiredUpdate', async (t) => {
  seed();
  t.equal((await cluster(['prepare', b.file, ...trust])).code, 0);
  api.replaceAll('pinnedimagesets', []);
  const r = await cluster(['upgrade', b.file, ...trust]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /PinnedImageSets: 2 applied to master, worker/);
  const order = api.requests
    .filter((q) => q.method === 'PATCH' && /pinnedimagesets|clusterversions/.test(q.path))
    .map((q) => q.path.split('/')[4]);
  t.equal(order.at(-1), 'clusterversions', 'desiredUpdate last');
});

t.test('sets of at most 500 images, named in order', async (t) => {
  const images = Array.from({ length: 1201 }, (_, i) => ({
    repository: ART_REPO,
    tag: null,
    digest: `sha256:${i.toString(16).padStart(64, '0')}`,
  }));
  const sets = pinnedSets({ version: '4.16.0', images }, 'worker');
  t.same(
    sets.map((s) => [s.name, s.images.length]),
    [
      ['offline-bundle-4.16.0-worker-1', MAX_PINNED_PER_SET],
      ['offline-bundle-4.16.0-worker-2', 500],
      ['offline-bundle-4.16.0-worker-3', 201],
    ],
  );
  t.equal(new Set(sets.flatMap((s) => s.images)).size, 1201, 'each image once');
});

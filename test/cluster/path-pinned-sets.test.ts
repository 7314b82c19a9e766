// PinnedImageSets of an update path, one series per release (#43): the signed head lists each
// release's payload, so prepare and upgrade (real CLI, API stand-in with the shipped admin RBAC,
// the CVO's history scripted as the CVO writes it) write a series per release and machine pool,
// each named and labelled for its version; once ClusterVersion's history says a later release of
// the path Completed, the earlier release's sets (and the start's) are taken out of the pools and
// deleted, said with why, while an image the later release shares stays pinned by its own sets.
// A path bundle built before the head listed payloads keeps one series named for the last release.
import t from 'tap';
import path from 'node:path';
import { signRelease } from '../builder/release-signing.js';
import { ART_REPO, RELEASE_REPO, clusterFixture, clusterVersion, makeBundle, nodeStatus, type TestBundle } from './lib.js';

const { work, api, key, cluster, allReady } = await clusterFixture(t);
const sign = async (d: string, ref: string) => [await signRelease(key, ref, d)];
const route = { version: '4.16.2', upgradeFrom: ['4.15.40'], via: [{ version: '4.15.40', upgradeFrom: ['4.14.30'] }], sign };
const p = await makeBundle(path.join(work, 'path'), { ...route, shared: true });
const older = await makeBundle(path.join(work, 'older'), { ...route, payloads: false });
const MCO = 'machineconfiguration.openshift.io';
const RELEASE_LABEL = 'offline-bundle.io/release';
const image1 = `${RELEASE_REPO}@${p.via[0]!.releaseDigest}`;
const image2 = `${RELEASE_REPO}@${p.releaseDigest}`;
const shared = `${ART_REPO}@${p.sharedDigest!}`;
const START_SET = 'offline-bundle-4.14.30-worker-1';

const pool = (name: string, sets: string[]) => ({ apiVersion: `${MCO}/v1`, kind: 'MachineConfigPool', metadata: { name }, spec: { paused: false, pinnedImageSets: sets.map((n) => ({ name: n })) } });
const set = (name: string, release: string) => ({ apiVersion: `${MCO}/v1`, kind: 'PinnedImageSet', metadata: { name, labels: { [RELEASE_LABEL]: release } }, spec: { pinnedImages: [{ name: `${ART_REPO}@sha256:${'9'.repeat(64)}` }] } });
const names = (release?: string) => api.list('pinnedimagesets').filter((s) => !release || s.metadata.labels?.[RELEASE_LABEL] === release).map((s) => s.metadata.name as string).sort();
const pinned = (name: string) => api.get('pinnedimagesets', name)!.spec.pinnedImages.map((i: { name: string }) => i.name).sort();
const listed = (name: string) => api.get('machineconfigpools', name)!.spec.pinnedImageSets.map((s: { name: string }) => s.name);

/** Every node Ready for `b`; the cluster on 4.14.30 with that release's set (an earlier bundle's) and one not ours in the worker pool. */
function seed(b: TestBundle): void {
  allReady();
  api.statuses = api.nodes.map((n) => nodeStatus(n.metadata.name, 'Ready', b.fileDigest, b.version));
  api.clusterVersion = clusterVersion('4.14.30');
  api.replaceAll('pinnedimagesets', [set(START_SET, '4.14.30'), { ...set('site-extras', ''), metadata: { name: 'site-extras' } }]);
  api.replaceAll('machineconfigpools', [pool('master', []), pool('worker', ['site-extras', START_SET])]);
}

/** What the CVO writes into ClusterVersion's history as it takes `version`, and desiredUpdate as upgrade set it. */
function cvo(version: string, image: string, state: 'Partial' | 'Completed'): void {
  const cv = api.clusterVersion!;
  const history = cv.status.history.filter((h: { version: string }) => h.version !== version);
  api.clusterVersion = { ...cv, spec: { ...cv.spec, desiredUpdate: { version, image, force: false } }, status: { ...cv.status, history: [{ state, version, image }, ...history] } };
}

t.test('prepare: a series per release and pool, each named for its version; an image both releases share in both; the start\'s set stays', async (t) => {
  seed(p);
  const r = await cluster(['prepare', p.file, '--key', p.pub, '--json']);
  t.equal(r.code, 0, r.stderr);
  t.match(JSON.parse(r.stdout).pinnedImageSets, {
    applied: [{ pool: 'master', sets: ['offline-bundle-4.15.40-master-1', 'offline-bundle-4.16.2-master-1'] }, { pool: 'worker', sets: ['offline-bundle-4.15.40-worker-1', 'offline-bundle-4.16.2-worker-1'] }],
    removed: [],
  });
  t.same(names('4.15.40'), ['offline-bundle-4.15.40-master-1', 'offline-bundle-4.15.40-worker-1'], 'labelled with their release');
  t.same(pinned('offline-bundle-4.15.40-worker-1'), [`${ART_REPO}@${p.via[0]!.payloadDigest}`, image1, shared].sort(), '4.15.40: its own payload, as the head lists it');
  t.same(pinned('offline-bundle-4.16.2-worker-1'), [`${ART_REPO}@${p.payloadDigest}`, image2, shared].sort(), '4.16.2: its own; the shared image in both');
  t.same(listed('worker'), ['site-extras', START_SET, 'offline-bundle-4.15.40-worker-1', 'offline-bundle-4.16.2-worker-1'], 'listed in the pool beside the others');
  t.ok(api.get('pinnedimagesets', START_SET), 'the release the path starts from keeps its set until the first hop Completed');
});

t.test('upgrade, hop by hop: past each release, its sets go, said with why; the later release\'s keep what it shares', async (t) => {
  seed(p);
  t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
  t.equal((await cluster(['upgrade', p.file, '--key', p.pub])).code, 0, 'hop one');
  t.ok(api.get('pinnedimagesets', START_SET), 'hop one under way: the start\'s set stays');
  cvo('4.15.40', image1, 'Completed');
  const two = await cluster(['upgrade', p.file, '--key', p.pub]);
  t.equal(two.code, 0, two.stderr);
  t.match(two.stdout, `PinnedImageSets: 4 applied to master, worker; removed 4.14.30's (${START_SET}): the cluster completed 4.15.40, later on the path`);
  t.equal(api.get('pinnedimagesets', START_SET), undefined, 'deleted');
  t.same(names('4.15.40').length, 2, 'the running release\'s sets stay through hop two');
  cvo('4.16.2', image2, 'Completed');
  const fin = await cluster(['upgrade', p.file, '--key', p.pub, '--json']);
  t.equal(fin.code, 0, fin.stderr);
  const j = JSON.parse(fin.stdout);
  t.equal(j.state, 'finished');
  t.match(j.pinnedImageSets, { applied: [{ pool: 'master', sets: ['offline-bundle-4.16.2-master-1'] }, { pool: 'worker', sets: ['offline-bundle-4.16.2-worker-1'] }], removed: ['offline-bundle-4.15.40-master-1', 'offline-bundle-4.15.40-worker-1'], passed: [{ version: '4.15.40', after: '4.16.2' }] });
  t.same(names('4.15.40'), [], '4.15.40\'s sets deleted once 4.16.2 Completed');
  t.same(listed('worker'), ['site-extras', 'offline-bundle-4.16.2-worker-1'], 'and out of the pool');
  t.ok(pinned('offline-bundle-4.16.2-worker-1').includes(shared), 'the image both releases share stays pinned by 4.16.2\'s set');
  t.equal(api.get('machineconfigpools', 'worker')!.spec.paused, false, 'the same run unpaused the pool');
});

t.test('a later prepare: keeps the running release\'s sets while the next hop is under way, drops them once it Completed', async (t) => {
  seed(p);
  t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
  cvo('4.15.40', image1, 'Completed');
  cvo('4.16.2', image2, 'Partial');
  t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
  t.same(names('4.15.40').length, 2, 'hop two under way: 4.15.40 runs, its sets stay');
  cvo('4.16.2', image2, 'Completed');
  const r = await cluster(['prepare', p.file, '--key', p.pub]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, "removed 4.15.40's (offline-bundle-4.15.40-master-1, offline-bundle-4.15.40-worker-1): the cluster completed 4.16.2, later on the path");
  t.same(names('4.15.40'), []);
  t.same(names('4.16.2'), ['offline-bundle-4.16.2-master-1', 'offline-bundle-4.16.2-worker-1']);
});

t.test('a path bundle whose head lists no payloads (built before): one series for the path, named for its last release', async (t) => {
  seed(older);
  const r = await cluster(['prepare', older.file, '--key', older.pub, '--json']);
  t.equal(r.code, 0, r.stderr);
  t.same(names('4.15.40'), [], 'no series of its own: the head does not say which images are 4.15.40\'s');
  t.same(pinned('offline-bundle-4.16.2-worker-1'), [`${ART_REPO}@${older.via[0]!.payloadDigest}`, `${ART_REPO}@${older.payloadDigest}`, `${RELEASE_REPO}@${older.via[0]!.releaseDigest}`, `${RELEASE_REPO}@${older.releaseDigest}`].sort());
});

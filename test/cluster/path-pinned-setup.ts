// Shared by the PinnedImageSet tests of an update path: the cluster fixture (API stand-in with
// the shipped admin RBAC), a path bundle with payload lists and one without, pools and sets as
// the MCO and an earlier bundle left them, and what the CVO and the MCO write as the cluster moves.
import path from 'node:path';
import { signRelease } from '../builder/release-signing.js';
import {
  ART_REPO,
  RELEASE_REPO,
  clusterFixture,
  clusterVersion,
  makeBundle,
  nodeStatus,
  type TestBundle,
} from './lib.js';

export async function pathPinnedSetup(t: { teardown(fn: () => unknown): void }) {
  const { work, api, key, cluster, allReady } = await clusterFixture(t);
  const sign = async (d: string, ref: string) => [await signRelease(key, ref, d)];
  const route = {
    version: '4.16.2',
    upgradeFrom: ['4.15.40'],
    via: [{ version: '4.15.40', upgradeFrom: ['4.14.30'] }],
    sign,
  };
  const p = await makeBundle(path.join(work, 'path'), { ...route, shared: true });
  const older = await makeBundle(path.join(work, 'older'), { ...route, payloads: false });
  const MCO = 'machineconfiguration.openshift.io';
  const RELEASE_LABEL = 'offline-bundle.io/release';
  const image1 = `${RELEASE_REPO}@${p.via[0]!.releaseDigest}`;
  const image2 = `${RELEASE_REPO}@${p.releaseDigest}`;
  const shared = `${ART_REPO}@${p.sharedDigest!}`;
  const START_SET = 'offline-bundle-4.14.30-worker-1';
  const START_MASTER = 'offline-bundle-4.14.30-master-1';

  /** A pool's status as the MCO writes it: every node on `reached` (updated), or some still on it while `rendered` waits (paused, or updating). */
  function poolStatus(
    name: string,
    how: 'updated' | 'pending' | 'updating',
    rendered = `rendered-${name}-1`,
  ) {
    const done = how === 'updated';
    return {
      spec: { configuration: { name: rendered } },
      status: {
        configuration: { name: done ? rendered : `rendered-${name}-0` },
        machineCount: 2,
        updatedMachineCount: done ? 2 : 0,
        readyMachineCount: done ? 2 : 1,
        conditions: [
          { type: 'Updated', status: done ? 'True' : 'False' },
          { type: 'Updating', status: how === 'updating' ? 'True' : 'False' },
        ],
      },
    };
  }
  const pool = (name: string, sets: string[]) => {
    const st = poolStatus(name, 'updated');
    return {
      apiVersion: `${MCO}/v1`,
      kind: 'MachineConfigPool',
      metadata: { name },
      spec: { paused: false, pinnedImageSets: sets.map((n) => ({ name: n })), ...st.spec },
      status: st.status,
    };
  };
  /** What the MCO writes into a pool's status as its nodes update (its spec as the admin or upgrade left it). */
  function mco(name: string, how: 'updated' | 'pending' | 'updating', rendered?: string): void {
    const cur = api.get('machineconfigpools', name)!;
    const st = poolStatus(name, how, rendered);
    api.put('machineconfigpools', { ...cur, spec: { ...cur.spec, ...st.spec }, status: st.status });
  }
  const set = (name: string, release: string, role?: string) => ({
    apiVersion: `${MCO}/v1`,
    kind: 'PinnedImageSet',
    metadata: {
      name,
      labels: {
        [RELEASE_LABEL]: release,
        ...(role ? { 'machineconfiguration.openshift.io/role': role } : {}),
      },
    },
    spec: { pinnedImages: [{ name: `${ART_REPO}@sha256:${'9'.repeat(64)}` }] },
  });
  const names = (release?: string) =>
    api
      .list('pinnedimagesets')
      .filter((s) => !release || s.metadata.labels?.[RELEASE_LABEL] === release)
      .map((s) => s.metadata.name as string)
      .sort();
  const pinned = (name: string) =>
    api
      .get('pinnedimagesets', name)!
      .spec.pinnedImages.map((i: { name: string }) => i.name)
      .sort();
  const listed = (name: string) =>
    api.get('machineconfigpools', name)!.spec.pinnedImageSets.map((s: { name: string }) => s.name);

  /** Every node Ready for `b`; the cluster on 4.14.30 with that release's set (an earlier bundle's) and one not ours in the worker pool. */
  function seed(b: TestBundle): void {
    allReady();
    api.statuses = api.nodes.map((n) =>
      nodeStatus(n.metadata.name, 'Ready', b.fileDigest, b.version),
    );
    api.clusterVersion = clusterVersion('4.14.30');
    api.intercept = undefined;
    api.replaceAll('pinnedimagesets', [
      set(START_SET, '4.14.30', 'worker'),
      set(START_MASTER, '4.14.30', 'master'),
      { ...set('site-extras', ''), metadata: { name: 'site-extras' } },
    ]);
    api.replaceAll('machineconfigpools', [
      pool('master', [START_MASTER]),
      pool('worker', ['site-extras', START_SET]),
    ]);
  }

  /** What the CVO writes into ClusterVersion's history as it takes `version`, and desiredUpdate as upgrade set it. */
  function cvo(version: string, image: string, state: 'Partial' | 'Completed'): void {
    const cv = api.clusterVersion!;
    const history = cv.status.history.filter((h: { version: string }) => h.version !== version);
    api.clusterVersion = {
      ...cv,
      spec: { ...cv.spec, desiredUpdate: { version, image, force: false } },
      status: { ...cv.status, history: [{ state, version, image }, ...history] },
    };
  }
  return {
    work,
    api,
    cluster,
    p,
    older,
    MCO,
    RELEASE_LABEL,
    image1,
    image2,
    shared,
    START_SET,
    START_MASTER,
    names,
    pinned,
    listed,
    seed,
    cvo,
    mco,
  };
}

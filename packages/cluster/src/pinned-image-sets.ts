/**
 * PinnedImageSets (machineconfiguration.openshift.io/v1) for the bundle's images, one series per
 * MachineConfigPool, listed in the pool's spec.pinnedImageSets as the MCO binds them. On the
 * releases where the MCO reads them, the MCD then takes the OS image from containers-storage
 * instead of pulling it through registries.conf, and CRI-O keeps every listed image from the
 * image GC; our agent's own pin drop-in stays beside the MCO's (neither touches the other's).
 * Written only once every node holds the images: the MCD pulls what a node lacks, and with no
 * registry that degrades the pool.
 */
import { apiCall, APPLY_PATCH, isApiException, listAll, requestOptions, type AdminApis } from '@offline-bundle/status';
import { ADMIN_FIELD_MANAGER } from './upgrade-gate.js';

/** What the sets are made of: a release's version and its images by digest. */
export interface ReleaseImages {
  version: string;
  images: readonly { repository: string; digest: string }[];
  /** An update path's releases, the final one (`version`) last: its sets pin every release's images at once. */
  path?: readonly { version: string }[];
}

const MCO = { group: 'machineconfiguration.openshift.io', version: 'v1' };
/** The MCO refuses a set of more images. */
export const MAX_PINNED_PER_SET = 500;
export const PINNED_SET_LABEL = 'offline-bundle.io/release';
/** On the sets of an update path: its releases, as "4.15.40,4.16.2". */
export const PINNED_PATH_ANNOTATION = 'offline-bundle.io/path';

export interface PinnedSetsResult {
  /** Sets applied, by pool. */
  applied: { pool: string; sets: string[] }[];
  /** Our sets of other releases taken out of the pools and deleted (the running release's are kept). */
  removed: string[];
  /** Why nothing was written, when so. */
  skipped?: string;
}

/** DNS-1123 name of set `n` of a release for a pool. */
export const pinnedSetName = (version: string, pool: string, n: number): string =>
  `offline-bundle-${version.toLowerCase().replace(/[^a-z0-9.-]/g, '-')}-${pool}-${n}`.slice(0, 253);

/** The bundle's images by digest, in sets of at most MAX_PINNED_PER_SET. */
export function pinnedSets(b: ReleaseImages, pool: string): { name: string; images: string[] }[] {
  const images = [...new Set(b.images.map((i) => `${i.repository}@${i.digest}`))].sort();
  const out: { name: string; images: string[] }[] = [];
  for (let i = 0; i < images.length; i += MAX_PINNED_PER_SET) out.push({ name: pinnedSetName(b.version, pool, out.length + 1), images: images.slice(i, i + MAX_PINNED_PER_SET) });
  return out;
}

const obj = (v: unknown) => (typeof v === 'object' && v !== null ? v as Record<string, unknown> : {});
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

/**
 * Applies the release's sets to every pool and lists them in the pool; drops from the pools and
 * deletes our sets of releases other than `version` and `keep` (the running one, and while a
 * path is under way the one it started from). A bundle of an update path is one series named
 * for its final release holding every release's images (the head does not say which payload
 * holds which image; an image both share is pinned once), so the next bundle's sets replace
 * it as they replace any release's. A cluster without PinnedImageSet or MachineConfigPools is
 * told so, and nothing fails.
 */
export async function applyPinnedImageSets(apis: AdminApis, b: ReleaseImages, keep: readonly string[] = []): Promise<PinnedSetsResult> {
  let absent = false;
  const existing = await listAll('list pinnedimagesets', (q) => apis.custom.listClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', ...q }),
    (o) => ({ name: str(obj(o.metadata).name) ?? '', release: str(obj(obj(o.metadata).labels)[PINNED_SET_LABEL]) }), { notFound: () => { absent = true; return []; } });
  if (absent) return { applied: [], removed: [], skipped: 'the cluster has no PinnedImageSet (OpenShift before 4.16, or without its feature gate): the OS image and the payload stay pinned by the agent alone' };
  const pools = await listAll('list machineconfigpools', (q) => apis.custom.listClusterCustomObject({ ...MCO, plural: 'machineconfigpools', ...q }),
    (o) => ({ name: str(obj(o.metadata).name) ?? '', sets: (Array.isArray(obj(o.spec).pinnedImageSets) ? obj(o.spec).pinnedImageSets as unknown[] : []).map((s) => str(obj(s).name)).filter((x): x is string => !!x) }), { notFound: () => [] });
  if (!pools.length) return { applied: [], removed: [], skipped: 'the cluster has no MachineConfigPool to bind PinnedImageSets to' };
  const stale = new Set(existing.filter((s) => s.release && s.release !== b.version && !keep.includes(s.release)).map((s) => s.name));
  const applied: PinnedSetsResult['applied'] = [];
  for (const pool of pools) {
    const sets = pinnedSets(b, pool.name);
    for (const s of sets) {
      const body = {
        apiVersion: `${MCO.group}/${MCO.version}`, kind: 'PinnedImageSet',
        metadata: { name: s.name, ...(b.path && b.path.length > 1 ? { annotations: { [PINNED_PATH_ANNOTATION]: b.path.map((r) => r.version).join(',') } } : {}), labels: { [PINNED_SET_LABEL]: b.version, 'machineconfiguration.openshift.io/role': pool.name, 'app.kubernetes.io/part-of': 'offline-bundle' } },
        spec: { pinnedImages: s.images.map((name) => ({ name })) },
      };
      await apiCall(`apply pinnedimagesets "${s.name}"`, () => apis.custom.patchClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', name: s.name, body, fieldManager: ADMIN_FIELD_MANAGER, force: true }, requestOptions(undefined, APPLY_PATCH)));
    }
    const names = sets.map((s) => s.name);
    const want = [...pool.sets.filter((n) => !stale.has(n) && !names.includes(n)), ...names];
    // a merge patch replaces the list whole: what others listed is kept as read
    if (want.join() !== pool.sets.join()) {
      await apiCall(`update machineconfigpools "${pool.name}"`, () => apis.custom.patchClusterCustomObject({ ...MCO, plural: 'machineconfigpools', name: pool.name, body: { spec: { pinnedImageSets: want.map((name) => ({ name })) } } }, requestOptions(undefined, 'application/merge-patch+json')));
    }
    applied.push({ pool: pool.name, sets: names });
  }
  const removed: string[] = [];
  for (const name of stale) {
    await apiCall(`delete pinnedimagesets "${name}"`, () => apis.custom.deleteClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', name }).catch((err: unknown) => {
      if (isApiException(err) && err.code === 404) return undefined;
      throw err;
    }));
    removed.push(name);
  }
  return { applied, removed };
}

/** One line for the admin. */
export function pinnedSetsLine(r: PinnedSetsResult): string {
  if (r.skipped) return `PinnedImageSets: none written: ${r.skipped}`;
  const sets = r.applied.reduce((n, p) => n + p.sets.length, 0);
  return `PinnedImageSets: ${sets} applied to ${r.applied.map((p) => p.pool).join(', ')}${r.removed.length ? `; removed ${r.removed.join(', ')}` : ''}`;
}

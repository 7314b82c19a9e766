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
  /**
   * An update path's releases, the final one (`version`) last. With each one's `payload` (the
   * signed head's digests of its images) each release gets a series of its own; without (a
   * bundle built before the head said), one series named for the final release pins them all.
   */
  path?: readonly { version: string; payload?: readonly string[] }[];
}

/** A release of the path the cluster has moved past: its sets go. */
export interface PassedRelease {
  version: string;
  /** The later release of the path ClusterVersion's history says Completed. */
  after: string;
}

/** One series: the release it is named and labelled for, and its images. */
export interface ReleaseSeries { version: string; images: readonly { repository: string; digest: string }[] }

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
  /** Of `removed`, those of releases the cluster has moved past on the path: which release's, and after which. */
  passed?: (PassedRelease & { sets: string[] })[];
  /** Why nothing was written, when so. */
  skipped?: string;
}

/** DNS-1123 name of set `n` of a release for a pool. */
export const pinnedSetName = (version: string, pool: string, n: number): string =>
  `offline-bundle-${version.toLowerCase().replace(/[^a-z0-9.-]/g, '-')}-${pool}-${n}`.slice(0, 253);

/**
 * The series to write: with every release's payload listed, one per release of the path the
 * cluster has not moved past (`passed`), each holding all of its payload, so an image two
 * releases share stays pinned by the later one when the earlier one's sets go; the final release
 * also holds what no payload lists (add-ons, operators, the agent). Otherwise one series for the
 * whole bundle, named for its final release.
 */
export function releaseSeries(b: ReleaseImages, passed: readonly PassedRelease[] = []): ReleaseSeries[] {
  const path = b.path ?? [];
  if (path.length < 2 || path.some((r) => !r.payload)) return [{ version: b.version, images: b.images }];
  const listed = new Set(path.flatMap((r) => r.payload!));
  const gone = new Set(passed.map((p) => p.version));
  return path.filter((r) => !gone.has(r.version) || r.version === b.version).map((r) => {
    const own = new Set(r.payload);
    return { version: r.version, images: b.images.filter((i) => own.has(i.digest) || (r.version === b.version && !listed.has(i.digest))) };
  });
}

/** A series' images by digest, in sets of at most MAX_PINNED_PER_SET. */
export function pinnedSets(b: ReleaseSeries, pool: string): { name: string; images: string[] }[] {
  const images = [...new Set(b.images.map((i) => `${i.repository}@${i.digest}`))].sort();
  const out: { name: string; images: string[] }[] = [];
  for (let i = 0; i < images.length; i += MAX_PINNED_PER_SET) out.push({ name: pinnedSetName(b.version, pool, out.length + 1), images: images.slice(i, i + MAX_PINNED_PER_SET) });
  return out;
}

const obj = (v: unknown) => (typeof v === 'object' && v !== null ? v as Record<string, unknown> : {});
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

/** Applies `series`' sets for `pool` and lists them in it, dropping `stale` from its list; the names applied. */
async function applyToPool(apis: AdminApis, b: ReleaseImages, series: readonly ReleaseSeries[], pool: { name: string; sets: string[] }, stale: ReadonlySet<string>): Promise<string[]> {
  const names: string[] = [];
  for (const release of series) {
    for (const s of pinnedSets(release, pool.name)) {
      const body = {
        apiVersion: `${MCO.group}/${MCO.version}`, kind: 'PinnedImageSet',
        metadata: { name: s.name, ...(b.path && b.path.length > 1 ? { annotations: { [PINNED_PATH_ANNOTATION]: b.path.map((r) => r.version).join(',') } } : {}), labels: { [PINNED_SET_LABEL]: release.version, 'machineconfiguration.openshift.io/role': pool.name, 'app.kubernetes.io/part-of': 'offline-bundle' } },
        spec: { pinnedImages: s.images.map((name) => ({ name })) },
      };
      await apiCall(`apply pinnedimagesets "${s.name}"`, () => apis.custom.patchClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', name: s.name, body, fieldManager: ADMIN_FIELD_MANAGER, force: true }, requestOptions(undefined, APPLY_PATCH)));
      names.push(s.name);
    }
  }
  const want = [...pool.sets.filter((n) => !stale.has(n) && !names.includes(n)), ...names];
  // a merge patch replaces the list whole: what others listed is kept as read
  if (want.join() !== pool.sets.join()) {
    await apiCall(`update machineconfigpools "${pool.name}"`, () => apis.custom.patchClusterCustomObject({ ...MCO, plural: 'machineconfigpools', name: pool.name, body: { spec: { pinnedImageSets: want.map((name) => ({ name })) } } }, requestOptions(undefined, 'application/merge-patch+json')));
  }
  return names;
}

/**
 * Applies the bundle's sets to every pool and lists them in the pool; drops from the pools and
 * deletes our sets of releases it does not write and `keep` does not name (the running one,
 * and the one a path started from until its first hop Completed). An update path whose head
 * lists each release's payload is a series per release (releaseSeries): a release in `passed`
 * (the cluster completed a later one of the path) gets none and its sets go, every later
 * release's being applied first; a path without the lists is one series named for its final
 * release, replaced by the next bundle's as any release's. A cluster without PinnedImageSet or
 * MachineConfigPools is told so, and nothing fails.
 */
export async function applyPinnedImageSets(apis: AdminApis, b: ReleaseImages, keep: readonly string[] = [], passed: readonly PassedRelease[] = []): Promise<PinnedSetsResult> {
  let absent = false;
  const existing = await listAll('list pinnedimagesets', (q) => apis.custom.listClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', ...q }),
    (o) => ({ name: str(obj(o.metadata).name) ?? '', release: str(obj(obj(o.metadata).labels)[PINNED_SET_LABEL]) }), { notFound: () => { absent = true; return []; } });
  if (absent) return { applied: [], removed: [], skipped: 'the cluster has no PinnedImageSet (OpenShift before 4.16, or without its feature gate): the OS image and the payload stay pinned by the agent alone' };
  const pools = await listAll('list machineconfigpools', (q) => apis.custom.listClusterCustomObject({ ...MCO, plural: 'machineconfigpools', ...q }),
    (o) => ({ name: str(obj(o.metadata).name) ?? '', sets: (Array.isArray(obj(o.spec).pinnedImageSets) ? obj(o.spec).pinnedImageSets as unknown[] : []).map((s) => str(obj(s).name)).filter((x): x is string => !!x) }), { notFound: () => [] });
  if (!pools.length) return { applied: [], removed: [], skipped: 'the cluster has no MachineConfigPool to bind PinnedImageSets to' };
  const series = releaseSeries(b, passed);
  const written = new Set(series.map((r) => r.version));
  const gone = new Set(passed.map((p) => p.version));
  // a passed release's sets go even when kept otherwise: the cluster is past it on the path
  const staleSets = existing.filter((s) => s.release && !written.has(s.release) && (!keep.includes(s.release) || gone.has(s.release)));
  const stale = new Set(staleSets.map((s) => s.name));
  const applied: PinnedSetsResult['applied'] = [];
  for (const pool of pools) applied.push({ pool: pool.name, sets: await applyToPool(apis, b, series, pool, stale) });
  const removed: string[] = [];
  for (const name of stale) {
    await apiCall(`delete pinnedimagesets "${name}"`, () => apis.custom.deleteClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', name }).catch((err: unknown) => {
      if (isApiException(err) && err.code === 404) return undefined;
      throw err;
    }));
    removed.push(name);
  }
  const byRelease = passed.map((p) => ({ ...p, sets: staleSets.filter((s) => s.release === p.version).map((s) => s.name) })).filter((p) => p.sets.length);
  return { applied, removed, ...(byRelease.length ? { passed: byRelease } : {}) };
}

/** One line for the admin. */
export function pinnedSetsLine(r: PinnedSetsResult): string {
  if (r.skipped) return `PinnedImageSets: none written: ${r.skipped}`;
  const sets = r.applied.reduce((n, p) => n + p.sets.length, 0);
  const passed = new Set((r.passed ?? []).flatMap((p) => p.sets));
  const other = r.removed.filter((n) => !passed.has(n));
  const why = (r.passed ?? []).map((p) => `; removed ${p.version}'s (${p.sets.join(', ')}): the cluster completed ${p.after}, later on the path`).join('');
  return `PinnedImageSets: ${sets} applied to ${r.applied.map((p) => p.pool).join(', ')}${why}${other.length ? `; removed ${other.join(', ')}` : ''}`;
}

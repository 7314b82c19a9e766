/**
 * PinnedImageSets (machineconfiguration.openshift.io/v1) for the bundle's images, one series per
 * MachineConfigPool, listed in the pool's spec.pinnedImageSets as the MCO binds them. On the
 * releases where the MCO reads them, the MCD then takes the OS image from containers-storage
 * instead of pulling it through registries.conf, and CRI-O keeps every listed image from the
 * image GC; our agent's own pin drop-in stays beside the MCO's (neither touches the other's).
 * Written only once every node holds the images: the MCD pulls what a node lacks, and with no
 * registry that degrades the pool.
 */
import { createHash } from 'node:crypto';
import { isPayloadComponent } from '@offline-bundle/format';
import {
  apiCall,
  APPLY_PATCH,
  ClusterError,
  isApiException,
  listAll,
  requestOptions,
  type AdminApis,
} from '@offline-bundle/kube';
import { poolNotUpdated } from './machine-pools.js';
import { ADMIN_FIELD_MANAGER } from './upgrade-gate.js';

/** What the sets are made of: a release's version and its images by digest. */
interface ReleaseImages {
  version: string;
  /** `component`: the head's (a release payload's name, or none for an add-on). */
  images: readonly { repository: string; digest: string; component?: string }[];
  /**
   * An update path's releases, the final one (`version`) last. With each one's `payload` (the
   * signed head's digests of its images) each release gets a series of its own; without (a
   * bundle built before the head said), one series named for the final release pins them all.
   */
  path?: readonly { version: string; payload?: readonly string[] }[];
}

/** A release of the path the cluster has moved past: its sets go from each pool whose nodes moved past it too. */
export interface PassedRelease {
  version: string;
  /** The later release of the path ClusterVersion's history says Completed. */
  after: string;
}

/** One series: the release it is named and labelled for, and its images. */
export interface ReleaseSeries {
  version: string;
  images: readonly { repository: string; digest: string }[];
}

const MCO = { group: 'machineconfiguration.openshift.io', version: 'v1' };
/** The MCO refuses a set of more images. */
export const MAX_PINNED_PER_SET = 500;
const PINNED_SET_LABEL = 'offline-bundle.io/release';
/** On the sets of an update path: its releases, as "4.15.40,4.16.2". */
const PINNED_PATH_ANNOTATION = 'offline-bundle.io/path';
const ROLE_LABEL = 'machineconfiguration.openshift.io/role';
/** Kubernetes' bound on a label value. */
const MAX_LABEL_VALUE_CHARS = 63;
/** Hex characters of the version's sha256 added to a label value or set name that had to be changed. */
const NAME_HASH_CHARS = 8;
/** Tries of a pool's list update that another writer changed between our read and our write (409). */
const POOL_UPDATE_TRIES = 3;

export interface PinnedSetsResult {
  /** Sets applied, by pool. */
  applied: { pool: string; sets: string[] }[];
  /** Our sets of other releases taken out of the pools and deleted (the running release's are kept). */
  removed: string[];
  /** Of `removed`, those of releases the cluster has moved past on the path: which release's, and after which. */
  passed?: (PassedRelease & { sets: string[] })[];
  /** Passed releases whose sets a pool keeps, and why: its nodes may still run that release. */
  held?: { version: string; pool: string; why: string }[];
  /** Deletes that failed (the sets are out of the pools; the next run deletes them). */
  failed?: string[];
  /** Why nothing was written, when so. */
  skipped?: string;
}

const shortHash = (s: string) =>
  createHash('sha256').update(s).digest('hex').slice(0, NAME_HASH_CHARS);

/** The release label's value: the version itself when it is a valid label value, else a sanitized one with a short hash of it, so two versions never share one. */
export function releaseLabel(version: string): string {
  if (
    version.length <= MAX_LABEL_VALUE_CHARS &&
    /^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$/.test(version)
  )
    return version;
  const base = version
    .replace(/[^A-Za-z0-9._-]/g, '-')
    .slice(0, MAX_LABEL_VALUE_CHARS - NAME_HASH_CHARS - 1)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
  return `${base}${base ? '-' : ''}${shortHash(version)}`;
}

/** DNS-1123 name of set `n` of a release for a pool; a version that had to be changed ("+", "_", capitals) gets a short hash of it, so two never collide. */
export function pinnedSetName(version: string, pool: string, n: number): string {
  const slug = version.toLowerCase().replace(/[^a-z0-9.-]/g, '-');
  return `offline-bundle-${slug}${slug === version ? '' : `-${shortHash(version)}`}-${pool}-${n}`.slice(
    0,
    253,
  );
}

/**
 * The series to write: with every release's payload listed, one per release of the path the
 * pool has not moved past (`passed`), each holding all of its payload, so an image two
 * releases share stays pinned by the later one when the earlier one's sets go; the final release
 * also holds every image that is not only a payload's component (add-ons, operators, the agent,
 * an add-on of the same digest as an earlier payload's image). Otherwise one series for the
 * whole bundle, named for its final release.
 */
export function releaseSeries(
  b: ReleaseImages,
  passed: readonly PassedRelease[] = [],
): ReleaseSeries[] {
  const path = b.path ?? [];
  if (path.length < 2 || path.some((r) => !r.payload))
    return [{ version: b.version, images: b.images }];
  // a digest goes with its releases only when every entry of it is a payload's component
  const notPayload = new Set(
    b.images.filter((i) => !isPayloadComponent(i.component)).map((i) => i.digest),
  );
  const gone = new Set(passed.map((p) => p.version));
  return path
    .filter((r) => !gone.has(r.version) || r.version === b.version)
    .map((r) => {
      const own = new Set(r.payload);
      return {
        version: r.version,
        images: b.images.filter(
          (i) => own.has(i.digest) || (r.version === b.version && notPayload.has(i.digest)),
        ),
      };
    });
}

/** A series' images by digest, in sets of at most MAX_PINNED_PER_SET. */
export function pinnedSets(b: ReleaseSeries, pool: string): { name: string; images: string[] }[] {
  const images = [...new Set(b.images.map((i) => `${i.repository}@${i.digest}`))].sort();
  const out: { name: string; images: string[] }[] = [];
  for (let i = 0; i < images.length; i += MAX_PINNED_PER_SET)
    out.push({
      name: pinnedSetName(b.version, pool, out.length + 1),
      images: images.slice(i, i + MAX_PINNED_PER_SET),
    });
  return out;
}

const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

interface SetRead {
  name: string;
  release?: string;
  pool?: string;
}
interface PoolRead {
  name: string;
  sets: string[];
  resourceVersion?: string;
  notUpdated?: string;
}

const readPool = (o: Record<string, unknown>): PoolRead => {
  const rv = str(obj(o.metadata).resourceVersion);
  const why = poolNotUpdated(o);
  return {
    name: str(obj(o.metadata).name) ?? '',
    sets: (Array.isArray(obj(o.spec).pinnedImageSets)
      ? (obj(o.spec).pinnedImageSets as unknown[])
      : []
    )
      .map((s) => str(obj(s).name))
      .filter((x): x is string => !!x),
    ...(rv ? { resourceVersion: rv } : {}),
    ...(why ? { notUpdated: why } : {}),
  };
};

const listPools = (apis: AdminApis) =>
  listAll(
    'list machineconfigpools',
    (q) => apis.custom.listClusterCustomObject({ ...MCO, plural: 'machineconfigpools', ...q }),
    readPool,
    { notFound: () => [] },
  );

/** One pool's part: the series it gets, our sets of it that go, and the passed releases it keeps (its nodes may still run them). */
interface PoolPlan {
  pool: PoolRead;
  series: ReleaseSeries[];
  stale: SetRead[];
  held: PassedRelease[];
}

function poolPlan(
  b: ReleaseImages,
  pool: PoolRead,
  existing: readonly SetRead[],
  keep: readonly string[],
  passed: readonly PassedRelease[],
): PoolPlan {
  // a passed release's sets go only from a pool whose nodes all run a later one: a paused or updating pool still runs it
  const held = pool.notUpdated ? [...passed] : [];
  const series = releaseSeries(b, pool.notUpdated ? [] : passed);
  const kept = new Set(
    [...series.map((s) => s.version), ...keep, ...held.map((p) => p.version)].map(releaseLabel),
  );
  const stale = existing.filter(
    (s) => s.release && (s.pool ?? pool.name) === pool.name && !kept.has(s.release),
  );
  return { pool, series, stale, held };
}

/** The pool's list as it should be; undefined when it already is. */
function poolList(
  pool: PoolRead,
  names: readonly string[],
  gone: ReadonlySet<string>,
): string[] | undefined {
  const want = [...pool.sets.filter((n) => !gone.has(n) && !names.includes(n)), ...names];
  return want.join() === pool.sets.join() ? undefined : want;
}

/** Sets the pool's list (a merge patch replaces it whole) at the version read; another writer's change in between (409) is read again and kept. */
async function updatePoolList(
  apis: AdminApis,
  read: PoolRead,
  names: readonly string[],
  gone: ReadonlySet<string>,
): Promise<void> {
  let pool = read;
  for (let tries = 1; ; tries++) {
    const want = poolList(pool, names, gone);
    if (!want) return;
    const body = {
      metadata: { ...(pool.resourceVersion ? { resourceVersion: pool.resourceVersion } : {}) },
      spec: { pinnedImageSets: want.map((name) => ({ name })) },
    };
    try {
      await apiCall(`update machineconfigpools "${pool.name}"`, () =>
        apis.custom.patchClusterCustomObject(
          { ...MCO, plural: 'machineconfigpools', name: pool.name, body },
          requestOptions(undefined, 'application/merge-patch+json'),
        ),
      );
      return;
    } catch (err) {
      const conflict =
        err instanceof ClusterError && isApiException(err.cause) && err.cause.code === 409;
      if (!conflict || tries >= POOL_UPDATE_TRIES) throw err;
      const again = (await listPools(apis)).find((p) => p.name === read.name);
      if (!again) return;
      pool = again;
    }
  }
}

/** Applies the plan's sets for its pool; the names applied. */
async function applySets(apis: AdminApis, b: ReleaseImages, plan: PoolPlan): Promise<string[]> {
  const names: string[] = [];
  for (const release of plan.series) {
    for (const s of pinnedSets(release, plan.pool.name)) {
      const body = {
        apiVersion: `${MCO.group}/${MCO.version}`,
        kind: 'PinnedImageSet',
        metadata: {
          name: s.name,
          ...(b.path && b.path.length > 1
            ? { annotations: { [PINNED_PATH_ANNOTATION]: b.path.map((r) => r.version).join(',') } }
            : {}),
          labels: {
            [PINNED_SET_LABEL]: releaseLabel(release.version),
            [ROLE_LABEL]: plan.pool.name,
            'app.kubernetes.io/part-of': 'offline-bundle',
          },
        },
        spec: { pinnedImages: s.images.map((name) => ({ name })) },
      };
      await apiCall(`apply pinnedimagesets "${s.name}"`, () =>
        apis.custom.patchClusterCustomObject(
          {
            ...MCO,
            plural: 'pinnedimagesets',
            name: s.name,
            body,
            fieldManager: ADMIN_FIELD_MANAGER,
            force: true,
          },
          requestOptions(undefined, APPLY_PATCH),
        ),
      );
      names.push(s.name);
    }
  }
  return names;
}

/** Deletes the sets; a refused delete is said (the set is out of every pool: the next run deletes it) and the rest go on. */
async function deleteSets(
  apis: AdminApis,
  names: Iterable<string>,
): Promise<{ removed: string[]; failed: string[] }> {
  const removed: string[] = [];
  const failed: string[] = [];
  for (const name of names) {
    try {
      await apiCall(`delete pinnedimagesets "${name}"`, () =>
        apis.custom
          .deleteClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', name })
          .catch((err: unknown) => {
            if (isApiException(err) && err.code === 404) return undefined;
            throw err;
          }),
      );
      removed.push(name);
    } catch (err) {
      failed.push(`${name} (${err instanceof Error ? err.message : String(err)})`);
    }
  }
  return { removed, failed };
}

/** The sets on the cluster, with the release and pool labels they carry; undefined when the cluster has no PinnedImageSet. */
async function listOurSets(apis: AdminApis): Promise<SetRead[] | undefined> {
  let absent = false;
  const existing = await listAll(
    'list pinnedimagesets',
    (q) => apis.custom.listClusterCustomObject({ ...MCO, plural: 'pinnedimagesets', ...q }),
    (o): SetRead => {
      const labels = obj(obj(o.metadata).labels);
      return {
        name: str(obj(o.metadata).name) ?? '',
        release: str(labels[PINNED_SET_LABEL]),
        ...(str(labels[ROLE_LABEL]) ? { pool: str(labels[ROLE_LABEL]) } : {}),
      };
    },
    {
      notFound: () => {
        absent = true;
        return [];
      },
    },
  );
  return absent ? undefined : existing;
}

/** Across the pools' plans: the sets to delete, and the passed releases a pool still holds. */
function whatGoes(
  plans: readonly PoolPlan[],
  existing: readonly SetRead[],
): { gone: Set<string>; held: NonNullable<PinnedSetsResult['held']> } {
  // a set without a pool label is every pool's: it goes only when every pool lets it go
  const keptSomewhere = new Set(
    plans.flatMap((p) =>
      existing
        .filter((s) => (s.pool ?? p.pool.name) === p.pool.name && !p.stale.includes(s))
        .map((s) => s.name),
    ),
  );
  const gone = new Set(
    plans.flatMap((p) => p.stale.map((s) => s.name)).filter((n) => !keptSomewhere.has(n)),
  );
  const held = plans.flatMap((p) =>
    p.held
      .filter((r) =>
        existing.some(
          (s) => s.release === releaseLabel(r.version) && (s.pool ?? p.pool.name) === p.pool.name,
        ),
      )
      .map((r) => ({ version: r.version, pool: p.pool.name, why: p.pool.notUpdated! })),
  );
  return { gone, held };
}

/**
 * Applies the bundle's sets to every pool and lists them in the pool; drops from the pools and
 * deletes our sets of releases it does not write and `keep` does not name (the running one,
 * and the one a path started from until its first hop Completed). An update path whose head
 * lists each release's payload is a series per release (releaseSeries): a release in `passed`
 * (the cluster completed a later one of the path) loses its sets pool by pool, from each pool
 * whose status says its nodes all run their rendered config (poolNotUpdated); a paused or
 * updating pool keeps them, said in `held`. `dropOnly` (a run with nothing else to do): no set
 * is written, only what may go goes; undefined when nothing does and nothing is held. A cluster
 * without PinnedImageSet or MachineConfigPools is told so, and nothing fails.
 */
export async function applyPinnedImageSets(
  apis: AdminApis,
  b: ReleaseImages,
  keep: readonly string[] = [],
  passed: readonly PassedRelease[] = [],
  opts: { dropOnly?: boolean } = {},
): Promise<PinnedSetsResult | undefined> {
  const existing = await listOurSets(apis);
  if (!existing)
    return {
      applied: [],
      removed: [],
      skipped:
        'the cluster has no PinnedImageSet (OpenShift before 4.16, or without its feature gate): the OS image and the payload stay pinned by the agent alone',
    };
  const pools = await listPools(apis);
  if (!pools.length)
    return {
      applied: [],
      removed: [],
      skipped: 'the cluster has no MachineConfigPool to bind PinnedImageSets to',
    };
  const plans = pools.map((pool) => poolPlan(b, pool, existing, keep, passed));
  const { gone, held } = whatGoes(plans, existing);
  if (opts.dropOnly && !gone.size && !held.length) return undefined;
  const applied: PinnedSetsResult['applied'] = [];
  for (const plan of plans) {
    const names = opts.dropOnly ? [] : await applySets(apis, b, plan);
    await updatePoolList(apis, plan.pool, names, gone);
    if (!opts.dropOnly) applied.push({ pool: plan.pool.name, sets: names });
  }
  const { removed, failed } = await deleteSets(apis, gone);
  const byRelease = passed
    .map((p) => ({
      ...p,
      sets: existing
        .filter((s) => s.release === releaseLabel(p.version) && removed.includes(s.name))
        .map((s) => s.name),
    }))
    .filter((p) => p.sets.length);
  return {
    applied,
    removed,
    ...(byRelease.length ? { passed: byRelease } : {}),
    ...(held.length ? { held } : {}),
    ...(failed.length ? { failed } : {}),
  };
}

/** One line for the admin. */
export function pinnedSetsLine(r: PinnedSetsResult): string {
  if (r.skipped) return `PinnedImageSets: none written: ${r.skipped}`;
  const sets = r.applied.reduce((n, p) => n + p.sets.length, 0);
  const passed = new Set((r.passed ?? []).flatMap((p) => p.sets));
  const other = r.removed.filter((n) => !passed.has(n));
  const why = (r.passed ?? [])
    .map(
      (p) =>
        `; removed ${p.version}'s (${p.sets.join(', ')}): the cluster completed ${p.after}, later on the path`,
    )
    .join('');
  const held = (r.held ?? [])
    .map(
      (h) =>
        `; kept ${h.version}'s pins on pool ${h.pool}: ${h.why} (run the command again once they have)`,
    )
    .join('');
  const failed = r.failed?.length
    ? `; could not delete ${r.failed.join(', ')}: run the command again`
    : '';
  const wrote = r.applied.length
    ? `${sets} applied to ${r.applied.map((p) => p.pool).join(', ')}`
    : 'none rewritten';
  return `PinnedImageSets: ${wrote}${why}${other.length ? `; removed ${other.join(', ')}` : ''}${held}${failed}`;
}

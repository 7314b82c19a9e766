/**
 * Which hop of an update path the cluster is on, for `bundle cluster status` and the page,
 * which have no bundle file: the path as prepare or upgrade wrote it into the upgrade gate
 * (spec.path), against ClusterVersion's history and desiredUpdate.
 */
import { GROUP, truncate, VERSION } from '@offline-bundle/status';
import { apiCall, ClusterError, type AdminApis } from '@offline-bundle/kube';
import { acksNeeded } from './admin-acks.js';
import { CV, running, type ClusterVersionDoc } from './cluster-upgrade.js';
import { GATE_NAME, GATE_PLURAL, gatePath } from './upgrade-gate.js';
import { hopLine } from './upgrade-path.js';

/**
 * A release of the path as the cluster stands: done (its history says Completed, or a later one
 * of the path is under way or done), in progress (desiredUpdate names it), next (the hop to
 * start, or the one after the hop in progress), waiting for ack (the hop to start, held by an
 * admin gate admin-acks does not set), later.
 */
export type PathReleaseState = 'done' | 'in progress' | 'next' | 'waiting for ack' | 'later';

export interface PathReleaseStatus {
  version: string;
  image: string;
  state: PathReleaseState;
  /** waiting for ack: the admin gates it waits on. */
  acks?: string[];
}

export interface PathStatus {
  path: { version: string; image: string }[];
  /** Each release of the path with its state: what status --json and the dashboard page show. */
  releases: PathReleaseStatus[];
  running?: string;
  /** The hop (from 1) under way or next; path.length + 1 once every hop completed. */
  hop: number;
  underWay: boolean;
  line: string;
  /** Why the path could not be read (the gate, ClusterVersion or the admin gates refused or failed): status and the page go on without it. */
  unread?: string;
}

/** Characters of the reason a path was not read, in the status line and on the page. */
const MAX_PATH_UNREAD_CHARS = 300;

const reasonOf = (err: unknown) =>
  truncate(err instanceof Error ? err.message : String(err), MAX_PATH_UNREAD_CHARS);

/**
 * The path and the cluster's hop on it, or undefined: no gate, no path in it, not OpenShift, or
 * not allowed to read them. A read that fails otherwise (a 500, a timeout) is said in the line
 * ("path: not read (…)"), never thrown: the table and the page stand without the path.
 * `clusterVersion`: the one a roll-up read already (not read again).
 */
export async function readPathStatus(
  apis: AdminApis,
  read: { clusterVersion?: unknown } = {},
): Promise<PathStatus | undefined> {
  try {
    return await readPath(apis, read);
  } catch (err) {
    const unread = reasonOf(err);
    return {
      path: [],
      releases: [],
      hop: 0,
      underWay: false,
      unread,
      line: `path: not read (${unread})`,
    };
  }
}

// an admin without the gate's get is not refused the table: not being allowed is not knowing
const quiet = async <T>(what: string, fn: () => Promise<T>) => {
  try {
    return await apiCall(what, fn, { notFound: () => undefined });
  } catch (err) {
    if (err instanceof ClusterError && err.code === 'FORBIDDEN') return undefined;
    throw err;
  }
};

async function readPath(
  apis: AdminApis,
  read: { clusterVersion?: unknown },
): Promise<PathStatus | undefined> {
  const gate = (await quiet(`read ${GATE_PLURAL}.${GROUP} "${GATE_NAME}"`, () =>
    apis.custom.getClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: GATE_PLURAL,
      name: GATE_NAME,
    }),
  )) as { spec?: { path?: unknown } } | undefined;
  const path = gatePath(gate?.spec?.path);
  if (!path) return undefined;
  const cv = (
    'clusterVersion' in read
      ? read.clusterVersion
      : await quiet('read ClusterVersion "version"', () => apis.custom.getClusterCustomObject(CV))
  ) as ClusterVersionDoc | undefined;
  if (!cv || typeof cv !== 'object') return undefined;
  const now = Array.isArray(cv.status?.history) ? running(cv) : undefined;
  const next = path.findIndex((r) => r.version === now) + 1;
  const target = path[next];
  const digest = cv.spec?.desiredUpdate?.image?.split('@')[1];
  const underWay = !!target && digest !== undefined && digest === target.image.split('@')[1];
  // the hop to start waits on the running release's admin gates: read only then; a failed read leaves the rest standing
  let acksUnread: string | undefined;
  const acks =
    target && !underWay
      ? ((await quiet('read the admin gates', () => acksNeeded(apis, now, target.version)).catch(
          (err: unknown) => {
            acksUnread = reasonOf(err);
            return undefined;
          },
        )) ?? [])
      : [];
  const s = { path, ...(now ? { running: now } : {}), hop: next + 1, underWay };
  const line =
    hopLine({ ...s, state: underWay ? 'waiting' : 'started' }) +
    (acksUnread ? `; admin gates not read (${acksUnread})` : '');
  return {
    ...s,
    releases: releaseStates(
      path,
      next,
      underWay,
      acks.map((a) => a.gate),
    ),
    line,
  };
}

/** Each release's state from the index of the hop under way or next, and the gates that hop waits on. */
function releaseStates(
  path: readonly { version: string; image: string }[],
  next: number,
  underWay: boolean,
  acks: readonly string[],
): PathReleaseStatus[] {
  return path.map((r, i): PathReleaseStatus => {
    if (i < next) return { ...r, state: 'done' };
    if (i === next && underWay) return { ...r, state: 'in progress' };
    if (i === next && acks.length) return { ...r, state: 'waiting for ack', acks: [...acks] };
    return { ...r, state: i === next || (i === next + 1 && underWay) ? 'next' : 'later' };
  });
}

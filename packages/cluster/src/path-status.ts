/**
 * Which hop of an update path the cluster is on, for `bundle cluster status` and the page,
 * which have no bundle file: the path as prepare or upgrade wrote it into the upgrade gate
 * (spec.path), against ClusterVersion's history and desiredUpdate.
 */
import { apiCall, ClusterError, GROUP, VERSION, type AdminApis } from '@offline-bundle/status';
import { CV, running, type ClusterVersionDoc } from './cluster-upgrade.js';
import { GATE_NAME, GATE_PLURAL, gatePath } from './upgrade-gate.js';
import { hopLine } from './upgrade-path.js';

export interface PathStatus {
  path: { version: string; image: string }[];
  running?: string;
  /** The hop (from 1) under way or next; path.length + 1 once every hop completed. */
  hop: number;
  underWay: boolean;
  line: string;
}

/**
 * The path and the cluster's hop on it, or undefined: no gate, no path in it, not OpenShift, or
 * not allowed to read them. `clusterVersion`: the one a roll-up read already (not read again).
 */
export async function readPathStatus(apis: AdminApis, read: { clusterVersion?: unknown } = {}): Promise<PathStatus | undefined> {
  const quiet = async <T>(what: string, fn: () => Promise<T>) => {
    try {
      return await apiCall(what, fn, { notFound: () => undefined });
    } catch (err) {
      // what status is for stands without it: an admin without the gate's get is not refused the table
      if (err instanceof ClusterError && err.code === 'FORBIDDEN') return undefined;
      throw err;
    }
  };
  const gate = await quiet(`read ${GATE_PLURAL}.${GROUP} "${GATE_NAME}"`, () => apis.custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: GATE_PLURAL, name: GATE_NAME })) as { spec?: { path?: unknown } } | undefined;
  const path = gatePath(gate?.spec?.path);
  if (!path) return undefined;
  const cv = ('clusterVersion' in read ? read.clusterVersion : await quiet('read ClusterVersion "version"', () => apis.custom.getClusterCustomObject(CV))) as ClusterVersionDoc | undefined;
  if (!cv || typeof cv !== 'object') return undefined;
  const now = Array.isArray(cv.status?.history) ? running(cv) : undefined;
  const next = path.findIndex((r) => r.version === now) + 1;
  const target = path[next];
  const digest = cv.spec?.desiredUpdate?.image?.split('@')[1];
  const underWay = !!target && digest !== undefined && digest === target.image.split('@')[1];
  const s = { path, ...(now ? { running: now } : {}), hop: next + 1, underWay };
  return { ...s, line: hopLine({ ...s, state: underWay ? 'waiting' : 'started' }) };
}

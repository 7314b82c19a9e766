/**
 * The MachineConfigPools an EUS-to-EUS upgrade pauses (OpenShift's "Control Plane Only update"):
 * every pool but master is paused before the first hop, so its nodes keep their OS and reboot
 * once, into the last release, when they are unpaused after the last hop. A pool we pause bears
 * PAUSED_BY, so we unpause only what we paused (a pool paused by the admin for a canary stays so).
 */
import { apiCall, listAll, requestOptions, type AdminApis } from '@offline-bundle/kube';

const MCO = {
  group: 'machineconfiguration.openshift.io',
  version: 'v1',
  plural: 'machineconfigpools',
};
/** Annotation on a pool paused for a path: the release the path ends at. */
export const PAUSED_BY = 'offline-bundle.io/paused-for';
/** The pool that must never be paused: the control plane takes every hop. */
const CONTROL_PLANE_POOL = 'master';

export interface PoolState {
  name: string;
  paused: boolean;
  /** The release our pause was for, when we paused it. */
  pausedFor?: string;
}

const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

/** Every pool but master (none on a cluster without the MCO). */
export async function workerPools(apis: AdminApis): Promise<PoolState[]> {
  const pools = await listAll(
    'list machineconfigpools',
    (q) => apis.custom.listClusterCustomObject({ ...MCO, ...q }),
    (o) => {
      const by = str(obj(obj(o.metadata).annotations)[PAUSED_BY]);
      return {
        name: str(obj(o.metadata).name) ?? '',
        paused: obj(o.spec).paused === true,
        ...(by ? { pausedFor: by } : {}),
      };
    },
    { notFound: () => [] },
  );
  return pools
    .filter((p) => p.name && p.name !== CONTROL_PLANE_POOL)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
}

/** The oc command that does the same as setPaused. */
export const ocPausePool = (pool: string, paused: boolean): string =>
  `oc patch mcp/${pool} --type=merge -p '{"spec":{"paused":${paused}}}'`;

/** Pauses (naming the release it is for) or unpauses a pool: a merge patch of spec.paused, as the docs' oc patch. */
export async function setPaused(
  apis: AdminApis,
  pool: string,
  pausedFor: string | undefined,
): Promise<void> {
  const body = {
    metadata: { annotations: { [PAUSED_BY]: pausedFor ?? null } },
    spec: { paused: pausedFor !== undefined },
  };
  await apiCall(`${pausedFor ? 'pause' : 'unpause'} machineconfigpools "${pool}"`, () =>
    apis.custom.patchClusterCustomObject(
      { ...MCO, name: pool, body },
      requestOptions(undefined, 'application/merge-patch+json'),
    ),
  );
}

/** The MCO's pool condition types this reads (MachineConfigPool status.conditions). */
const UPDATED = 'Updated';
const UPDATING = 'Updating';

/**
 * Why a pool's nodes may not all run its rendered config yet, or undefined when its status says
 * they do: not paused, every machine updated and ready (status.machineCount ==
 * updatedMachineCount == readyMachineCount), Updated True and Updating not True, and the config
 * it reached (status.configuration) the one rendered for it (spec.configuration). A pool whose
 * status says none of this is taken as not updated: pins are kept, never dropped, on a guess.
 */
export function poolNotUpdated(o: Record<string, unknown>): string | undefined {
  const spec = obj(o.spec);
  const st = obj(o.status);
  if (spec.paused === true) return 'it is paused, so its nodes have not all updated yet';
  const count = (k: string) => (typeof st[k] === 'number' ? (st[k] as number) : undefined);
  const machines = count('machineCount');
  const cond = (type: string) =>
    (Array.isArray(st.conditions) ? (st.conditions as unknown[]) : [])
      .map(obj)
      .find((c) => c.type === type)?.status;
  const rendered = str(obj(spec.configuration).name);
  const reached = str(obj(st.configuration).name);
  const updated =
    machines !== undefined &&
    count('updatedMachineCount') === machines &&
    count('readyMachineCount') === machines &&
    cond(UPDATED) === 'True' &&
    cond(UPDATING) !== 'True' &&
    (!rendered || rendered === reached);
  return updated ? undefined : 'its nodes have not all updated yet';
}

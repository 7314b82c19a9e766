/**
 * Admin acknowledgements: a release lists in ConfigMap openshift-config-managed/admin-gates the
 * gates the admin must acknowledge before the cluster leaves its minor version (API removals,
 * say), each key "ack-<major>.<minor>-…" with the reason as its value; the admin acknowledges
 * one by setting it to "true" in openshift-config/admin-acks. The CVO holds a minor update
 * (Upgradeable=False, AdminAckRequired) until then; we say so before we ask for the hop.
 */
import { truncate } from '@offline-bundle/status';
import { apiCall, requestOptions, type AdminApis } from '@offline-bundle/kube';

export const ADMIN_GATES = { namespace: 'openshift-config-managed', name: 'admin-gates' } as const;
export const ADMIN_ACKS = { namespace: 'openshift-config', name: 'admin-acks' } as const;
/** The CVO's shape of a gate's name: the major.minor it holds the cluster at. */
const GATE_NAME = /^ack-(\d+\.\d+)-[^-]/;
/** Gates read from the cluster's ConfigMap, at most (a release lists one or two). */
const MAX_ADMIN_GATES = 32;
/** Characters of a gate's reason quoted. */
const MAX_GATE_REASON_CHARS = 300;

export interface AdminGate {
  gate: string;
  reason: string;
}

const minor = (v: string) => /^(\d+\.\d+)/.exec(v)?.[1];

/** The oc command that acknowledges `gate`. */
export const ocAck = (gate: string): string =>
  `oc -n ${ADMIN_ACKS.namespace} patch cm ${ADMIN_ACKS.name} --type=merge -p '{"data":{"${gate}":"true"}}'`;

const readData = async (apis: AdminApis, at: { namespace: string; name: string }) => {
  const cm = await apiCall(
    `read ConfigMap ${at.namespace}/${at.name}`,
    () => apis.core.readNamespacedConfigMap(at),
    { notFound: () => undefined },
  );
  const data = cm?.data;
  return typeof data === 'object' && data !== null ? (data as Record<string, unknown>) : {};
};

/**
 * The gates a move from `running` to `target` waits on: none within a minor version; else the
 * running release's gates for its minor that admin-acks does not set to "true".
 */
export async function acksNeeded(
  apis: AdminApis,
  running: string | undefined,
  target: string,
): Promise<AdminGate[]> {
  const from = running ? minor(running) : undefined;
  if (!from || from === minor(target)) return [];
  const gates = Object.entries(await readData(apis, ADMIN_GATES))
    .filter(([k]) => GATE_NAME.exec(k)?.[1] === from)
    .slice(0, MAX_ADMIN_GATES);
  if (!gates.length) return [];
  const acks = await readData(apis, ADMIN_ACKS);
  return gates
    .filter(([k]) => acks[k] !== 'true')
    .map(([gate, reason]) => ({
      gate,
      reason: truncate(String(reason ?? ''), MAX_GATE_REASON_CHARS),
    }));
}

/** Sets each gate to "true" in admin-acks (a merge patch, as ocAck). */
export async function acknowledge(apis: AdminApis, gates: readonly string[]): Promise<void> {
  if (!gates.length) return;
  const body = { data: Object.fromEntries(gates.map((g) => [g, 'true'])) };
  await apiCall(`update ConfigMap ${ADMIN_ACKS.namespace}/${ADMIN_ACKS.name}`, () =>
    apis.core.patchNamespacedConfigMap(
      { ...ADMIN_ACKS, body },
      requestOptions(undefined, 'application/merge-patch+json'),
    ),
  );
}

import {
  apiMessage,
  adminApis,
  customObjectsApi,
  isApiException,
  requestOptions,
} from '@offline-bundle/kube';

interface ClusterVersion {
  status?: {
    history?: { state?: string; version?: string; image?: string; completionTime?: string }[];
    desired?: { version?: string };
  };
}

/** The release an OpenShift cluster runs: its version and release image (pull spec by digest). */
export interface ClusterRelease {
  version: string;
  image?: string;
}

/**
 * The OpenShift version the cluster runs: the newest entry of ClusterVersion "version"'s
 * history whose update completed (the history is newest first). Undefined when the cluster
 * has no ClusterVersion (not OpenShift) or no completed entry. Errors (unreachable, refused)
 * are thrown for the caller to decide; client-node is loaded only when this is called.
 */
export async function readClusterVersion(
  kubeconfig: string,
  opts: { context?: string; timeoutMs?: number } = {},
): Promise<string | undefined> {
  return (await readClusterRelease(kubeconfig, opts))?.version;
}

/** As readClusterVersion, with the completed entry's release image. */
export async function readClusterRelease(
  kubeconfig: string,
  opts: { context?: string; timeoutMs?: number } = {},
): Promise<ClusterRelease | undefined> {
  const done = completedRelease(await readClusterVersionObject(kubeconfig, opts));
  return done ? { version: done.version, ...(done.image ? { image: done.image } : {}) } : undefined;
}

/** ClusterVersion "version" as the API returned it; undefined when the cluster has none (not OpenShift). Errors are thrown. */
export async function readClusterVersionObject(
  kubeconfig: string,
  opts: { context?: string; timeoutMs?: number } = {},
): Promise<unknown> {
  const api = await customObjectsApi(kubeconfig, opts.context);
  try {
    return await api.getClusterCustomObject(
      { group: 'config.openshift.io', version: 'v1', plural: 'clusterversions', name: 'version' },
      requestOptions(AbortSignal.timeout(opts.timeoutMs ?? 10_000)),
    );
  } catch (err) {
    if (isApiException(err) && err.code === 404) return undefined;
    throw err;
  }
}

/** The newest completed entry of a ClusterVersion's history (newest first), with when it completed. */
export function completedRelease(
  cv: unknown,
): (ClusterRelease & { completionTime?: string }) | undefined {
  // an answer of another shape (a proxy's, a hostile server's) says nothing about the version
  const history = (cv as ClusterVersion | undefined)?.status?.history;
  const done = (Array.isArray(history) ? history : []).find(
    (h) => typeof h?.version === 'string' && h.state === 'Completed' && h.version,
  );
  if (!done) return undefined;
  return {
    version: done.version!,
    ...(typeof done.image === 'string' ? { image: done.image } : {}),
    ...(typeof done.completionTime === 'string' ? { completionTime: done.completionTime } : {}),
  };
}

/** The ClusterRole in deploy/rbac.yaml that lets nodes read ClusterVersion "version". */
export const RUNNING_VERSION_ROLE = 'offline-bundle:running-version-reader';

/**
 * Why reading ClusterVersion failed, for the node's status: `forbidden` (401/403: the node's
 * identity lacks the rule, or its credentials are refused) or `unreachable` (no answer, a
 * timeout, a 5xx or 429: it may come back). `user` is the identity the API server named.
 */
export interface ClusterReadFailure {
  kind: 'forbidden' | 'unreachable';
  status?: number;
  user?: string;
  /** One line: the API server's message, or the connection error. */
  detail: string;
}

export function clusterReadFailure(err: unknown): ClusterReadFailure {
  if (isApiException(err)) {
    const detail = apiMessage(err.body).slice(0, 500) || `HTTP ${err.code}`;
    if (err.code === 401 || err.code === 403) {
      const user = /User "([^"]{1,253})"/.exec(detail)?.[1];
      return { kind: 'forbidden', status: err.code, ...(user ? { user } : {}), detail };
    }
    return { kind: 'unreachable', status: err.code, detail };
  }
  return {
    kind: 'unreachable',
    detail: String((err as Error)?.message ?? err)
      .split('\n')[0]!
      .slice(0, 500),
  };
}

/** What the node's status says about a refused read: who was refused what, and the rule that grants it. */
export function forbiddenMessage(f: ClusterReadFailure): string {
  const who = f.user ? `the node identity ${f.user}` : 'the identity in status.kubeconfig';
  if (f.status === 401)
    return `the API server does not accept the credentials of status.kubeconfig (401): check that the file is the kubelet's current kubeconfig and readable by the agent`;
  return `${who} may not get clusterversions.config.openshift.io "version": apply deploy/rbac.yaml (ClusterRole ${RUNNING_VERSION_ROLE}, bound to group system:nodes)`;
}

/** What the Machine Config Daemon says of one Node (its annotations); undefined fields where the MCO does not manage it. */
export interface NodeMachineConfig {
  state?: string;
  currentConfig?: string;
  desiredConfig?: string;
}

const MCD = 'machineconfiguration.openshift.io';

/** The MCD's annotations on Node `node` (a node may read its own Node: the Node authorizer); none for a Node that does not exist. Other errors are thrown. */
export async function readNodeMachineConfig(
  kubeconfig: string,
  node: string,
  opts: { timeoutMs?: number } = {},
): Promise<NodeMachineConfig> {
  const { core } = await adminApis(kubeconfig, undefined, { deadlineMs: opts.timeoutMs ?? 10_000 });
  let n: Awaited<ReturnType<typeof core.readNode>>;
  try {
    n = await core.readNode({ name: node });
  } catch (err) {
    // no such Node: nothing the MCO manages
    if (isApiException(err) && err.code === 404) return {};
    throw err;
  }
  const a = (n.metadata?.annotations ?? {}) as Record<string, unknown>;
  const str = (k: string) =>
    typeof a[`${MCD}/${k}`] === 'string' ? { [k]: a[`${MCD}/${k}`] as string } : {};
  return { ...str('state'), ...str('currentConfig'), ...str('desiredConfig') };
}

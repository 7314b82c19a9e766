import { customObjectsApi, isApiException, requestOptions } from './kube.js';

interface ClusterVersion {
  status?: { history?: { state?: string; version?: string; image?: string }[]; desired?: { version?: string } };
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
export async function readClusterVersion(kubeconfig: string, opts: { context?: string; timeoutMs?: number } = {}): Promise<string | undefined> {
  return (await readClusterRelease(kubeconfig, opts))?.version;
}

/** As readClusterVersion, with the completed entry's release image. */
export async function readClusterRelease(kubeconfig: string, opts: { context?: string; timeoutMs?: number } = {}): Promise<ClusterRelease | undefined> {
  const api = await customObjectsApi(kubeconfig, opts.context);
  let cv: ClusterVersion;
  try {
    cv = (await api.getClusterCustomObject(
      { group: 'config.openshift.io', version: 'v1', plural: 'clusterversions', name: 'version' },
      requestOptions(AbortSignal.timeout(opts.timeoutMs ?? 10_000)),
    )) as ClusterVersion;
  } catch (err) {
    if (isApiException(err) && err.code === 404) return undefined;
    throw err;
  }
  // an answer of another shape (a proxy's, a hostile server's) says nothing about the version
  const history = Array.isArray(cv?.status?.history) ? cv.status.history : [];
  const done = history.find((h) => typeof h?.version === 'string' && h.state === 'Completed' && h.version);
  return done ? { version: done.version!, ...(typeof done.image === 'string' ? { image: done.image } : {}) } : undefined;
}

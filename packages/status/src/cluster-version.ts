import type { CustomObjectsApi } from '@kubernetes/client-node';

interface ClusterVersion {
  status?: { history?: { state?: string; version?: string }[]; desired?: { version?: string } };
}

/**
 * The OpenShift version the cluster runs: the newest entry of ClusterVersion "version"'s
 * history whose update completed (the history is newest first). Undefined when the cluster
 * has no ClusterVersion (not OpenShift) or no completed entry. Errors (unreachable, refused)
 * are thrown for the caller to decide; client-node is loaded only when this is called.
 */
export async function readClusterVersion(kubeconfig: string, opts: { context?: string; timeoutMs?: number } = {}): Promise<string | undefined> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  if (opts.context) kc.setCurrentContext(opts.context);
  const api: CustomObjectsApi = kc.makeApiClient(k8s.CustomObjectsApi);
  const signal = AbortSignal.timeout(opts.timeoutMs ?? 10_000);
  const withSignal = {
    pre: (ctx: { setSignal(s: AbortSignal): void }) => {
      ctx.setSignal(signal);
      return new k8s.Observable(Promise.resolve(ctx));
    },
    post: (ctx: unknown) => new k8s.Observable(Promise.resolve(ctx)),
  };
  let cv: ClusterVersion;
  try {
    cv = (await api.getClusterCustomObject(
      { group: 'config.openshift.io', version: 'v1', plural: 'clusterversions', name: 'version' },
      { middleware: [withSignal], middlewareMergeStrategy: 'append' } as never,
    )) as ClusterVersion;
  } catch (err) {
    if (err instanceof k8s.ApiException && err.code === 404) return undefined;
    throw err;
  }
  return cv.status?.history?.find((h) => h.state === 'Completed' && h.version)?.version;
}

// client-node is large: loaded on first use, so the CLIs that import this package start fast.
type K8s = typeof import('@kubernetes/client-node');
let k8s: K8s | undefined;

export async function loadK8s(): Promise<K8s> {
  return (k8s ??= await import('@kubernetes/client-node'));
}

/** True only for client-node's API errors (and only once client-node was loaded). */
export const isApiException = (err: unknown): err is InstanceType<K8s['ApiException']> =>
  k8s !== undefined && err instanceof k8s.ApiException;

/** client-node once some call has loaded it (synchronous callers run after a client exists). */
export function loadedK8s(): K8s {
  if (!k8s) throw new Error('@kubernetes/client-node used before loadK8s()');
  return k8s;
}

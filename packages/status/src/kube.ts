import type { ConfigurationOptions, CustomObjectsApi } from '@kubernetes/client-node';

// client-node is large: loaded on first use, so the CLIs that import this package start fast.
export type K8s = typeof import('@kubernetes/client-node');
let k8s: K8s | undefined;

export async function loadK8s(): Promise<K8s> {
  return (k8s ??= await import('@kubernetes/client-node'));
}

/** True only for client-node's API errors (and only once client-node was loaded). */
export const isApiException = (err: unknown): err is InstanceType<K8s['ApiException']> => k8s !== undefined && err instanceof k8s.ApiException;

/** A CustomObjectsApi from a kubeconfig file (and optional context). */
export async function customObjectsApi(kubeconfig: string, context?: string): Promise<CustomObjectsApi> {
  const { KubeConfig, CustomObjectsApi: Api } = await loadK8s();
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  if (context) kc.setCurrentContext(context);
  return kc.makeApiClient(Api);
}

/** Per-request options that cut the request off when `signal` aborts; optionally with a Content-Type. */
export function requestOptions(signal: AbortSignal, contentType?: string): ConfigurationOptions {
  const { Observable, setHeaderOptions } = k8s!;
  const options: ConfigurationOptions = {
    middleware: [{
      pre: (ctx) => {
        ctx.setSignal(signal);
        return new Observable(Promise.resolve(ctx));
      },
      post: (ctx) => new Observable(Promise.resolve(ctx)),
    }],
    middlewareMergeStrategy: 'append',
  };
  return contentType ? setHeaderOptions('Content-Type', contentType, options) : options;
}

/** The clients `bundle cluster` uses, from one kubeconfig file (and optional context). */
export interface AdminApis {
  core: import('@kubernetes/client-node').CoreV1Api;
  custom: CustomObjectsApi;
}

export async function adminApis(kubeconfig: string, context?: string): Promise<AdminApis> {
  const { KubeConfig, CoreV1Api, CustomObjectsApi: Custom } = await loadK8s();
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  if (context) kc.setCurrentContext(context);
  return { core: kc.makeApiClient(CoreV1Api), custom: kc.makeApiClient(Custom) };
}

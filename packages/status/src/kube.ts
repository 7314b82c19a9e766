import { dirname } from 'node:path';
import type { ConfigurationOptions, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { readSmallFile } from '@offline-bundle/oci';
import { boundedHttpLibrary, type BoundedHttpOptions } from './cluster-http.js';
import { loadK8s, loadedK8s } from './k8s.js';

export { loadK8s, isApiException, type K8s } from './k8s.js';

/** A kubeconfig is a few KiB; client-node's loadFromFile would read a FIFO or /dev/zero whole, synchronously. */
export const MAX_KUBECONFIG_BYTES = 1024 * 1024;

async function loadKubeconfig(file: string, context?: string): Promise<KubeConfig> {
  const { KubeConfig: Kc } = await loadK8s();
  const kc = new Kc();
  kc.loadFromString((await readSmallFile(file, MAX_KUBECONFIG_BYTES)).bytes.toString('utf8'));
  kc.makePathsAbsolute(dirname(file));
  if (context) kc.setCurrentContext(context);
  return kc;
}

/** An API client of `Api` whose every call is bounded in time and size (cluster-http.ts). */
async function boundedClient<T>(kc: KubeConfig, Api: new (config: import('@kubernetes/client-node').Configuration) => T, http: BoundedHttpOptions): Promise<T> {
  const { createConfiguration, ServerConfiguration } = await loadK8s();
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig names no cluster (no current context)');
  return new Api(createConfiguration({ baseServer: new ServerConfiguration(cluster.server, {}), authMethods: { default: kc }, httpApi: await boundedHttpLibrary(http) }));
}

/** A CustomObjectsApi from a kubeconfig file (and optional context). */
export async function customObjectsApi(kubeconfig: string, context?: string, http: BoundedHttpOptions = {}): Promise<CustomObjectsApi> {
  const { CustomObjectsApi: Api } = await loadK8s();
  return boundedClient(await loadKubeconfig(kubeconfig, context), Api, http);
}

/**
 * Per-request options that cut the request off when `signal` aborts (none: the client's own
 * deadline, cluster-http.ts, is the only one); optionally with a Content-Type.
 */
export function requestOptions(signal: AbortSignal | undefined, contentType?: string): ConfigurationOptions {
  const { Observable, setHeaderOptions } = loadedK8s();
  const options: ConfigurationOptions = {
    middleware: [{
      pre: (ctx) => {
        if (signal) ctx.setSignal(signal);
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

export async function adminApis(kubeconfig: string, context?: string, http: BoundedHttpOptions = {}): Promise<AdminApis> {
  const { CoreV1Api, CustomObjectsApi: Custom } = await loadK8s();
  const kc = await loadKubeconfig(kubeconfig, context);
  return { core: await boundedClient(kc, CoreV1Api, http), custom: await boundedClient(kc, Custom, http) };
}

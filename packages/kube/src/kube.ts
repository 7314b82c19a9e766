import { dirname, isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type {
  ConfigurationOptions,
  CustomObjectsApi,
  HttpLibrary,
  KubeConfig,
} from '@kubernetes/client-node';
import { assertNesting, assertValueNesting, readSmallFile, isLoopback } from '@offline-bundle/host';
import {
  boundedHttpLibrary,
  streamingHttpLibrary,
  type BoundedHttpOptions,
  type StreamingHttpOptions,
} from './cluster-http.js';
import { loadK8s, loadedK8s } from './k8s.js';

export { isApiException } from './k8s.js';

/** A kubeconfig is a few KiB; client-node's loadFromFile would read a FIFO or /dev/zero whole, synchronously. */
const MAX_KUBECONFIG_BYTES = 1024 * 1024;
/** A certificate, key or token file a kubeconfig names: a few KiB. */
const MAX_KUBECONFIG_REFERENCED_BYTES = 256 * 1024;

const USE_A_TOKEN =
  'use a kubeconfig with a token or client certificate (e.g. "oc login --token", "oc create token" or a ServiceAccount token)';

type Entry = { name?: unknown; cluster?: Record<string, unknown>; user?: Record<string, unknown> };

/**
 * The files a kubeconfig names, read here (bounded, regular files only, relative to the
 * kubeconfig's directory as kubectl resolves them) and put in as their *-data / token fields:
 * client-node would read them synchronously and whole, token-file even relative to the cwd.
 * An exec credential plugin is refused: client-node runs it with no deadline. So is an
 * auth-provider with a cmd-path (gcp, azure): client-node runs it with execSync, no deadline,
 * whenever the token is missing or expired; without one it only sends the access-token.
 */
async function inlineReferencedFiles(
  doc: { clusters?: unknown; users?: unknown },
  file: string,
): Promise<void> {
  const read = async (where: string, ref: unknown) => {
    if (typeof ref !== 'string' || ref === '') throw new Error(`${where} is not a file name`);
    const p = isAbsolute(ref) ? ref : join(dirname(file), ref);
    try {
      return (await readSmallFile(p, MAX_KUBECONFIG_REFERENCED_BYTES)).bytes;
    } catch (err) {
      throw new Error(`${where} ${p}: ${(err as Error).message.split('\n')[0]!.slice(0, 300)}`, {
        cause: err,
      });
    }
  };
  const entries = (list: unknown): Entry[] =>
    Array.isArray(list) ? list.filter((e): e is Entry => typeof e === 'object' && e !== null) : [];
  for (const { name, cluster: c } of entries(doc.clusters)) {
    if (
      c &&
      typeof c.server === 'string' &&
      /^http:\/\//i.test(c.server) &&
      c['insecure-skip-tls-verify'] !== true
    ) {
      // plain http only to this machine (kubectl proxy's server), as kubectl: client-node refuses it unless told to skip TLS checks
      if (!isLoopback(new URL(c.server).hostname)) {
        throw new Error(
          `cluster ${String(name)}'s server ${c.server} is plain http to another machine: use its https address (plain http is for a loopback server such as kubectl proxy's)`,
        );
      }
      c['insecure-skip-tls-verify'] = true;
    }
    if (c && c['certificate-authority'] !== undefined) {
      c['certificate-authority-data'] ??= (
        await read(`cluster ${String(name)}'s certificate-authority`, c['certificate-authority'])
      ).toString('base64');
      delete c['certificate-authority'];
    }
  }
  for (const { name, user: u } of entries(doc.users)) {
    if (!u) continue;
    if (u.exec !== undefined)
      throw new Error(
        `user ${String(name)} gets its credentials from an exec plugin, which bundle cluster does not run (it could not bound it in time): ${USE_A_TOKEN}`,
      );
    const provider = u['auth-provider'] as
      { name?: unknown; config?: Record<string, unknown> } | undefined;
    if (provider?.config?.['cmd-path'] !== undefined) {
      throw new Error(
        `user ${String(name)}'s auth-provider ${String(provider.name)} runs a command (cmd-path) for its token, which bundle cluster does not run (it could not bound it in time): ${USE_A_TOKEN}`,
      );
    }
    for (const [fileKey, dataKey] of [
      ['client-certificate', 'client-certificate-data'],
      ['client-key', 'client-key-data'],
    ] as const) {
      if (u[fileKey] === undefined) continue;
      u[dataKey] ??= (await read(`user ${String(name)}'s ${fileKey}`, u[fileKey])).toString(
        'base64',
      );
      delete u[fileKey];
    }
    if (u['token-file'] !== undefined) {
      u.token ??= (await read(`user ${String(name)}'s token-file`, u['token-file']))
        .toString('utf8')
        .trim();
      delete u['token-file'];
    }
  }
}

async function loadKubeconfig(file: string, context?: string): Promise<KubeConfig> {
  const { KubeConfig: Kc } = await loadK8s();
  const kc = new Kc();
  const text = (await readSmallFile(file, MAX_KUBECONFIG_BYTES)).bytes.toString('utf8');
  assertNesting(text, 'yaml', file);
  const doc: unknown = parseYaml(text);
  assertValueNesting(doc, file);
  if (typeof doc !== 'object' || doc === null)
    throw new Error('not a kubeconfig (no clusters, users and contexts)');
  await inlineReferencedFiles(doc as { clusters?: unknown; users?: unknown }, file);
  kc.loadFromString(JSON.stringify(doc));
  if (context) kc.setCurrentContext(context);
  return kc;
}

type ApiClass<T> = new (config: import('@kubernetes/client-node').Configuration) => T;

/** An API client of `Api` whose every call is bounded in time and size (cluster-http.ts). */
async function boundedClient<T>(
  kc: KubeConfig,
  Api: ApiClass<T>,
  http: BoundedHttpOptions,
): Promise<T> {
  return clientOver(kc, Api, await boundedHttpLibrary(http));
}

async function clientOver<T>(kc: KubeConfig, Api: ApiClass<T>, httpApi: HttpLibrary): Promise<T> {
  const { createConfiguration, ServerConfiguration } = await loadK8s();
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig names no cluster (no current context)');
  return new Api(
    createConfiguration({
      baseServer: new ServerConfiguration(cluster.server, {}),
      authMethods: { default: kc },
      httpApi,
    }),
  );
}

/** A CustomObjectsApi for one watch: its answer streamed to `http.onData` (cluster-http.ts streamingHttpLibrary). */
export async function streamingCustomObjectsApi(
  kubeconfig: string,
  context: string | undefined,
  http: StreamingHttpOptions,
): Promise<CustomObjectsApi> {
  const { CustomObjectsApi: Api } = await loadK8s();
  return clientOver(
    await loadKubeconfig(kubeconfig, context),
    Api,
    await streamingHttpLibrary(http),
  );
}

/** A CustomObjectsApi from a kubeconfig file (and optional context). */
export async function customObjectsApi(
  kubeconfig: string,
  context?: string,
  http: BoundedHttpOptions = {},
): Promise<CustomObjectsApi> {
  const { CustomObjectsApi: Api } = await loadK8s();
  return boundedClient(await loadKubeconfig(kubeconfig, context), Api, http);
}

/** Server-side apply's content type (PatchStrategy.ServerSideApply): every apply of ours sends it. */
export const APPLY_PATCH = 'application/apply-patch+yaml';

/**
 * Per-request options that cut the request off when `signal` aborts (none: the client's own
 * deadline, cluster-http.ts, is the only one); optionally with a Content-Type.
 */
export function requestOptions(
  signal: AbortSignal | undefined,
  contentType?: string,
): ConfigurationOptions {
  const { Observable, setHeaderOptions } = loadedK8s();
  const options: ConfigurationOptions = {
    middleware: [
      {
        pre: (ctx) => {
          if (signal) ctx.setSignal(signal);
          return new Observable(Promise.resolve(ctx));
        },
        post: (ctx) => new Observable(Promise.resolve(ctx)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
  return contentType ? setHeaderOptions('Content-Type', contentType, options) : options;
}

/** The clients `bundle cluster` uses, from one kubeconfig file (and optional context). */
export interface AdminApis {
  core: import('@kubernetes/client-node').CoreV1Api;
  custom: CustomObjectsApi;
}

export async function adminApis(
  kubeconfig: string,
  context?: string,
  http: BoundedHttpOptions = {},
): Promise<AdminApis> {
  const { CoreV1Api, CustomObjectsApi: Custom } = await loadK8s();
  const kc = await loadKubeconfig(kubeconfig, context);
  return {
    core: await boundedClient(kc, CoreV1Api, http),
    custom: await boundedClient(kc, Custom, http),
  };
}

/** The clients of TokenReview and SubjectAccessReview (the metrics listener's checks), from one kubeconfig file. */
export interface ReviewApis {
  authn: import('@kubernetes/client-node').AuthenticationV1Api;
  authz: import('@kubernetes/client-node').AuthorizationV1Api;
}

export async function reviewApis(
  kubeconfig: string,
  http: BoundedHttpOptions = {},
): Promise<ReviewApis> {
  const { AuthenticationV1Api, AuthorizationV1Api } = await loadK8s();
  const kc = await loadKubeconfig(kubeconfig);
  return {
    authn: await boundedClient(kc, AuthenticationV1Api, http),
    authz: await boundedClient(kc, AuthorizationV1Api, http),
  };
}

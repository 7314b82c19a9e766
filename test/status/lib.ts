// Shared pieces of the status tests: the CRD's schema, status sequences as the agent produces
// them, and a recording stand-in for the Kubernetes API server on 127.0.0.1.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { emptyStatus, StatusTracker, type NodeStatus } from '@offline-bundle/status';
import {
  startKubeStandIn,
  type KubeApiStandIn,
  type StandInRequest,
} from '../helpers/kube-standin.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const DEPLOY = path.join(ROOT, 'deploy');

// ajv-formats is CommonJS: under ESM its function is the default export (or its .default).
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ??
  addFormatsModule) as (a: Ajv) => Ajv;

export type Doc = Record<string, any>;

export async function loadYamlDocs(file: string): Promise<Doc[]> {
  const text = await readFile(file, 'utf8');
  const docs = parseAllDocuments(text, { prettyErrors: true });
  const out: Doc[] = [];
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    const js = d.toJS();
    if (js !== null && js !== undefined) out.push(js);
  }
  return out;
}

export async function loadCrd(): Promise<Doc> {
  const [crd] = await loadYamlDocs(path.join(DEPLOY, 'crd.yaml'));
  return crd!;
}

export function crdSchema(crd: Doc): Doc {
  return crd.spec.versions[0].schema.openAPIV3Schema;
}

/**
 * The CRD's schema as ajv compiles it. The x-kubernetes-* extensions are declared as
 * annotation keywords (ajv stays strict for everything else). With `closed`, every object
 * that lists properties gets additionalProperties: false, so a field the API server would
 * silently prune fails instead.
 */
export function compileSchema(schema: Doc, opts: { closed?: boolean } = {}): ValidateFunction {
  const ajv = new Ajv({ strict: true, allErrors: true });
  addFormats(ajv);
  for (const k of [
    'x-kubernetes-list-type',
    'x-kubernetes-list-map-keys',
    'x-kubernetes-validations',
    'x-kubernetes-preserve-unknown-fields',
    'x-kubernetes-int-or-string',
    'x-kubernetes-embedded-resource',
    'x-kubernetes-map-type',
  ]) {
    ajv.addKeyword({ keyword: k });
  }
  const s = structuredClone(schema);
  if (opts.closed) {
    const close = (n: Doc, isRoot: boolean): void => {
      if (n.properties) {
        if (n.additionalProperties === undefined) n.additionalProperties = false;
        for (const [k, v] of Object.entries(n.properties as Record<string, Doc>))
          if (!(isRoot && k === 'metadata')) close(v, false);
      }
      if (n.items) close(n.items, false);
    };
    close(s, true);
  }
  return ajv.compile(s);
}

export function fixedClock(start = Date.parse('2026-11-21T10:00:00Z'), stepMs = 1000): () => Date {
  let t = start;
  return () => {
    const d = new Date(t);
    t += stepMs;
    return d;
  };
}

export const SIGNER = 'sha256:' + 'ab'.repeat(32);
export const DIGEST = 'sha256:' + 'cd'.repeat(32);

/**
 * Drives a StatusTracker through one bundle load the way agent/src/load/pipeline.ts does, and
 * returns every status its sinks saw. `fail` stops with a failure at that phase.
 */
export function loadSequence(
  opts: {
    node?: string;
    version?: string;
    mode?: 'staged' | 'media';
    fail?: 'Verifying' | 'Preloading';
    start?: NodeStatus;
  } = {},
): NodeStatus[] {
  const node = opts.node ?? 'worker-1';
  const version = opts.version ?? '4.15.1';
  const tracker = new StatusTracker(
    opts.start ?? emptyStatus(node, new Date('2026-11-21T09:59:00Z')),
    fixedClock(),
  );
  const seen: NodeStatus[] = [];
  tracker.onChange((s) => seen.push(s));
  tracker.update(() => undefined);
  tracker.update((s) => {
    s.phase = 'Verifying';
    s.bundle = { file: '/run/media/STICK/ocp-4.15.1.bundle', media: 'USB stick STICK' };
    s.conditions = [];
    s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
  });
  tracker.condition(
    'MediaDetected',
    'True',
    'BundleFound',
    'found /run/media/STICK/ocp-4.15.1.bundle',
  );
  tracker.update((s) => {
    s.bundle = {
      ...s.bundle!,
      name: `OpenShift ${version}`,
      version,
      arch: 'amd64',
      signer: SIGNER,
    };
  });
  const fail = (reason: string, message: string): NodeStatus[] => {
    tracker.condition('Failed', 'True', reason, message);
    tracker.condition('Ready', 'False', reason, message);
    tracker.phase('Failed');
    return seen;
  };
  if (opts.fail === 'Verifying')
    return fail('BadSignature', 'the bundle signature does not verify: do not use this stick');
  const mode = opts.mode ?? 'staged';
  tracker.condition(
    'SpaceAvailable',
    'True',
    mode === 'staged' ? 'FitsOnDisk' : 'ServeFromMedia',
    'enough space',
  );
  tracker.update((s) => {
    s.bundle = { ...s.bundle!, mode };
  });
  if (mode === 'staged') tracker.phase('Staging');
  const total = 18_400_000_000;
  for (let i = 1; i <= 5; i++)
    tracker.progress({
      bytesDone: (total / 5) * i,
      bytesTotal: total,
      rate: 120_000_000.7,
      etaSeconds: ((5 - i) * total) / 5 / 120e6,
    });
  tracker.condition(
    'Verified',
    'True',
    'SignatureValid',
    'signed by /etc/bundle-agent/keys/factory.pub',
  );
  tracker.condition(
    'Staged',
    mode === 'staged' ? 'True' : 'False',
    mode === 'staged' ? 'Staged' : 'ServingFromMedia',
    'layout staged',
  );
  tracker.update((s) => {
    s.bundle = { ...s.bundle!, digest: DIGEST };
  });
  tracker.phase('Serving');
  tracker.condition('Serving', 'True', 'RegistryUp', 'temporary registry on 127.0.0.1:40123');
  tracker.phase('Preloading');
  tracker.progress({ imagesDone: 0, imagesTotal: 4 });
  for (let i = 1; i <= 4; i++) {
    tracker.progress({ imagesDone: i, imagesTotal: 4 });
    if (opts.fail === 'Preloading' && i === 2)
      return fail('PullFailed', 'pulling quay.io/ns/app failed: no space left on device');
  }
  tracker.condition('Preloaded', 'True', 'AllImagesPulled', "4 images in the runtime's store");
  tracker.phase('Pinning');
  tracker.condition('Pinned', 'True', 'Pinned', '6 images pinned (with the running 4.14.38)');
  tracker.condition('Serving', 'False', 'RegistryStopped', 'temporary registry stopped');
  tracker.update((s) => {
    s.phase = 'Ready';
    s.history = [
      ...s.history,
      { version, state: 'loaded', digest: DIGEST, at: '2026-11-21T10:05:00.000Z' },
    ];
  });
  tracker.condition(
    'Ready',
    'True',
    'Loaded',
    `update ${version} loaded: you may remove the USB stick`,
  );
  return seen;
}

// ---------------------------------------------------------------------------------------
// The API stand-in of the reporter tests: test/helpers/kube-standin.ts (TLS, authentication,
// the shipped RBAC and admission policy) with answers scripted per request.

export interface Recorded {
  method: string;
  url: URL;
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
  at: number;
  /** The HTTP status given (undefined: still hanging). */
  answered?: number;
}

export type Answer =
  | { status: number; body?: unknown; headers?: Record<string, string> }
  | 'hang'
  /** Runs (e.g. to change something on disk) before the answer it returns is sent. */
  | (() => Promise<{ status: number; body?: unknown; headers?: Record<string, string> }>);

export interface FakeApi {
  port: number;
  /** The stand-in itself (objects, RBAC, every request with its caller). */
  server: KubeApiStandIn;
  requests: Recorded[];
  /** Answers to give, in order, to authorized requests whose path ends with /status (then: the stand-in's own). */
  statusAnswers: Answer[];
  /** Answers to give, in order, to other authorized requests (then: the stand-in's own). */
  mainAnswers: Answer[];
  /**
   * When set, a status write no scripted answer covers is checked against this schema the way
   * the API server checks it against the CRD: an invalid one gets 422 Invalid naming each field
   * in details.causes (see invalidStatus).
   */
  schema?: ValidateFunction;
  statusRequests(): Recorded[];
  /** Only those answered 2xx. */
  accepted(): Recorded[];
  close(): Promise<void>;
}

/**
 * The stand-in on `port` (default: any) where the bearer tokens writeKubeconfig writes
 * ('node-token', 'rotated-token') are the node identity of `node` (system:node:<node>, group
 * system:nodes), so its writes pass RBAC and the admission policy only for its own object.
 */
export async function startFakeApi(port = 0, node = 'worker-1'): Promise<FakeApi> {
  const server = await startKubeStandIn({ port });
  for (const token of ['node-token', 'rotated-token'])
    server.addToken(`system:node:${node}`, ['system:nodes'], token);
  const recorded = (r: StandInRequest): Recorded => ({
    method: r.method,
    url: r.url,
    path: r.path,
    headers: r.headers,
    body: r.body,
    at: r.at,
    ...(r.status ? { answered: r.status } : {}),
  });
  const api: FakeApi = {
    port: server.port,
    server,
    get requests() {
      return server.requests.map(recorded);
    },
    statusAnswers: [],
    mainAnswers: [],
    get schema() {
      return server.statusSchema;
    },
    set schema(v) {
      server.statusSchema = v;
    },
    statusRequests: () => api.requests.filter((r) => r.path.endsWith('/status')),
    accepted: () =>
      api.requests.filter((r) => r.answered !== undefined && r.answered >= 200 && r.answered < 300),
    close: () => server.close(),
  };
  server.intercept = async (r) => {
    const scripted = (r.path.endsWith('/status') ? api.statusAnswers : api.mainAnswers).shift();
    return typeof scripted === 'function' ? await scripted() : scripted;
  };
  return api;
}

/**
 * The API server's answer to an object that fails the CRD's schema: 422 Invalid with one cause
 * per field, named as Kubernetes names them ("status.conditions[1].type"). Undefined when valid.
 */
export function invalidStatus(validate: ValidateFunction, body: string): Doc | undefined {
  const obj = parseYaml(body);
  if (validate(obj)) return undefined;
  const causes = (validate.errors ?? []).map((e) => {
    const parts = e.instancePath.split('/').slice(1);
    if (e.keyword === 'required') parts.push(String(e.params.missingProperty));
    const field = parts
      .map((p, i) => (/^\d+$/.test(p) ? `[${p}]` : `${i ? '.' : ''}${p}`))
      .join('');
    const reason =
      e.keyword === 'enum'
        ? 'FieldValueNotSupported'
        : e.keyword === 'required'
          ? 'FieldValueRequired'
          : 'FieldValueInvalid';
    return {
      reason,
      message:
        e.keyword === 'enum'
          ? `Unsupported value: supported values: ${(e.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`
          : String(e.message),
      field,
    };
  });
  return {
    kind: 'Status',
    apiVersion: 'v1',
    status: 'Failure',
    reason: 'Invalid',
    code: 422,
    message: `NodeBundleStatus.bundles.offline-bundle.io "${obj?.metadata?.name}" is invalid: ${causes.map((c) => `${c.field}: ${c.message}`).join(', ')}`,
    details: {
      name: obj?.metadata?.name,
      group: 'bundles.offline-bundle.io',
      kind: 'NodeBundleStatus',
      causes,
    },
  };
}

/** A free port on 127.0.0.1 (nothing listens on it when this returns). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', () => resolve()));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** A token kubeconfig for the stand-in on `port` (its certificate not checked: see KubeApiStandIn for kubeconfigs with its CA). */
/** A token kubeconfig for a stand-in on 127.0.0.1 (`http` for the hostile stand-ins, which speak plain HTTP). */
export async function writeKubeconfig(
  file: string,
  port: number,
  token = 'node-token',
  scheme: 'https' | 'http' = 'https',
): Promise<string> {
  await writeFile(
    file,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '  - name: test',
      '    cluster:',
      `      server: ${scheme}://127.0.0.1:${port}`,
      '      insecure-skip-tls-verify: true',
      'users:',
      '  - name: node',
      '    user:',
      `      token: ${token}`,
      'contexts:',
      '  - name: test',
      '    context: { cluster: test, user: node }',
      'current-context: test',
      '',
    ].join('\n'),
  );
  return file;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A temporary directory removed when `t` ends (as test/helpers/tmp.mjs, but typed). */
export async function tmpdir(
  t: { teardown(fn: () => unknown): void },
  prefix = 'ob-status-',
): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

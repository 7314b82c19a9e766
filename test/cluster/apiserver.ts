// Contract stand-in for the Kubernetes API server, for `bundle cluster` (no real API server runs
// here). It keeps the semantics of the real one that the commands rely on, for the subset they
// use:
// - Nodes (list, labelSelector with `k=v`, `k!=v`, `k`), Pods (list across namespaces);
// - NodeBundleStatuses (list; 404 when the CRD is not installed);
// - ClusterVersion "version" (get; merge patch, application/merge-patch+json only);
// - MachineAutoscalers, ClusterAutoscalers (list; 404 when their CRDs are absent);
// - ConfigMaps (get; server-side apply: application/apply-patch+yaml, fieldManager required,
//   field ownership per manager for labels, annotations, data and binaryData keys: a manager's
//   apply removes the keys it owned alone and no longer applies, a key owned by another manager
//   with another value is a 409 Conflict unless force=true);
// - RBAC: denied (verb, resource) pairs answer 403 Forbidden with the API server's Status.
// Every request is recorded (method, path, query, content type, body).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parse as parseYaml } from 'yaml';
import { writeKubeconfig, type Doc } from '../status/lib.js';

export interface Req { method: string; path: string; query: URLSearchParams; contentType: string; body: string; status: number }
interface Owned { obj: Doc; owners: Map<string, Set<string>> }

export class StandInApi {
  nodes: Doc[] = [];
  statuses: Doc[] = [];
  crdInstalled = true;
  clusterVersion: Doc | undefined;
  pods: Doc[] = [];
  machineAutoscalers: Doc[] | undefined;
  clusterAutoscalers: Doc[] | undefined;
  readonly configMaps = new Map<string, Owned>();
  /** "verb resource" pairs RBAC refuses, e.g. "list nodes", "patch configmaps". */
  readonly deny = new Set<string>();
  readonly requests: Req[] = [];
  port = 0;
  private server?: Server;

  static async start(): Promise<StandInApi> {
    const api = new StandInApi();
    api.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        const r: Req = { method: req.method ?? '', path: url.pathname, query: url.searchParams, contentType: String(req.headers['content-type'] ?? ''), body: Buffer.concat(chunks).toString('utf8'), status: 0 };
        api.requests.push(r);
        const [status, body] = api.handle(r);
        r.status = status;
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(body));
      });
    });
    await new Promise<void>((resolve) => api.server!.listen(0, '127.0.0.1', resolve));
    api.port = (api.server.address() as AddressInfo).port;
    return api;
  }

  kubeconfig(file: string): Promise<string> {
    return writeKubeconfig(file, this.port, 'admin-token');
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server?.close(() => resolve());
      this.server?.closeAllConnections();
    });
  }

  configMap(ns: string, name: string): Doc | undefined {
    return this.configMaps.get(`${ns}/${name}`)?.obj;
  }

  private handle(r: Req): [number, unknown] {
    const p = r.path;
    let m: RegExpExecArray | null;
    const verb = r.method === 'GET' ? (/\/(nodes|pods|nodebundlestatuses|machineautoscalers|clusterautoscalers)$/.test(p) ? 'list' : 'get') : r.method.toLowerCase();
    const resource = /\/(nodes|pods|nodebundlestatuses|clusterversions|configmaps|machineautoscalers|clusterautoscalers)(\/|$)/.exec(p)?.[1] ?? '';
    if (this.deny.has(`${verb} ${resource}`)) {
      return [403, status(403, 'Forbidden', `${resource} is forbidden: User "admin" cannot ${verb} resource "${resource}" in API group "" at the cluster scope`)];
    }
    if (r.method === 'GET' && p === '/api/v1/nodes') return [200, list('NodeList', this.nodes.filter((n) => selects(r.query.get('labelSelector'), n.metadata?.labels ?? {})))];
    if (r.method === 'GET' && p === '/api/v1/pods') return [200, list('PodList', this.pods)];
    if (r.method === 'GET' && p === '/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses') {
      return this.crdInstalled ? [200, list('NodeBundleStatusList', this.statuses)] : [404, status(404, 'NotFound', 'the server could not find the requested resource')];
    }
    if (r.method === 'GET' && p === '/apis/autoscaling.openshift.io/v1beta1/machineautoscalers') return this.machineAutoscalers ? [200, list('MachineAutoscalerList', this.machineAutoscalers)] : [404, status(404, 'NotFound', 'the server could not find the requested resource')];
    if (r.method === 'GET' && p === '/apis/autoscaling.openshift.io/v1/clusterautoscalers') return this.clusterAutoscalers ? [200, list('ClusterAutoscalerList', this.clusterAutoscalers)] : [404, status(404, 'NotFound', 'the server could not find the requested resource')];
    if (p === '/apis/config.openshift.io/v1/clusterversions/version') {
      if (!this.clusterVersion) return [404, status(404, 'NotFound', 'clusterversions.config.openshift.io "version" not found')];
      if (r.method === 'GET') return [200, this.clusterVersion];
      if (r.method === 'PATCH') {
        if (r.contentType !== 'application/merge-patch+json') return [415, status(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/merge-patch+json (got ${r.contentType})`)];
        this.clusterVersion = mergePatch(this.clusterVersion, JSON.parse(r.body)) as Doc;
        return [200, this.clusterVersion];
      }
    }
    if ((m = /^\/api\/v1\/namespaces\/([^/]+)\/configmaps\/([^/]+)$/.exec(p))) {
      const key = `${m[1]}/${m[2]}`;
      if (r.method === 'GET') {
        const cm = this.configMaps.get(key);
        return cm ? [200, cm.obj] : [404, status(404, 'NotFound', `configmaps "${m[2]}" not found`)];
      }
      if (r.method === 'PATCH') return this.apply(key, m[1]!, m[2]!, r);
    }
    return [404, status(404, 'NotFound', `the stand-in does not serve ${r.method} ${p}`)];
  }

  private apply(key: string, ns: string, name: string, r: Req): [number, unknown] {
    if (r.contentType !== 'application/apply-patch+yaml') return [415, status(415, 'UnsupportedMediaType', `not an apply patch: ${r.contentType}`)];
    const manager = r.query.get('fieldManager');
    if (!manager) return [400, status(400, 'BadRequest', 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')];
    const body = parseYaml(r.body) as Doc;
    if (body?.apiVersion !== 'v1' || body?.kind !== 'ConfigMap' || body?.metadata?.name !== name || (body.metadata.namespace ?? ns) !== ns) {
      return [400, status(400, 'BadRequest', 'apply body must be a v1 ConfigMap with the name and namespace of the URL')];
    }
    const cur: Owned = this.configMaps.get(key) ?? { obj: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns } }, owners: new Map() };
    const fields = new Map<string, unknown>();
    for (const [sect, obj] of [['labels', body.metadata.labels], ['annotations', body.metadata.annotations], ['data', body.data], ['binaryData', body.binaryData]] as const) {
      for (const [k, v] of Object.entries((obj ?? {}) as Record<string, unknown>)) fields.set(`${sect}/${k}`, v);
    }
    const get = (f: string) => {
      const [sect, k] = split(f);
      return (sect === 'labels' || sect === 'annotations' ? cur.obj.metadata?.[sect] : cur.obj[sect])?.[k];
    };
    const force = r.query.get('force') === 'true';
    const conflicts = [...fields].filter(([f, v]) => [...cur.owners].some(([mgr, set]) => mgr !== manager && set.has(f)) && get(f) !== v);
    if (conflicts.length && !force) return [409, status(409, 'Conflict', `Apply failed with ${conflicts.length} conflicts: ${conflicts.map(([f]) => f).join(', ')}`)];
    const mine = cur.owners.get(manager) ?? new Set<string>();
    for (const f of mine) {
      if (fields.has(f)) continue;
      const others = [...cur.owners].some(([mgr, set]) => mgr !== manager && set.has(f));
      if (!others) setField(cur.obj, f, undefined);
    }
    for (const [f, v] of fields) {
      setField(cur.obj, f, v);
      if (force) for (const [mgr, set] of cur.owners) if (mgr !== manager) set.delete(f);
    }
    cur.owners.set(manager, new Set(fields.keys()));
    this.configMaps.set(key, cur);
    return [200, cur.obj];
  }
}

const split = (f: string): [string, string] => [f.slice(0, f.indexOf('/')), f.slice(f.indexOf('/') + 1)];

function setField(obj: Doc, f: string, v: unknown): void {
  const [sect, k] = split(f);
  const holder = sect === 'labels' || sect === 'annotations' ? (obj.metadata[sect] ??= {}) : (obj[sect] ??= {});
  if (v === undefined) delete holder[k];
  else holder[k] = v;
}

function list(kind: string, items: Doc[]): Doc {
  return { kind, apiVersion: 'v1', metadata: { resourceVersion: '1' }, items };
}

function status(code: number, reason: string, message: string): Doc {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Doc = typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Doc) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** Equality-based label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated. */
function selects(selector: string | null, labels: Record<string, string>): boolean {
  if (!selector) return true;
  return selector.split(',').every((term) => {
    const t = term.trim();
    let m: RegExpExecArray | null;
    if ((m = /^([^!=]+)!=(.*)$/.exec(t))) return labels[m[1]!] !== m[2];
    if ((m = /^([^!=]+)==?(.*)$/.exec(t))) return labels[m[1]!] === m[2];
    if (t.startsWith('!')) return !(t.slice(1) in labels);
    return t in labels;
  });
}

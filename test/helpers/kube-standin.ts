// Stand-in for the Kubernetes API server (none can run here) that authenticates and authorizes
// the way kube-apiserver does, so a missing rule shows up in a test and not on the first node:
// - TLS only. Client certificates verified against the stand-in's CA are the user (CN) and the
//   groups (one O each), as the kubelet's are; bearer tokens come from a token map. Anything
//   else: 401 Unauthorized. Every authenticated user is also in system:authenticated.
// - RBAC from the YAML files given (default: the shipped deploy/rbac.yaml and
//   deploy/admin-rbac.yaml): ClusterRoles, Roles, ClusterRoleBindings and RoleBindings, with
//   apiGroups, resources (subresources as "resource/sub", "*", "*/sub"), resourceNames, verbs
//   ("*") and nonResourceURLs; subjects User, Group and ServiceAccount. Aggregation labels
//   (aggregate-to-view...) are ignored: nothing here reads the aggregated roles.
// - Built in, as a cluster has them: cluster-admin for system:masters and
//   system:cluster-admins; discovery URLs for system:authenticated; and (openshiftNodeDefaults)
//   what the Node authorizer and NodeRestriction give system:nodes: nodes get/list/watch, its
//   own Node (update, patch, status), pods get/list/watch, events, leases, CSRs. Nothing on
//   config.openshift.io: a node may not read ClusterVersion unless a loaded file grants it.
// - Server-side apply of a missing object needs create as well as patch (as patch.go checks).
// - ValidatingAdmissionPolicies of the loaded files with a Deny binding are evaluated as the
//   API server does (matchConstraints.resourceRules, matchConditions, variables, validations,
//   messageExpression, in CEL, with request, object, oldObject and params): deploy/rbac.yaml's
//   lets a node write only its own NodeBundleStatus; deploy/upgrade-gate.yaml's refuses a
//   ClusterVersion desiredUpdate its UpgradeGate does not name. As the API server's dispatcher
//   does, a binding's paramRef (by name) is looked up before any matchCondition: none there is
//   params null with parameterNotFoundAction Allow and a refusal of every matched request with
//   Deny, and so is a paramKind no served resource has; a false matchCondition skips the policy,
//   else an expression that fails to evaluate refuses (failurePolicy Fail). object is what a
//   merge patch or an apply would make of the stored object. (Binding matchResources, paramRef
//   selectors and paramKind's version are not read: ours have none, or one.)
// - Refusals are the API server's Status objects, with its messages.
// - Objects of the shipped CRDs (deploy/crd.yaml) are created (POST) only when they pass the
//   CRD's schema and CEL rules (kube-standin-crd.ts), else 422 Invalid; an existing name is a
//   409 AlreadyExists; DELETE removes one (404 when missing).
// Served: Nodes, Pods, NodeBundleStatuses (+ /status, server-side apply), BundleApprovals
// (create, get, list, delete), ClusterVersion
// "version" (get, merge patch), Machine/ClusterAutoscalers (list), ConfigMaps (get, server-side
// apply with field ownership per manager), UpgradeGates (get, apply, held to the CRD's schema),
// workloads (Deployments, DaemonSets, StatefulSets, ReplicaSets, Jobs, CronJobs) and OLM's
// ClusterServiceVersions (list), MachineConfigPools (list, merge patch) and PinnedImageSets
// (list, apply, delete). A resource marked absent answers 404 as a missing CRD.
// Watches (GET ?watch=true) of any served resource, as the API server's watch cache serves them:
// every change of an object (create, apply, patch, delete, and the test's own put and delete) is
// an event with a new resourceVersion; a watch from resourceVersion N sends the events after N,
// then each as it happens, one JSON object per line; from a version older than the history kept
// (WATCH_HISTORY_EVENTS, or compactWatchHistory()) an ERROR event with a 410 Expired Status ends
// it; without one (or "0") it begins with an ADDED event per object; allowWatchBookmarks=true
// adds a BOOKMARK every watchBookmarkMs (the API server: about a minute); the stream ends after
// timeoutSeconds (default 1,800 s). cutWatches() breaks every open one (a restart, a proxy's cut).
// TokenReviews (create) answer from the token map and SubjectAccessReviews (create) from the
// RBAC in force, as the API server's delegated authentication and authorization do for
// kube-rbac-proxy and the kubelet; the Node authorizer lets nodes create both (its NodeRules).
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { evaluate } from '@marcbachmann/cel-js';
import type { ValidateFunction } from 'ajv';
import { parse as parseYaml } from 'yaml';
import { invalidStatus, loadYamlDocs, type Doc } from '../status/lib.js';
import { issueClientCert, makeTestCa } from './test-ca.mjs';
import { crdCreateChecks, type CreateCheck } from './kube-standin-crd.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SHIPPED_RBAC = [
  path.join(ROOT, 'deploy', 'rbac.yaml'),
  path.join(ROOT, 'deploy', 'admin-rbac.yaml'),
  path.join(ROOT, 'deploy', 'upgrade-gate.yaml'),
];

export interface StandInRequest {
  method: string;
  path: string;
  url: URL;
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  /** When it arrived (Date.now()). */
  at: number;
  contentType: string;
  body: string;
  user: string;
  groups: string[];
  /** The RBAC verb: get, list, watch, create, update, patch, delete, deletecollection (non-resource: the lower-case method). */
  verb: string;
  /** The resource, with its subresource as "nodebundlestatuses/status"; '' for non-resource URLs. */
  resource: string;
  group: string;
  name: string;
  namespace: string;
  /** The HTTP status given (0 while unanswered). */
  status: number;
}

export type StandInAnswer =
  { status: number; body?: unknown; headers?: Record<string, string> } | 'hang';

export interface KubeStandIn {
  /** https://HOST:PORT */
  url: string;
  /** PEM file: the CA that signed the serving certificate and the client certificates. */
  caFile: string;
  /**
   * Writes a kubeconfig shaped like RHCOS's kubelet one for user system:node:<node> (groups
   * system:nodes, system:authenticated) under `root`: root/var/lib/kubelet/kubeconfig naming
   * client-certificate and client-key as the file /var/lib/kubelet/pki/kubelet-client-current.pem
   * (certificate and key in one PEM, as RHCOS has it), certificate-authority-data inline;
   * `server` overrides url; certPaths 'root' names the PEM under `root` (an agent on this host).
   */
  writeNodeKubeconfig(
    root: string,
    node: string,
    opts?: { server?: string; certPaths?: 'node' | 'root' },
  ): Promise<void>;
  /** A cluster-admin kubeconfig (bearer token) for the admin commands. */
  adminKubeconfig(file: string): Promise<string>;
  /** Objects by resource, e.g. get('nodebundlestatuses', 'worker-1'). */
  get(resource: string, name: string, namespace?: string): Record<string, any> | undefined;
  /** Every request, with the identity it authenticated as (user '' when it did not) and the answer's status. */
  requests: StandInRequest[];
  close(): Promise<void>;
}

interface Rule {
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  verbs: string[];
  nonResourceURLs?: string[];
}
export interface Subject {
  kind: 'User' | 'Group' | 'ServiceAccount';
  name: string;
  namespace?: string;
}
interface Binding {
  name: string;
  namespace?: string;
  roleRef: { kind: string; name: string };
  subjects: Subject[];
}
interface Identity {
  user: string;
  groups: string[];
}

const CR = 'rbac.authorization.k8s.io';

/** Group and (plural) resource → whether objects live in a namespace. */
const NAMESPACED: Record<string, boolean> = {
  '/nodes': false,
  '/pods': true,
  '/configmaps': true,
  '/events': true,
  '/namespaces': false,
  'bundles.offline-bundle.io/nodebundlestatuses': false,
  'bundles.offline-bundle.io/bundleapprovals': false,
  'bundles.offline-bundle.io/upgradegates': false,
  'config.openshift.io/clusterversions': false,
  'autoscaling.openshift.io/machineautoscalers': true,
  'autoscaling.openshift.io/clusterautoscalers': false,
  'apps/deployments': true,
  'apps/daemonsets': true,
  'apps/statefulsets': true,
  'apps/replicasets': true,
  'batch/jobs': true,
  'batch/cronjobs': true,
  'operators.coreos.com/clusterserviceversions': true,
  'machineconfiguration.openshift.io/machineconfigpools': false,
  'machineconfiguration.openshift.io/pinnedimagesets': false,
  'authentication.k8s.io/tokenreviews': false,
  'authorization.k8s.io/subjectaccessreviews': false,
};

/** What the Node authorizer with NodeRestriction lets a node do (the parts that matter here). */
function nodeAuthorizer(node: string, a: Attrs): boolean {
  const core = a.group === '';
  if (core && a.resource === 'nodes' && ['get', 'list', 'watch', 'create'].includes(a.verb))
    return true;
  if (
    core &&
    (a.resource === 'nodes' || a.resource === 'nodes/status') &&
    ['update', 'patch'].includes(a.verb)
  )
    return a.name === node;
  if (core && a.resource === 'pods' && ['get', 'list', 'watch'].includes(a.verb)) return true;
  if (core && a.resource === 'events' && ['create', 'update', 'patch'].includes(a.verb))
    return true;
  if (
    a.group === 'coordination.k8s.io' &&
    a.resource === 'leases' &&
    a.namespace === 'kube-node-lease'
  )
    return (
      ['get', 'create', 'update', 'patch'].includes(a.verb) &&
      (a.verb === 'create' || a.name === node)
    );
  if (a.group === 'certificates.k8s.io' && a.resource === 'certificatesigningrequests')
    return ['create', 'get', 'list', 'watch'].includes(a.verb);
  // "needed to check API access. These creates are non-mutating" (the kubelet's own /metrics)
  if (
    a.verb === 'create' &&
    ((a.group === 'authentication.k8s.io' && a.resource === 'tokenreviews') ||
      (a.group === 'authorization.k8s.io' && a.resource === 'subjectaccessreviews'))
  )
    return true;
  return false;
}

/** Events a watch can be resumed from (the API server's watch cache keeps a window of them too). */
export const WATCH_HISTORY_EVENTS = 1000;

interface Change {
  rv: number;
  resource: string;
  namespace?: string;
  labels: Record<string, string>;
  line: string;
}
interface Watcher {
  resource: string;
  namespace?: string;
  selector: string | null;
  res: ServerResponse;
}

interface Attrs {
  verb: string;
  group: string;
  resource: string;
  name: string;
  namespace: string;
  nonResource?: string;
}

/** ClusterRoles every cluster has, and their bindings (OpenShift's names where they differ). */
const BUILT_IN_ROLES: Doc[] = [
  {
    kind: 'ClusterRole',
    metadata: { name: 'cluster-admin' },
    rules: [
      { apiGroups: ['*'], resources: ['*'], verbs: ['*'] },
      { nonResourceURLs: ['*'], verbs: ['*'] },
    ],
  },
  {
    kind: 'ClusterRole',
    metadata: { name: 'system:discovery' },
    rules: [
      {
        nonResourceURLs: [
          '/api',
          '/api/*',
          '/apis',
          '/apis/*',
          '/version',
          '/healthz',
          '/readyz',
          '/livez',
        ],
        verbs: ['get'],
      },
    ],
  },
  {
    kind: 'ClusterRoleBinding',
    metadata: { name: 'cluster-admin' },
    roleRef: { apiGroup: CR, kind: 'ClusterRole', name: 'cluster-admin' },
    subjects: [
      { kind: 'Group', name: 'system:masters' },
      { kind: 'Group', name: 'system:cluster-admins' },
    ],
  },
  {
    kind: 'ClusterRoleBinding',
    metadata: { name: 'system:discovery' },
    roleRef: { apiGroup: CR, kind: 'ClusterRole', name: 'system:discovery' },
    subjects: [{ kind: 'Group', name: 'system:authenticated' }],
  },
];

export class KubeApiStandIn implements KubeStandIn {
  url = '';
  caFile = '';
  readonly requests: StandInRequest[] = [];
  /** bearer token → identity */
  readonly tokens = new Map<string, Identity>();
  /** Resources (group/plural, e.g. "autoscaling.openshift.io/machineautoscalers") whose CRD is not installed: 404. */
  readonly absent = new Set<string>();
  /** When set, a NodeBundleStatus status apply is checked against this schema (422 Invalid as the API server's CRD check). */
  statusSchema?: ValidateFunction;
  /**
   * Runs after authentication, authorization and admission (so only for calls the real server
   * would let through): an answer it returns is given instead of the stand-in's own.
   */
  intercept?: (r: StandInRequest) => StandInAnswer | undefined | Promise<StandInAnswer | undefined>;
  /** Set to false to take the Node authorizer away (a cluster without it). */
  nodeAuthorizer: boolean;
  private readonly store = new Map<string, Doc>();
  private readonly owners = new Map<string, Map<string, Set<string>>>();
  private roles = new Map<string, Rule[]>();
  private bindings: Binding[] = [];
  private policies: { name: string; binding: string; spec: Doc; paramRef?: Doc }[] = [];
  private resourceVersion = 1;
  private server?: Server;
  private dir = '';
  private ca?: { caCert: string; caKey: string };
  private readonly hanging: ServerResponse[] = [];
  /** The changes a watch may be resumed from, oldest first; a watch from before historyFrom is 410 Gone. */
  private history: Change[] = [];
  private historyFrom = 1;
  private readonly watchers = new Set<Watcher>();
  /** How often an open watch that asked for them gets a BOOKMARK (the API server: about a minute). */
  watchBookmarkMs = 60_000;
  /** What creating an object of a shipped CRD must pass, by plural. */
  private createChecks = new Map<string, CreateCheck>();

  private constructor(opts: { openshiftNodeDefaults?: boolean }) {
    this.nodeAuthorizer = opts.openshiftNodeDefaults ?? true;
  }

  static async start(opts: StandInOptions = {}): Promise<KubeApiStandIn> {
    const api = new KubeApiStandIn(opts);
    const host = opts.host ?? '127.0.0.1';
    api.dir = await mkdtemp(path.join(os.tmpdir(), 'ob-kube-standin-'));
    const ca = await makeTestCa(api.dir, {
      names: [
        ...new Set(
          [host, '127.0.0.1', 'localhost', ...(opts.names ?? [])].filter(
            (n) => n !== '0.0.0.0' && n !== '::',
          ),
        ),
      ],
    });
    api.ca = ca;
    api.caFile = ca.caCert;
    await api.loadRbac(opts.rbacFiles ?? SHIPPED_RBAC);
    api.createChecks = await crdCreateChecks(path.join(ROOT, 'deploy', 'crd.yaml'));
    api.tokens.set('admin-token', { user: 'kube:admin', groups: ['system:cluster-admins'] });
    if (opts.clusterVersion) api.clusterVersion = clusterVersionDoc(opts.clusterVersion);
    const [key, cert, caPem] = await Promise.all([
      readFile(ca.serverKey),
      readFile(ca.serverCert),
      readFile(ca.caCert),
    ]);
    api.server = createServer(
      { key, cert, ca: caPem, requestCert: true, rejectUnauthorized: false },
      (req, res) => api.serve(req, res),
    );
    await new Promise<void>((resolve, reject) => {
      api.server!.once('error', reject);
      api.server!.listen(opts.port ?? 0, host, () => resolve());
    });
    const { port } = api.server.address() as AddressInfo;
    api.url = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
    return api;
  }

  get port(): number {
    return Number(new URL(this.url).port);
  }

  /** Replaces the RBAC objects (and the admission policy) with those of `files`. */
  async loadRbac(files: string[]): Promise<void> {
    const docs = [...BUILT_IN_ROLES];
    for (const f of files) docs.push(...(await loadYamlDocs(f)));
    this.roles = new Map();
    this.bindings = [];
    const vaps = new Map<string, Doc>();
    const vapBindings: Doc[] = [];
    for (const d of docs) {
      const name = d.metadata?.name as string;
      if (d.kind === 'ClusterRole') this.roles.set(`ClusterRole//${name}`, d.rules ?? []);
      else if (d.kind === 'Role')
        this.roles.set(`Role/${d.metadata.namespace ?? 'default'}/${name}`, d.rules ?? []);
      else if (d.kind === 'ClusterRoleBinding' || d.kind === 'RoleBinding') {
        this.bindings.push({
          name,
          ...(d.kind === 'RoleBinding' ? { namespace: d.metadata.namespace ?? 'default' } : {}),
          roleRef: d.roleRef,
          subjects: d.subjects ?? [],
        });
      } else if (d.kind === 'ValidatingAdmissionPolicy') vaps.set(name, d);
      else if (
        d.kind === 'ValidatingAdmissionPolicyBinding' &&
        (d.spec?.validationActions ?? []).includes('Deny')
      )
        vapBindings.push(d);
    }
    this.policies = vapBindings.flatMap((b) => {
      const vap = vaps.get(b.spec.policyName);
      return vap
        ? [
            {
              name: vap.metadata.name,
              binding: b.metadata.name,
              spec: vap.spec,
              ...(b.spec.paramRef ? { paramRef: b.spec.paramRef } : {}),
            },
          ]
        : [];
    });
  }

  /**
   * Binds a subject to a ClusterRole (cluster-wide, or in `namespace` as a RoleBinding) or to a
   * Role of `namespace`, as `kubectl create (cluster)rolebinding` does.
   */
  bind(
    roleRef: { kind: 'ClusterRole' | 'Role'; name: string },
    subject: Subject,
    namespace?: string,
  ): void {
    if (roleRef.kind === 'Role' && !namespace) throw new Error('a Role is bound in its namespace');
    this.bindings.push({
      name: `${roleRef.name}:${subject.name}`,
      ...(namespace ? { namespace } : {}),
      roleRef,
      subjects: [subject],
    });
  }

  /** A user known by a bearer token; returns the token. */
  addToken(user: string, groups: string[] = [], token = randomBytes(16).toString('hex')): string {
    this.tokens.set(token, { user, groups });
    return token;
  }

  // -- kubeconfigs -------------------------------------------------------------------------

  private async caData(): Promise<string> {
    return (await readFile(this.caFile)).toString('base64');
  }

  private async kubeconfigYaml(user: Doc, server = this.url): Promise<string> {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- cluster:',
      `    certificate-authority-data: ${await this.caData()}`,
      `    server: ${server}`,
      '  name: local',
      'contexts:',
      '- context:',
      '    cluster: local',
      '    user: user',
      '  name: local',
      'current-context: local',
      'preferences: {}',
      'users:',
      '- name: user',
      '  user:',
      ...Object.entries(user).map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`),
      '',
    ].join('\n');
  }

  /**
   * RHCOS's kubelet kubeconfig for system:node:<node> under `root`: root/var/lib/kubelet/kubeconfig
   * naming /var/lib/kubelet/pki/kubelet-client-current.pem (certificate and key in one file) as
   * client-certificate and client-key. certPaths 'root' writes those two paths under `root`
   * instead, for an agent that runs on this host rather than in the node's root.
   */
  async writeNodeKubeconfig(
    root: string,
    node: string,
    opts: { server?: string; certPaths?: 'node' | 'root' } = {},
  ): Promise<void> {
    const pem = await this.clientPem(`node-${node}`, `system:node:${node}`, ['system:nodes']);
    const pki = path.join(root, 'var/lib/kubelet/pki');
    await mkdir(pki, { recursive: true });
    await writeFile(path.join(pki, 'kubelet-client-current.pem'), pem, { mode: 0o600 });
    const certFile =
      opts.certPaths === 'root'
        ? path.join(pki, 'kubelet-client-current.pem')
        : '/var/lib/kubelet/pki/kubelet-client-current.pem';
    await writeFile(
      path.join(root, 'var/lib/kubelet/kubeconfig'),
      await this.kubeconfigYaml(
        { 'client-certificate': certFile, 'client-key': certFile },
        opts.server ?? this.url,
      ),
    );
  }

  /** A kubeconfig with a client certificate for any user and groups (e.g. a ServiceAccount's identity). */
  async certKubeconfig(
    file: string,
    user: string,
    groups: string[],
    opts: { server?: string } = {},
  ): Promise<string> {
    const pem = await this.clientPem(`user-${randomBytes(4).toString('hex')}`, user, groups);
    const pemFile = `${file}.pem`;
    await writeFile(pemFile, pem, { mode: 0o600 });
    await writeFile(
      file,
      await this.kubeconfigYaml(
        { 'client-certificate': pemFile, 'client-key': pemFile },
        opts.server ?? this.url,
      ),
    );
    return file;
  }

  async adminKubeconfig(file: string): Promise<string> {
    return this.tokenKubeconfig(file, 'admin-token');
  }

  /** A kubeconfig holding a bearer token (made with addToken, or 'admin-token'). */
  async tokenKubeconfig(
    file: string,
    token: string,
    opts: { server?: string } = {},
  ): Promise<string> {
    await writeFile(file, await this.kubeconfigYaml({ token }, opts.server ?? this.url));
    return file;
  }

  private async clientPem(file: string, user: string, groups: string[]): Promise<string> {
    const { cert, key } = await issueClientCert(
      this.ca!,
      this.dir,
      file.replace(/[^A-Za-z0-9_.-]/g, '_'),
      { cn: user, o: groups },
    );
    return (await readFile(cert, 'utf8')) + (await readFile(key, 'utf8'));
  }

  /** How many watches are open now. */
  get openWatches(): number {
    return this.watchers.size;
  }

  /** Every open watch's stream broken off (its connection reset), as an API server's restart or a proxy's cut does. */
  cutWatches(): void {
    for (const w of this.watchers) {
      this.watchers.delete(w);
      w.res.destroy();
    }
  }

  /**
   * The watch history dropped, its window moved past the current version (changes elsewhere in
   * the cluster): a watch from any version given so far is 410 Gone; a list gives a new one.
   */
  compactWatchHistory(): void {
    this.history = [];
    this.historyFrom = ++this.resourceVersion;
  }

  /** The API server goes away (a reboot, a partition): nothing listens on its port until resume(). */
  pause(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.cutWatches();
      for (const r of this.hanging.splice(0)) r.destroy();
      this.server!.close(() => resolve());
      this.server!.closeAllConnections();
    });
  }

  /** Listens again on the same address and port, with the same certificates and objects. */
  resume(): Promise<void> {
    const u = new URL(this.url);
    return new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(Number(u.port), u.hostname.replace(/^\[|\]$/g, ''), () => resolve());
    });
  }

  close(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.cutWatches();
      for (const r of this.hanging) r.destroy();
      if (!this.server?.listening) return resolve();
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    }).then(() => rm(this.dir, { recursive: true, force: true }));
  }

  // -- objects -----------------------------------------------------------------------------

  get(resource: string, name: string, namespace?: string): Doc | undefined {
    return this.store.get(key(resource, name, namespace));
  }

  put(resource: string, obj: Doc): Doc {
    const ns = obj.metadata?.namespace;
    obj.metadata = { ...obj.metadata, resourceVersion: String(++this.resourceVersion) };
    const k = key(resource, obj.metadata.name, ns);
    const type = this.store.has(k) ? 'MODIFIED' : 'ADDED';
    this.store.set(k, obj);
    this.changed(resource, type, obj);
    return obj;
  }

  delete(resource: string, name: string, namespace?: string): void {
    const gone = this.store.get(key(resource, name, namespace));
    this.store.delete(key(resource, name, namespace));
    this.owners.delete(key(resource, name, namespace));
    // the DELETED event carries the object at the deletion's resourceVersion
    if (gone)
      this.changed(resource, 'DELETED', {
        ...gone,
        metadata: { ...gone.metadata, resourceVersion: String(++this.resourceVersion) },
      });
  }

  /** A change recorded for watches to resume from and sent to the open ones it concerns. */
  private changed(resource: string, type: string, obj: Doc): void {
    const c: Change = {
      rv: Number(obj.metadata.resourceVersion),
      resource,
      labels: obj.metadata?.labels ?? {},
      line: `${JSON.stringify({ type, object: obj })}\n`,
      ...(obj.metadata?.namespace ? { namespace: obj.metadata.namespace } : {}),
    };
    this.history.push(c);
    if (this.history.length > WATCH_HISTORY_EVENTS) this.historyFrom = this.history.shift()!.rv;
    for (const w of this.watchers) if (watches(w, c)) w.res.write(c.line);
  }

  /** A watch, as the API server's watch cache serves one (see the file's head). */
  private serveWatch(a: Attrs, r: StandInRequest, res: ServerResponse): void {
    const [base] = a.resource.split('/') as [string];
    const gr = `${a.group}/${base}`;
    const write = (type: string, object: unknown) =>
      res.write(`${JSON.stringify({ type, object })}\n`);
    r.status = !(gr in NAMESPACED) || this.absent.has(gr) ? 404 : 200;
    if (r.status === 404) {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end(
        JSON.stringify(
          statusDoc(404, 'NotFound', 'the server could not find the requested resource'),
        ),
      );
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/json' });
    const w: Watcher = {
      resource: base,
      ...(a.namespace ? { namespace: a.namespace } : {}),
      selector: r.query.get('labelSelector'),
      res,
    };
    const from = r.query.get('resourceVersion');
    if (!from || from === '0') {
      for (const o of this.list(base, w.namespace))
        if (selects(w.selector, o.metadata?.labels ?? {})) write('ADDED', o);
    } else if (!/^\d+$/.test(from) || Number(from) < this.historyFrom) {
      write(
        'ERROR',
        statusDoc(410, 'Expired', `too old resource version: ${from} (${this.historyFrom})`),
      );
      res.end();
      return;
    } else {
      for (const c of this.history) if (c.rv > Number(from) && watches(w, c)) res.write(c.line);
    }
    this.watchers.add(w);
    const bookmarks =
      r.query.get('allowWatchBookmarks') === 'true'
        ? setInterval(
            () =>
              write('BOOKMARK', {
                kind: 'Bookmark',
                apiVersion: 'v1',
                metadata: { resourceVersion: String(this.resourceVersion) },
              }),
            this.watchBookmarkMs,
          )
        : undefined;
    const ends = setTimeout(
      () => res.end(),
      1000 * (Number(r.query.get('timeoutSeconds')) || 1800),
    );
    res.on('close', () => {
      clearInterval(bookmarks);
      clearTimeout(ends);
      this.watchers.delete(w);
    });
  }

  list(resource: string, namespace?: string): Doc[] {
    const prefix = `${resource}|`;
    return [...this.store]
      .filter(
        ([k]) =>
          k.startsWith(prefix) &&
          (namespace === undefined || k.startsWith(`${prefix}${namespace}|`)),
      )
      .map(([, v]) => v);
  }

  /**
   * The objects of `resource` made `items`, as updates to the API server make them: one set again
   * unchanged is no change (no new resourceVersion, no event), one changed is MODIFIED, one
   * gone DELETED, one new ADDED.
   */
  replaceAll(resource: string, items: Doc[]): void {
    const wanted = new Set(items.map((o) => key(resource, o.metadata.name, o.metadata?.namespace)));
    for (const o of this.list(resource))
      if (!wanted.has(key(resource, o.metadata.name, o.metadata.namespace)))
        this.delete(resource, o.metadata.name, o.metadata.namespace);
    for (const o of items) {
      const k = key(resource, o.metadata.name, o.metadata?.namespace);
      const cur = this.store.get(k);
      if (!cur || !isDeepStrictEqual(written(cur), written(o))) this.put(resource, o);
      else
        o.metadata = {
          ...cur.metadata,
          ...o.metadata,
          resourceVersion: cur.metadata.resourceVersion,
        };
      // listed in the order given, as before; an unchanged object is unseen by watches
      this.store.delete(k);
      this.store.set(k, o);
    }
  }

  // The shapes `bundle cluster` tests set up directly.
  get nodes(): Doc[] {
    return this.list('nodes');
  }
  set nodes(items: Doc[]) {
    this.replaceAll('nodes', items);
  }
  get pods(): Doc[] {
    return this.list('pods');
  }
  set pods(items: Doc[]) {
    this.replaceAll(
      'pods',
      items.map((p) => ({ ...p, metadata: { namespace: 'default', ...p.metadata } })),
    );
  }
  get statuses(): Doc[] {
    return this.list('nodebundlestatuses');
  }
  set statuses(items: Doc[]) {
    this.replaceAll('nodebundlestatuses', items);
  }
  get crdInstalled(): boolean {
    return !this.absent.has('bundles.offline-bundle.io/nodebundlestatuses');
  }
  set crdInstalled(v: boolean) {
    this.setAbsent('bundles.offline-bundle.io/nodebundlestatuses', !v);
  }
  get clusterVersion(): Doc | undefined {
    return this.get('clusterversions', 'version');
  }
  set clusterVersion(cv: Doc | undefined) {
    if (cv) this.put('clusterversions', cv);
    else this.delete('clusterversions', 'version');
  }
  get machineAutoscalers(): Doc[] | undefined {
    return this.absent.has('autoscaling.openshift.io/machineautoscalers')
      ? undefined
      : this.list('machineautoscalers');
  }
  set machineAutoscalers(items: Doc[] | undefined) {
    this.setAbsent('autoscaling.openshift.io/machineautoscalers', !items);
    this.replaceAll('machineautoscalers', items ?? []);
  }
  get clusterAutoscalers(): Doc[] | undefined {
    return this.absent.has('autoscaling.openshift.io/clusterautoscalers')
      ? undefined
      : this.list('clusterautoscalers');
  }
  set clusterAutoscalers(items: Doc[] | undefined) {
    this.setAbsent('autoscaling.openshift.io/clusterautoscalers', !items);
    this.replaceAll('clusterautoscalers', items ?? []);
  }
  get approvals(): Doc[] {
    return this.list('bundleapprovals');
  }
  set approvals(items: Doc[]) {
    this.replaceAll('bundleapprovals', items);
  }
  configMap(ns: string, name: string): Doc | undefined {
    return this.get('configmaps', name, ns);
  }
  clearConfigMaps(): void {
    for (const c of this.list('configmaps'))
      this.delete('configmaps', c.metadata.name, c.metadata.namespace);
  }

  private setAbsent(r: string, absent: boolean): void {
    if (absent) this.absent.add(r);
    else this.absent.delete(r);
  }

  // -- authentication and authorization ----------------------------------------------------

  private authenticate(req: IncomingMessage): Identity | undefined {
    const auth = req.headers.authorization;
    if (auth) {
      const m = /^Bearer\s+(\S+)$/i.exec(auth);
      const id = m ? this.tokens.get(m[1]!) : undefined;
      return id && { user: id.user, groups: [...new Set([...id.groups, 'system:authenticated'])] };
    }
    const sock = req.socket as TLSSocket;
    const cert = sock.getPeerCertificate?.();
    if (!sock.authorized || !cert?.subject?.CN) return undefined;
    const o = cert.subject.O;
    const groups = o === undefined ? [] : Array.isArray(o) ? o : [o];
    return {
      user: String(cert.subject.CN),
      groups: [...new Set([...groups, 'system:authenticated'])],
    };
  }

  /** Whether RBAC (and the Node authorizer) allows `a` to `id`. */
  allows(id: Identity, a: Attrs): boolean {
    const node = /^system:node:(.+)$/.exec(id.user)?.[1];
    if (
      this.nodeAuthorizer &&
      node &&
      id.groups.includes('system:nodes') &&
      nodeAuthorizer(node, a)
    )
      return true;
    return this.bindings.some((b) => {
      if (b.namespace !== undefined && b.namespace !== a.namespace) return false;
      if (!b.subjects.some((s) => subjectMatches(s, id, b.namespace))) return false;
      const rules =
        this.roles.get(
          b.roleRef.kind === 'Role'
            ? `Role/${b.namespace}/${b.roleRef.name}`
            : `ClusterRole//${b.roleRef.name}`,
        ) ?? [];
      return rules.some((r) => ruleAllows(r, a));
    });
  }

  // -- serving -----------------------------------------------------------------------------

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void this.answer(req, Buffer.concat(chunks).toString('utf8'), res).catch((err) => {
        if (!res.headersSent) {
          res.writeHead(500, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify(statusDoc(500, 'InternalError', String(err?.stack ?? err))));
        }
      });
    });
  }

  private async answer(req: IncomingMessage, body: string, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'https://stand-in');
    const a = attributes(req.method ?? 'GET', url);
    const id = this.authenticate(req);
    const r: StandInRequest = {
      method: req.method ?? '',
      path: url.pathname,
      url,
      query: url.searchParams,
      headers: req.headers,
      at: Date.now(),
      contentType: String(req.headers['content-type'] ?? ''),
      body,
      user: id?.user ?? '',
      groups: id?.groups ?? [],
      verb: a.verb,
      resource: a.resource,
      group: a.group,
      name: a.name,
      namespace: a.namespace,
      status: 0,
    };
    this.requests.push(r);
    const send = (status: number, doc: unknown, headers: Record<string, string> = {}) => {
      r.status = status;
      res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
      res.end(doc === undefined ? undefined : JSON.stringify(doc));
    };
    if (!id) return send(401, statusDoc(401, 'Unauthorized', 'Unauthorized'));
    if (!this.allows(id, a)) return send(403, forbidden(id.user, a));
    const denied = this.admit(id, a, r);
    if (denied) return send(403, denied);
    const scripted = await this.intercept?.(r);
    if (scripted === 'hang') {
      this.hanging.push(res);
      return;
    }
    if (scripted)
      return send(
        scripted.status,
        scripted.body ??
          (scripted.status >= 400
            ? statusDoc(scripted.status, 'Scripted', `answer ${scripted.status}`)
            : undefined),
        scripted.headers,
      );
    if (a.verb === 'watch') return this.serveWatch(a, r, res);
    const [status, doc] = this.handle(id, a, r);
    send(status, doc);
  }

  /** The loaded ValidatingAdmissionPolicies, evaluated as the API server does. */
  private admit(id: Identity, a: Attrs, r: StandInRequest): Doc | undefined {
    if (!['create', 'update', 'patch', 'delete'].includes(a.verb) || a.nonResource !== undefined)
      return undefined;
    const [base, sub = ''] = a.resource.split('/') as [string, string?];
    const cur = this.get(base, a.name, a.namespace || undefined);
    const operation =
      a.verb === 'create' || (a.verb === 'patch' && !cur && !sub)
        ? 'CREATE'
        : a.verb === 'delete'
          ? 'DELETE'
          : 'UPDATE';
    const request = {
      name: a.name,
      namespace: a.namespace,
      operation,
      subResource: sub,
      resource: { group: a.group, version: '', resource: base },
      userInfo: { username: id.user, groups: id.groups },
    };
    const objects = {
      object: operation === 'DELETE' ? null : wouldBe(cur, r, sub),
      oldObject: operation === 'UPDATE' || operation === 'DELETE' ? (cur ?? null) : null,
    };
    for (const p of this.policies) {
      if (!policyMatches(p.spec, request)) continue;
      // params are found before any matchCondition runs, as the API server's dispatcher does
      let params: Doc | null = null;
      if (p.spec.paramKind && p.paramRef) {
        const group = String(p.spec.paramKind.apiVersion ?? '').split('/')[0]!;
        const plural = `${String(p.spec.paramKind.kind).toLowerCase()}s`;
        const known = `${group}/${plural}` in NAMESPACED && !this.absent.has(`${group}/${plural}`);
        params = known ? (this.get(plural, p.paramRef.name, p.paramRef.namespace) ?? null) : null;
        if (!params && (!known || p.paramRef.parameterNotFoundAction !== 'Allow')) {
          const why = known
            ? 'no params found for policy binding with `Deny` parameterNotFoundAction'
            : `failed to find resource referenced by paramKind: '${p.spec.paramKind.apiVersion}, Kind=${p.spec.paramKind.kind}'`;
          return statusDoc(
            403,
            'Forbidden',
            `${a.group ? `${base}.${a.group}` : base} "${a.name}" is forbidden: ValidatingAdmissionPolicy '${p.name}' with binding '${p.binding}' denied request: failed to configure binding: ${why}`,
            { name: a.name, group: a.group, kind: base },
          );
        }
      }
      const denied = admitPolicy(p.spec, request, objects, params);
      if (!denied) continue;
      const qualified = a.group ? `${base}.${a.group}` : base;
      return statusDoc(
        REASON_CODES[denied.reason] ?? 422,
        denied.reason,
        `${qualified} "${a.name}" is forbidden: ValidatingAdmissionPolicy '${p.name}' with binding '${p.binding}' denied request: ${denied.message}`,
        { name: a.name, group: a.group, kind: base },
      );
    }
    return undefined;
  }

  private handle(id: Identity, a: Attrs, r: StandInRequest): [number, unknown] {
    if (a.nonResource !== undefined)
      return a.nonResource === '/version'
        ? [200, { major: '1', minor: '29', gitVersion: 'v1.29.0-stand-in' }]
        : [404, statusDoc(404, 'NotFound', 'the server could not find the requested resource')];
    const [base, sub] = a.resource.split('/') as [string, string | undefined];
    const gr = `${a.group}/${base}`;
    if (
      a.verb === 'create' &&
      (gr === 'authentication.k8s.io/tokenreviews' ||
        gr === 'authorization.k8s.io/subjectaccessreviews')
    )
      return this.review(gr, r.body);
    if (!(gr in NAMESPACED) || this.absent.has(gr))
      return [404, statusDoc(404, 'NotFound', 'the server could not find the requested resource')];
    const qualified = a.group ? `${base}.${a.group}` : base;
    const notFound = (): [number, unknown] => [
      404,
      statusDoc(404, 'NotFound', `${qualified} "${a.name}" not found`, {
        name: a.name,
        group: a.group,
        kind: base,
      }),
    ];
    if (a.verb === 'list') {
      const items = this.list(base, a.namespace || undefined).filter((o) =>
        selects(r.query.get('labelSelector'), o.metadata?.labels ?? {}),
      );
      return [
        200,
        {
          kind: 'List',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.resourceVersion) },
          items,
        },
      ];
    }
    if (a.verb === 'create' && !sub) return this.create(base, a, r.body);
    const cur = this.get(base, a.name, a.namespace || undefined);
    if (a.verb === 'get') return cur ? [200, cur] : notFound();
    if (a.verb === 'delete' && !sub) {
      if (!cur) return notFound();
      this.delete(base, a.name, a.namespace || undefined);
      return [
        200,
        {
          kind: 'Status',
          apiVersion: 'v1',
          metadata: {},
          status: 'Success',
          details: { name: a.name, group: a.group, kind: base, uid: cur.metadata?.uid },
        },
      ];
    }
    if (a.verb === 'patch') {
      if (r.contentType === 'application/merge-patch+json') {
        if (!cur) return notFound();
        const merged = mergePatch(cur, JSON.parse(r.body)) as Doc;
        const refused = typedFieldRefusal(base, merged);
        if (refused) return refused;
        return [200, this.put(base, merged)];
      }
      if (r.contentType !== 'application/apply-patch+yaml') {
        return [
          415,
          statusDoc(
            415,
            'UnsupportedMediaType',
            `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got ${r.contentType})`,
          ),
        ];
      }
      const manager = r.query.get('fieldManager');
      if (!manager)
        return [
          400,
          statusDoc(
            400,
            'BadRequest',
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
          ),
        ];
      let obj: Doc;
      try {
        obj = parseYaml(r.body) as Doc;
      } catch (err) {
        return [
          400,
          statusDoc(400, 'BadRequest', `error decoding YAML: ${(err as Error).message}`),
        ];
      }
      if (
        obj?.metadata?.name !== a.name ||
        (obj.metadata.namespace ?? a.namespace) !== a.namespace
      ) {
        return [
          400,
          statusDoc(
            400,
            'BadRequest',
            'the name of the object (and its namespace) must match the request',
          ),
        ];
      }
      if (sub === 'status') {
        if (!cur) return notFound();
        const invalid = this.statusSchema ? invalidStatus(this.statusSchema, r.body) : undefined;
        if (invalid) return [422, invalid];
        return [200, this.put(base, { ...cur, status: obj.status })];
      }
      // Apply creates a missing object: that needs create too.
      if (!cur && !this.allows(id, { ...a, verb: 'create' }))
        return [403, forbidden(id.user, { ...a, verb: 'create' })];
      return base === 'configmaps'
        ? this.applyFields(base, a, obj, cur, manager, r.query.get('force') === 'true')
        : this.applyMain(base, a, obj, cur);
    }
    return [
      405,
      statusDoc(405, 'MethodNotAllowed', `the stand-in does not serve ${a.verb} on ${a.resource}`),
    ];
  }

  /** A TokenReview (from the token map) or a SubjectAccessReview (from the RBAC in force), answered with its status filled in. */
  private review(gr: string, body: string): [number, unknown] {
    let doc: Doc;
    try {
      doc = JSON.parse(body) as Doc;
    } catch (err) {
      return [400, statusDoc(400, 'BadRequest', `error decoding JSON: ${(err as Error).message}`)];
    }
    const spec = doc?.spec ?? {};
    if (gr === 'authentication.k8s.io/tokenreviews') {
      const id = typeof spec.token === 'string' ? this.tokens.get(spec.token) : undefined;
      const status = id
        ? {
            authenticated: true,
            user: {
              username: id.user,
              uid: `uid-${id.user}`,
              groups: [...new Set([...id.groups, 'system:authenticated'])],
            },
          }
        : { authenticated: false, error: 'invalid bearer token' };
      return [201, { ...doc, status }];
    }
    if (typeof spec.user !== 'string' && !Array.isArray(spec.groups))
      return [
        422,
        statusDoc(
          422,
          'Invalid',
          'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or group must be specified',
        ),
      ];
    const who = {
      user: String(spec.user ?? ''),
      groups: Array.isArray(spec.groups) ? spec.groups.map(String) : [],
    };
    const n = spec.nonResourceAttributes;
    const ra = spec.resourceAttributes ?? {};
    const attrs: Attrs = n
      ? {
          verb: String(n.verb ?? ''),
          group: '',
          resource: '',
          name: '',
          namespace: '',
          nonResource: String(n.path ?? ''),
        }
      : {
          verb: String(ra.verb ?? ''),
          group: String(ra.group ?? ''),
          resource: ra.subresource ? `${ra.resource}/${ra.subresource}` : String(ra.resource ?? ''),
          name: String(ra.name ?? ''),
          namespace: String(ra.namespace ?? ''),
        };
    const allowed = this.allows(who, attrs);
    return [
      201,
      {
        ...doc,
        status: allowed
          ? { allowed: true, reason: "RBAC: allowed by the stand-in's bindings" }
          : { allowed: false },
      },
    ];
  }

  /** POST of a new object: the CRD's checks where it is one of ours, 409 when the name is taken. */
  private create(base: string, a: Attrs, body: string): [number, unknown] {
    let obj: Doc;
    try {
      obj = JSON.parse(body) as Doc;
    } catch (err) {
      return [400, statusDoc(400, 'BadRequest', `error decoding JSON: ${(err as Error).message}`)];
    }
    const name = obj?.metadata?.name;
    if (typeof name !== 'string' || name === '')
      return [
        422,
        statusDoc(
          422,
          'Invalid',
          `${base} "" is invalid: metadata.name: Required value: name or generateName is required`,
        ),
      ];
    const qualified = a.group ? `${base}.${a.group}` : base;
    if (this.get(base, name, a.namespace || undefined))
      return [
        409,
        statusDoc(409, 'AlreadyExists', `${qualified} "${name}" already exists`, {
          name,
          group: a.group,
          kind: base,
        }),
      ];
    const refused = this.createChecks.get(base)?.(obj);
    if (refused) return [422, refused];
    obj.metadata = {
      ...obj.metadata,
      uid: randomBytes(16).toString('hex'),
      creationTimestamp: new Date().toISOString(),
      generation: 1,
      ...(a.namespace ? { namespace: a.namespace } : {}),
    };
    return [201, this.put(base, obj)];
  }

  /** Apply to a main resource with one field manager: metadata labels and annotations merge, the rest replaces. */
  private applyMain(base: string, a: Attrs, obj: Doc, cur: Doc | undefined): [number, unknown] {
    const { status: _ignored, ...rest } = obj;
    const next: Doc = {
      ...(cur ?? {}),
      ...rest,
      metadata: {
        ...(cur?.metadata ?? {}),
        ...obj.metadata,
        labels: { ...(cur?.metadata?.labels ?? {}), ...(obj.metadata?.labels ?? {}) },
      },
    };
    next.metadata.generation = cur
      ? cur.metadata.generation + (JSON.stringify(cur.spec) !== JSON.stringify(next.spec) ? 1 : 0)
      : 1;
    // a custom resource with a spec is held to its CRD's schema, as a create is
    const refused = next.spec !== undefined ? this.createChecks.get(base)?.(next) : undefined;
    if (refused) return [422, refused];
    if (a.namespace) next.metadata.namespace = a.namespace;
    return [cur ? 200 : 201, this.put(base, next)];
  }

  /**
   * Apply with field ownership per manager for labels, annotations, data and binaryData keys:
   * a manager's apply removes the keys it owned alone and no longer applies; a key owned by
   * another manager with another value is a 409 Conflict unless force=true.
   */
  private applyFields(
    base: string,
    a: Attrs,
    body: Doc,
    existing: Doc | undefined,
    manager: string,
    force: boolean,
  ): [number, unknown] {
    const k = key(base, a.name, a.namespace || undefined);
    const cur: Doc = structuredClone(
      existing ?? {
        apiVersion: body.apiVersion,
        kind: body.kind,
        metadata: { name: a.name, ...(a.namespace ? { namespace: a.namespace } : {}) },
      },
    );
    const owners = this.owners.get(k) ?? new Map<string, Set<string>>();
    const fields = new Map<string, unknown>();
    for (const [sect, obj] of [
      ['labels', body.metadata.labels],
      ['annotations', body.metadata.annotations],
      ['data', body.data],
      ['binaryData', body.binaryData],
    ] as const) {
      for (const [f, v] of Object.entries((obj ?? {}) as Record<string, unknown>))
        fields.set(`${sect}/${f}`, v);
    }
    const get = (f: string) => {
      const [sect, name] = split(f);
      return (sect === 'labels' || sect === 'annotations' ? cur.metadata?.[sect] : cur[sect])?.[
        name
      ];
    };
    const conflicts = [...fields].filter(
      ([f, v]) => [...owners].some(([m, set]) => m !== manager && set.has(f)) && get(f) !== v,
    );
    if (conflicts.length && !force)
      return [
        409,
        statusDoc(
          409,
          'Conflict',
          `Apply failed with ${conflicts.length} conflicts: ${conflicts.map(([f]) => f).join(', ')}`,
        ),
      ];
    for (const f of owners.get(manager) ?? []) {
      if (!fields.has(f) && ![...owners].some(([m, set]) => m !== manager && set.has(f)))
        setField(cur, f, undefined);
    }
    for (const [f, v] of fields) {
      setField(cur, f, v);
      if (force) for (const [m, set] of owners) if (m !== manager) set.delete(f);
    }
    owners.set(manager, new Set(fields.keys()));
    this.owners.set(k, owners);
    return [existing ? 200 : 201, this.put(base, cur)];
  }
}

export interface StandInOptions {
  /** Listen address (default 127.0.0.1), also in the serving certificate's names. */
  host?: string;
  /** More names (IP addresses, DNS names) for the serving certificate, e.g. the address a container reaches it at (then pass it as writeNodeKubeconfig's server). */
  names?: string[];
  /** Listen port (default: any free one). */
  port?: number;
  /** RBAC objects (and admission policies) in force; default: the shipped deploy/rbac.yaml and deploy/admin-rbac.yaml. */
  rbacFiles?: string[];
  /** The Node authorizer's rights for system:nodes (default true). */
  openshiftNodeDefaults?: boolean;
  /** A ClusterVersion "version" that completed its update to this version. */
  clusterVersion?: string;
}

export function startKubeStandIn(opts?: StandInOptions): Promise<KubeApiStandIn> {
  return KubeApiStandIn.start(opts);
}

/** ClusterVersion "version" of a cluster that completed its update to `version`. */
export function clusterVersionDoc(
  version: string,
  image = `quay.io/openshift-release-dev/ocp-release@sha256:${'0'.repeat(64)}`,
): Doc {
  return {
    apiVersion: 'config.openshift.io/v1',
    kind: 'ClusterVersion',
    metadata: { name: 'version' },
    spec: {
      channel: `stable-${version.split('.').slice(0, 2).join('.')}`,
      clusterID: '00000000-0000-0000-0000-000000000000',
    },
    status: {
      desired: { version, image },
      history: [
        {
          state: 'Completed',
          version,
          image,
          startedTime: '2026-11-01T00:00:00Z',
          completionTime: '2026-11-01T01:00:00Z',
          verified: true,
        },
      ],
    },
  };
}

/**
 * One ValidatingAdmissionPolicy against one admission request (the CEL `request` variable):
 * undefined when it does not match or allows, else the refusal's reason and message.
 */
export function admitPolicy(
  spec: Doc,
  request: Doc,
  objects: { object?: Doc | null; oldObject?: Doc | null } = {},
  params: Doc | null = null,
): { reason: string; message: string } | undefined {
  if (!policyMatches(spec, request)) return undefined;
  const ctx: Doc = {
    request,
    object: objects.object ?? null,
    oldObject: objects.oldObject ?? null,
    params,
  };
  // failurePolicy Fail: an expression that cannot be evaluated refuses the request
  const run = (expression: string, vars: Doc = {}) => {
    try {
      return { value: evaluate(expression, { ...ctx, variables: vars }) as unknown };
    } catch (err) {
      return { error: `expression '${expression}' resulted in error: ${(err as Error).message}` };
    }
  };
  // any condition false skips the policy; only then does an error in another one refuse
  const conditions = ((spec.matchConditions ?? []) as Doc[]).map((m) => run(m.expression));
  if (conditions.some((c) => !c.error && c.value !== true)) return undefined;
  const broken = conditions.find((c) => c.error);
  if (broken) return { reason: 'Forbidden', message: broken.error! };
  const variables: Doc = {};
  for (const v of (spec.variables ?? []) as Doc[]) {
    const got = run(v.expression, variables);
    if (got.error) return { reason: 'Forbidden', message: got.error };
    variables[v.name] = got.value;
  }
  for (const v of (spec.validations ?? []) as Doc[]) {
    const got = run(v.expression, variables);
    if (got.error) return { reason: 'Forbidden', message: got.error };
    if (got.value === true) continue;
    const said = v.messageExpression ? run(v.messageExpression, variables) : undefined;
    const message =
      said?.value !== undefined
        ? String(said.value)
        : (v.message ?? `failed expression: ${v.expression}`);
    return { reason: v.reason ?? 'Invalid', message };
  }
  return undefined;
}

/** Whether the request is one the policy's matchConstraints.resourceRules name. */
function policyMatches(spec: Doc, request: Doc): boolean {
  return (spec.matchConstraints?.resourceRules ?? []).some(
    (r: Doc) =>
      anyOf(r.apiGroups, request.resource.group) &&
      anyOf(r.operations, request.operation) &&
      anyOf(
        r.resources,
        request.subResource
          ? `${request.resource.resource}/${request.subResource}`
          : request.resource.resource,
      ),
  );
}

/** The object a write would store: a merge patch or an apply on the stored one, a created one as sent. */
function wouldBe(cur: Doc | undefined, r: StandInRequest, sub: string): Doc | null {
  try {
    if (r.contentType === 'application/merge-patch+json')
      return cur ? (mergePatch(cur, JSON.parse(r.body)) as Doc) : null;
    const sent = (
      r.contentType === 'application/apply-patch+yaml' ? parseYaml(r.body) : JSON.parse(r.body)
    ) as Doc;
    if (sub === 'status') return cur ? { ...cur, status: sent?.status } : null;
    return cur ? { ...cur, ...sent, metadata: { ...cur.metadata, ...sent?.metadata } } : sent;
  } catch {
    return null;
  }
}

/** The HTTP code the API server gives a policy's refusal reason. */
const REASON_CODES: Record<string, number> = {
  Forbidden: 403,
  Unauthorized: 401,
  Invalid: 422,
  RequestEntityTooLarge: 413,
};

const anyOf = (list: string[] | undefined, v: string) =>
  (list ?? []).some((x) => x === '*' || x === v);

const key = (resource: string, name: string, namespace?: string) =>
  `${resource}|${namespace ?? ''}|${name}`;

/** What a client writes of an object: without the metadata the API server sets. */
function written(o: Doc): Doc {
  const {
    resourceVersion: _rv,
    uid: _uid,
    creationTimestamp: _ct,
    generation: _g,
    managedFields: _mf,
    ...metadata
  } = o.metadata ?? {};
  return { ...o, metadata };
}

/** Whether watch `w` sees change `c`: its resource, its namespace (all when none), its label selector. */
const watches = (w: Watcher, c: Change) =>
  c.resource === w.resource &&
  (w.namespace === undefined || c.namespace === w.namespace) &&
  selects(w.selector, c.labels);

/** Request attributes as kube-apiserver's RequestInfoFactory derives them. */
function attributes(method: string, url: URL): Attrs {
  const parts = url.pathname.split('/').filter(Boolean);
  let rest: string[];
  let group = '';
  if (parts[0] === 'api' && parts.length >= 3) rest = parts.slice(2);
  else if (parts[0] === 'apis' && parts.length >= 4) {
    group = parts[1]!;
    rest = parts.slice(3);
  } else
    return {
      verb: method.toLowerCase(),
      group: '',
      resource: '',
      name: '',
      namespace: '',
      nonResource: url.pathname,
    };
  let namespace = '';
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    namespace = rest[1]!;
    rest = rest.slice(2);
  }
  const [res, name = '', sub] = rest as [string, string?, string?];
  const resource = sub ? `${res}/${sub}` : res;
  const verbs: Record<string, string> = {
    POST: 'create',
    PUT: 'update',
    PATCH: 'patch',
    DELETE: name ? 'delete' : 'deletecollection',
  };
  const verb =
    method === 'GET' || method === 'HEAD'
      ? name
        ? 'get'
        : url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1'
          ? 'watch'
          : 'list'
      : (verbs[method] ?? method.toLowerCase());
  return { verb, group, resource, name, namespace };
}

function subjectMatches(s: Subject, id: Identity, bindingNs?: string): boolean {
  if (s.kind === 'User') return s.name === id.user;
  if (s.kind === 'Group') return id.groups.includes(s.name);
  if (s.kind === 'ServiceAccount')
    return id.user === `system:serviceaccount:${s.namespace ?? bindingNs}:${s.name}`;
  return false;
}

function ruleAllows(r: Rule, a: Attrs): boolean {
  if (!r.verbs.includes('*') && !r.verbs.includes(a.verb)) return false;
  if (a.nonResource !== undefined) {
    return (r.nonResourceURLs ?? []).some(
      (u) =>
        u === '*' ||
        u === a.nonResource ||
        (u.endsWith('*') && a.nonResource!.startsWith(u.slice(0, -1))),
    );
  }
  if (!r.apiGroups?.some((g) => g === '*' || g === a.group)) return false;
  const [, sub] = a.resource.split('/');
  if (
    !r.resources?.some(
      (x) => x === '*' || x === a.resource || (sub !== undefined && x === `*/${sub}`),
    )
  )
    return false;
  return !r.resourceNames?.length || (a.name !== '' && r.resourceNames.includes(a.name));
}

/** The API server's 403 for an RBAC refusal, message word for word. */
function forbidden(user: string, a: Attrs): Doc {
  if (a.nonResource !== undefined)
    return statusDoc(
      403,
      'Forbidden',
      `forbidden: User "${user}" cannot ${a.verb} path "${a.nonResource}"`,
    );
  const [base] = a.resource.split('/');
  const qualified = a.group ? `${base}.${a.group}` : base;
  const scope = a.namespace ? `in the namespace "${a.namespace}"` : 'at the cluster scope';
  const what = a.name ? `${qualified} "${a.name}"` : qualified;
  return statusDoc(
    403,
    'Forbidden',
    `${what} is forbidden: User "${user}" cannot ${a.verb} resource "${a.resource}" in API group "${a.group}" ${scope}`,
    { ...(a.name ? { name: a.name } : {}), group: a.group, kind: base },
  );
}

function statusDoc(code: number, reason: string, message: string, details?: Doc): Doc {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    ...(details ? { details } : {}),
    code,
  };
}

const split = (f: string): [string, string] => [
  f.slice(0, f.indexOf('/')),
  f.slice(f.indexOf('/') + 1),
];

function setField(obj: Doc, f: string, v: unknown): void {
  const [sect, k] = split(f);
  const holder =
    sect === 'labels' || sect === 'annotations' ? (obj.metadata[sect] ??= {}) : (obj[sect] ??= {});
  if (v === undefined) delete holder[k];
  else holder[k] = v;
}

/** RFC 7386 JSON merge patch. */
/**
 * What the API server's decoding refuses of a patched object, for the kinds the EUS steps patch:
 * a ConfigMap's data values are strings (a number or a boolean fails to decode: 400), and a
 * MachineConfigPool's spec.paused is a boolean (its CRD's schema: 422).
 */
function typedFieldRefusal(base: string, obj: Doc): [number, unknown] | undefined {
  if (base === 'configmaps') {
    const bad = Object.entries((obj.data ?? {}) as Record<string, unknown>).find(
      ([, v]) => typeof v !== 'string',
    );
    if (bad)
      return [
        400,
        statusDoc(
          400,
          'BadRequest',
          `json: cannot unmarshal ${typeof bad[1]} into Go struct field ConfigMap.data of type string`,
        ),
      ];
  }
  if (
    base === 'machineconfigpools' &&
    obj.spec?.paused !== undefined &&
    typeof obj.spec.paused !== 'boolean'
  ) {
    return [
      422,
      statusDoc(
        422,
        'Invalid',
        `MachineConfigPool.machineconfiguration.openshift.io "${obj.metadata?.name}" is invalid: spec.paused: Invalid value: "${typeof obj.spec.paused}": spec.paused in body must be of type boolean: "${typeof obj.spec.paused}"`,
      ),
    ];
  }
  return undefined;
}

function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Doc =
    typeof target === 'object' && target !== null && !Array.isArray(target)
      ? { ...(target as Doc) }
      : {};
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

// What a site applies so its Prometheus scrapes the agents (deploy/metrics.yaml, the OpenShift
// ServiceMonitor, the DaemonSet's PodMonitor) agrees with the shipped agent configs and the RBAC
// in force: the rules evaluated by the RBAC-enforcing API stand-in; ports, secrets, selectors and
// certificate paths read from the files themselves.
import t from 'tap';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { parseConfig } from '@offline-bundle/agent';
import { startKubeStandIn, SHIPPED_RBAC } from '../helpers/kube-standin.js';

const DEPLOY = new URL('../../deploy/', import.meta.url).pathname;
const docs = async (f: string) =>
  parseAllDocuments(await readFile(join(DEPLOY, f), 'utf8')).map((d) => d.toJSON());
const metricsGet = {
  verb: 'get',
  group: 'bundles.offline-bundle.io',
  resource: 'nodebundlestatuses/metrics',
  name: 'w1',
  namespace: '',
};
const urlGet = (path: string) => ({
  verb: 'get',
  group: '',
  resource: '',
  name: '',
  namespace: '',
  nonResource: path,
});
const review = (group: string, resource: string) => ({
  verb: 'create',
  group,
  resource,
  name: '',
  namespace: '',
});
const sa = (ns: string, name: string) => ({
  user: `system:serviceaccount:${ns}:${name}`,
  groups: ['system:serviceaccounts', `system:serviceaccounts:${ns}`, 'system:authenticated'],
});
const node = { user: 'system:node:w1', groups: ['system:nodes', 'system:authenticated'] };

t.test(
  "metrics.yaml: the scraper may get nodebundlestatuses/metrics and nothing else (no /metrics URL of the cluster); the reviews are the Node authorizer's alone",
  async (t) => {
    const api = await startKubeStandIn({
      rbacFiles: [...SHIPPED_RBAC, join(DEPLOY, 'metrics.yaml')],
    });
    t.teardown(() => api.close());
    const scraper = sa('offline-bundle-metrics', 'scraper');
    t.ok(api.allows(scraper, metricsGet), 'the scraper: get nodebundlestatuses/metrics');
    t.notOk(
      api.allows(scraper, urlGet('/metrics')),
      "not the API server's /metrics, nor any kube-rbac-proxy's",
    );
    t.notOk(
      api.allows(scraper, { ...metricsGet, resource: 'nodebundlestatuses' }),
      'not the status objects themselves',
    );
    t.notOk(
      api.allows(scraper, {
        verb: 'list',
        group: 'bundles.offline-bundle.io',
        resource: 'bundleapprovals',
        name: '',
        namespace: '',
      }),
      "the scraper is not in the agents' group (its own namespace)",
    );
    t.notOk(
      api.allows(scraper, review('authentication.k8s.io', 'tokenreviews')),
      'the scraper reviews nobody',
    );
    for (const who of [
      sa('openshift-monitoring', 'prometheus-k8s'),
      sa('monitoring', 'prometheus-k8s'),
      sa('default', 'nobody'),
    ]) {
      t.notOk(
        api.allows(who, metricsGet),
        `${who.user}: nothing bound (the monitors send the scraper's token)`,
      );
    }
    for (const [g, r] of [
      ['authentication.k8s.io', 'tokenreviews'],
      ['authorization.k8s.io', 'subjectaccessreviews'],
    ] as const) {
      t.ok(api.allows(node, review(g, r)), `the node: create ${r}`);
      t.notOk(
        api.allows(sa('offline-bundle', 'bundle-agent-w1'), review(g, r)),
        `a ServiceAccount of offline-bundle: no ${r} (the auth-delegator role is bound to nobody)`,
      );
      t.notOk(
        api.allows(sa('offline-bundle', 'default'), review(g, r)),
        `offline-bundle/default: no ${r}`,
      );
    }
    api.nodeAuthorizer = false;
    t.notOk(
      api.allows(node, review('authentication.k8s.io', 'tokenreviews')),
      'without the Node authorizer the node could not review: it is what allows the agent',
    );
    const ns = (await docs('metrics.yaml')).find((d) => d.kind === 'Namespace');
    t.equal(ns.metadata.name, 'offline-bundle-metrics');
    t.equal(
      ns.metadata.labels['openshift.io/cluster-monitoring'],
      'true',
      'the platform Prometheus reads the monitors of the scraping namespace',
    );
    const [agents] = (await docs('rbac.yaml')).filter((d) => d.kind === 'Namespace');
    t.equal(
      agents.metadata.labels['openshift.io/cluster-monitoring'],
      undefined,
      "the agents' namespace is no platform namespace",
    );
  },
);

t.test(
  "openshift: the ServiceMonitor scrapes every node at config.yaml.in's metrics.port with the kubelet serving CA; the certificate is the mounted kubelet one",
  async (t) => {
    const config = parseConfig(
      await readFile(join(DEPLOY, 'openshift/config.yaml.in'), 'utf8'),
      'config.yaml.in',
    );
    t.equal(config.metrics.enabled, true, 'shipped enabled');
    const sm = parseYaml(
      await readFile(join(DEPLOY, 'openshift/metrics-servicemonitor.yaml'), 'utf8'),
    );
    t.equal(sm.kind, 'ServiceMonitor');
    const secret = (await docs('metrics.yaml')).find((d) => d.kind === 'Secret');
    t.equal(
      sm.metadata.namespace,
      secret.metadata.namespace,
      'in the scraping namespace, beside the token Secret',
    );
    const ep = sm.spec.endpoints[0];
    t.equal(ep.scheme, 'https');
    t.equal(ep.tlsConfig.insecureSkipVerify, false, 'the certificate is verified');
    t.match(
      ep.tlsConfig.caFile,
      /kubelet-serving-ca-bundle/,
      "with the CA of the kubelet's serving certificate",
    );
    t.equal(
      ep.bearerTokenFile,
      undefined,
      'no token file (deprecated; refused where monitors may not read files)',
    );
    t.strictSame(
      ep.authorization,
      { type: 'Bearer', credentials: { name: secret.metadata.name, key: 'token' } },
      "the scraper's token",
    );
    const moved = ep.relabelings.find((r: any) => r.targetLabel === '__address__');
    t.equal(
      moved.replacement,
      `\${1}:${config.metrics.port}`,
      "the kubelet's address, the agent's port",
    );
    t.match(config.metrics.cert!, /^\/var\/lib\/kubelet\/pki\//, 'the kubelet serving certificate');
    const unit = await readFile(join(DEPLOY, 'openshift/bundle-agent.container'), 'utf8');
    t.match(
      unit,
      /^Volume=\/var\/lib\/kubelet\/pki:\/var\/lib\/kubelet\/pki:ro$/m,
      'mounted in the container (read-only; it rotates: the directory)',
    );
    t.match(
      unit,
      /^Network=host$/m,
      "on the host network: the Node's InternalIP is the container's",
    );
  },
);

t.test(
  "kubernetes: the PodMonitor targets the DaemonSet's metrics port with the scraper's token; the certificate is under the mounted kubelet directory",
  async (t) => {
    const [cm, ds] = ['ConfigMap', 'DaemonSet'].map(async (k) =>
      (await docs('kubernetes/daemonset.yaml')).find((d) => d.kind === k),
    );
    const config = parseConfig((await cm).data['config.yaml'], 'config.yaml');
    t.equal(config.metrics.enabled, true, 'shipped enabled');
    const pod = (await ds).spec.template;
    const port = pod.spec.containers[0].ports.find((p: any) => p.name === 'metrics');
    t.equal(port.containerPort, config.metrics.port, 'the container port is metrics.port');
    const pm = parseYaml(
      await readFile(join(DEPLOY, 'kubernetes/metrics-podmonitor.yaml'), 'utf8'),
    );
    t.equal(pm.kind, 'PodMonitor');
    t.strictSame(pm.spec.namespaceSelector.matchNames, [(await ds).metadata.namespace]);
    for (const [k, v] of Object.entries(pm.spec.selector.matchLabels))
      t.equal(pod.metadata.labels[k], v, `selects the pods by ${k}`);
    const ep = pm.spec.podMetricsEndpoints[0];
    t.equal(ep.port, 'metrics');
    t.equal(ep.scheme, 'https');
    const secret = (await docs('metrics.yaml')).find((d) => d.kind === 'Secret');
    t.equal(
      secret.metadata.namespace,
      pm.metadata.namespace,
      "the token Secret is in the PodMonitor's namespace",
    );
    t.equal(ep.authorization.credentials.name, secret.metadata.name);
    t.equal(ep.tlsConfig.insecureSkipVerify, false, 'the token goes only to a verified agent');
    t.strictSame(
      ep.tlsConfig.ca,
      { configMap: { name: 'bundle-agent-metrics-ca', key: 'ca.crt' } },
      'by the CA the site puts in the scraping namespace',
    );
    const mounts = pod.spec.containers[0].volumeMounts.map((m: any) => m.mountPath);
    for (const f of [config.metrics.cert!, config.metrics.key!]) {
      t.ok(f.startsWith('/host/var/lib/rancher/k3s/agent/'), `${f}: under root (/host)`);
      t.ok(mounts.includes('/host'), 'the host is mounted at /host');
    }
  },
);

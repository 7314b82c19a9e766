// The node's own rights, checked as the API server checks them (the API server cannot run
// here: test/helpers/kube-standin.ts authenticates the kubelet's client certificate and applies
// the shipped deploy/rbac.yaml, OpenShift's node permissions and the admission policy). The
// agent runs with the shipped OpenShift config's `version` and `status` (fromCluster, the
// kubelet's kubeconfig, shaped as on RHCOS) and a real containerd.
import t from 'tap';
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse as parseYaml, parseAllDocuments, stringify } from 'yaml';
import { SHIPPED_RBAC, startKubeStandIn, type KubeApiStandIn } from '../helpers/kube-standin.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { startContainerd } from '../runtime/lib.js';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';
import { until } from '../helpers/until.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const NODE = 'node-a';
const images = [
  { name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1' } },
  { name: 'quay.io/acme/tool:v2', files: { 'tool.txt': 'tool v2' } },
];

/** `version` and `status` exactly as deploy/openshift/config.yaml.in ships them. */
async function shippedSections(): Promise<{
  version: Record<string, unknown>;
  status: Record<string, unknown>;
}> {
  const shipped = parseYaml(await readFile(join(ROOT, 'deploy/openshift/config.yaml.in'), 'utf8'));
  return { version: shipped.version, status: shipped.status };
}

/** A node root with its containerd, the RHCOS-shaped kubelet kubeconfig for `api`, and the shipped sections. */
async function node(t: any, api: KubeApiStandIn, extraVersion: Record<string, unknown> = {}) {
  const dir = await tmpdir(t, 'ob-node-rights-');
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const ctd = await startContainerd(30_000, {
    certsDir: join(root, 'etc/containerd/certs.d'),
    socket: join(root, 'run/containerd/containerd.sock'),
  });
  t.teardown(() => ctd.stop());
  const { version, status } = await shippedSections();
  t.equal(
    version.fromCluster,
    true,
    'the shipped config reads the running version from the cluster',
  );
  t.equal(
    status.kubeconfig,
    '/var/lib/kubelet/kubeconfig',
    "the shipped config uses the kubelet's kubeconfig",
  );
  await api.writeNodeKubeconfig(root, NODE, { certPaths: 'root' });
  const config = await nodeRoot(
    root,
    keys.pub,
    `runtime: containerd\nspace:\n  reserveBytes: 0\n${stringify({ version: { ...version, ...extraVersion }, status: { ...status, console: false } })}`,
  );
  const bundle = await makeBundle(dir, {
    key: keys.key,
    version: '4.15.1',
    images,
    upgradeFrom: ['4.15.0'],
    out: join(dir, 'update.bundle'),
  });
  return { dir, root, config, bundle, statusFile: join(root, 'var/lib/bundle-agent/status.json') };
}

const byNode = (api: KubeApiStandIn) =>
  api.requests.filter((r) => r.user === `system:node:${NODE}`);
const ready = (s: any) => s?.conditions?.find((c: any) => c.type === 'Ready');

t.test(
  'shipped RBAC + OpenShift node permissions: every call the agent makes during a full load is allowed',
  async (t) => {
    const api = await startKubeStandIn({ clusterVersion: '4.15.0' });
    t.teardown(() => api.close());
    const n = await node(t, api);
    const r = await run(AGENT, ['load', n.bundle, '--config', n.config, '--json']);
    t.equal(r.code, 0, r.stderr.slice(-1500));
    const calls = byNode(api);
    t.ok(
      calls.some(
        (c) => c.verb === 'get' && c.resource === 'clusterversions' && c.name === 'version',
      ),
      'read ClusterVersion "version" as the node',
    );
    t.ok(
      calls.some(
        (c) => c.verb === 'patch' && c.resource === 'nodebundlestatuses/status' && c.name === NODE,
      ),
      'wrote its status as the node',
    );
    t.same(
      calls
        .filter((c) => c.status < 200 || c.status >= 300)
        .map((c) => `${c.method} ${c.path} ${c.status}`),
      [],
      'no call refused',
    );
    t.same(
      new Set(api.requests.map((c) => c.user)),
      new Set([`system:node:${NODE}`]),
      'every call authenticated by the kubelet client certificate',
    );
    t.match(
      api.get('nodebundlestatuses', NODE)?.status,
      { phase: 'Ready', bundle: { version: '4.15.1' } },
      'the cluster sees the node Ready',
    );
    const remembered = JSON.parse(
      await readFile(join(n.root, 'var/lib/bundle-agent/cluster-release.json'), 'utf8'),
    );
    t.match(
      remembered,
      { version: '4.15.0' },
      'the running version is remembered for when the API is away',
    );
  },
);

t.test(
  'without the ClusterVersion rule: the load waits with ClusterForbidden naming the rule, and goes on once it is applied',
  async (t) => {
    const dir = await tmpdir(t, 'ob-node-rights-rbac-');
    // a copy of the shipped rbac.yaml without the rule (and its binding) that lets nodes read ClusterVersion
    const docs = parseAllDocuments(await readFile(SHIPPED_RBAC[0]!, 'utf8'))
      .map((d) => d.toJS())
      .filter((d) => d);
    const without = docs.filter(
      (d) => d.metadata?.name !== 'offline-bundle:running-version-reader',
    );
    t.equal(docs.length - without.length, 2, 'the shipped file holds the rule and its binding');
    const copy = join(dir, 'rbac-without-clusterversion.yaml');
    await writeFile(copy, without.map((d) => stringify(d)).join('---\n'));
    const api = await startKubeStandIn({
      clusterVersion: '4.15.0',
      rbacFiles: [copy, SHIPPED_RBAC[1]!],
    });
    t.teardown(() => api.close());
    const n = await node(t, api);

    const child = spawn(
      process.execPath,
      [AGENT, 'load', n.bundle, '--config', n.config, '--json'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    const exit = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
    t.teardown(() => {
      child.kill('SIGKILL');
    });

    // a generous bound: a loaded machine verifies the bundle slowly before the question is asked
    const status = await until(
      'the status says ClusterForbidden',
      async () => {
        const s = await readFile(n.statusFile, 'utf8').then(JSON.parse, () => undefined);
        return ready(s)?.reason === 'ClusterForbidden' ? s : undefined;
      },
      { timeoutMs: 120_000, stepMs: 50 },
    );
    t.equal(ready(status)?.reason, 'ClusterForbidden', 'the node says why it waits');
    t.equal(status.phase, 'Verifying', 'not a failure: the load waits');
    t.match(
      ready(status).message,
      'the node identity system:node:node-a may not get clusterversions.config.openshift.io "version": apply deploy/rbac.yaml (ClusterRole offline-bundle:running-version-reader, bound to group system:nodes)',
    );
    t.match(
      status.message,
      /may not ask the cluster which version it runs.*Leave the USB stick in/,
      "the technician's line",
    );
    const refused = byNode(api).find((c) => c.resource === 'clusterversions');
    t.equal(refused?.status, 403, 'refused by the stand-in as by the API server');
    await until(
      'the NodeBundleStatus says ClusterForbidden',
      () => ready(api.get('nodebundlestatuses', NODE)?.status)?.reason === 'ClusterForbidden',
    );
    t.equal(
      ready(api.get('nodebundlestatuses', NODE)?.status)?.reason,
      'ClusterForbidden',
      'and the cluster sees it in the NodeBundleStatus',
    );
    await sleep(2500);
    t.equal(
      (stderr.match(/may not get clusterversions/g) ?? []).length,
      1,
      'logged once, not on every retry',
    );

    await api.loadRbac(SHIPPED_RBAC);
    const code = await exit;
    t.equal(code, 0, stderr.slice(-1500));
    t.match(
      JSON.parse(stdout.trim().split('\n').pop()!),
      { ready: true, version: '4.15.1' },
      'the rule applied: the load went on to Ready',
    );
    t.match(stderr, /the cluster answered: it runs 4\.15\.0/);
  },
);

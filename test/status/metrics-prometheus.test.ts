// Debian's real Prometheus scrapes the daemon's authenticated metrics listener (issue #39 item 4)
// as the shipped ServiceMonitor tells the platform Prometheus to: https, the scraper's bearer
// token, the agent's certificate as ca_file, the shipped relabelings (read from the YAML and
// turned into relabel_configs field by field, as the operator does): the kubelet's address moved to
// the agent's port, an IPv6 kubelet address dropped, the node's name from EndpointSlice discovery.
// The API server is the RBAC-enforcing stand-in (TokenReview and a SubjectAccessReview on
// nodebundlestatuses/metrics, answered from the shipped deploy/rbac.yaml + deploy/metrics.yaml);
// the agent reviews as the node (system:node:worker-1, the kubelet kubeconfig). With the scraper's
// token: up == 1 and the agent's metrics in Prometheus; no token, or a token whose user has no
// grant: up == 0, and the agent counted (and logged) its 401s and 403s.
import t from 'tap';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { parse as parseYaml } from 'yaml';
import { createLogger, parseConfig, statusTracker } from '@offline-bundle/agent';
import { statusOutputs } from '../../agent/dist/daemon/daemon.js';
import { startKubeStandIn, SHIPPED_RBAC } from '../helpers/kube-standin.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { freePort } from '../helpers/registry.mjs';
import { DEPLOY } from './lib.js';

const PROMETHEUS = '/usr/bin/prometheus';
const haveProm = spawnSync(PROMETHEUS, ['--version']).status === 0;

/** The shipped ServiceMonitor's relabelings as Prometheus relabel_configs: every field, camelCase to snake_case, as the operator writes them. */
async function shippedRelabelings(agentPort: number): Promise<Record<string, unknown>[]> {
  const sm = parseYaml(
    await readFile(join(DEPLOY, 'openshift/metrics-servicemonitor.yaml'), 'utf8'),
  );
  return sm.spec.endpoints[0].relabelings.map((r: Record<string, unknown>) =>
    Object.fromEntries(
      Object.entries(r).map(([k, v]) => [
        k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`),
        // the shipped port (9471) is the config's; this test's agent listens on a free one
        k === 'replacement'
          ? String(v).replace(/:9471$/, `:${agentPort}`)
          : k === 'action'
            ? String(v).toLowerCase()
            : v,
      ]),
    ),
  );
}

async function query(
  promUrl: string,
  q: string,
): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const res = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(q)}`);
  const body = (await res.json()) as { data?: { result?: [] } };
  return body.data?.result ?? [];
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

t.test(
  "real Prometheus: the shipped scrape with the scraper's token is up (IPv6 target dropped, node label from EndpointSlice); no token (401) and a token without the RBAC (403) are down",
  { skip: !haveProm && 'apt-get install prometheus (scripts/setup.sh)' },
  async (t) => {
    const dir = await tmpdir(t, 'ob-metrics-prom-');
    const api = await startKubeStandIn({
      rbacFiles: [...SHIPPED_RBAC, join(DEPLOY, 'metrics.yaml')],
    });
    t.teardown(() => api.close());
    api.nodes = [
      {
        metadata: { name: 'worker-1', labels: {} },
        status: {
          addresses: [{ type: 'InternalIP', address: '127.0.0.1' }],
          conditions: [{ type: 'Ready', status: 'True' }],
        },
      },
    ];
    const promToken = api.addToken('system:serviceaccount:offline-bundle-metrics:scraper', [
      'system:serviceaccounts',
      'system:serviceaccounts:offline-bundle-metrics',
    ]);
    const otherToken = api.addToken('system:serviceaccount:default:nobody', [
      'system:serviceaccounts',
      'system:serviceaccounts:default',
    ]);

    const root = join(dir, 'root');
    await mkdir(join(root, 'state'), { recursive: true });
    await api.writeNodeKubeconfig(root, 'worker-1', { certPaths: 'root' });
    const agentPort = await freePort();
    const config = parseConfig(
      [
        `root: ${root}`,
        'nodeName: worker-1',
        `trust: { digest: "sha256:${'0'.repeat(64)}" }`,
        'paths: { stateDir: /state, upgradeDir: /upgrade }',
        'status: { kubeconfig: /var/lib/kubelet/kubeconfig, console: false }',
        `metrics: { enabled: true, port: ${agentPort} }`,
        '',
      ].join('\n'),
      'config.yaml',
    );
    const lines: string[] = [];
    const log = createLogger(
      new Writable({
        write: (c, _e, cb) => {
          lines.push(String(c));
          cb();
        },
      }),
    );
    const tracker = await statusTracker(config);
    const close = await statusOutputs(config, log, tracker, 'run');
    t.teardown(close);
    const certFile = join(root, 'state/metrics-tls/tls.crt');
    await until(
      'the listener',
      async () =>
        lines.some((l) => l.includes(`https://127.0.0.1:${agentPort}/metrics`)) ? true : undefined,
      10_000,
    );

    // what a ServiceMonitor endpoint becomes: the kubelet's address, the shipped relabelings
    await writeFile(join(dir, 'prom.token'), promToken);
    await writeFile(join(dir, 'other.token'), otherToken);
    const relabel = await shippedRelabelings(agentPort);
    const job = (name: string, auth: Record<string, unknown>) => ({
      job_name: name,
      scheme: 'https',
      metrics_path: '/metrics',
      ...auth,
      tls_config: { ca_file: certFile, insecure_skip_verify: false },
      // what Endpoints/EndpointSlice discovery gives for one dual-stack node: both kubelet addresses
      static_configs: [
        {
          targets: ['127.0.0.1:10250'],
          labels: { __meta_kubernetes_endpointslice_address_target_name: 'worker-1' },
        },
        {
          targets: ['[::1]:10250'],
          labels: { __meta_kubernetes_endpointslice_address_target_name: 'worker-1' },
        },
      ],
      relabel_configs:
        name === 'shipped'
          ? relabel
          : relabel.filter((r) => r.target_label === '__address__' || r.action === 'drop'),
    });
    const promConfig = {
      global: { scrape_interval: '1s', scrape_timeout: '1s' },
      scrape_configs: [
        job('shipped', { authorization: { credentials_file: join(dir, 'prom.token') } }),
        job('no-token', {}),
        job('no-rbac', { authorization: { credentials_file: join(dir, 'other.token') } }),
      ],
    };
    await writeFile(join(dir, 'prometheus.yml'), JSON.stringify(promConfig));
    const promPort = await freePort();
    const prom: ChildProcess = spawn(
      PROMETHEUS,
      [
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'tsdb')}`,
        `--web.listen-address=127.0.0.1:${promPort}`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let promLog = '';
    prom.stderr!.on('data', (d) => {
      promLog = (promLog + d).slice(-20_000);
    });
    t.teardown(() => {
      prom.kill('SIGTERM');
    });
    const promUrl = `http://127.0.0.1:${promPort}`;

    const up = await until(
      'up{job="bundle-agent"} == 1',
      async () => (await query(promUrl, 'up{job="bundle-agent"} == 1'))[0],
    );
    t.equal(
      up.metric.instance,
      `127.0.0.1:${agentPort}`,
      "the relabeled target: the node's address, the agent's port",
    );
    t.equal(up.metric.node, 'worker-1', 'the node label from EndpointSlice discovery');
    const targets = await query(promUrl, 'up{job="bundle-agent"}');
    t.strictSame(
      targets.map((x) => x.metric.instance),
      [`127.0.0.1:${agentPort}`],
      'the IPv6 kubelet address dropped: no target the agent never listens on',
    );
    const idle = await until(
      'an agent metric',
      async () => (await query(promUrl, 'bundle_agent_phase{job="bundle-agent",phase="Idle"}'))[0],
    );
    t.equal(idle.value[1], '1', 'bundle_agent_phase{phase="Idle"} scraped from the agent');
    for (const name of ['no-token', 'no-rbac']) {
      const down = await until(
        `up{job="${name}"}`,
        async () => (await query(promUrl, `up{job="${name}"}`))[0],
      );
      t.equal(down.value[1], '0', `${name}: refused, so down`);
    }
    const counted = await until('401 and 403 counted', async () => {
      const r = await query(promUrl, 'bundle_agent_metrics_requests_total{job="bundle-agent"}');
      const by = Object.fromEntries(r.map((x) => [x.metric.code, Number(x.value[1])]));
      return by['401']! > 0 && by['403']! > 0 && by['200']! > 0 ? by : undefined;
    });
    t.ok(
      counted['401']! > 0 && counted['403']! > 0,
      `the agent counts its refusals: ${JSON.stringify(counted)}`,
    );
    t.ok(
      lines.some((l) => l.includes('refused with 401')),
      'the 401 is logged',
    );
    t.ok(
      lines.some(
        (l) => l.includes('refused with 403') && l.includes('system:serviceaccount:default:nobody'),
      ),
      'the 403 is logged with the user refused',
    );
    const reviews = api.requests.filter(
      (r) => r.resource === 'tokenreviews' || r.resource === 'subjectaccessreviews',
    );
    t.ok(
      reviews.length >= 2 &&
        reviews.every((r) => r.user === 'system:node:worker-1' && r.status === 201),
      'reviews made as the node, allowed by the Node authorizer (metrics.yaml binds no reviewer)',
    );
    // one scrape a second for several seconds, yet the answers are kept (REVIEW_CACHE_TTL_MS)
    t.ok(
      reviews.filter((r) => r.resource === 'tokenreviews').length <= 4,
      `tokens reviewed once each, not per scrape (${reviews.length} reviews)`,
    );
    if (t.passing() === false) t.comment(promLog.slice(-3000));
  },
);

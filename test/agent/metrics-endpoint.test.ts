// The daemon's metrics endpoint (agent/src/daemon/metrics-endpoint.ts) against the RBAC-enforcing
// API stand-in: on the Node's InternalIP with a self-signed certificate for it; when the Node's
// InternalIP changes while the agent runs, the listener moves to the new address with a
// certificate naming it (it was fixed at start).
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, parseConfig } from '@offline-bundle/agent';
import { Metrics } from '@offline-bundle/status';
import { startMetricsEndpoint } from '../../agent/dist/daemon/metrics-endpoint.js';
import { startKubeStandIn, SHIPPED_RBAC } from '../helpers/kube-standin.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { freePort } from '../helpers/registry.mjs';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const node = (ip: string) => ({
  metadata: { name: 'worker-1', labels: {} },
  status: {
    addresses: [{ type: 'InternalIP', address: ip }],
    conditions: [{ type: 'Ready', status: 'True' }],
  },
});

t.test(
  "the Node's InternalIP changes while running: the listener moves, its self-signed certificate names the new address (stand-in API server)",
  async (t) => {
    const dir = await tmpdir(t, 'ob-metrics-ep-');
    const api = await startKubeStandIn({ rbacFiles: SHIPPED_RBAC });
    t.teardown(() => api.close());
    api.nodes = [node('127.0.0.1')];
    const root = join(dir, 'root');
    await mkdir(join(root, 'state'), { recursive: true });
    await api.writeNodeKubeconfig(root, 'worker-1', { certPaths: 'root' });
    const port = await freePort();
    const config = parseConfig(
      [
        `root: ${root}`,
        'nodeName: worker-1',
        `trust: { digest: "sha256:${'0'.repeat(64)}" }`,
        'paths: { stateDir: /state, upgradeDir: /upgrade }',
        'status: { kubeconfig: /var/lib/kubelet/kubeconfig, console: false }',
        `metrics: { enabled: true, port: ${port} }`,
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
    const stop = startMetricsEndpoint(config, log, new Metrics(), 60_000, 200);
    t.teardown(stop);
    const until = async (what: string, f: () => boolean) => {
      for (let i = 0; i < 100 && !f(); i++) await sleep(100);
      t.ok(f(), what);
    };
    await until('listening on 127.0.0.1', () =>
      lines.some((l) => l.includes(`https://127.0.0.1:${port}/metrics`)),
    );
    api.nodes = [node('127.0.0.2')];
    await until('moved to 127.0.0.2', () =>
      lines.some((l) => l.includes(`https://127.0.0.2:${port}/metrics`)),
    );
    t.ok(
      lines.some((l) => l.includes('changed from 127.0.0.1 to 127.0.0.2')),
      'the move is said',
    );
    const cert = new X509Certificate(await readFile(join(root, 'state/metrics-tls/tls.crt')));
    t.equal(cert.checkIP('127.0.0.2'), '127.0.0.2', 'the certificate names the new address');
  },
);

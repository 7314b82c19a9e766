// `bundle cluster` through the environment's HTTPS proxy, as kubectl and `bundle create`: a
// CONNECT-only proxy (test/helpers/connect-proxy.mjs) that alone resolves the API server's
// name, in front of the RBAC stand-in (test/helpers/kube-standin.ts) serving TLS for that name.
import t from 'tap';
import path from 'node:path';
import { writeFile } from 'node:fs/promises';
import { BUNDLE_BIN, errorCode, run } from '../builder/lib.js';
import { tmpdir } from '../status/lib.js';
import { KubeApiStandIn } from '../helpers/kube-standin.js';
import { startConnectProxy } from '../helpers/connect-proxy.mjs';

const NAME = 'api.cluster.invalid';
const work = await tmpdir(t, 'ob-cluster-proxy-');
const api = await KubeApiStandIn.start({ names: [NAME] });
t.teardown(() => api.close());
const port = new URL(api.url).port;
const proxy = await startConnectProxy(t, { [`${NAME}:${port}`]: `127.0.0.1:${port}` });
const kubeconfig = path.join(work, 'kubeconfig');
await writeFile(
  kubeconfig,
  `apiVersion: v1\nkind: Config\nclusters: [{ name: c, cluster: { server: "https://${NAME}:${port}", certificate-authority: ${api.caFile} } }]\nusers: [{ name: u, user: { token: admin-token } }]\ncontexts: [{ name: c, context: { cluster: c, user: u } }]\ncurrent-context: c\n`,
);
const status = (env: Record<string, string>) =>
  run(
    process.execPath,
    [BUNDLE_BIN, 'cluster', 'status', '--kubeconfig', kubeconfig, '--request-timeout', '10'],
    { env },
  );

t.test(
  'HTTPS_PROXY (either case) is used for the API server, TLS checked for its name inside the tunnel',
  async (t) => {
    for (const name of ['HTTPS_PROXY', 'https_proxy']) {
      const before = proxy.seen.length;
      const r = await status({ [name]: proxy.url });
      t.equal(errorCode(r.stderr), 'NODES_NOT_READY', `${name}: ${r.stderr}`);
      t.match(r.stderr, 'no nodes match');
      t.ok(
        proxy.seen.slice(before).every((s) => s === `CONNECT ${NAME}:${port}`) &&
          proxy.seen.length > before,
        `${name}: ${proxy.seen.slice(before).join(', ')}`,
      );
    }
  },
);

t.test(
  'NO_PROXY naming the server: connected directly (here: a name nothing else resolves), one line',
  async (t) => {
    const before = proxy.seen.length;
    const r = await status({ HTTPS_PROXY: proxy.url, NO_PROXY: '.cluster.invalid' });
    t.equal(errorCode(r.stderr), 'UNREACHABLE', r.stderr);
    t.match(r.stderr, NAME);
    t.equal(r.stderr.trimEnd().split('\n').length, 1);
    t.equal(proxy.seen.length, before, 'the proxy was not asked');
  },
);

// Peers on by default and inert until approved (issue #42 item 3), as daemons against the
// RBAC-enforcing API stand-in, each node as its kubelet, approvals written and withdrawn with the
// real `bundle cluster approve` / `revoke`. No node config here says `peers.enabled`: the default
// is what is tested, with `staging.keep: untilComplete` (what docs/peers.md has k3s nodes set for
// bundles to travel; the DaemonSet ships false). Whether a port is open is
// read from the kernel (the agent process's sockets in LISTEN), never from what the agent says.
// node-a has the stick, node-b none, node-c sets peers.enabled false, node-d has no peer keys
// (a default install whose admin never made them).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { bundleIdentity, openBundle, readHeader } from '@offline-bundle/format';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { compileSchema, crdSchema, loadCrd } from '../status/lib.js';
import { makePeerCa } from '../../deploy/openshift/peer-ca.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import { BUNDLE, containerdNode, daemonChild, makeBundle, run } from './fixtures.js';
import { listensOn } from './listening-sockets.js';

const PORT = 9491;
const IP = {
  'node-a': '127.0.0.91',
  'node-b': '127.0.0.92',
  'node-c': '127.0.0.93',
  'node-d': '127.0.0.94',
} as const;
type Name = keyof typeof IP;
/** Longer than two of the daemons' looks (every 5 s; the approvals are watched). */
const TWO_LOOKS_MS = 11_000;
const NO_KEYS_LINE = /the peer keys are not installed/g;

const api = await startKubeStandIn();
t.teardown(() => api.close());
api.statusSchema = compileSchema(crdSchema(await loadCrd()), { closed: true });
api.nodes = Object.entries(IP).map(([name, ip]) => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name },
  status: {
    conditions: [{ type: 'Ready', status: 'True' }],
    addresses: [
      { type: 'Hostname', address: name },
      { type: 'InternalIP', address: ip },
    ],
  },
}));

async function node(
  name: Name,
  o: { peers: string; ca?: { ca: string; cert: string; key: string }; pub?: string },
) {
  const n = await containerdNode(
    t,
    `ob-inert-${name}-`,
    `staging:\n  keep: untilComplete\npeers:\n${o.peers}status:\n  kubeconfig: /var/lib/kubelet/kubeconfig\n`,
  );
  await writeFile(
    n.config,
    (await readFile(n.config, 'utf8')).replace('nodeName: node-a', `nodeName: ${name}`),
  );
  await api.writeNodeKubeconfig(n.root, name, { certPaths: 'root' });
  if (o.ca) {
    const dir = join(n.root, 'etc/bundle-agent/peers');
    await mkdir(dir, { recursive: true });
    for (const [from, to] of [
      [o.ca.ca, 'ca.crt'],
      [o.ca.cert, 'node.crt'],
      [o.ca.key, 'node.key'],
    ] as const)
      await copyFile(from, join(dir, to));
    await chmod(join(dir, 'node.key'), 0o600);
  }
  if (o.pub) await copyFile(o.pub, join(n.root, 'etc/bundle-agent/keys/factory.pub'));
  const statusFile = join(n.root, 'var/lib/bundle-agent/status.json');
  const images = () =>
    execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', 'ls', '-q'], {
      encoding: 'utf8',
    })
      .split('\n')
      .filter((i) => i.includes('acme'));
  return {
    ...n,
    name,
    statusFile,
    images,
    daemon: undefined as ReturnType<typeof daemonChild> | undefined,
  };
}

const peersCondition = (
  s:
    | { conditions?: { type: string; status: string; reason: string; message: string }[] }
    | undefined,
) => s?.conditions?.find((c) => c.type === 'Peers');
/** What node `name` asked the API server (as system:node:NAME) of `resource` with `verb`. */
const asked = (name: Name, resource: string, verb = 'list') =>
  api.requests.filter(
    (r) => r.user === `system:node:${name}` && r.resource === resource && r.verb === verb,
  ).length;

t.test(
  'peers by default: no port and no fetch without an approval; approve opens the ports and node-b fetches; revoke closes them; peers off and no keys never open',
  async (t) => {
    const work = await tmpdir(t, 'ob-peers-inert-');
    const ca = makePeerCa(join(work, 'peer-ca')) as { ca: string; cert: string; key: string };
    const a = await node('node-a', { peers: `  port: ${PORT}\n`, ca });
    const pub = join(a.root, 'etc/bundle-agent/keys/factory.pub');
    const b = await node('node-b', { peers: `  port: ${PORT}\n`, ca, pub });
    const c = await node('node-c', { peers: `  enabled: false\n  port: ${PORT}\n`, ca, pub });
    const d = await node('node-d', { peers: `  port: ${PORT}\n`, pub });
    const bundle = await makeBundle(work, {
      key: a.keys.key,
      version: '1.1.0',
      upgradeFrom: ['1.0.0'],
      images: [{ name: 'quay.io/acme/app:1.1', files: { 'app.txt': 'inert '.repeat(50_000) } }],
      out: join(work, 'u.bundle'),
    });
    const source = await openBundle(bundle);
    const manifestDigest = bundleIdentity(
      (await readHeader(source).finally(() => source.close())).manifestBytes,
    );
    const admin = await api.tokenKubeconfig(join(work, 'admin.kubeconfig'), 'admin-token');

    for (const n of [a, b, c, d]) n.daemon = daemonChild(t, n.config, n.statusFile);
    const pid = (n: typeof a) => n.daemon!.child.pid!;
    // node-c (peers off) and node-d (no keys) are watched all along: one sample in LISTEN is a failure
    const everListened = new Set<string>();
    let sampling = false;
    const sampler = setInterval(() => {
      if (sampling) return;
      sampling = true;
      void Promise.all(
        [c, d].map(async (n) => {
          if (await listensOn(pid(n), PORT)) everListened.add(n.name);
        }),
      ).finally(() => {
        sampling = false;
      });
    }, 200);
    t.teardown(() => clearInterval(sampler));

    await copyFile(bundle, join(a.root, 'var/lib/bundle-agent/drop/u.bundle'));
    await a.daemon!.until('node-a Ready from its stick', (s) => s?.phase === 'Ready' && !!s.bundle);
    await sleep(TWO_LOOKS_MS);

    await t.test(
      'no approval: no node listens on the peer port, nothing is published or fetched',
      async (t) => {
        for (const n of [a, b, c, d])
          t.notOk(
            await listensOn(pid(n), PORT),
            `${n.name}'s agent holds no socket listening on ${PORT}`,
          );
        t.notOk(
          api.get('nodebundlestatuses', 'node-a')?.status?.serving,
          'node-a publishes nothing as served',
        );
        t.notOk((await b.daemon!.until('node-b runs', (s) => !!s)).bundle, 'node-b has no bundle');
        t.same(b.images(), [], "node-b's containerd has no image of it");
        t.equal(
          asked('node-b', 'nodebundlestatuses') + asked('node-b', 'nodes', 'get'),
          0,
          "node-b never looked for a peer (no list of the nodes' statuses, no read of a Node)",
        );
        t.ok(
          asked('node-b', 'bundleapprovals') >= 1 &&
            asked('node-b', 'bundleapprovals', 'watch') >= 1,
          'node-b listed the approvals and watches them',
        );
        t.match(
          peersCondition(await a.daemon!.until('node-a status', (s) => peersCondition(s))),
          { status: 'False', reason: 'NotApproved' },
          "node-a's Peers condition says why its port is closed",
        );
        const dStatus = await d.daemon!.until(
          'node-d says it has no keys',
          (s) => peersCondition(s)?.reason === 'NoPeerCredentials',
        );
        t.match(
          peersCondition(dStatus)?.message,
          /peer keys are not installed.*ca\.crt.*opens no peer port \(never one without mutual TLS\).*peer-ca\.mjs.*peers\.enabled: false/,
        );
        t.notOk(
          dStatus.peers,
          "no status.peers, as with peers off: the technician's line lets the stick go",
        );
        t.equal(
          asked('node-d', 'bundleapprovals'),
          0,
          'node-d without keys does not even ask for approvals',
        );
        t.notOk(
          peersCondition(await c.daemon!.until('node-c runs', (s) => !!s)),
          'peers off: no Peers condition',
        );
      },
    );

    const approved = await run(BUNDLE, [
      'cluster',
      'approve',
      bundle,
      '--key',
      pub,
      '--kubeconfig',
      admin,
      '--json',
    ]);
    t.equal(approved.code, 0, approved.stderr);
    const approvedAt = Date.now();

    await t.test(
      'approved: node-a and node-b listen, node-b fetches from node-a and serves on from its kept layout',
      async (t) => {
        // on a miss: what node-a asked of the approvals since the approval, and its last words
        const aDetail = () => {
          const calls = api.requests.filter(
            (r) =>
              r.user === 'system:node:node-a' &&
              r.resource === 'bundleapprovals' &&
              r.at >= approvedAt - 60_000,
          );
          return `node-a's approval calls: ${calls.map((r) => `${r.verb} ${r.status} at ${r.at - approvedAt} ms`).join(', ')}\nnode-a's log: ${a.daemon!.out.log.slice(-3000)}`;
        };
        await until('node-a listens on the peer port', () => listensOn(pid(a), PORT), {
          timeoutMs: 30_000,
          stepMs: 100,
          detail: aDetail,
        });
        t.comment(`approval → node-a's port open: ${Date.now() - approvedAt} ms`);
        const s = await b.daemon!.until(
          'node-b Ready from peers',
          (x) => x?.phase === 'Ready' && !!x.bundle,
        );
        t.equal(s.bundle?.media, 'peers', 'loaded from peers, not from a stick');
        t.comment(`approval → node-b Ready from peers: ${Date.now() - approvedAt} ms`);
        t.ok(
          b.images().some((i) => i.startsWith('quay.io/acme/app:1.1')),
          "the image is in node-b's containerd",
        );
        t.ok(await listensOn(pid(b), PORT), 'node-b listens too');
        // published as a partial copy while it fetched; whole once its load kept the layout
        const servedByB = await until('node-b publishes its kept copy, whole', () => {
          const v = api.get('nodebundlestatuses', 'node-b')?.status?.serving;
          return v?.complete ? v : undefined;
        });
        t.match(
          servedByB,
          { manifestDigest, complete: true, address: IP['node-b'], port: PORT },
          'node-b serves the layout it keeps (staging.keep untilComplete) to others',
        );
        t.match(
          peersCondition(
            await a.daemon!.until('node-a listening', (x) => peersCondition(x)?.status === 'True'),
          ),
          { reason: 'Listening' },
        );
      },
    );

    await t.test('withdrawn: the ports close and nothing is published as served', async (t) => {
      const revoked = await run(BUNDLE, [
        'cluster',
        'revoke',
        manifestDigest,
        '--kubeconfig',
        admin,
      ]);
      t.equal(revoked.code, 0, revoked.stderr);
      const revokedAt = Date.now();
      for (const n of [a, b]) {
        await until(`${n.name}'s peer port closed`, async () => !(await listensOn(pid(n), PORT)), {
          timeoutMs: 30_000,
          stepMs: 100,
        });
        await until(
          `${n.name} publishes nothing as served`,
          () => !api.get('nodebundlestatuses', n.name)?.status?.serving,
          { timeoutMs: 30_000 },
        );
        t.match(
          peersCondition(
            await n.daemon!.until(
              `${n.name} says why`,
              (x) => peersCondition(x)?.reason === 'NotApproved',
            ),
          ),
          { status: 'False' },
        );
      }
      t.comment(`revoke → both ports closed and nothing published: ${Date.now() - revokedAt} ms`);
      t.pass('node-a and node-b hold no listening socket on the peer port any more');
    });

    await t.test(
      'peers off (node-c) and no keys (node-d): never a port, never a fetch, one log line',
      async (t) => {
        clearInterval(sampler);
        t.same(
          [...everListened],
          [],
          'neither ever held a socket listening on the peer port, approval or not',
        );
        for (const n of [c, d]) {
          t.notOk(
            (await n.daemon!.until(`${n.name} runs`, (s) => !!s)).bundle,
            `${n.name} has no bundle`,
          );
          t.same(n.images(), [], `${n.name}'s containerd has no image of it`);
        }
        t.equal(
          asked('node-c', 'bundleapprovals') + asked('node-c', 'nodebundlestatuses'),
          0,
          'node-c never asked for approvals or peers',
        );
        t.equal(
          d.daemon!.out.log.match(NO_KEYS_LINE)?.length,
          1,
          'node-d said it has no keys once, not at every look',
        );
      },
    );
  },
);

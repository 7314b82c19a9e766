// One stick, two nodes (issue #22), as daemons: node-a loads a bundle from its drop directory
// (the stick), keeps the layout and serves it; node-b, with no stick, does nothing until the
// admin approves the bundle, then fetches it from node-a over mutual TLS and loads it into its
// own real containerd. Discovery goes through the RBAC-enforcing API stand-in with the shipped
// rules (each node as its kubelet, system:node:NAME), where each node publishes status.serving.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { bundleIdentity, openBundle, readHeader } from '@offline-bundle/format';
import { approvalName } from '@offline-bundle/status';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { compileSchema, crdSchema, loadCrd } from '../status/lib.js';
import { makePeerCa } from '../../deploy/openshift/peer-ca.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import { containerdNode, daemonChild, makeBundle } from './fixtures.js';

const api = await startKubeStandIn();
t.teardown(() => api.close());
api.statusSchema = compileSchema(crdSchema(await loadCrd()), { closed: true });
const ADDRESS = { 'node-a': '127.0.0.21', 'node-b': '127.0.0.22' } as const;
api.nodes = Object.entries(ADDRESS).map(([name, ip]) => ({
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

type Name = keyof typeof ADDRESS;
async function peerNode(name: Name, ca: { ca: string; cert: string; key: string }, pub?: string) {
  const n = await containerdNode(
    t,
    `ob-peers-${name}-`,
    `staging:\n  keep: true\npeers:\n  enabled: true\n  port: 9471\nstatus:\n  kubeconfig: /var/lib/kubelet/kubeconfig\n`,
  );
  await writeFile(
    n.config,
    (await readFile(n.config, 'utf8')).replace('nodeName: node-a', `nodeName: ${name}`),
  );
  await api.writeNodeKubeconfig(n.root, name, { certPaths: 'root' });
  const peersDir = join(n.root, 'etc/bundle-agent/peers');
  await mkdir(peersDir, { recursive: true });
  for (const [from, to] of [
    [ca.ca, 'ca.crt'],
    [ca.cert, 'node.crt'],
    [ca.key, 'node.key'],
  ] as const)
    await copyFile(from, join(peersDir, to));
  await chmod(join(peersDir, 'node.key'), 0o600);
  // the factory's key, the same on every node
  if (pub) await copyFile(pub, join(n.root, 'etc/bundle-agent/keys/factory.pub'));
  const statusFile = join(n.root, 'var/lib/bundle-agent/status.json');
  return {
    ...n,
    name,
    statusFile,
    images: () =>
      execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', 'ls', '-q'], {
        encoding: 'utf8',
      })
        .split('\n')
        .filter(Boolean),
  };
}

t.test(
  'one stick, two nodes: node-b fetches from node-a only after the approval, and loads it into its own containerd (stand-in API, RBAC per node)',
  async (t) => {
    const work = await tmpdir(t, 'ob-peers-daemon-');
    const ca = makePeerCa(join(work, 'peer-ca')) as { ca: string; cert: string; key: string };
    const a = await peerNode('node-a', ca);
    const b = await peerNode('node-b', ca, join(a.root, 'etc/bundle-agent/keys/factory.pub'));
    const bundle = await makeBundle(work, {
      key: a.keys.key,
      version: '1.1.0',
      upgradeFrom: ['1.0.0'],
      images: [{ name: 'quay.io/acme/app:1.1', files: { 'app.txt': 'peer '.repeat(50_000) } }],
      out: join(work, 'u.bundle'),
    });
    const source = await openBundle(bundle);
    const head = await readHeader(source).finally(() => source.close());
    const manifestDigest = bundleIdentity(head.manifestBytes);

    const da = daemonChild(t, a.config, a.statusFile);
    const db = daemonChild(t, b.config, b.statusFile);
    await mkdir(join(a.root, 'var/lib/bundle-agent/drop'), { recursive: true });
    await copyFile(bundle, join(a.root, 'var/lib/bundle-agent/drop/u.bundle'));
    await da.until('node-a Ready', (s) => s?.phase === 'Ready');

    // no approval yet: node-a serves nothing (issue #42: inert until approved), node-b fetches nothing
    await sleep(7000);
    t.notOk(
      (await db.until('node-b runs', (s) => !!s)).bundle,
      'node-b has no bundle before the approval',
    );
    t.same(
      b.images().filter((i) => i.includes('acme')),
      [],
    );
    t.notOk(
      api.get('nodebundlestatuses', 'node-a')?.status?.serving,
      'node-a publishes nothing as served before the approval',
    );

    // the admin approves (written as `bundle cluster approve` writes it)
    api.approvals = [
      {
        apiVersion: 'bundles.offline-bundle.io/v1alpha1',
        kind: 'BundleApproval',
        metadata: { name: approvalName(manifestDigest) },
        spec: {
          manifestDigest,
          version: '1.1.0',
          signer: head.manifest.signer.fingerprint,
          checked: 'file',
        },
      },
    ];
    const published = await until(
      'node-a publishes what it serves',
      async () => api.get('nodebundlestatuses', 'node-a')?.status?.serving,
    );
    t.same(
      published,
      {
        manifestDigest,
        complete: true,
        verifiedBlobs: head.manifest.blobs.length + 1,
        address: ADDRESS['node-a'],
        port: 9471,
      },
      'node-a serves the bundle, complete, on its InternalIP',
    );
    const s = await db.until('node-b Ready from node-a', (x) => x?.phase === 'Ready');
    t.equal(s.bundle?.media, 'peers', 'loaded from peers, not from a stick');
    t.ok(
      b.images().some((i) => i.startsWith('quay.io/acme/app:1.1')),
      "the image is in node-b's containerd",
    );
    t.match(db.out.log, /fetching it from other nodes/);
  },
);

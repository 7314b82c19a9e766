// A stick never waits behind a fetch from peers (issue #44 item 2): the real daemon of node-b
// fetches an approved bundle from a peer that drips a byte every 200 ms (slow enough to hold a
// blob for ever, never idle long enough to be cut for it); a bundle copied into its drop
// directory meanwhile is loaded at once, the fetch stopped for it. Discovery through the
// API stand-in with the shipped RBAC; real mutual TLS; node-b loads into its own containerd.
import t from 'tap';
import { chmod, copyFile, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { ServedBundle, loadPeerCredentials, startPeerServer } from '@offline-bundle/agent';
import { bundleIdentity, openBundle, readHeader } from '@offline-bundle/format';
import { approvalName, emptyStatus } from '@offline-bundle/status';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { makePeerCa } from '../../deploy/openshift/peer-ca.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { containerdNode, daemonChild, makeBundle } from './fixtures.js';
import { altered } from './peers-setup.js';

const IP = { 'node-b': '127.0.0.73', 'node-drip': '127.0.0.74' } as const;
const PORT = 9476;
/** Well under MIN_BLOB_RATE's 30 s window: only the stick's turn can free the node this soon. */
const STICK_BOUND_MS = 20_000;

const api = await startKubeStandIn();
t.teardown(() => api.close());
api.nodes = Object.entries(IP).map(([name, ip]) => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name },
  status: {
    conditions: [{ type: 'Ready', status: 'True' }],
    addresses: [{ type: 'InternalIP', address: ip }],
  },
}));

/** Passes each byte on 200 ms after the one before. */
const dripping = () =>
  new Transform({
    transform(c: Buffer, _e, cb) {
      let i = 0;
      const next = () => {
        if (this.destroyed) return;
        if (i >= c.length) return cb();
        this.push(c.subarray(i, ++i));
        setTimeout(next, 200);
      };
      next();
    },
  });

t.test(
  'a bundle dropped while the daemon fetches from a dripping peer loads at once',
  async (t) => {
    const work = await tmpdir(t, 'ob-stick-first-');
    const ca = makePeerCa(join(work, 'peer-ca')) as { ca: string; cert: string; key: string };
    const n = await containerdNode(
      t,
      'ob-stick-first-b-',
      `staging:\n  keep: true\npeers:\n  enabled: true\n  port: ${PORT}\nstatus:\n  kubeconfig: /var/lib/kubelet/kubeconfig\n`,
    );
    await writeFile(
      n.config,
      (await readFile(n.config, 'utf8')).replace('nodeName: node-a', 'nodeName: node-b'),
    );
    await api.writeNodeKubeconfig(n.root, 'node-b', { certPaths: 'root' });
    const peersDir = join(n.root, 'etc/bundle-agent/peers');
    await mkdir(peersDir, { recursive: true });
    for (const [from, to] of [
      [ca.ca, 'ca.crt'],
      [ca.cert, 'node.crt'],
      [ca.key, 'node.key'],
    ] as const)
      await copyFile(from, join(peersDir, to));
    await chmod(join(peersDir, 'node.key'), 0o600);
    const bundle = await makeBundle(work, {
      key: n.keys.key,
      version: '1.1.0',
      upgradeFrom: ['1.0.0'],
      images: [{ name: 'quay.io/acme/app:1.1', files: { 'app.txt': 'drip '.repeat(50_000) } }],
      out: join(work, 'u.bundle'),
    });

    // the dripping peer serves the very bundle, complete, a byte at a time
    const source = await openBundle(bundle);
    t.teardown(() => source.close());
    const head = await readHeader(source);
    const manifestDigest = bundleIdentity(head.manifestBytes);
    const offer = altered(
      await ServedBundle.fromBundleFile(source, head),
      (_d, data) => data.pipe(dripping()) as never,
    );
    const drip = await startPeerServer({
      credentials: await loadPeerCredentials(ca),
      host: IP['node-drip'],
      port: PORT,
      uploadBytesPerSecond: 64 * 1024 * 1024,
      downloaders: 4,
      bundle: (d) => (d === manifestDigest ? offer : undefined),
    });
    t.teardown(() => drip.close());
    api.statuses = [
      {
        apiVersion: 'bundles.offline-bundle.io/v1alpha1',
        kind: 'NodeBundleStatus',
        metadata: { name: 'node-drip' },
        status: {
          ...emptyStatus('node-drip'),
          node: 'node-drip',
          serving: {
            manifestDigest,
            complete: true,
            verifiedBlobs: head.manifest.blobs.length + 1,
            address: IP['node-drip'],
            port: PORT,
          },
        },
      },
    ];
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

    const statusFile = join(n.root, 'var/lib/bundle-agent/status.json');
    const d = daemonChild(t, n.config, statusFile);
    await d.until(
      'node-b fetching from the dripping peer',
      (s) => s?.phase === 'Staging' && s.bundle?.media === 'peers',
    );
    await d.until('the drip under way', () => drip.counters.bytesServed > 0);
    const drop = join(n.root, 'var/lib/bundle-agent/drop');
    await copyFile(bundle, join(drop, '.u.bundle.tmp'));
    await rename(join(drop, '.u.bundle.tmp'), join(drop, 'u.bundle'));
    const dropped = Date.now();
    const s = await d.until(
      'node-b Ready from the drop directory',
      (x) => x?.phase === 'Ready' && x.bundle?.media !== 'peers',
    );
    const took = Date.now() - dropped;
    t.ok(took < STICK_BOUND_MS, `the dropped bundle was loaded ${took} ms after it appeared`);
    t.equal(s.bundle?.version, '1.1.0');
    t.match(d.out.log, /loaded first: the fetch from peers stopped/);
  },
);

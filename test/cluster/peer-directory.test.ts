// Peer discovery (issue #22) against the RBAC-enforcing API stand-in with the shipped
// deploy/rbac.yaml: the directory runs as the node (an RHCOS-shaped kubelet kubeconfig,
// system:node:NAME), reads the other nodes' NodeBundleStatus `status.serving` and checks each
// claim against the publishing node's Node object. The reporter publishes status.serving
// through the CRD's schema (deploy/crd.yaml, unknown fields refused), and `bundle cluster
// status` shows per node where its bundle came from and what it serves.
import t from 'tap';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import { ApiPeerDirectory, selectPeers } from '@offline-bundle/agent';
import { ClusterReporter, emptyStatus, type NodeStatus } from '@offline-bundle/status';
import { adminApis } from '@offline-bundle/kube';
import { readRollup } from '@offline-bundle/cluster';
import { startKubeStandIn, SHIPPED_RBAC } from '../helpers/kube-standin.js';
import { compileSchema, crdSchema, loadCrd, tmpdir, type Doc } from '../status/lib.js';
import { until } from '../helpers/until.js';
import { bundle } from '../builder/lib.js';
import { bindAdmin, nodeStatus } from './lib.js';

const D = `sha256:${'d1'.repeat(32)}`;
const OTHER = `sha256:${'e2'.repeat(32)}`;
const dir = await tmpdir(t, 'ob-peer-dir-');
const api = await startKubeStandIn();
t.teardown(() => api.close());
api.statusSchema = compileSchema(crdSchema(await loadCrd()), { closed: true });

const nodeDoc = (name: string, ...ips: string[]): Doc => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name },
  status: {
    conditions: [{ type: 'Ready', status: 'True' }],
    addresses: [
      { type: 'Hostname', address: name },
      ...ips.map((address) => ({ type: 'InternalIP', address })),
      { type: 'ExternalIP', address: '198.51.100.7' },
    ],
  },
});
const serving = (name: string, s: Record<string, unknown>, statusNode = name): Doc => {
  const d = nodeStatus(name, 'Ready', `sha256:${'f0'.repeat(32)}`, '4.15.1');
  d.status.node = statusNode;
  d.status.bundle.media = 'USB stick STICK';
  d.status.serving = { manifestDigest: D, complete: false, verifiedBlobs: 0, port: 9470, ...s };
  return d;
};

/** Written straight into the stand-in's store (no CRD check): what a cluster without this CRD version, or a forged object, would hold. */
function cluster(): void {
  api.nodes = [
    nodeDoc('w1', '10.0.0.1'),
    nodeDoc('w2', '10.0.0.2'),
    nodeDoc('w3', '10.0.0.3'),
    nodeDoc('w4', '10.0.0.4'),
    nodeDoc('w5', '10.0.0.5'),
    nodeDoc('w6', '10.0.0.6'),
    nodeDoc('w7', '10.0.0.7'),
    nodeDoc('w8', 'fd00::8'),
    nodeDoc('w9', '10.0.0.9'),
    nodeDoc('w10', '10.0.0.10'),
    // powered off: its Node went NotReady, its last status still says complete
    {
      ...nodeDoc('w11', '10.0.0.11'),
      status: {
        conditions: [{ type: 'Ready', status: 'Unknown' }],
        addresses: [{ type: 'InternalIP', address: '10.0.0.11' }],
      },
    },
  ];
  api.statuses = [
    serving('w1', { complete: true, verifiedBlobs: 40, address: '10.0.0.1' }), // this node: never its own peer
    serving('w2', { verifiedBlobs: 12, address: '10.0.0.2' }),
    serving('w3', { complete: true, verifiedBlobs: 40, address: '10.0.0.3', port: 9471 }),
    serving('w4', { complete: true, verifiedBlobs: 40, address: '203.0.113.9' }), // an address that is not its Node's
    serving('w5', { complete: true, verifiedBlobs: 40, address: '10.0.0.5', port: 22 }), // a port outside 9000-9999
    serving('w6', {
      complete: true,
      verifiedBlobs: 40,
      address: '10.0.0.6',
      manifestDigest: OTHER,
    }), // another bundle
    serving('w7', { complete: true, verifiedBlobs: 40, address: '10.0.0.2' }), // pointing at another node
    serving('w8', { verifiedBlobs: 3, address: 'fd00::8' }),
    serving('w9', { complete: true, verifiedBlobs: 40, address: '10.0.0.2' }, 'w2'), // a status naming another node
    nodeStatus('w10', 'Ready', D, '4.15.1'), // serves nothing
    serving('w11', { complete: true, verifiedBlobs: 40, address: '10.0.0.11' }), // a Node not Ready
  ];
}

await api.writeNodeKubeconfig(path.join(dir, 'w1'), 'w1', { certPaths: 'root' });
const w1Kubeconfig = path.join(dir, 'w1/var/lib/kubelet/kubeconfig');
const directory = new ApiPeerDirectory({ node: 'w1', kubeconfig: w1Kubeconfig });

t.test(
  'directory (stand-in, node identity): the peers of a digest, complete first; never itself; forged addresses and ports, and Nodes not Ready, ignored',
  async (t) => {
    cluster();
    const before = api.requests.length;
    const peers = await directory.peersFor(D);
    t.same(peers, [
      { node: 'w3', url: 'https://10.0.0.3:9471', complete: true, verifiedBlobs: 40 },
      { node: 'w2', url: 'https://10.0.0.2:9470', complete: false, verifiedBlobs: 12 },
      { node: 'w8', url: 'https://[fd00::8]:9470', complete: false, verifiedBlobs: 3 },
    ]);
    const calls = api.requests.slice(before);
    t.same(
      calls.map((r) => [r.verb, r.resource, r.user, r.status]),
      [
        ['list', 'nodebundlestatuses', 'system:node:w1', 200],
        ['list', 'nodes', 'system:node:w1', 200],
      ],
      'two lists as the node, both allowed by the shipped rules',
    );
    t.same(await directory.peersFor(OTHER), [
      { node: 'w6', url: 'https://10.0.0.6:9470', complete: true, verifiedBlobs: 40 },
    ]);
    const n = api.requests.length;
    t.same(await directory.peersFor(`sha256:${'99'.repeat(32)}`), [], 'nobody serves it');
    t.equal(api.requests.length - n, 1, 'and the Nodes are not read for it');
    t.equal(await directory.ownAddress(), '10.0.0.1', 'its own InternalIP, from its Node');
  },
);

t.test('selectPeers: the rules alone', async (t) => {
  const ips = new Map([
    ['a', ['10.1.0.1']],
    ['b', ['10.1.0.2', 'fd00::2']],
  ]);
  const claim = (
    node: string,
    address: string,
    port: unknown = 9000,
    complete = false,
    verifiedBlobs = 0,
  ) => ({ node, manifestDigest: D, complete, verifiedBlobs, address, port });
  t.same(
    selectPeers('a', D, [claim('a', '10.1.0.1'), claim('b', 'fd00::2', 9999)], ips).map(
      (p) => p.url,
    ),
    ['https://[fd00::2]:9999'],
    'any InternalIP of the node; ports 9000 and 9999 included',
  );
  t.same(
    selectPeers(
      'x',
      D,
      [
        claim('a', '10.1.0.1', 8999),
        claim('b', '10.1.0.2', 10000),
        claim('b', '10.1.0.2', 9000.5),
        claim('b', '10.1.0.2', '9000'),
      ],
      ips,
    ),
    [],
    'ports outside the range, fractional or a string: ignored',
  );
  t.same(
    selectPeers('x', D, [claim('c', '10.1.0.3'), claim('Bad_Name', '10.1.0.1')], ips),
    [],
    'a node with no Node object, or not a node name: ignored',
  );
  t.same(
    selectPeers(
      'x',
      D,
      [claim('b', '10.1.0.2', 9000, false, 5), claim('a', '10.1.0.1', 9000, false, 9)],
      ips,
    ).map((p) => p.node),
    ['a', 'b'],
    'more verified blobs first',
  );
});

t.test('directory (stand-in): approvals the node can see', async (t) => {
  api.approvals = [
    {
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'BundleApproval',
      metadata: { name: `sha256-${D.slice(7)}` },
      spec: { manifestDigest: D, version: '4.15.1', signer: OTHER, checked: 'file' },
    },
    // named after another digest (a cluster without the CRD's rule): approves nothing
    {
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'BundleApproval',
      metadata: { name: `sha256-${'0'.repeat(64)}` },
      spec: { manifestDigest: OTHER, version: '4.15.2', signer: OTHER, checked: 'file' },
    },
  ];
  t.same(await directory.approved(), [{ manifestDigest: D, version: '4.15.1', signer: OTHER }]);
  api.approvals = [];
  t.same(await directory.approved(), []);
});

t.test(
  "directory (stand-in): without rbac.yaml's peer-discovery rule the node is refused, and told which rule",
  async (t) => {
    const docs = parseAllDocuments(await readFile(SHIPPED_RBAC[0]!, 'utf8')).map(
      (d) => d.toJS() as Doc,
    );
    const kept = docs.filter((d) => d.metadata?.name !== 'offline-bundle:peer-discovery');
    t.equal(docs.length - kept.length, 2, 'the ClusterRole and its binding taken out');
    const file = path.join(dir, 'rbac-without-discovery.yaml');
    await writeFile(file, kept.map((d) => stringify(d)).join('---\n'));
    await api.loadRbac([file, SHIPPED_RBAC[1]!]);
    t.teardown(() => api.loadRbac(SHIPPED_RBAC));
    const err = await directory.peersFor(D).then(
      () => undefined,
      (e: Error & { code?: string }) => e,
    );
    t.equal(err?.code, 'FORBIDDEN');
    t.match(
      err?.message,
      /cannot list resource "nodebundlestatuses".*: apply deploy\/rbac\.yaml \(ClusterRole offline-bundle:peer-discovery, bound to group system:nodes\)$/,
    );
    t.equal(
      await directory.approved().then(
        () => 'ok',
        (e: { code?: string }) => e.code,
      ),
      'FORBIDDEN',
    );
  },
);

t.test(
  "publishing (stand-in): the reporter writes status.serving and bundle.fromPeers through the CRD's schema; peers and the admin see them",
  async (t) => {
    cluster();
    api.statuses = api.statuses.filter((s) => s.metadata.name !== 'w2');
    await api.writeNodeKubeconfig(path.join(dir, 'w2'), 'w2', { certPaths: 'root' });
    const w2Kubeconfig = path.join(dir, 'w2/var/lib/kubelet/kubeconfig');
    const address = await new ApiPeerDirectory({
      node: 'w2',
      kubeconfig: w2Kubeconfig,
    }).ownAddress();
    t.equal(address, '10.0.0.2');
    const status: NodeStatus = {
      ...emptyStatus('w2'),
      phase: 'Ready',
      message: 'loaded',
      bundle: {
        file: '/var/lib/bundle-agent/peers/4.15.1',
        version: '4.15.1',
        fromPeers: ['w3', 'w8'],
      },
      serving: {
        manifestDigest: D,
        complete: true,
        verifiedBlobs: 40,
        address: address!,
        port: 9472,
      },
    };
    const reporter = new ClusterReporter({
      node: 'w2',
      kubeconfig: w2Kubeconfig,
      initialBackoffMs: 50,
    });
    t.teardown(() => reporter.close());
    reporter.report(status);
    await until(
      "w2's status says what it serves",
      () => api.get('nodebundlestatuses', 'w2')?.status?.serving !== undefined,
      { timeoutMs: 30_000 },
    );
    const stored = api.get('nodebundlestatuses', 'w2')!.status;
    t.same(
      stored.serving,
      { manifestDigest: D, complete: true, verifiedBlobs: 40, address: '10.0.0.2', port: 9472 },
      'accepted by the CRD schema (unknown fields refused)',
    );
    t.same(stored.bundle.fromPeers, ['w3', 'w8']);
    t.equal(reporter.stats.rejected, 0);
    t.same(
      (await directory.peersFor(D)).map((p) => [p.node, p.url]),
      [
        ['w2', 'https://10.0.0.2:9472'],
        ['w3', 'https://10.0.0.3:9471'],
        ['w8', 'https://[fd00::8]:9470'],
      ],
      'w1 finds w2 where it published',
    );

    // the admin's view: source and what each node serves
    const rollup = await readRollup(
      await adminApis(
        await api.tokenKubeconfig(
          path.join(dir, 'admin'),
          bindAdmin(api, 'carol', { signatureRole: false }),
        ),
      ),
    );
    const row = (n: string) => rollup.rows.find((r) => r.node === n)!;
    t.equal(row('w2').source, 'peer w3,w8');
    t.same(row('w2').serving, {
      manifestDigest: D,
      complete: true,
      verifiedBlobs: 40,
      address: '10.0.0.2',
      port: 9472,
    });
    t.equal(row('w3').source, 'stick', 'from the stick (bundle.media)');
    t.equal(row('w10').serving, undefined, 'serves nothing');
    const table = await bundle(['cluster', 'status', '--kubeconfig', path.join(dir, 'admin')]);
    t.match(
      table.stdout,
      /^NODE\s+NODE READY\s+PHASE\s+VERSION\s+DIGEST\s+PINNED\s+LAST HEARTBEAT\s+READY FOR BUNDLE\s+SOURCE\s+RATE\s+SERVES\n/,
    );
    t.match(
      table.stdout,
      /\nw2\s.*\speer w3,w8\s+-\s+complete on 10\.0\.0\.2:9472\n/,
      'Ready: no rate',
    );
    t.match(table.stdout, /\nw8\s.*\sstick\s+-\s+3 blobs on \[fd00::8\]:9470\n/);
    t.match(table.stdout, /\nw10\s.*\s-\s+-\s+-\n/, 'a node with neither: dashes');
  },
);

t.test(
  'directory (stand-in): an API server that never answers costs one request deadline, then API_TIMEOUT; the next call works',
  async (t) => {
    cluster();
    const quick = new ApiPeerDirectory({
      node: 'w1',
      kubeconfig: w1Kubeconfig,
      requestTimeoutMs: 500,
    });
    api.intercept = (r) =>
      r.resource === 'nodebundlestatuses' && r.verb === 'list' ? 'hang' : undefined;
    t.teardown(() => {
      api.intercept = undefined;
    });
    const err = await quick.peersFor(D).then(
      () => undefined,
      (e: Error & { code?: string }) => e,
    );
    t.equal(err?.code, 'API_TIMEOUT');
    t.match(err?.message, /gave no complete answer within 0\.5 s/);
    api.intercept = undefined;
    t.equal((await quick.peersFor(D)).length, 3, 'the API back: peers again');
  },
);

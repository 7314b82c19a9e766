// Several nodes on this machine for the peer tests (issue #22): each a network namespace on a
// test bridge (test/helpers/netns.ts) running its own bundle-agent daemon with its own root and
// its own real containerd (both in the namespace: containerd pulls from the agent's loopback
// registry), each its kubelet identity (system:node:NAME) against the RBAC-enforcing API
// stand-in, which listens on the bridge's host address. The peer port is served on the node's
// bridge address, so other nodes reach it across the bridge only. The admin approves with the
// real `bundle cluster approve`.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmod, copyFile, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { bundleIdentity, openBundle, readHeader } from '@offline-bundle/format';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { makeBridge } from '../helpers/node.js';
import { countSentFrom, netnsNode, type NetNode } from '../helpers/netns.js';
import { compileSchema, crdSchema, loadCrd } from '../status/lib.js';
import { makePeerCa } from '../../deploy/openshift/peer-ca.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { BUNDLE, containerdNode, daemonChild, keygen, makeBundle, run } from './fixtures.js';

type T = Parameters<typeof tmpdir>[0] & { teardown(fn: () => unknown): void };
type Tap = {
  equal(a: unknown, b: unknown, m: string): unknown;
  ok(a: unknown, m: string): unknown;
  match(a: unknown, b: unknown, m: string): unknown;
};
export const PEER_PORT = 9471;

export interface ClusterNode {
  name: string;
  net: NetNode;
  root: string;
  statusFile: string;
  /** bytes this node's peer server sent, counted on the wire */
  uploaded: () => number;
  /** the daemon, once start() ran */
  daemon?: ReturnType<typeof daemonChild>;
  start(): ReturnType<typeof daemonChild>;
  /** lines of `ctr images ls` in the node's containerd (namespace k8s.io) */
  images(): string[];
  status(): Promise<any>;
}

/**
 * `names` nodes on one bridge, the first the one that gets the stick (its drop directory); a
 * signed bundle of `imageBytes` of incompressible layer data; nothing started yet.
 */
/** `peers`: more keys of the agents' `peers:` block (YAML lines, indented two spaces); `imageSize`: bytes of each image (one layer each; default 64 MiB). */
export async function peerCluster(
  t: T,
  names: string[],
  imageBytes: number,
  opts: { peers?: string; imageSize?: number } = {},
) {
  const work = await tmpdir(t, 'ob-peers-nodes-');
  const bridge = await makeBridge(t);
  const api = await startKubeStandIn({ host: bridge.hostAddress });
  t.teardown(() => api.close());
  api.statusSchema = compileSchema(crdSchema(await loadCrd()), { closed: true });
  api.nodes = names.map((name, i) => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    status: {
      conditions: [{ type: 'Ready', status: 'True' }],
      addresses: [
        { type: 'Hostname', address: name },
        { type: 'InternalIP', address: bridge.nodeAddress(i) },
      ],
    },
  }));
  const ca = makePeerCa(join(work, 'peer-ca')) as { ca: string; cert: string; key: string };
  const factory = await keygen(work);
  // the bundle and the nodes (a containerd each) at once: on a loaded machine each takes seconds
  const [bundle, nodes] = await Promise.all([
    makeBundle(work, {
      key: factory.key,
      version: '1.1.0',
      upgradeFrom: ['1.0.0'],
      out: join(work, 'u.bundle'),
      images: imagesOf(imageBytes, opts.imageSize),
    }),
    Promise.all(
      names.map((name, i) =>
        clusterNode(t, {
          name,
          net: netnsNode(t, bridge, bridge.nodeAddress(i)),
          api,
          ca,
          pub: factory.pub,
          peers: opts.peers ?? '',
        }),
      ),
    ),
  ]);
  // one at a time: the stand-in's CA issues with openssl's serial file, which two at once corrupt
  for (const n of nodes) await api.writeNodeKubeconfig(n.root, n.name, { certPaths: 'root' });
  const source = await openBundle(bundle);
  const head = await readHeader(source).finally(() => source.close());
  const admin = await api.tokenKubeconfig(join(work, 'admin.kubeconfig'), 'admin-token');
  return {
    work,
    bridge,
    api,
    bundle,
    nodes,
    factory,
    manifestDigest: bundleIdentity(head.manifestBytes),
    bundleBytes: (await stat(bundle)).size,
    /** the stick: the bundle copied into the first node's drop directory */
    plugStick: async () => {
      await mkdir(join(nodes[0]!.root, 'var/lib/bundle-agent/drop'), { recursive: true });
      await copyFile(bundle, join(nodes[0]!.root, 'var/lib/bundle-agent/drop/u.bundle'));
    },
    /** what the admin types: the real CLI, checking the file against the factory key */
    approve: async () => {
      const r = await run(BUNDLE, [
        'cluster',
        'approve',
        bundle,
        '--key',
        factory.pub,
        '--kubeconfig',
        admin,
        '--json',
      ]);
      if (r.code !== 0) throw new Error(`bundle cluster approve failed: ${r.stderr}`);
      return r.stdout;
    },
  };
}

async function clusterNode(
  t: T,
  o: {
    name: string;
    net: NetNode;
    api: Awaited<ReturnType<typeof startKubeStandIn>>;
    ca: { ca: string; cert: string; key: string };
    pub: string;
    peers: string;
  },
): Promise<ClusterNode> {
  const n = await containerdNode(
    t,
    `ob-peers-${o.name}-`,
    `staging:\n  keep: true\npeers:\n  enabled: true\n  port: ${PEER_PORT}\n${o.peers}status:\n  kubeconfig: /var/lib/kubelet/kubeconfig\n`,
    { netns: o.net.ns },
  );
  await writeFile(
    n.config,
    (await readFile(n.config, 'utf8')).replace('nodeName: node-a', `nodeName: ${o.name}`),
  );
  const peersDir = join(n.root, 'etc/bundle-agent/peers');
  await mkdir(peersDir, { recursive: true });
  for (const [from, to] of [
    [o.ca.ca, 'ca.crt'],
    [o.ca.cert, 'node.crt'],
    [o.ca.key, 'node.key'],
  ] as const)
    await copyFile(from, join(peersDir, to));
  await chmod(join(peersDir, 'node.key'), 0o600);
  // the factory's key, the same on every node
  await copyFile(o.pub, join(n.root, 'etc/bundle-agent/keys/factory.pub'));
  const statusFile = join(n.root, 'var/lib/bundle-agent/status.json');
  const node: ClusterNode = {
    name: o.name,
    net: o.net,
    root: n.root,
    statusFile,
    uploaded: countSentFrom(o.net, PEER_PORT),
    start: () => (node.daemon = daemonChild(t as never, n.config, statusFile, { netns: o.net.ns })),
    images: () =>
      execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', 'ls'], {
        encoding: 'utf8',
      })
        .split('\n')
        .slice(1)
        .filter(Boolean),
    status: () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined),
  };
  return node;
}

/** Images of two files each, up to 64 MiB an image (made in memory); the first is quay.io/acme/app:1.1. */
function imagesOf(bytes: number, per = 64 * 1024 * 1024) {
  return Array.from({ length: Math.max(1, Math.ceil(bytes / per)) }, (_, i) => {
    const size = Math.min(per, bytes - i * per);
    // random bytes: the transfer moves the size asked for, gzip cannot shrink it
    return {
      name: i ? `quay.io/acme/app-${i}:1.1` : 'quay.io/acme/app:1.1',
      files: {
        'a.bin': randomish(Math.floor(size / 2), 2 * i),
        'b.bin': randomish(Math.ceil(size / 2), 2 * i + 1),
      },
    };
  });
}

/** Deterministic bytes that do not compress (a counter through sha256). */
function randomish(size: number, seed: number): Buffer {
  const out = Buffer.alloc(size);
  for (let off = 0, i = 0; off < size; off += 32, i++)
    createHash('sha256').update(`${seed}:${i}`).digest().copy(out, off);
  return out;
}

/** The node is Ready with the bundle loaded from peers, its image in its containerd and pinned there. */
/** Comments saying where a run's time went, for one that comes close to tap's timeout on a loaded machine. */
export function timeMarks(t: { comment(m: string): unknown }): (what: string) => void {
  const t0 = Date.now();
  return (what) => t.comment(`${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

export async function readyFromPeers(t: Tap, node: ClusterNode) {
  const s = await node.daemon!.until(
    `${node.name} Ready from peers`,
    (x) => x?.phase === 'Ready' && !!x?.bundle,
  );
  t.equal(s.bundle?.media, 'peers', `${node.name} loaded it from peers, not from a stick`);
  const line = node.images().find((l) => l.startsWith('quay.io/acme/app:1.1'));
  t.ok(line, `the image is in ${node.name}'s own containerd`);
  t.match(line ?? '', /io\.cri-containerd\.pinned=pinned/, `and pinned there`);
  return s;
}

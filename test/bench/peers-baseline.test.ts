// The peers bench's registry baseline (issue #42) on real parts: namespace nodes on a bridge
// (test/agent/peers-nodes-setup.ts), Debian's docker-registry in the stick node's namespace,
// the other node's real containerd pulling through its CRI and pinning; and the whole bench at
// a tiny size, ours and the baseline in one run.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { openBundle, readHeader } from '@offline-bundle/format';
import {
  baselinePull,
  clearBaseline,
  criSocketOf,
  layoutImages,
  stickRegistry,
} from '../../bench/lib/peers-baseline.mjs';
import { nodeCpu, pidsIn } from '../../bench/lib/netns-meter.mjs';
import { netnsSupport } from '../helpers/netns.js';
import { peerCluster } from '../agent/peers-nodes-setup.js';

const MiB = 1024 * 1024;
const ROOT = new URL('../../', import.meta.url).pathname;
const skip = netnsSupport();

t.test(
  "baseline: the stick node's docker-registry holds the bundle's images; the other node's containerd pulls every one through CRI and pins it; cleared after",
  { skip },
  async (t) => {
    const c = await peerCluster(t, ['node-0', 'node-1'], 4 * MiB, { imageSize: MiB });
    const [seed, node] = c.nodes as [(typeof c.nodes)[0], (typeof c.nodes)[0]];
    const source = await openBundle(c.bundle);
    const { manifest } = await readHeader(source).finally(() => source.close());
    const images = await layoutImages(join(c.work, 'layout-1.1.0-amd64'), manifest.images);
    const reg = await stickRegistry(seed.net, join(c.work, 'layout-1.1.0-amd64'), images);
    t.teardown(() => reg.stop());
    t.ok(pidsIn(seed.net.ns).includes(reg.pid), "the registry runs in the stick node's namespace");
    t.notOk(
      pidsIn(node.net.ns).includes(reg.pid),
      "not in the receiving node's, whose CPU is counted",
    );
    t.ok(
      reg.host.startsWith(`${seed.net.address}:`),
      "it listens on the stick node's bridge address",
    );

    const idle = nodeCpu(node.net.ns);
    const payload = manifest.blobs.reduce((s, b) => s + b.size, 0);
    const b = await baselinePull({
      seed,
      nodes: [node],
      registry: reg.host,
      upstream: 'quay.io',
      refs: images.map((i: { ref: string }) => i.ref),
      blobs: manifest.blobs,
    });
    t.ok(
      b.sent >= payload && b.sent < 1.5 * payload,
      `the stick node sent every blob once on its cable (${b.sent} bytes for ${payload})`,
    );
    t.ok(
      b.transfer > 0 && b.transfer <= b.all,
      `the transfer (${b.transfer} s) ends by the time all are pinned (${b.all} s)`,
    );
    t.ok(b.cpu > 0 && idle() >= b.cpu, `the receiving node's containerd used CPU (${b.cpu} s)`);
    const lines = node.images();
    for (const im of manifest.images) {
      const line = lines.find((l) => l.startsWith(`${im.repository}:${im.tag} `));
      t.ok(
        line?.includes(im.digest),
        `${im.repository}:${im.tag} is in node-1's containerd with the bundle's digest`,
      );
      t.match(line ?? '', /io\.cri-containerd\.pinned=pinned/, 'and pinned as ours are');
    }
    await reg.stop();
    await clearBaseline([node], 'quay.io');
    t.same(node.images(), [], 'cleared: no image left for our run to find');
    t.notOk(
      existsSync(join(node.root, 'etc/containerd/certs.d/quay.io')),
      "nor the baseline's mirror",
    );
    t.ok(
      existsSync(criSocketOf(node.root)),
      "the containerd is the node's own, on the socket under its root",
    );
  },
);

t.test(
  'the whole bench at a tiny size: ours and the baseline in one run, each row a ratio of the two',
  { skip },
  async (t) => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [join(ROOT, 'bench/peers.mjs'), '--json', '--nodes', '1', '--size', '4M', '--image', '1M'],
      { maxBuffer: 1 << 20, timeout: 240_000 },
    );
    const rows = JSON.parse(stdout);
    t.same(
      rows.map((r: { id: string }) => r.id),
      ['peers', 'peers-transfer', 'peers-upload', 'peers-cpu'],
    );
    for (const r of rows)
      t.ok(
        r.ours.median > 0 &&
          r.peer.median > 0 &&
          Math.abs(r.ratios.median - r.ours.median / r.peer.median) < 1e-9,
        `${r.id}: both sides measured, ratio ours / baseline`,
      );
    const upload = rows.find((r: { id: string }) => r.id === 'peers-upload');
    t.ok(
      upload.ours.median >= 4 * MiB && upload.peer.median >= 4 * MiB,
      "each side's stick node sent at least the image set once",
    );
  },
);

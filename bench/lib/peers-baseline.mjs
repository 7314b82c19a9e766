// The peers bench's baseline (issue #42): what a site builds without us, in the same simulation
// (namespaces, shaped links, containerds): Debian's docker-registry on the stick node holding
// the bundle's images, every other node's containerd pulling all of them at once through its
// CRI from there (a hosts.toml mirror, as a site points its nodes at a registry) and pinning
// them as the agent does. Measured as ours is: until every node pulled and pinned, the transfer
// alone (every node's content store holds every blob), the bytes the stick node sent and the
// CPU time of one receiving node.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pinContainerdImages } from '@offline-bundle/runtime';
import { startRegistry } from '../../test/helpers/registry.mjs';
import { criPullAll, mirrorToRegistry } from './node.mjs';
import { containerdRootIn, nodeCpu, sentOnCable } from './netns-meter.mjs';

const exec = promisify(execFile);
/** Pushes at once while filling the registry (setup, not measured). */
const PUSH_CONCURRENCY = 4;
/** How often the transfer's end is looked for on each node (a stat per blob). */
const POLL_MS = 250;

/** Where a node's containerd and its mirrors live (test/agent/fixtures.ts containerdNode). */
export const criSocketOf = (root) => join(root, 'run/containerd/containerd.sock');
const certsDirOf = (root) => join(root, 'etc/containerd/certs.d');

/**
 * The registry's copy of each bundle image: the layout `bundle create` read (its index names
 * each image by tag), matched to the bundle's images by digest.
 * @param {string} layout
 * @param {{ repository: string, tag: string | null, digest: string }[]} images
 * @returns {Promise<{ tag: string, ref: string, repo: string }[]>} repo: the path in the registry
 */
export async function layoutImages(layout, images) {
  const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8'));
  return images.map((im) => {
    const entry = index.manifests.find((m) => m.digest === im.digest);
    const tag = entry?.annotations?.['org.opencontainers.image.ref.name'];
    if (!tag || !im.tag)
      throw new Error(
        `the bundle's image ${im.repository} (${im.digest}) is not tagged in ${layout}: the bench needs the layout bundle create read`,
      );
    return {
      tag,
      ref: `${im.repository}:${im.tag}`,
      repo: `${im.repository.split('/').slice(1).join('/')}:${im.tag}`,
    };
  });
}

/** Runs `fn` over `items`, `limit` at a time. */
async function eachLimited(items, limit, fn) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]);
    }),
  );
}

/**
 * The stick node's registry, filled from the layout (skopeo in the stick node's namespace, so
 * filling it crosses no cable).
 * @param {{ ns: string, address: string }} net
 */
export async function stickRegistry(net, layout, images) {
  const reg = await startRegistry({ netns: net.ns, address: net.address, timeoutMs: 30_000 });
  try {
    await eachLimited(images, PUSH_CONCURRENCY, (im) =>
      exec(
        'ip',
        [
          'netns',
          'exec',
          net.ns,
          'skopeo',
          '--insecure-policy',
          'copy',
          '--quiet',
          '--preserve-digests',
          '--dest-tls-verify=false',
          `oci:${layout}:${im.tag}`,
          `docker://${reg.host}/${im.repo}`,
        ],
        { maxBuffer: 1 << 20 },
      ),
    );
  } catch (err) {
    await reg.stop();
    throw err;
  }
  return reg;
}

/** Every blob of `blobs` is in the content store under `ctdRoot`. */
const holdsAll = (ctdRoot, blobs) =>
  blobs.every((b) =>
    existsSync(join(ctdRoot, 'io.containerd.content.v1.content/blobs', b.digest.replace(':', '/'))),
  );

/**
 * Every receiving node pulls every image at once and pins it; resolves with the figures.
 * @param {{ seed: { net: { ns: string, hostVeth: string } }, nodes: { name: string, root: string, net: { ns: string } }[],
 *   registry: string, upstream: string, refs: string[], blobs: { digest: string }[] }} o
 *   registry: host:port of the stick's registry; upstream: the registry host the refs name
 */
export async function baselinePull(o) {
  for (const n of o.nodes) await mirrorToRegistry(certsDirOf(n.root), o.upstream, o.registry);
  const roots = o.nodes.map((n) => containerdRootIn(n.net.ns));
  const cpu = nodeCpu(o.nodes[0].net.ns);
  const sent0 = sentOnCable(o.seed.net.hostVeth);
  const t0 = process.hrtime.bigint();
  const since = () => Number(process.hrtime.bigint() - t0) / 1e9;
  const transferAt = new Map();
  const watch = setInterval(() => {
    o.nodes.forEach((n, i) => {
      if (!transferAt.has(n.name) && holdsAll(roots[i], o.blobs)) transferAt.set(n.name, since());
    });
  }, POLL_MS);
  const doneAt = new Map();
  try {
    await Promise.all(
      o.nodes.map(async (n) => {
        await criPullAll(criSocketOf(n.root), o.refs);
        await pinContainerdImages(o.refs, { address: criSocketOf(n.root) });
        // one reading for both: a second one, microseconds later, put the transfer's end after the pins
        const at = since();
        doneAt.set(n.name, at);
        // a pull that ends between two looks: its content is whole by now
        if (!transferAt.has(n.name)) transferAt.set(n.name, at);
      }),
    );
  } finally {
    clearInterval(watch);
  }
  return {
    all: Math.max(...doneAt.values()),
    transfer: Math.max(...transferAt.values()),
    sent: sentOnCable(o.seed.net.hostVeth) - sent0,
    cpu: cpu(),
  };
}

/**
 * Leaves each node's containerd as before the baseline for our run: every image removed with
 * its content (a synchronous GC) and the baseline's mirror gone. Rejects when content remains.
 */
export async function clearBaseline(nodes, upstream) {
  for (const n of nodes) {
    const ctr = (...args) =>
      exec('ctr', ['-a', criSocketOf(n.root), '-n', 'k8s.io', ...args], { maxBuffer: 16 << 20 });
    const names = (await ctr('images', 'ls', '-q')).stdout.split('\n').filter(Boolean);
    if (names.length) await ctr('images', 'rm', '--sync', ...names);
    const left = (await ctr('content', 'ls', '-q')).stdout.split('\n').filter(Boolean);
    if (left.length)
      throw new Error(
        `${n.name}: ${left.length} blobs stay in containerd after the baseline's images were removed; our run would find them there`,
      );
    await rm(join(certsDirOf(n.root), upstream), { recursive: true, force: true });
  }
}

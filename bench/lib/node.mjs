// A fresh "node" per sample: a private containerd (test/helpers/containerd.mjs) whose CRI
// pulls through hosts.toml mirrors, and the bundle-agent configuration the demo uses.
import { mkdir, mkdtemp, rm, writeFile, copyFile } from 'node:fs/promises';
import path from 'node:path';
import { CriImageClient, pullAll, writeContainerdHosts } from '@offline-bundle/runtime';
import { overlayWorks, startContainerd } from '../../test/helpers/containerd.mjs';
import { PREVIOUS } from './release.mjs';

/** What the agent pulls with by default (config preload.concurrency): both sides use it. */
export const PULL_CONCURRENCY = 3;
/**
 * Deadline of one pull, both sides (the agent's own default is 30 min): containerd 1.6 was
 * seen once to leave a PullImage unanswered with nothing in flight, which would stall a run.
 */
const PULL_TIMEOUT_S = 600;

/** Probed once: overlayfs where this machine mounts it (as on real nodes), else native. */
let snapshotter;
export async function nodeSnapshotter(parent) {
  snapshotter ??= (await overlayWorks(parent)) ? 'overlayfs' : 'native';
  return snapshotter;
}

/**
 * A node root with containerd running (sockets and certs.d where the agent's config puts
 * them) and an agent config trusting `pub`.
 * @param {string} parent
 * @param {string} pub
 */
export async function startNode(parent, pub) {
  const root = await mkdtemp(path.join(parent, 'node-'));
  const ctd = await startContainerd(60_000, {
    certsDir: path.join(root, 'etc/containerd/certs.d'),
    socket: path.join(root, 'run/containerd/containerd.sock'),
    snapshotter: await nodeSnapshotter(parent),
  });
  await mkdir(path.join(root, 'etc/bundle-agent/keys'), { recursive: true });
  await copyFile(pub, path.join(root, 'etc/bundle-agent/keys/bench.pub'));
  const config = path.join(root, 'etc/bundle-agent/config.yaml');
  // no kubelet runs here, and this VM's disk is shared: the host reports it ~73 % used before a
  // run, so the kubelet's default thresholds (image GC at 85 %) refuse a scale 4 load (17 GB of
  // images); the bench measures the load, not the space check (its own tests cover that)
  await mkdir(path.join(root, 'var/lib/kubelet'), { recursive: true });
  await writeFile(
    path.join(root, 'var/lib/kubelet/config.yaml'),
    'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 100\nevictionHard:\n  imagefs.available: "1%"\n  nodefs.available: "1%"\n',
  );
  await writeFile(
    config,
    `root: ${root}\nnodeName: bench\nruntime: containerd\narch: amd64\ntrust:\n  keys: [/etc/bundle-agent/keys/bench.pub]\nversion:\n  current: "${PREVIOUS}"\nspace:\n  reserveBytes: 0\npreload:\n  timeoutSeconds: ${PULL_TIMEOUT_S}\n`,
  );
  return {
    root,
    ctd,
    config,
    stop: async () => {
      await ctd.stop();
      await rm(root, { recursive: true, force: true });
    },
  };
}

/** Sends `upstreamHost`'s images to `registry` as its plain /v2/ (a docker-registry mirror). */
export async function mirrorToRegistry(certsDir, upstreamHost, registry) {
  await mkdir(path.join(certsDir, upstreamHost), { recursive: true });
  await writeFile(
    path.join(certsDir, upstreamHost, 'hosts.toml'),
    `server = "https://${upstreamHost}"\n\n[host."http://${registry}"]\n  capabilities = ["pull", "resolve"]\n`,
  );
}

/** Sends `upstreamHost`'s images to a bundle registry (the agent's own hosts.toml). */
export const mirrorToBundle = (certsDir, upstreamHost, address) =>
  writeContainerdHosts(certsDir, upstreamHost, address);

/** Pulls every reference through containerd's CRI, as the agent's pre-load does. */
export async function criPullAll(socket, refs) {
  const client = new CriImageClient(socket);
  try {
    await pullAll(client, refs, {
      concurrency: PULL_CONCURRENCY,
      retries: 3,
      timeoutMs: PULL_TIMEOUT_S * 1000,
    });
  } finally {
    client.close();
  }
}

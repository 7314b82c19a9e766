// A private containerd (1.6, root required) for tests and the demo: its CRI ImageService
// on its own socket, the native snapshotter (overlayfs on request), and a registry config_path for hosts.toml mirrors.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { CriImageClient } from '@offline-bundle/runtime';
import { startService } from './service.mjs';

/**
 * Start a private containerd (1.6, root required) with everything under a fresh temp dir:
 * root, state, gRPC/ttrpc sockets, the opt plugin dir, CNI dirs (empty: no pod networking
 * needed for image calls), the native snapshotter, and the CRI registry config_path. The
 * sandbox image is never pulled. Resolves once the CRI ImageService answers.
 */
/**
 * @param {number} [timeoutMs]
 * @param {{ certsDir?: string, socket?: string, snapshotter?: 'native' | 'overlayfs', netns?: string, configPath?: string, beforeStart?: (config: string) => Promise<void> }} [opts]
 * netns: run it in that network namespace (ip netns exec), beside an agent whose loopback registry it pulls from
 * configPath: the CRI registry config_path (default certsDir; "" as containerd 1.x and Debian ship it)
 * beforeStart: called with the config file once written, before containerd starts (a test may edit it)
 * @returns {Promise<{ dir: string, socket: string, certsDir: string, pid: number, logs: () => string, stop: () => Promise<void> }>}
 */
export async function startContainerd(timeoutMs = 20_000, opts = {}) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ob-ctd-'));
  // The agent's tests place the hosts dir and socket under the node root they configure.
  const certsDir = opts.certsDir ?? path.join(dir, 'certs.d');
  const socket = opts.socket ?? path.join(dir, 'containerd.sock');
  await mkdir(path.dirname(socket), { recursive: true });
  for (const d of [certsDir, path.join(dir, 'cni', 'bin'), path.join(dir, 'cni', 'conf')])
    await mkdir(d, { recursive: true });
  const q = JSON.stringify;
  const config = path.join(dir, 'config.toml');
  await writeFile(
    config,
    [
      'version = 2',
      `root = ${q(path.join(dir, 'root'))}`,
      `state = ${q(path.join(dir, 'state'))}`,
      'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]',
      '[grpc]',
      `  address = ${q(socket)}`,
      '[ttrpc]',
      `  address = ${q(socket + '.ttrpc')}`,
      '[debug]',
      '  address = ""',
      '[metrics]',
      '  address = ""',
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = ${q(path.join(dir, 'opt'))}`,
      '[plugins."io.containerd.grpc.v1.cri"]',
      '  sandbox_image = "registry.invalid/pause:unused"',
      '  stream_server_address = "127.0.0.1"',
      '  stream_server_port = "0"',
      '  [plugins."io.containerd.grpc.v1.cri".containerd]',
      `    snapshotter = ${q(opts.snapshotter ?? 'native')}`,
      '  [plugins."io.containerd.grpc.v1.cri".cni]',
      `    bin_dir = ${q(path.join(dir, 'cni', 'bin'))}`,
      `    conf_dir = ${q(path.join(dir, 'cni', 'conf'))}`,
      '  [plugins."io.containerd.grpc.v1.cri".registry]',
      `    config_path = ${q(opts.configPath ?? certsDir)}`,
      '',
    ].join('\n'),
  );
  if (opts.beforeStart) await opts.beforeStart(config);

  const svc = await startService({
    name: 'containerd',
    // ip netns exec execs containerd: the pid stopped is containerd's
    command: opts.netns ? 'ip' : 'containerd',
    args: [...(opts.netns ? ['netns', 'exec', opts.netns, 'containerd'] : []), '--config', config],
    ready: async () => {
      if (!existsSync(socket)) return false;
      const c = new CriImageClient(socket, { callTimeoutMs: 2000 });
      try {
        await c.listImages();
        return true;
      } finally {
        c.close();
      }
    },
    readyWhat: `answer on its CRI socket ${socket}`,
    timeoutMs,
    pollMs: 100,
    killAfterMs: 5000,
    maxLogChars: 256 * 1024,
    cleanup: async () => {
      await unmountUnder(dir);
      await rm(dir, { recursive: true, force: true });
    },
  });
  return { dir, socket, certsDir, pid: svc.pid, logs: svc.logs, stop: svc.stop };
}

/**
 * Whether overlayfs mounts under `parent` (the kernel has it, and `parent` is not itself on a
 * filesystem overlayfs refuses as an upper layer): the snapshotter real nodes use. The native
 * snapshotter copies each layer's whole parent chain, which at GB scale runs a disk out.
 * @param {string} parent
 */
export async function overlayWorks(parent) {
  const dir = await mkdtemp(path.join(parent, 'ob-ovl-'));
  try {
    for (const d of ['l', 'u', 'w', 'm']) await mkdir(path.join(dir, d));
    execFileSync(
      'mount',
      [
        '-t',
        'overlay',
        'overlay',
        '-o',
        `lowerdir=${dir}/l,upperdir=${dir}/u,workdir=${dir}/w`,
        `${dir}/m`,
      ],
      { stdio: 'ignore' },
    );
    execFileSync('umount', [`${dir}/m`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * A containerd killed while it unpacks (SIGKILL after killAfterMs, seen with GB-sized layers)
 * leaves its temporary mounts behind: lazily unmount everything under `dir`, deepest first,
 * so removing the directory does not fail with EBUSY.
 */
async function unmountUnder(dir) {
  const mounts = (await readFile('/proc/self/mounts', 'utf8').catch(() => ''))
    .split('\n')
    .map((l) => l.split(' ')[1]?.replace(/\\040/g, ' '))
    .filter((m) => m && (m === dir || m.startsWith(`${dir}/`)));
  for (const m of mounts.sort((a, b) => b.length - a.length)) {
    try {
      execFileSync('umount', ['-l', m], { stdio: 'ignore' });
    } catch {
      // already gone, or not ours to unmount: rm reports what remains
    }
  }
}

// scripts/screenshots.mjs, the nodes: per node a root directory with a private containerd, a
// loop-mounted ext4 "USB stick" holding the bundle, the node's kubeconfig for the API stand-in,
// and `bundle-agent run` as a child (as the systemd unit runs it).
import { execFileSync, spawn } from 'node:child_process';
import { copyFile, mkdir, open, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startContainerd } from '../../test/helpers/containerd.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const AGENT_BIN = path.join(ROOT, 'agent', 'bin', 'bundle-agent.js');
export const STICK_LABEL = 'OCP-4.15.1';

/** The ext4 "stick" at `mnt`, labelled as the technician's is, with the bundle (and its .sha256) on it. */
async function stick(ctx, name, mnt, tamper) {
  const img = path.join(ctx.tmp, `${name}-stick.img`);
  execFileSync('truncate', ['-s', '256M', img]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-L', STICK_LABEL, img]);
  await mkdir(mnt, { recursive: true });
  execFileSync('mount', ['-o', 'loop', img, mnt]);
  ctx.cleanups.push(() => execFileSync('umount', ['-l', mnt]));
  const on = path.join(mnt, path.basename(ctx.rel.file));
  await copyFile(ctx.rel.file, on);
  await copyFile(`${ctx.rel.file}.sha256`, `${on}.sha256`).catch(() => undefined);
  if (tamper) {
    // one byte changed in the middle of the file: a copy damaged on its way to the stick
    const f = await open(on, 'r+');
    const { size } = await f.stat();
    const b = Buffer.alloc(1);
    await f.read(b, 0, 1, Math.floor(size / 2));
    b[0] ^= 0xff;
    await f.write(b, 0, 1, Math.floor(size / 2));
    await f.close();
  }
}

const config = (root, name) => `root: ${root}
nodeName: ${name}
runtime: containerd
arch: amd64
trust:
  keys: [/etc/bundle-agent/keys/factory.pub]
version:
  current: "4.15.0"
space:
  reserveBytes: 0
media:
  roots: [/media]
  pollSeconds: 1
status:
  kubeconfig: /var/lib/kubelet/kubeconfig
`;

/** A node and its agent, started; `tamper`: its stick's copy has one byte changed. */
export async function startNode(ctx, name, opts = {}) {
  const root = path.join(ctx.tmp, 'nodes', name);
  const ctd = await startContainerd(30_000, {
    certsDir: path.join(root, 'etc/containerd/certs.d'),
    socket: path.join(root, 'run/containerd/containerd.sock'),
  });
  ctx.cleanups.push(async () => {
    try {
      process.kill(ctd.pid, 'SIGCONT');
    } catch {
      /* gone */
    }
    await ctd.stop();
  });
  await mkdir(path.join(root, 'etc/bundle-agent/keys'), { recursive: true });
  await copyFile(ctx.rel.pub, path.join(root, 'etc/bundle-agent/keys/factory.pub'));
  const cfg = path.join(root, 'etc/bundle-agent/config.yaml');
  await writeFile(cfg, config(root, name));
  await ctx.api.writeNodeKubeconfig(root, name, { certPaths: 'root' });
  await stick(ctx, name, path.join(root, 'media/usb'), opts.tamper);
  const child = spawn(process.execPath, [AGENT_BIN, 'run', '--config', cfg], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const n = {
    name,
    root,
    ctd,
    child,
    log: '',
    statusFile: path.join(root, 'var/lib/bundle-agent/status.json'),
  };
  child.stdout.on('data', (c) => {
    n.log += c;
  });
  child.stderr.on('data', (c) => {
    n.log += c;
  });
  ctx.cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return n;
}

const exited = (n) => n.child.exitCode !== null || n.child.signalCode !== null;

/** Stops (SIGSTOP) the node's agent as soon as the cluster holds a status of it for which `pred` holds. */
export async function freezeWhen(ctx, n, pred, timeoutMs = 120_000) {
  await ctx.h.until(
    `${n.name}'s report in the cluster`,
    () => {
      if (exited(n)) throw new Error(`${n.name}'s agent exited: ${n.log.slice(-2000)}`);
      const s = ctx.api.get('nodebundlestatuses', n.name)?.status;
      return s && pred(s) ? s : undefined;
    },
    { timeoutMs, stepMs: 2 },
  );
  n.child.kill('SIGSTOP');
}

/**
 * Holds a load mid-Preloading: once the agent's own status file says some but not all images
 * are in, its containerd stops (SIGSTOP: the next pull waits), and once the cluster has that
 * progress (the reporter sends progress at most every 5 s) the agent stops too.
 */
export async function freezeMidPreload(ctx, n) {
  const local = async () => JSON.parse(await readFile(n.statusFile, 'utf8').catch(() => '{}'));
  const mid = (s) =>
    s?.phase === 'Preloading' &&
    s.progress?.imagesDone > 0 &&
    s.progress.imagesDone < s.progress.imagesTotal;
  await ctx.h.until(
    `${n.name} mid-preload`,
    async () => {
      if (exited(n)) throw new Error(`${n.name}'s agent exited: ${n.log.slice(-2000)}`);
      return mid(await local());
    },
    { timeoutMs: 240_000, stepMs: 5 },
  );
  process.kill(n.ctd.pid, 'SIGSTOP');
  await freezeWhen(ctx, n, mid, 30_000);
}

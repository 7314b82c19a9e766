import { spawn } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { BundleManifest } from '@offline-bundle/format';
import { makeDirs, parseReference } from '@offline-bundle/oci';
import {
  CriImageClient, RuntimeError, pullAll, setContainerdPins, type ImagePuller, type PullImageOptions, readPinsDropIn, reloadRuntime, removeContainerdHosts, removeDropIn,
  writeContainerdHosts, writePinsDropIn, writeRegistriesDropIn,
} from '@offline-bundle/runtime';
import type { AgentConfig } from './config.js';
import { AgentError, oneLine } from './errors.js';
import type { Logger } from './log.js';

/** Every name an image of the bundle is pulled and pinned by: repo@digest, and repo:tag when tagged. */
export function imageRefs(m: BundleManifest): string[] {
  const refs = new Set<string>();
  for (const img of m.images) {
    refs.add(`${img.repository}@${img.digest}`);
    if (img.tag) refs.add(`${img.repository}:${img.tag}`);
  }
  return [...refs].sort();
}

/** What the pipeline needs from the node's container runtime. */
export interface RuntimeTarget {
  /** Points the runtime at the local registry; returns the undo. */
  mirror(registryAddress: string, m: BundleManifest): Promise<() => Promise<void>>;
  preload(refs: string[], onProgress: (done: number, total: number, ref: string) => void, signal?: AbortSignal): Promise<void>;
  /** Pins `refs` (this release's and those still in use); `released` are older releases' images to unpin. */
  pin(refs: string[], released: string[]): Promise<void>;
  /** Removes mirror drop-ins a killed agent left behind (they point at a registry that is gone). */
  cleanup(): Promise<void>;
  close(): Promise<void>;
}

/**
 * `preload.command` (crictl pull, podman pull) as an ImagePuller: the same loop as the CRI
 * client (bounded concurrency, retries with backoff, stop at the first no-space error).
 */
class CommandPuller implements ImagePuller {
  constructor(private readonly argv: string[]) {}

  pullImage(ref: string, opts: PullImageOptions = {}): Promise<string> {
    const [cmd, ...args] = this.argv;
    return new Promise((resolve, reject) => {
      // Its own process group, so a stop or a timeout ends the command and whatever it started.
      const child = spawn(cmd!, [...args, ref], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      let stdout = '';
      let stderr = '';
      let settled = false;
      const finish = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        fn();
      };
      const killGroup = () => {
        try {
          if (child.pid) process.kill(-child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
        child.stdout.destroy();
        child.stderr.destroy();
      };
      const onAbort = () => finish(() => {
        killGroup();
        reject(opts.signal!.reason);
      });
      const timer = setTimeout(() => finish(() => {
        killGroup();
        reject(new RuntimeError('TIMEOUT', `${cmd} did not pull ${ref} within ${Math.round((opts.timeoutMs ?? 0) / 1000)} s`));
      }), opts.timeoutMs ?? 2 ** 31 - 1);
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      child.stdout.on('data', (d: Buffer) => { stdout += d; });
      child.stderr.on('data', (d: Buffer) => { stderr += d; });
      child.on('error', (err) => finish(() => reject(new RuntimeError('RUNTIME_UNAVAILABLE', `cannot run ${cmd}: ${err.message}; check preload.command`, { cause: err }))));
      child.on('close', (code) => finish(() => {
        if (code === 0) return resolve(stdout.trim().split('\n').pop() || ref);
        const why = stderr.trim().split('\n').pop() || `exit ${code ?? 'by signal'}`;
        reject(new RuntimeError(/no space left/i.test(stderr) ? 'NO_SPACE' : 'PULL_FAILED', `${cmd} could not pull ${ref}: ${why}`));
      }));
    });
  }
}

/** Pre-loads through the CRI socket, or a command (crictl pull, podman pull) where the socket client cannot be used. */
async function preloadWith(config: AgentConfig, cri: () => CriImageClient, refs: string[], onProgress: (done: number, total: number, ref: string) => void, signal?: AbortSignal): Promise<void> {
  const { method, command, concurrency, retries, timeoutSeconds } = config.preload;
  if (method === 'none') return;
  const puller: ImagePuller = method === 'command' ? new CommandPuller(command) : cri();
  await pullAll(puller, refs, { concurrency, retries, timeoutMs: timeoutSeconds * 1000, onProgress: (p) => onProgress(p.done, p.total, p.ref), ...(signal ? { signal } : {}) });
}

/** One entry per image; the drop-in renderer merges a repository's entries (digest-only if none is tagged). */
function repositories(m: BundleManifest): { repository: string; digestOnly: boolean }[] {
  return m.images.map((img) => ({ repository: img.repository, digestOnly: !img.tag }));
}

export class CrioTarget implements RuntimeTarget {
  private client?: CriImageClient;
  private readonly mirrorName: string;
  private readonly pinsName: string;

  constructor(private readonly config: AgentConfig, private readonly log?: Logger) {
    this.mirrorName = `${config.prefix}-mirror.conf`;
    this.pinsName = `${config.prefix}-pins.conf`;
  }

  async mirror(address: string, m: BundleManifest): Promise<() => Promise<void>> {
    await makeDirs(this.config.paths.registriesDropInDir);
    const file = await writeRegistriesDropIn(this.config.paths.registriesDropInDir, this.mirrorName, { mirror: address, repositories: repositories(m) });
    return async () => {
      await removeDropIn(file);
    };
  }

  preload(refs: string[], onProgress: (done: number, total: number, ref: string) => void, signal?: AbortSignal): Promise<void> {
    return preloadWith(this.config, () => (this.client ??= new CriImageClient(this.config.criSocket)), refs, onProgress, signal);
  }

  async cleanup(): Promise<void> {
    await removeDropIn(join(this.config.paths.registriesDropInDir, this.mirrorName));
  }

  /**
   * CRI-O takes pinned_images from the last crio.conf.d file that sets it, so ours carries the
   * union with every other file's pins (an installer's, the MCO's): writing it never unpins theirs.
   */
  // Our pins file is rewritten whole, so released images simply drop out of it.
  async pin(refs: string[], _released: string[]): Promise<void> {
    const dir = this.config.paths.crioDropInDir;
    const ours = this.pinsName;
    await makeDirs(dir);
    const others = (await readdir(dir)).filter((n) => n.endsWith('.conf') && n !== ours).sort();
    // crio.conf itself and every other drop-in: a file we cannot read would lose its pins, so it stops us.
    const sources = [join(dirname(dir), 'crio.conf'), ...others.map((n) => join(dir, n))];
    const foreign = new Set<string>();
    for (const file of sources) {
      const pins = await readPinsDropIn(file).catch((err: unknown) => {
        throw new AgentError('PinFailed', `cannot read the pins in ${file} (${oneLine(err)}): fix or remove it, then plug the stick in again; our pins would otherwise replace its pins`, { cause: err });
      });
      for (const p of pins) foreign.add(p);
    }
    const later = others.filter((n) => n > ours);
    if (later.length) this.log?.warn('pin', `crio.conf.d files sorting after ours may override our pins: ${later.join(', ')}`);
    const before = await readPinsDropIn(join(dir, ours));
    const all = [...new Set([...refs, ...foreign])].sort();
    await writePinsDropIn(dir, ours, all);
    if (this.config.reload.command.length > 0 && before.join('\n') !== all.join('\n')) {
      await reloadRuntime(this.config.reload.command);
    }
  }

  async close(): Promise<void> {
    this.client?.close();
  }
}

export class ContainerdTarget implements RuntimeTarget {
  private client?: CriImageClient;
  constructor(private readonly config: AgentConfig) {}

  async mirror(address: string, m: BundleManifest): Promise<() => Promise<void>> {
    const hosts = [...new Set(m.images.map((i) => parseReference(i.repository).registry))].sort();
    const written: string[] = [];
    try {
      for (const host of hosts) {
        await writeContainerdHosts(this.config.paths.containerdCertsDir, host, address).catch((err: { code?: string }) => {
          if (err.code !== 'FOREIGN_FILE') throw err;
          throw new AgentError('ForeignFile', `${this.config.paths.containerdCertsDir}/${host}/hosts.toml exists and is not ours, so images of ${host} cannot be mirrored: move it aside while the bundle loads, then restore it`, { cause: err });
        });
        written.push(host);
      }
    } catch (err) {
      for (const host of written) await removeContainerdHosts(this.config.paths.containerdCertsDir, host);
      throw err;
    }
    return async () => {
      for (const host of written) await removeContainerdHosts(this.config.paths.containerdCertsDir, host);
    };
  }

  preload(refs: string[], onProgress: (done: number, total: number, ref: string) => void, signal?: AbortSignal): Promise<void> {
    return preloadWith(this.config, () => (this.client ??= new CriImageClient(this.config.criSocket)), refs, onProgress, signal);
  }

  async cleanup(): Promise<void> {
    const dirs = await readdir(this.config.paths.containerdCertsDir).catch(() => [] as string[]);
    // removeContainerdHosts only removes files that carry our marker
    for (const host of dirs) await removeContainerdHosts(this.config.paths.containerdCertsDir, host).catch(() => false);
  }

  async pin(refs: string[], released: string[]): Promise<void> {
    // containerd's CRI honours the pinned label from 1.7 (1.6 stores it).
    await setContainerdPins(refs, released, { ctr: this.config.containerd.ctr, address: this.config.criSocket, namespace: this.config.containerd.namespace });
  }

  async close(): Promise<void> {
    this.client?.close();
  }
}

export function runtimeTarget(config: AgentConfig, log?: Logger): RuntimeTarget {
  return config.runtime === 'crio' ? new CrioTarget(config, log) : new ContainerdTarget(config);
}

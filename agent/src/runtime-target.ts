import { spawn } from 'node:child_process';
import { mkdir, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { BundleManifest } from '@offline-bundle/format';
import { parseReference } from '@offline-bundle/oci';
import {
  CriImageClient, pullAll, setContainerdPins, readPinsDropIn, reloadRuntime, removeContainerdHosts, removeDropIn,
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

function runCommand(argv: string[], timeoutMs: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'], timeout: timeoutMs, ...(signal ? { signal } : {}) });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('error', (err: NodeJS.ErrnoException) => reject(err.name === 'AbortError' ? err : new AgentError('PullFailed', `cannot run ${argv[0]}: ${err.message}; check preload.command`, { cause: err })));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new AgentError('PullFailed', `${argv.join(' ')} failed: ${stderr.trim().split('\n').pop() ?? `exit ${code}`}`))));
  });
}

/** Pre-loads through the CRI socket, or a command (crictl pull, podman pull) where the socket client cannot be used. */
async function preloadWith(config: AgentConfig, cri: () => CriImageClient, refs: string[], onProgress: (done: number, total: number, ref: string) => void, signal?: AbortSignal): Promise<void> {
  const { method, command, concurrency, retries, timeoutSeconds } = config.preload;
  if (method === 'none') return;
  if (method === 'command') {
    let done = 0;
    for (const ref of refs) {
      signal?.throwIfAborted();
      await runCommand([...command, ref], timeoutSeconds * 1000, signal);
      onProgress(++done, refs.length, ref);
    }
    return;
  }
  await pullAll(cri(), refs, { concurrency, retries, timeoutMs: timeoutSeconds * 1000, onProgress: (p) => onProgress(p.done, p.total, p.ref), ...(signal ? { signal } : {}) });
}

/** One entry per image; the drop-in renderer merges a repository's entries (digest-only if none is tagged). */
function repositories(m: BundleManifest): { repository: string; digestOnly: boolean }[] {
  return m.images.map((img) => ({ repository: img.repository, digestOnly: !img.tag }));
}

export class CrioTarget implements RuntimeTarget {
  private client?: CriImageClient;
  constructor(private readonly config: AgentConfig, private readonly log?: Logger) {}

  private get mirrorFile(): string {
    return join(this.config.paths.registriesDropInDir, `${this.config.prefix}-mirror.conf`);
  }

  get pinsFile(): string {
    return join(this.config.paths.crioDropInDir, `${this.config.prefix}-pins.conf`);
  }

  async mirror(address: string, m: BundleManifest): Promise<() => Promise<void>> {
    await mkdir(this.config.paths.registriesDropInDir, { recursive: true });
    const file = await writeRegistriesDropIn(this.config.paths.registriesDropInDir, `${this.config.prefix}-mirror.conf`, { mirror: address, repositories: repositories(m) });
    return async () => {
      await removeDropIn(file);
    };
  }

  preload(refs: string[], onProgress: (done: number, total: number, ref: string) => void, signal?: AbortSignal): Promise<void> {
    return preloadWith(this.config, () => (this.client ??= new CriImageClient(this.config.criSocket)), refs, onProgress, signal);
  }

  async cleanup(): Promise<void> {
    await removeDropIn(this.mirrorFile);
  }

  /**
   * CRI-O takes pinned_images from the last crio.conf.d file that sets it, so ours carries the
   * union with every other file's pins (an installer's, the MCO's): writing it never unpins theirs.
   */
  // Our pins file is rewritten whole, so released images simply drop out of it.
  async pin(refs: string[], _released: string[]): Promise<void> {
    const dir = this.config.paths.crioDropInDir;
    const ours = `${this.config.prefix}-pins.conf`;
    await mkdir(dir, { recursive: true });
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
    const before = await readPinsDropIn(this.pinsFile);
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

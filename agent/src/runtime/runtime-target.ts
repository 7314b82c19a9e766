import { spawn } from 'node:child_process';
import { setMaxListeners } from 'node:events';
import { readFile, readdir, rm } from 'node:fs/promises';
import { readStateJson } from '../state/state-json.js';
import { dirname, join } from 'node:path';
import type { BundleManifest } from '@offline-bundle/format';
import { parseReference } from '@offline-bundle/oci';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import {
  CriImageClient,
  MANAGED_MARKER,
  RuntimeError,
  containerdPinnedRefs,
  renderPinsDropIn,
  containerdReportsPins,
  containerdVersion,
  pullAll,
  watchStalls,
  type PullActivity,
  setContainerdPins,
  type ImagePuller,
  type PullImageOptions,
  readPinsDropIn,
  reloadRuntime,
  removeContainerdHosts,
  removeDropIn,
  writeContainerdHosts,
  writePinsDropIn,
  writeRegistriesDropIn,
  containerdHostDir,
  renderContainerdHosts,
  renderRegistriesDropIn,
} from '@offline-bundle/runtime';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import { checkContainerdConfig } from './config-check.js';
import { CRIO_PROBE_HOST, checkCrioConfig, isProbePin } from './crio-config-check.js';
import { crioRunningConfig } from './crio-info-api.js';
import { MIRROR_PROBE_TIMEOUT_MS } from './crio-mirror-probe.js';
import type { Logger } from '../log.js';

/** The names one image of the bundle is pulled and pinned by: repo@digest, and repo:tag when tagged. */
export function namesOf(img: BundleManifest['images'][number]): string[] {
  return img.tag
    ? [`${img.repository}@${img.digest}`, `${img.repository}:${img.tag}`]
    : [`${img.repository}@${img.digest}`];
}

/** Every name an image of the bundle is pulled and pinned by: never a chart's (bundle.json's charts are served only; a runtime cannot pull one). */
export function imageRefs(m: BundleManifest): string[] {
  return [...new Set(m.images.flatMap(namesOf))].sort();
}

/**
 * How many of the bundle's images (entries of bundle.json's images, as `bundle inspect` counts
 * them) have every name in `refs`: what people read as "N of M images", where one image may
 * be pulled by two names.
 */
export function imagesCovered(m: BundleManifest, refs: ReadonlySet<string>): number {
  return m.images.filter((img) => namesOf(img).every((n) => refs.has(n))).length;
}

/** What the pipeline asks the runtime about its images (the CRI ImageService). */
export type ImageInspector = Pick<CriImageClient, 'imageStatus' | 'listImages'>;

/** What the pipeline needs from the node's container runtime. */
export interface RuntimeTarget {
  /**
   * Points the runtime at the local registry and makes it take effect before returning
   * (CRI-O: a reload); returns the undo, whose effect waits for `pin` or `apply`.
   */
  mirror(registryAddress: string, m: BundleManifest): Promise<() => Promise<void>>;
  /** Whether the mirror drop-ins `mirror` would write for `m` are on disk as it would write them (another process's load may have replaced or removed them). */
  mirrored?(registryAddress: string, m: BundleManifest): Promise<boolean>;
  /**
   * `gate(ref)`: what a pull waits for before it starts (its image staged); pulls then start as
   * their images are ready. `watch`: each pull is cancelled and retried once its image moves
   * no bytes for preload.stallSeconds.
   */
  preload(
    refs: string[],
    onProgress: (done: number, total: number, ref: string) => void,
    signal?: AbortSignal,
    gate?: PullGate,
    watch?: PullWatch,
  ): Promise<void>;
  /**
   * Pins `refs` (this release's and those still in use); `released` are older releases' images
   * to unpin. Makes every change so far take effect (CRI-O: one reload for the removed mirror
   * and the new pins).
   */
  pin(refs: string[], released: string[]): Promise<void>;
  /**
   * Unpins `released` (a forgotten release's images) except those also in `keep` (images of
   * releases that stay pinned), and makes it take effect.
   */
  unpin(released: string[], keep: string[]): Promise<void>;
  /** The names the agent has pinned (CRI-O: our pins list; containerd: records with the pin label). */
  pinnedRefs(): Promise<Set<string>>;
  /** Makes configuration changes not yet in effect take effect (after a failure). */
  apply(): Promise<void>;
  /** The CRI ImageService when the runtime answers on its socket; undefined where only a pull command is usable. */
  inspector(): Promise<ImageInspector | undefined>;
  /** Removes mirror drop-ins a killed agent left behind (they point at a registry that is gone). */
  cleanup(): Promise<void>;
  /**
   * Refuses (RuntimeIgnoresMirror) a runtime whose configuration would not read the drop-ins
   * `mirror` writes; run before anything is staged. Absent: nothing to check. CRI-O: a probe
   * through one reload (crio-config-check.ts). `signal`: the load's stop, which ends the check.
   */
  checkConfig?(signal?: AbortSignal): Promise<void>;
  /**
   * How long pins may take to show through the CRI after `pin` returns (default 5 s, CRI-O's
   * reload).
   */
  readonly pinSettleMs?: number;
  /**
   * How long a runtime that reports no pins at all is asked again (default pinSettleMs): 0 where
   * its version says it never will. Read after `pin`.
   */
  readonly noPinsSettleMs?: number;
  close(): Promise<void>;
}

/**
 * The CRI client when the socket answers. With preload.method cri an unreachable socket is an
 * error (the pulls would fail too); with a pull command the runtime may have no usable socket.
 */
async function reachableCri(
  config: AgentConfig,
  client: CriImageClient,
): Promise<ImageInspector | undefined> {
  try {
    await client.listImages();
    return client;
  } catch (err) {
    if (config.preload.method === 'cri') throw err;
    return undefined;
  }
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
      const child = spawn(cmd!, [...args, ref], {
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
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
      const onAbort = () =>
        finish(() => {
          killGroup();
          reject(opts.signal!.reason);
        });
      const timer = setTimeout(
        () =>
          finish(() => {
            killGroup();
            reject(
              new RuntimeError(
                'TIMEOUT',
                `${cmd} did not pull ${ref} within ${Math.round((opts.timeoutMs ?? 0) / 1000)} s`,
              ),
            );
          }),
        opts.timeoutMs ?? 2 ** 31 - 1,
      );
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      child.stdout.on('data', (d: Buffer) => {
        stdout += d;
      });
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
      });
      child.on('error', (err) =>
        finish(() =>
          reject(
            new RuntimeError(
              'RUNTIME_UNAVAILABLE',
              `cannot run ${cmd}: ${err.message}; check preload.command`,
              { cause: err },
            ),
          ),
        ),
      );
      child.on('close', (code) =>
        finish(() => {
          if (code === 0) return resolve(stdout.trim().split('\n').pop() || ref);
          const why = stderr.trim().split('\n').pop() || `exit ${code ?? 'by signal'}`;
          reject(
            new RuntimeError(
              /no space left/i.test(stderr) ? 'NO_SPACE' : 'PULL_FAILED',
              `${cmd} could not pull ${ref}: ${why}`,
            ),
          );
        }),
      );
    });
  }
}

export type PullGate = (ref: string) => Promise<void>;

/** What a pull's watchdog reads (bytes of its image going out of the load's registry), and who hears of a retry. */
interface PullWatch {
  lastMoved: PullActivity;
  onRetry?: (ref: string, attempt: number, err: RuntimeError) => void;
}

/**
 * A puller whose pulls first wait for `gate(ref)`, then for one of `concurrency` slots: every
 * name waits at once, and the pulls run in the order their images become ready, never more
 * than `concurrency` at a time.
 */
function gated(inner: ImagePuller, gate: PullGate, concurrency: number): ImagePuller {
  let free = Math.max(1, concurrency);
  const queue: (() => void)[] = [];
  return {
    async pullImage(ref, opts) {
      // every name waits on pullAll's one signal at once: more than the default 10 listeners
      if (opts?.signal) setMaxListeners(0, opts.signal);
      await untilAborted(gate(ref), opts?.signal);
      if (free > 0) free--;
      else await new Promise<void>((resolve) => queue.push(resolve));
      try {
        opts?.signal?.throwIfAborted();
        return await inner.pullImage(ref, opts);
      } finally {
        // after pullAll has seen this outcome: a NO_SPACE stops it before the next pull may start
        setImmediate(() => {
          const next = queue.shift();
          if (next) next();
          else free++;
        });
      }
    },
  };
}

/** `p`, or the signal's reason as soon as it aborts; the listener goes either way. */
async function untilAborted<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  signal.throwIfAborted();
  let onAbort!: () => void;
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([p, aborted]);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

/** Pre-loads through the CRI socket, or a command (crictl pull, podman pull) where the socket client cannot be used. */
async function preloadWith(
  config: AgentConfig,
  cri: () => CriImageClient,
  refs: string[],
  onProgress: (done: number, total: number, ref: string) => void,
  signal?: AbortSignal,
  gate?: PullGate,
  watch?: PullWatch,
): Promise<void> {
  const { method, command, concurrency, retries, timeoutSeconds, stallSeconds } = config.preload;
  if (method === 'none') return;
  const runtime: ImagePuller = method === 'command' ? new CommandPuller(command) : cri();
  // inside the gate: a pull's clock starts when it does, not while it waits for its image to be staged
  const puller = watch
    ? watchStalls(runtime, { stallMs: stallSeconds * 1000, lastMoved: watch.lastMoved })
    : runtime;
  const how = gate
    ? { puller: gated(puller, gate, concurrency), concurrency: Math.max(1, refs.length) }
    : { puller, concurrency };
  await pullAll(how.puller, refs, {
    concurrency: how.concurrency,
    retries,
    timeoutMs: timeoutSeconds * 1000,
    onProgress: (p) => onProgress(p.done, p.total, p.ref),
    ...(watch?.onRetry ? { onRetry: watch.onRetry } : {}),
    ...(signal ? { signal } : {}),
  });
}

/** One entry per image; the drop-in renderer merges a repository's entries (digest-only if none is tagged). */
function repositories(m: BundleManifest): { repository: string; digestOnly: boolean }[] {
  return m.images.map((img) => ({ repository: img.repository, digestOnly: !img.tag }));
}

/** Removes the temp files a killed atomic write of `names` left in `dir` (hidden: never the file itself). */
async function removeTemps(dir: string, names: readonly string[]): Promise<void> {
  for (const n of await readdir(dir).catch(() => [] as string[])) {
    // ".NAME.PID.RAND.tmp" (writeFileAtomic's temp, also where putPinsFile stages the pins)
    if (
      n.endsWith('.tmp') &&
      names.some((name) => n.replace(/^\.+/, '').startsWith(`${name}.`) && n !== name)
    )
      await rm(join(dir, n), { force: true });
  }
}

/**
 * CRI-O reads registries.conf(.d) and crio.conf.d only at start and on reload (SIGHUP, what
 * `systemctl reload crio` sends): every file written here is followed by a reload before the
 * runtime is expected to act on it, in this order: mirror drop-in, reload, pulls, drop-in
 * removed, pins, reload.
 */
export class CrioTarget implements RuntimeTarget {
  private client?: CriImageClient;
  private readonly mirrorName: string;
  private readonly pinsName: string;
  /** The config check's mirror drop-in (crio-config-check.ts). */
  private readonly probeName: string;
  /** A drop-in changed since the last reload. */
  private unapplied = false;

  constructor(
    private readonly config: AgentConfig,
    private readonly log?: Logger,
  ) {
    this.mirrorName = `${config.prefix}-mirror.conf`;
    this.pinsName = `${config.prefix}-pins.conf`;
    this.probeName = `${config.prefix}-probe.conf`;
  }

  private cri(): CriImageClient {
    return (this.client ??= new CriImageClient(this.config.criSocket));
  }

  /** `event`: the journal's name for it (the config check's reload is not one of the load's). */
  private async reload(why: string, event = 'reload'): Promise<void> {
    const cmd = this.config.reload.command;
    if (cmd.length === 0) {
      this.log?.warn(
        'reload',
        `reload.command is empty: CRI-O must notice the ${why} by itself (auto_reload_registries), or the pulls will not use the mirror`,
      );
      this.unapplied = false;
      return;
    }
    try {
      await reloadRuntime(cmd);
    } catch (err) {
      throw new AgentError(
        'ReloadFailed',
        `CRI-O was not reloaded after the ${why} (${oneLine(err)}): check reload.command and that crio runs (systemctl status crio)`,
        { cause: err },
      );
    }
    this.unapplied = false;
    this.log?.info(event, `CRI-O reloaded (${why})`, { command: cmd.join(' ') });
  }

  /** CRI-O must apply the crio.conf.d the agent writes to: see crio-config-check.ts. */
  checkConfig(signal?: AbortSignal, settleMs?: number): Promise<void> {
    const dir = this.config.paths.crioDropInDir;
    const file = join(dir, this.pinsName);
    let before: string | undefined;
    return checkCrioConfig(
      this.config,
      {
        writeProbe: async (entry) => {
          before = await readFile(file, 'utf8').catch(() => undefined);
          // what CRI-O would run with during the probe is never less than the file it replaces
          const current = (await readPinsDropIn(file).catch(() => [] as string[])).filter(
            (p) => !isProbePin(p),
          );
          await makeDirs(dir);
          await this.writePins([
            ...new Set([
              ...current,
              ...(await this.mergedPins((await this.ownPins()) ?? [])),
              entry,
            ]),
          ]);
          this.unapplied = true;
          return file;
        },
        writeMirrorProbe: async (address, repository) => {
          await makeDirs(this.config.paths.registriesDropInDir);
          return writeRegistriesDropIn(this.config.paths.registriesDropInDir, this.probeName, {
            mirror: address,
            repositories: [{ repository, digestOnly: false }],
          });
        },
        restore: async () => {
          await removeDropIn(join(this.config.paths.registriesDropInDir, this.probeName));
          if (before === undefined) await removeDropIn(file);
          else await this.putPinsFile(before);
          this.unapplied = true;
          await this.reloadAfterProbe("config check's probe files put back");
        },
        pull: (ref, signal) =>
          this.cri().pullImage(ref, { signal, timeoutMs: MIRROR_PROBE_TIMEOUT_MS }),
        reload: (why) => this.reload(why, 'runtime-config'),
        laterFiles: async () =>
          (await readdir(dir).catch(() => [] as string[]))
            .filter((n) => n > this.pinsName && !n.startsWith('.'))
            .sort(),
      },
      this.log,
      { ...(signal ? { signal } : {}), ...(settleMs !== undefined ? { settleMs } : {}) },
    );
  }

  /** A reload after the probe: its failure is logged, not thrown (the check's outcome stands; unapplied stays for the load's next reload). */
  private async reloadAfterProbe(why: string): Promise<void> {
    await this.reload(why, 'runtime-config').catch((err: unknown) => {
      this.unapplied = true;
      this.log?.warn(
        'runtime-config',
        `${oneLine(err)}; CRI-O may keep the probe's pins until its next reload`,
      );
    });
  }

  async mirror(address: string, m: BundleManifest): Promise<() => Promise<void>> {
    await makeDirs(this.config.paths.registriesDropInDir);
    const file = await writeRegistriesDropIn(
      this.config.paths.registriesDropInDir,
      this.mirrorName,
      { mirror: address, repositories: repositories(m) },
    );
    this.unapplied = true;
    this.log?.info('mirror', `mirror drop-in written: ${file}`, { file, mirror: address });
    const undo = async () => {
      if (await removeDropIn(file)) {
        this.unapplied = true;
        this.log?.info('unmirror', `mirror drop-in removed: ${file}`, { file });
      }
    };
    try {
      await this.reload('mirror drop-in');
    } catch (err) {
      await undo();
      throw err;
    }
    return undo;
  }

  async mirrored(address: string, m: BundleManifest): Promise<boolean> {
    const want = renderRegistriesDropIn({ mirror: address, repositories: repositories(m) });
    return (
      (await readFile(join(this.config.paths.registriesDropInDir, this.mirrorName), 'utf8').catch(
        () => undefined,
      )) === want
    );
  }

  preload(
    refs: string[],
    onProgress: (done: number, total: number, ref: string) => void,
    signal?: AbortSignal,
    gate?: PullGate,
    watch?: PullWatch,
  ): Promise<void> {
    return preloadWith(this.config, () => this.cri(), refs, onProgress, signal, gate, watch);
  }

  inspector(): Promise<ImageInspector | undefined> {
    return reachableCri(this.config, this.cri());
  }

  async apply(why = 'mirror drop-in removal'): Promise<void> {
    if (this.unapplied) await this.reload(why);
  }

  async cleanup(): Promise<void> {
    const regDir = this.config.paths.registriesDropInDir;
    const crioDir = this.config.paths.crioDropInDir;
    // a kill while a drop-in was being written leaves its temp file (".NAME.PID.RAND.tmp"): CRI-O's
    // crio.conf.d walk reads every file, dot files too, so a stale pins copy there would count
    await removeTemps(regDir, [this.mirrorName, this.probeName]);
    await removeTemps(crioDir, [this.pinsName]);
    await removeTemps(dirname(crioDir), [this.pinsName]);
    // the config check's probe too, should the agent have been killed during it
    const removed = [
      await removeDropIn(join(regDir, this.mirrorName)),
      await removeDropIn(join(regDir, this.probeName)),
      await this.stripProbePins(),
    ];
    if (removed.includes(true) || (await this.runningProbePins())) {
      this.unapplied = true;
      await this.apply("removal of a killed load's drop-ins");
    }
  }

  /**
   * A check killed between its probe and its restore leaves the probe's pin in our pins file,
   * and a list from then: made again from our pins and every other file's (removed when we have
   * none). Returns whether the file changed.
   */
  private async stripProbePins(): Promise<boolean> {
    const dir = this.config.paths.crioDropInDir;
    const file = join(dir, this.pinsName);
    const pins = await readPinsDropIn(file).catch(() => [] as string[]);
    if (!pins.some(isProbePin)) return false;
    const own = await this.ownPins();
    if (!own) return removeDropIn(file);
    await this.writeMerged(own).catch(async (err: unknown) => {
      this.log?.warn('pin', `${oneLine(err)}; the probe's pin is only taken out of ${file}`);
      await this.writePins(pins.filter((p) => !isProbePin(p)));
    });
    return true;
  }

  /** Whether CRI-O still runs with a probe's pin (its files were put back, the reload never came). */
  private async runningProbePins(): Promise<boolean> {
    const text = await crioRunningConfig(this.config.criSocket).catch(() => '');
    return text.includes(`"${CRIO_PROBE_HOST}/`);
  }

  /**
   * CRI-O takes pinned_images from the last crio.conf.d file that sets it, so ours carries the
   * union with every other file's pins (an installer's, the MCO's): writing it never unpins theirs.
   * Our own list is kept in the state directory, so the union can be made again whenever
   * another file changes (`remerge`) and released images simply drop out of it.
   */
  async pin(refs: string[], _released: string[]): Promise<void> {
    await makeDirs(this.config.paths.stateDir);
    await writeFileAtomic(
      this.ownPinsFile(),
      JSON.stringify({ pins: [...new Set(refs)].sort() }, null, 2) + '\n',
    );
    await this.writeMerged([...new Set(refs)]);
    await this.apply('pins and mirror removal');
  }

  async unpin(released: string[], keep: string[]): Promise<void> {
    const own = await this.ownPins();
    if (!own) return;
    const drop = new Set(released.filter((r) => !keep.includes(r)));
    const next = own.filter((r) => !drop.has(r));
    if (next.length !== own.length) await this.pin(next, [...drop]);
  }

  async pinnedRefs(): Promise<Set<string>> {
    return new Set((await this.ownPins()) ?? []);
  }

  /** Our own pins list (undefined before the first pin), kept apart from other files' pins. */
  private async ownPins(): Promise<string[] | undefined> {
    return readStateJson(this.ownPinsFile()).then((d) => {
      const pins = (d as { pins?: unknown } | undefined)?.pins;
      return Array.isArray(pins) && pins.every((p) => typeof p === 'string')
        ? (pins as string[])
        : undefined;
    });
  }

  /**
   * Makes our pins file the union of our pins and every other file's again, and reloads when
   * that changed it: run when any crio.conf(.d) file changes, so a PinnedImageSet the MCO adds
   * later is never hidden behind a stale copy in our file. Returns whether it rewrote the file.
   */
  async remerge(): Promise<boolean> {
    const own = await this.ownPins();
    if (!own) return false;
    const changed = await this.writeMerged(own);
    if (changed) await this.apply('a change in another crio.conf.d file');
    return changed;
  }

  private ownPinsFile(): string {
    return join(this.config.paths.stateDir, 'crio-pins.json');
  }

  /** CRI-O reads every file of crio.conf.d, whatever its name (the MCO's is 50-pinned-images). */
  private async foreignPinFiles(): Promise<string[]> {
    const dir = this.config.paths.crioDropInDir;
    const others = (await readdir(dir).catch(() => [] as string[]))
      .filter((n) => n !== this.pinsName && !n.startsWith('.'))
      .sort();
    const later = others.filter((n) => n > this.pinsName);
    if (later.length)
      this.log?.warn(
        'pin',
        `crio.conf.d files sorting after ours may override our pins: ${later.join(', ')}`,
      );
    return [join(dirname(dir), 'crio.conf'), ...others.map((n) => join(dir, n))];
  }

  /** Writes our pins drop-in (refused, FOREIGN_FILE, where the file is not ours). */
  private async writePins(pins: string[]): Promise<string> {
    const dir = this.config.paths.crioDropInDir;
    const file = join(dir, this.pinsName);
    const existing = await readFile(file, 'utf8').catch(() => undefined);
    if (existing !== undefined && existing.split('\n', 1)[0] !== MANAGED_MARKER)
      return writePinsDropIn(dir, this.pinsName, pins);
    await this.putPinsFile(renderPinsDropIn(pins));
    return file;
  }

  /**
   * CRI-O's crio.conf.d walk reads every file, a dot or .tmp one too, so the new copy is written
   * in the directory above (crio.conf's, which it does not walk) and renamed in; where that fails
   * (another filesystem, read-only), beside it.
   */
  private async putPinsFile(text: string): Promise<void> {
    const dir = this.config.paths.crioDropInDir;
    const file = join(dir, this.pinsName);
    await writeFileAtomic(file, text, 0o644, dirname(dir)).catch(() => writeFileAtomic(file, text));
  }

  /** `own` with every other file's pins. */
  private async mergedPins(own: string[]): Promise<string[]> {
    const foreign = new Set<string>();
    // crio.conf itself and every other drop-in: a file we cannot read would lose its pins, so it stops us.
    for (const file of await this.foreignPinFiles()) {
      const pins = await readPinsDropIn(file).catch((err: unknown) => {
        throw new AgentError(
          'PinFailed',
          `cannot read the pins in ${file} (${oneLine(err)}): fix or remove it, then plug the stick in again; our pins would otherwise replace its pins`,
          { cause: err },
        );
      });
      for (const p of pins) foreign.add(p);
    }
    return [...new Set([...own, ...foreign])].sort();
  }

  private async writeMerged(own: string[]): Promise<boolean> {
    const dir = this.config.paths.crioDropInDir;
    await makeDirs(dir);
    const before = await readPinsDropIn(join(dir, this.pinsName));
    const all = await this.mergedPins(own);
    if (before.join('\n') === all.join('\n')) return false;
    const file = await this.writePins(all);
    this.unapplied = true;
    this.log?.info(
      'pin',
      `pins drop-in written: ${file} (${all.length} images, ${own.length} ours)`,
      { file },
    );
    return true;
  }

  async close(): Promise<void> {
    this.client?.close();
  }
}

export class ContainerdTarget implements RuntimeTarget {
  private client?: CriImageClient;
  /** Whether this containerd's CRI reports pins, from its version (asked once, at the first pin). */
  private reportsPins: boolean | undefined;
  constructor(
    private readonly config: AgentConfig,
    private readonly log?: Logger,
  ) {}

  /**
   * The labels are in containerd's store when its images API answers; its CRI (1.6.22+) sees them through
   * an event a moment later.
   */
  readonly pinSettleMs = 1_000;

  /** A containerd whose version never reports pins (before 1.6.22): asking again would be pure waiting. */
  get noPinsSettleMs(): number {
    return this.reportsPins === false ? 0 : this.pinSettleMs;
  }

  async mirror(address: string, m: BundleManifest): Promise<() => Promise<void>> {
    const hosts = [...new Set(m.images.map((i) => parseReference(i.repository).registry))].sort();
    const written: string[] = [];
    try {
      for (const host of hosts) {
        await writeContainerdHosts(this.config.paths.containerdCertsDir, host, address).catch(
          (err: { code?: string }) => {
            if (err.code !== 'FOREIGN_FILE') throw err;
            throw new AgentError(
              'ForeignFile',
              `${this.config.paths.containerdCertsDir}/${host}/hosts.toml exists and is not ours, so images of ${host} cannot be mirrored: move it aside while the bundle loads, then restore it`,
              { cause: err },
            );
          },
        );
        written.push(host);
      }
    } catch (err) {
      for (const host of written)
        await removeContainerdHosts(this.config.paths.containerdCertsDir, host);
      throw err;
    }
    return async () => {
      for (const host of written)
        await removeContainerdHosts(this.config.paths.containerdCertsDir, host);
    };
  }

  async mirrored(address: string, m: BundleManifest): Promise<boolean> {
    for (const host of new Set(m.images.map((i) => parseReference(i.repository).registry))) {
      const file = join(
        this.config.paths.containerdCertsDir,
        containerdHostDir(host),
        'hosts.toml',
      );
      if (
        (await readFile(file, 'utf8').catch(() => undefined)) !==
        renderContainerdHosts(host, address)
      )
        return false;
    }
    return true;
  }

  /** containerd's CRI must read paths.containerdCertsDir (its registry config_path), or every pull goes to the real registry. */
  checkConfig(): Promise<void> {
    return checkContainerdConfig(this.config, this.log);
  }

  preload(
    refs: string[],
    onProgress: (done: number, total: number, ref: string) => void,
    signal?: AbortSignal,
    gate?: PullGate,
    watch?: PullWatch,
  ): Promise<void> {
    return preloadWith(
      this.config,
      () => (this.client ??= new CriImageClient(this.config.criSocket)),
      refs,
      onProgress,
      signal,
      gate,
      watch,
    );
  }

  async cleanup(): Promise<void> {
    const dirs = await readdir(this.config.paths.containerdCertsDir).catch(() => [] as string[]);
    // removeContainerdHosts only removes files that carry our marker
    for (const host of dirs)
      await removeContainerdHosts(this.config.paths.containerdCertsDir, host).catch(() => false);
  }

  private get pinOptions() {
    return { address: this.config.criSocket, namespace: this.config.containerd.namespace };
  }

  async pin(refs: string[], released: string[]): Promise<void> {
    // containerd's CRI honours the pinned label from 1.6.22 (before, it stores it).
    await setContainerdPins(refs, released, this.pinOptions);
    if (this.reportsPins === undefined) {
      const version = await containerdVersion(this.config.criSocket).catch((err: unknown) => {
        this.log?.warn(
          'pin',
          `cannot read containerd's version (${oneLine(err)}): the pin check waits as for one that reports pins`,
        );
        return '';
      });
      this.reportsPins = containerdReportsPins(version);
      if (this.reportsPins === false)
        this.log?.info(
          'pin',
          `containerd ${version} does not report pins through the CRI (1.6.22 and later do): the pin labels are set, the check does not wait for them`,
          { version },
        );
    }
  }

  /** `keep` is labelled again where present: an image shared with a forgotten release stays pinned. */
  async unpin(released: string[], keep: string[]): Promise<void> {
    const pinned = await this.pinnedRefs();
    await setContainerdPins(
      keep.filter((r) => pinned.has(r)),
      released.filter((r) => !keep.includes(r)),
      this.pinOptions,
    );
  }

  pinnedRefs(): Promise<Set<string>> {
    return containerdPinnedRefs(this.pinOptions);
  }

  /** containerd re-reads hosts.toml on every pull: nothing waits for a reload. */
  async apply(): Promise<void> {}

  inspector(): Promise<ImageInspector | undefined> {
    return reachableCri(this.config, (this.client ??= new CriImageClient(this.config.criSocket)));
  }

  async close(): Promise<void> {
    this.client?.close();
  }
}

export function runtimeTarget(config: AgentConfig, log?: Logger): RuntimeTarget {
  return config.runtime === 'crio'
    ? new CrioTarget(config, log)
    : new ContainerdTarget(config, log);
}

// Between Ready and the end of the cluster's upgrade, components pull by themselves: rpm-ostree
// the OS image by digest through registries.conf, the kubelet a pod with imagePullPolicy Always,
// CRI-O after crio-wipe emptied its storage. With no registry on the site, only this node can
// answer them: it keeps serving the release's kept layout on loopback, with the mirror drop-in a
// load uses, until ClusterVersion's history says the release completed.
import { rm } from 'node:fs/promises';
import { checkSignature, compareVersions, loadTrust, parseManifestBytes, readLayoutDescription, type BundleManifest } from '@offline-bundle/format';
import { LayoutStore, catalogOf, startRegistry, type RunningRegistry } from '@offline-bundle/registry';
import { completedRelease, formatBytes, observeRunning, readClusterVersionObject, type StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { withLoadLock } from '../load/lock.js';
import { rememberClusterRelease, rememberedClusterRelease } from '../releases/running-release.js';
import { readReleases, recordRelease, type ReleaseRecord } from '../releases/state.js';
import { runtimeTarget, type RuntimeTarget } from '../runtime/runtime-target.js';

export interface KeptServingDeps {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  signal: AbortSignal;
  /** The daemon's one-task-at-a-time queue: a check never runs beside a load of this process. */
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
}

interface Served {
  version: string;
  layout: string;
  manifest: BundleManifest;
  registry: RunningRegistry;
  runtime: RuntimeTarget;
  unmirror: () => Promise<void>;
  bytes: number;
}

/** What the cluster said at the last check: undefined before one answered (then the remembered ClusterVersion counts). */
type ClusterKind = 'openshift' | 'other' | undefined;

/** On by config, on a node that reports to a cluster and pulls images at all. */
export function servesUntilComplete(config: AgentConfig): boolean {
  return config.staging.serveUntilComplete && config.status.kubeconfig !== undefined && config.preload.method !== 'none';
}

export class KeptServing {
  private served: Served | undefined;
  private timer: NodeJS.Timeout | undefined;
  private cluster: ClusterKind;
  private unread = false;

  constructor(private readonly d: KeptServingDeps) {}

  /** How often the cluster is asked whether the release served has completed (staging.serveCheckSeconds). */
  private get checkMs(): number {
    return this.d.config.staging.serveCheckSeconds * 1000;
  }

  get enabled(): boolean {
    return servesUntilComplete(this.d.config);
  }

  /** What is served now, for status and tests. */
  get current(): { version: string; address: string; layout: string; bytes: number } | undefined {
    const s = this.served;
    return s ? { version: s.version, address: s.registry.address, layout: s.layout, bytes: s.bytes } : undefined;
  }

  /** Serves what is due at once (after a reboot: before the kubelet needs it), then checks the cluster every checkMs. */
  async start(): Promise<void> {
    if (!this.enabled) return;
    await this.d.exclusive(() => this.check());
    this.timer = setInterval(() => void this.d.exclusive(() => this.check()), this.checkMs);
    this.timer.unref();
  }

  /** After a load of this process: the release due may have changed, and the load replaced the mirror drop-in. */
  async afterLoad(): Promise<void> {
    if (this.enabled) await this.d.exclusive(() => this.underLock());
  }

  /** Reads ClusterVersion, then serves the release due, or stops. Never throws. */
  async check(): Promise<void> {
    if (this.d.signal.aborted) return;
    await this.readCluster();
    await this.underLock();
  }

  /** At shutdown: the registry and the drop-in go (a drop-in naming a dead port only slows pulls); the layout stays for the next start. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.withdraw('the agent stops; it serves again when it starts', { drop: false });
  }

  private async underLock(): Promise<void> {
    const { config, log } = this.d;
    await withLoadLock(config.paths.stateDir, () => this.refresh()).catch((err: unknown) => {
      // a `bundle-agent load` by hand holds the lock: its own registry serves meanwhile; the next check puts ours back
      if (err instanceof AgentError && err.reason === 'Busy') return;
      log.warn('serving', `cannot keep serving the loaded release: ${oneLine(err)}`);
    });
  }

  private async readCluster(): Promise<void> {
    const { config, log, tracker } = this.d;
    try {
      const cv = await readClusterVersionObject(config.status.kubeconfig!, { timeoutMs: 10_000 });
      this.cluster = cv === undefined ? 'other' : 'openshift';
      const done = completedRelease(cv);
      if (done) {
        tracker.update((s) => { s.history = observeRunning(s.history, done.version); });
        await rememberClusterRelease(config.paths.stateDir, done).catch(() => undefined);
      }
    } catch (err) {
      // unreachable or refused: what is served stays served (the upgrade may be under way); said once per outage
      if (this.served && !this.unread) log.warn('serving', `cannot read ClusterVersion (${oneLine(err)}): ${this.served.version} is still served; asked again every ${Math.round(this.checkMs / 1000)} s`);
      this.unread = true;
      return;
    }
    this.unread = false;
  }

  /** The release due: the newest this node loaded and the cluster does not run yet, whose layout is kept. */
  private async due(): Promise<ReleaseRecord | undefined> {
    const { config, tracker } = this.d;
    if (this.cluster === 'other') return undefined;
    // not read yet (a single-node cluster's API starts after the kubelet, which waits for us): what it said before
    if (this.cluster === undefined && !(await rememberedClusterRelease(config.paths.stateDir))) return undefined;
    const h = tracker.current.history;
    const runs = h.filter((e) => e.state === 'running' || e.state === 'complete').map((e) => e.version).sort(compareVersions);
    const newest = runs.at(-1);
    const loaded = new Set(h.filter((e) => e.state === 'loaded' && (!newest || compareVersions(e.version, newest) > 0)).map((e) => e.version));
    const recs = (await readReleases(config.paths.stateDir)).filter((r) => r.layout && r.arch === config.arch && loaded.has(r.version));
    return recs.sort((a, b) => compareVersions(a.version, b.version)).at(-1);
  }

  private async refresh(): Promise<void> {
    const due = await this.due();
    const s = this.served;
    if (s && due && s.version === due.version && s.layout === due.layout) return this.keepUp(s);
    if (s) await this.withdraw(due ? `${due.version} was loaded since` : this.endedWhy(s.version), { drop: !due || due.version !== s.version });
    if (due) await this.serve(due);
  }

  private endedWhy(version: string): string {
    if (this.cluster === 'other') return 'the cluster has no ClusterVersion (not OpenShift): nothing upgrades from it by itself';
    const e = this.d.tracker.current.history.find((x) => x.version === version);
    return e?.state === 'complete' || e?.state === 'running' ? `the cluster's upgrade to ${version} completed` : `${version} is no longer due (the cluster runs a newer release, or it was forgotten)`;
  }

  /** A load (of this process or by hand) replaced or removed the drop-in: it is put back; the condition too. */
  private async keepUp(s: Served): Promise<void> {
    if ((await s.runtime.mirrored?.(s.registry.address, s.manifest)) === false) {
      s.unmirror = await s.runtime.mirror(s.registry.address, s.manifest);
      this.d.log.info('serving', `the mirror drop-in for ${s.version} was put back (a load replaced it)`, { version: s.version });
    }
    if (this.d.tracker.current.conditions.find((c) => c.type === 'Serving')?.reason !== 'KeptUntilComplete') this.say(s);
  }

  private async serve(rec: ReleaseRecord): Promise<void> {
    const { config, log } = this.d;
    const { manifestBytes, signature } = await readLayoutDescription(rec.layout!);
    const manifest = parseManifestBytes(manifestBytes);
    checkSignature(manifestBytes, signature, manifest.signer.fingerprint, await loadTrust(config.trust.keys, config.trust.digest));
    const catalog = catalogOf(manifest);
    // every blob hashed again: the disk is not trusted since the load, least of all after a crash
    const store = await LayoutStore.open(rec.layout!, catalog);
    const registry = await startRegistry({ store, catalog });
    const runtime = runtimeTarget(config, log);
    let unmirror: () => Promise<void>;
    try {
      unmirror = await runtime.mirror(registry.address, manifest);
    } catch (err) {
      await registry.close().catch(() => undefined);
      await runtime.close();
      throw err;
    }
    const bytes = [...catalog.blobs.values()].reduce((a, b) => a + b, 0);
    this.served = { version: rec.version, layout: rec.layout!, manifest, registry, runtime, unmirror, bytes };
    this.say(this.served);
    log.info('serving', `serving ${rec.version} on ${registry.address} from ${rec.layout} until the cluster's upgrade to it completes`, { version: rec.version, address: registry.address });
  }

  private say(s: Served): void {
    this.d.tracker.condition('Serving', 'True', 'KeptUntilComplete',
      `${s.version} is served to this node's runtime on ${s.registry.address} from the copy kept in ${s.layout} (${formatBytes(s.bytes)} of disk) until the cluster's upgrade to it completes`);
  }

  private async withdraw(why: string, opts: { drop: boolean }): Promise<void> {
    const s = this.served;
    if (!s) return;
    this.served = undefined;
    const { config, log, tracker } = this.d;
    await s.unmirror().catch((err) => log.error('mirror', `could not remove the mirror drop-in: ${oneLine(err)}`));
    await s.runtime.apply().catch((err) => log.error('reload', `the runtime did not take the removal of the mirror: ${oneLine(err)}`));
    await s.registry.close().catch(() => undefined);
    await s.runtime.close();
    tracker.condition('Serving', 'False', 'ServingEnded', `stopped serving ${s.version} on ${s.registry.address}: ${why}`);
    log.info('serving', `stopped serving ${s.version}: ${why}`, { version: s.version });
    if (!opts.drop || config.staging.keep === true) return;
    // its layout was kept only to be served (staging.keep is not true): the disk goes back
    const rec = (await readReleases(config.paths.stateDir)).find((r) => r.version === s.version && r.layout === s.layout);
    if (!rec || this.d.tracker.current.history.some((e) => e.version === s.version && e.state === 'loaded')) return;
    await rm(s.layout, { recursive: true, force: true });
    await recordRelease(config.paths.stateDir, { ...rec, layout: undefined });
    log.info('staging', `removed ${s.layout} (${formatBytes(s.bytes)}): ${s.version} is not served any more`, { version: s.version });
  }
}

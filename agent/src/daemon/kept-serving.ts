// Between Ready and the end of the upgrade on this node, components pull by themselves:
// rpm-ostree the OS image by digest through registries.conf, the kubelet a pod with
// imagePullPolicy Always, CRI-O after crio-wipe emptied its storage. With no registry on the
// site, only this node can answer them: it keeps serving the release's kept layout on loopback,
// with the mirror drop-in a load uses, until ClusterVersion's history says the release
// Completed and this node's Machine Config Daemon applied it (a paused worker pool updates
// long after the cluster says Completed).
import { rm } from 'node:fs/promises';
import type { BundleManifest } from '@offline-bundle/format';
import { catalogOf, startRegistry, type RunningRegistry } from '@offline-bundle/registry';
import {
  completedRelease,
  observeRunning,
  readClusterVersionObject,
  readNodeMachineConfig,
  runningReleases,
  type NodeMachineConfig,
  type StatusTracker,
} from '@offline-bundle/status';
import { formatBytes } from '@offline-bundle/cli';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { withLoadLock } from '../state/lock.js';
import { compareVersions } from '../load/policy.js';
import { openKeptLayout, type KeptLayout } from '../load/kept-layout.js';
import { loadedAhead, newestRun } from '../load/loaded-ahead.js';
import { rememberClusterRelease, rememberedClusterRelease } from '../load/running-release.js';
import { forgetServing, readServing, writeServing } from '../state/serving-state.js';
import {
  heldForPath,
  pathFinal,
  readReleases,
  recordRelease,
  type ReleaseRecord,
} from '../state/release-records.js';
import { runtimeTarget, type RuntimeTarget } from '../runtime/runtime-target.js';

interface KeptServingDeps {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  signal: AbortSignal;
  /** The daemon's one-task-at-a-time queue: a check never runs beside a load of this process. */
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Layouts the start-up restore checked and hashed, by path: the first check serves one without reading it all again (before the kubelet may start); its chunk digests still hold every byte served. */
  checkedAtStart?: Map<string, KeptLayout>;
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
  return (
    config.staging.serveUntilComplete &&
    config.status.kubeconfig !== undefined &&
    config.preload.method !== 'none'
  );
}

export class KeptServing {
  private served: Served | undefined;
  private timer: NodeJS.Timeout | undefined;
  private cluster: ClusterKind;
  /** The release ClusterVersion is moving to (status.desired), when it said. */
  private desired: string | undefined;
  /** This Node's MCD annotations at the last check; undefined when unread. */
  private node: NodeMachineConfig | undefined;
  private unread = false;
  private stopped = false;
  /** A check under way: the interval does not queue another behind it. */
  private checking = false;

  constructor(private readonly d: KeptServingDeps) {}

  get enabled(): boolean {
    return servesUntilComplete(this.d.config);
  }

  /** How often the cluster is asked whether the release served has completed (staging.serveCheckSeconds). */
  private get checkMs(): number {
    return this.d.config.staging.serveCheckSeconds * 1000;
  }

  private get ending(): boolean {
    return this.stopped || this.d.signal.aborted;
  }

  /** Serves what is due at once (after a reboot: before the kubelet needs it), then checks the cluster every checkMs. */
  async start(): Promise<void> {
    if (this.enabled) await this.d.exclusive(() => this.check());
    // what start-up opened is for the first check only (none when serving is off); a later serve checks the layout anew
    for (const k of this.d.checkedAtStart?.values() ?? []) await k.store.close();
    this.d.checkedAtStart?.clear();
    if (!this.enabled) return;
    this.timer = setInterval(() => {
      // one check at a time: a slow one (a layout hashed before it is served) is not queued behind again
      if (!this.checking) void this.d.exclusive(() => this.check());
    }, this.checkMs);
    this.timer.unref();
  }

  /** After a load of this process: the release due may have changed, and the load replaced the mirror drop-in. */
  async afterLoad(): Promise<void> {
    if (this.enabled && !this.ending) await this.d.exclusive(() => this.underLock());
  }

  /** Reads ClusterVersion and this Node, then serves the release due, or stops. Never throws. */
  async check(): Promise<void> {
    if (this.ending) return;
    this.checking = true;
    try {
      await this.readCluster();
      await this.underLock();
    } finally {
      this.checking = false;
    }
  }

  /**
   * At shutdown, after any check under way: the registry goes, and the drop-in if it is still
   * ours (a `bundle-agent load` by hand may have replaced it); the layout stays for the next start.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.d.exclusive(() =>
      this.withdraw('the agent stops; it serves again when it starts', {
        drop: false,
        onlyOurs: true,
      }),
    );
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
      // a ClusterVersion seen before and missing now is an API server still starting, not another kind of cluster
      if (cv === undefined)
        this.cluster = (await rememberedClusterRelease(config.paths.stateDir))
          ? this.cluster
          : 'other';
      else this.cluster = 'openshift';
      const desired = (cv as { status?: { desired?: { version?: unknown } } } | undefined)?.status
        ?.desired?.version;
      this.desired = typeof desired === 'string' ? desired : undefined;
      const done = completedRelease(cv);
      if (done) {
        tracker.update((s) => {
          s.history = observeRunning(s.history, done.version);
        });
        await rememberClusterRelease(config.paths.stateDir, done).catch(() => undefined);
      }
      if (this.cluster === 'openshift')
        this.node = await readNodeMachineConfig(config.status.kubeconfig!, config.nodeName, {
          timeoutMs: 10_000,
        }).catch(() => this.node);
    } catch (err) {
      // unreachable or refused: what is served stays served (the upgrade may be under way); said once per outage
      if (this.served && !this.unread)
        log.warn(
          'serving',
          `cannot read ClusterVersion (${oneLine(err)}): ${this.served.version} is still served; asked again every ${Math.round(this.checkMs / 1000)} s`,
        );
      this.unread = true;
      return;
    }
    this.unread = false;
  }

  /**
   * Whether this node applied the release the cluster completed: its MCD is Done on the config
   * it wants, and that config is not the one it had when serving began. A Node the MCO does not
   * manage (no annotations) follows the cluster; one never read keeps being served.
   */
  private nodeUpdated(configAtLoad: string | undefined): boolean {
    const n = this.node;
    if (!n) return false;
    if (n.state === undefined) return true;
    return (
      n.state === 'Done' &&
      n.currentConfig !== undefined &&
      n.currentConfig === n.desiredConfig &&
      n.currentConfig !== configAtLoad
    );
  }

  /**
   * The release due: the one ClusterVersion moves to if this node loaded it; else the release
   * the cluster completed whose OS update this node has not applied yet; else the newest loaded
   * and not run yet. Only with its layout kept.
   */
  private async due(): Promise<ReleaseRecord | undefined> {
    const { config, tracker } = this.d;
    if (this.cluster === 'other') return undefined;
    // not read yet (a single-node cluster's API starts after the kubelet, which waits for us): what it said before
    if (this.cluster === undefined && !(await rememberedClusterRelease(config.paths.stateDir)))
      return undefined;
    const h = tracker.current.history;
    const recs = (await readReleases(config.paths.stateDir)).filter(
      (r) => r.layout && r.arch === config.arch,
    );
    const newest = (v: string | undefined) =>
      v === undefined
        ? undefined
        : recs
            .filter((r) => r.version === v)
            .sort((a, b) => a.loadedAt.localeCompare(b.loadedAt))
            .at(-1);
    // an update path's earlier release (#43) is served as its bundle, the final one, until that one is over
    const of = (v: string | undefined) => {
      const rec = newest(v);
      return rec && pathFinal(rec) !== rec.version
        ? (recs.find((r) => r.identity === rec.identity && r.version === pathFinal(rec)) ?? rec)
        : rec;
    };
    const ahead = loadedAhead(h);
    const held = recs
      .filter((r) =>
        heldForPath(
          r,
          recs,
          runningReleases(h).map((e) => e.version),
        ),
      )
      .map((r) => r.version);
    if (this.desired && [...ahead, ...held].includes(this.desired) && of(this.desired))
      return of(this.desired);
    const serving = await readServing(config.paths.stateDir);
    const finished = newestRun(h);
    if (
      serving &&
      serving.version === finished &&
      !this.nodeUpdated(serving.configAtLoad) &&
      of(finished)
    )
      return of(finished);
    return of(ahead.sort(compareVersions).at(-1));
  }

  private async refresh(): Promise<void> {
    if (this.ending) return;
    const due = await this.due();
    const s = this.served;
    if (s && due && s.version === due.version && s.layout === due.layout) {
      await this.rebaseOnHop(due);
      return this.keepUp(s);
    }
    if (s)
      await this.withdraw(due ? `${due.version} is due instead` : this.endedWhy(s.version), {
        drop: true,
        onlyOurs: false,
      });
    else if (!due) await this.dropStale();
    if (due && !this.ending) await this.serve(due);
  }

  /**
   * An update path's earlier release (#43) completed and this node applied its OS update: the
   * MachineConfig it is Done on now is the one the final release moves it from, so "updated"
   * (nodeUpdated) means the final release's, not the first hop's.
   */
  private async rebaseOnHop(rec: ReleaseRecord): Promise<void> {
    const { config, tracker } = this.d;
    const finished = newestRun(tracker.current.history);
    const n = this.node;
    if (
      !rec.path ||
      finished === undefined ||
      finished === rec.version ||
      !rec.path.includes(finished)
    )
      return;
    if (n?.state !== 'Done' || n.currentConfig === undefined || n.currentConfig !== n.desiredConfig)
      return;
    const serving = await readServing(config.paths.stateDir);
    if (!serving || serving.version !== rec.version || serving.configAtLoad === n.currentConfig)
      return;
    await writeServing(config.paths.stateDir, { ...serving, configAtLoad: n.currentConfig });
    this.d.log.info(
      'serving',
      `this node applied ${finished}, a release of the path to ${rec.version}: ${rec.version} is served until this node applies it too`,
      { version: rec.version },
    );
  }

  /** Serving state left by an earlier start for a release no longer due (completed meanwhile): its layout goes. */
  private async dropStale(): Promise<void> {
    const rec = await readServing(this.d.config.paths.stateDir);
    if (rec) await this.dropLayout(rec.version, rec.layout, undefined);
  }

  private endedWhy(version: string): string {
    if (this.cluster === 'other')
      return 'the cluster has no ClusterVersion (not OpenShift): nothing upgrades from it by itself';
    const e = this.d.tracker.current.history.find((x) => x.version === version);
    return e?.state === 'complete' || e?.state === 'running'
      ? `the cluster's upgrade to ${version} completed and this node applied it`
      : `${version} is no longer due (the cluster runs a newer release, or it was forgotten)`;
  }

  /** A load (of this process or by hand) replaced or removed the drop-in: it is put back; the condition too. */
  private async keepUp(s: Served): Promise<void> {
    if ((await s.runtime.mirrored?.(s.registry.address, s.manifest)) === false) {
      s.unmirror = await s.runtime.mirror(s.registry.address, s.manifest);
      this.d.log.info(
        'serving',
        `the mirror drop-in for ${s.version} was put back (a load replaced it)`,
        { version: s.version },
      );
    }
    if (
      this.d.tracker.current.conditions.find((c) => c.type === 'Serving')?.reason !==
      'KeptUntilComplete'
    )
      this.say(s);
  }

  private async serve(rec: ReleaseRecord): Promise<void> {
    const { config, log } = this.d;
    const layout = rec.layout!;
    // checked against what was loaded, every blob hashed again (or by the start-up restore a moment ago, its chunk digests kept): the disk is not trusted since the load, least of all after a crash
    const pre = this.d.checkedAtStart?.get(layout);
    this.d.checkedAtStart?.delete(layout);
    const hashedBefore = !!pre && pre.identity === rec.identity;
    const { manifest, store } = hashedBefore
      ? pre
      : await openKeptLayout(config, { ...rec, layout });
    if (this.ending) return;
    const catalog = catalogOf(manifest);
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
    this.served = { version: rec.version, layout, manifest, registry, runtime, unmirror, bytes };
    const before = await readServing(config.paths.stateDir);
    const configAtLoad =
      before?.version === rec.version ? before.configAtLoad : this.node?.currentConfig;
    await writeServing(config.paths.stateDir, {
      version: rec.version,
      layout,
      ...(configAtLoad ? { configAtLoad } : {}),
    });
    this.say(this.served);
    const hashNote = hashedBefore
      ? ' (checked and hashed by the start-up restore, not read again)'
      : '';
    log.info(
      'serving',
      `serving ${rec.version} on ${registry.address} from ${layout} until the upgrade to it is over on this node${hashNote}`,
      { version: rec.version, address: registry.address },
    );
  }

  private say(s: Served): void {
    this.d.tracker.condition(
      'Serving',
      'True',
      'KeptUntilComplete',
      `${s.version} is served to this node's runtime on ${s.registry.address} from the copy kept in ${s.layout} (${formatBytes(s.bytes)} of disk) until the upgrade to it is over on this node`,
    );
  }

  private async withdraw(why: string, opts: { drop: boolean; onlyOurs: boolean }): Promise<void> {
    const s = this.served;
    if (!s) return;
    this.served = undefined;
    const { log, tracker } = this.d;
    // at shutdown the drop-in may be a load's by hand (same file name): only ours is removed
    const ours =
      !opts.onlyOurs || (await s.runtime.mirrored?.(s.registry.address, s.manifest)) !== false;
    if (ours) {
      await s
        .unmirror()
        .catch((err) =>
          log.error('mirror', `could not remove the mirror drop-in: ${oneLine(err)}`),
        );
      await s.runtime
        .apply()
        .catch((err) =>
          log.error(
            'reload',
            `the runtime did not take the removal of the mirror: ${oneLine(err)}`,
          ),
        );
    }
    await s.registry.close().catch(() => undefined);
    await s.runtime.close();
    tracker.condition(
      'Serving',
      'False',
      'ServingEnded',
      `stopped serving ${s.version} on ${s.registry.address}: ${why}`,
    );
    log.info('serving', `stopped serving ${s.version}: ${why}`, { version: s.version });
    if (opts.drop) await this.dropLayout(s.version, s.layout, s.bytes);
  }

  /** The layout was kept only to be served (staging.keep is not true) and is no longer due: the disk goes back. */
  private async dropLayout(
    version: string,
    layout: string,
    bytes: number | undefined,
  ): Promise<void> {
    const { config, log, tracker } = this.d;
    await forgetServing(config.paths.stateDir);
    if (config.staging.keep === true || loadedAhead(tracker.current.history).includes(version))
      return;
    const all = await readReleases(config.paths.stateDir);
    const recs = all.filter((r) => r.layout === layout);
    if (recs.length === 0) return;
    // one layout holds every release of a path (#43): not removed while one of them is still ahead
    const runs = runningReleases(tracker.current.history).map((e) => e.version);
    if (
      recs.some(
        (r) =>
          loadedAhead(tracker.current.history).includes(r.version) || heldForPath(r, all, runs),
      )
    )
      return;
    await rm(layout, { recursive: true, force: true });
    for (const r of recs) await recordRelease(config.paths.stateDir, { ...r, layout: undefined });
    log.info(
      'staging',
      `removed ${layout}${bytes === undefined ? '' : ` (${formatBytes(bytes)})`}: ${version} is not served any more`,
      { version },
    );
  }
}

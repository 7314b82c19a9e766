// `bundle-agent releases`: what the agent keeps of each release it loaded (record, pins, kept
// layout), and the way to let go of releases the node no longer needs. Pins otherwise pile
// up: with a fixed version.current nothing ever becomes "complete" and releases nothing.
import { rm } from 'node:fs/promises';
import { relative, isAbsolute } from 'node:path';
import {
  readStatusFile,
  runningReleases,
  technicianLine,
  writeStatusFile,
  type HistoryEntry,
  type HistoryState,
  type NodeStatus,
} from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { withLoadLock } from '../state/lock.js';
import { compareVersions } from '../load/policy.js';
import { missingImages } from '../runtime/runtime-checks.js';
import type { ImageInspector, RuntimeTarget } from '../runtime/runtime-target.js';
import {
  addForgotten,
  clearForgotten,
  forgetBundles,
  readForgotten,
  type ForgottenRelease,
} from '../state/bundle-records.js';
import { refsToKeepPinned } from '../state/agent-switch-state.js';
import {
  forgetReleaseRecord,
  heldForPath,
  pathFinal,
  readReleases,
  type ReleaseRecord,
} from '../state/release-records.js';

interface ReleaseRow {
  version: string;
  arch: string;
  /** The bundle file's sha256 this row's images came from: a release may be brought by more than one bundle, each its own row. */
  digest?: string;
  /** What the node's history says of it (running, complete, loaded, ...); absent when it says nothing. */
  state?: HistoryState;
  /** The cluster runs it (or ran it last): never unpinned, never pruned. */
  running: boolean;
  /** bundle: loaded by the agent; node: on the node before the first bundle, recorded to keep it pinned. */
  source: 'bundle' | 'node';
  /** Its images, counted as the console and `bundle inspect` count them: one per digest, whatever its tags. */
  images: number;
  /** How many of its images the runtime holds; absent when the runtime cannot be asked. */
  imagesPresent?: number;
  /**
   * The same truth as the load's Pinned condition. yes: the runtime reports every image pinned;
   * no: not all are pinned (or asked to be); unknown: the agent asked for the pins but this
   * runtime does not report pins (CRI-O before 1.28, containerd before 1.6.22: PinningUnverifiable).
   */
  pinned: PinState;
  /** The verified layout kept on disk (staging.keep), to restore vanished images with no stick. */
  layout?: string;
  loadedAt: string;
  /** The update path (#43) its bundle carries, in order, the final release last: every release of it has a row. */
  path?: string[];
  /** An earlier release of that path, kept (pins, prune, forget) until the node runs the final one. */
  heldFor?: string;
}

export type PinState = 'yes' | 'no' | 'unknown';

export interface ReleasesView {
  /** The release the node runs as far as the agent knows (config version.current, else its history). */
  running?: string;
  releases: ReleaseRow[];
  /** Releases the daemon does not load again from a stick (releases forget), until unforget. */
  forgotten: ForgottenRelease[];
}

/**
 * One name per image: the repo@digest name every image a bundle brings has (a tag is a second
 * name of it), as the console and `bundle inspect` count. A record with no digest name (written
 * by hand) counts its names.
 */
function digestNames(refs: readonly string[]): readonly string[] {
  const byDigest = refs.filter((r) => r.includes('@'));
  return byDigest.length ? byDigest : refs;
}

/** What the runtime reports of the pins: by image id, or undefined when it reports none at all (so none can be verified). */
async function reportedPins(
  inspector: ImageInspector | undefined,
): Promise<Map<string, boolean> | undefined> {
  const listed = await inspector?.listImages().catch(() => undefined);
  if (!listed?.some((i) => i.pinned)) return undefined;
  return new Map(listed.map((i) => [i.id, i.pinned]));
}

async function pinState(
  refs: readonly string[],
  asked: ReadonlySet<string>,
  reported: Map<string, boolean> | undefined,
  inspector: ImageInspector | undefined,
): Promise<PinState> {
  if (refs.length === 0 || !refs.every((r) => asked.has(r))) return 'no';
  if (!reported || !inspector) return 'unknown';
  for (const ref of digestNames(refs)) {
    const st = await inspector.imageStatus(ref).catch(() => undefined);
    if (!st || !(reported.get(st.id) ?? st.pinned)) return 'no';
  }
  return 'yes';
}

/**
 * Versions the node runs, oldest first: version.current when set (as for the version policy),
 * else the running or complete entries of the history (two while an upgrade is under way).
 */
function runningVersions(config: AgentConfig, history: readonly HistoryEntry[]): string[] {
  if (config.version.current) return [config.version.current];
  return [...new Set(runningReleases(history).map((e) => e.version))].sort(compareVersions);
}

async function historyOf(config: AgentConfig): Promise<HistoryEntry[]> {
  return (await readStatusFile(config.paths.statusFile).catch(() => undefined))?.history ?? [];
}

export async function listReleases(
  config: AgentConfig,
  runtime: RuntimeTarget,
  log?: Logger,
): Promise<ReleasesView> {
  const history = await historyOf(config);
  const running = runningVersions(config, history);
  const records = (await readReleases(config.paths.stateDir)).sort(
    (a, b) =>
      compareVersions(a.version, b.version) ||
      a.arch.localeCompare(b.arch) ||
      a.loadedAt.localeCompare(b.loadedAt),
  );
  const inspector = await runtime.inspector().catch((err) => {
    log?.warn('releases', `cannot ask the runtime which images it holds: ${oneLine(err)}`);
    return undefined;
  });
  const pinned = await runtime.pinnedRefs().catch((err) => {
    log?.warn('releases', `cannot read the pins: ${oneLine(err)}`);
    return new Set<string>();
  });
  const reported = await reportedPins(inspector);
  const rows: ReleaseRow[] = [];
  for (const r of records) {
    const state = history.find((e) => e.version === r.version)?.state;
    const images = digestNames(r.refs);
    const missing = inspector ? (await missingImages(inspector, images)).length : undefined;
    rows.push({
      version: r.version,
      arch: r.arch,
      ...(r.digest ? { digest: r.digest } : {}),
      ...(state ? { state } : {}),
      running: running.includes(r.version),
      source: r.source ?? 'bundle',
      images: images.length,
      ...(missing !== undefined ? { imagesPresent: images.length - missing } : {}),
      pinned: await pinState(r.refs, pinned, reported, inspector),
      ...(r.layout ? { layout: r.layout } : {}),
      loadedAt: r.loadedAt,
      ...(r.path ? { path: r.path } : {}),
      ...(heldForPath(r, records, running) ? { heldFor: pathFinal(r) } : {}),
    });
  }
  return {
    ...(running.length ? { running: running[0] } : {}),
    releases: rows,
    forgotten: await readForgotten(config.paths.stateDir),
  };
}

export interface Forgotten {
  version: string;
  arch: string;
  /** The bundle whose record this was (a release brought by two bundles is forgotten one record at a time). */
  digest?: string;
  /** Images no longer pinned, counted one per image as the list counts them (those shared with a release that stays are kept). */
  unpinned: number;
  /** The kept layout removed, if there was one. */
  layout?: string;
}

/** A layout path from a record is only removed when it lies inside the upgrade directory. */
function insideUpgradeDir(config: AgentConfig, dir: string): boolean {
  const rel = relative(config.paths.upgradeDir, dir);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
}

/** Unpins one release (never an image another release or the agent switch keeps), removes its kept layout and drops its records. Runs under the load lock. */
async function forgetOne(
  config: AgentConfig,
  runtime: RuntimeTarget,
  rec: ReleaseRecord,
  others: ReleaseRecord[],
): Promise<Forgotten> {
  // the releases that stay, and the agent images a switch keeps (the running one; the previous one while unconfirmed)
  const keep = await refsToKeepPinned(config.paths.stateDir, others);
  const released = rec.refs.filter((r) => !keep.includes(r));
  await runtime.unpin(released, keep);
  let layout: string | undefined;
  // the releases of one path share their bundle's layout: it goes with the last record naming it
  if (
    rec.layout &&
    insideUpgradeDir(config, rec.layout) &&
    !others.some((o) => o.layout === rec.layout)
  ) {
    await rm(rec.layout, { recursive: true, force: true });
    layout = rec.layout;
  }
  await forgetReleaseRecord(config.paths.stateDir, rec);
  await forgetBundles(config.paths.stateDir, rec.version, rec.arch);
  // a stick still in, or plugged in again, must not bring it back behind the admin's back
  await addForgotten(config.paths.stateDir, rec.version, rec.arch);
  return {
    version: rec.version,
    arch: rec.arch,
    ...(rec.digest ? { digest: rec.digest } : {}),
    unpinned: digestNames(released).length,
    ...(layout ? { layout } : {}),
  };
}

/**
 * A status that shows a forgotten release as Ready ("Done: update X is loaded") is no longer
 * true: it becomes Idle, saying the release was removed. Written with a fresh updatedAt and the
 * writer as it was, so a running daemon adopts it at its next heartbeat (console, cluster).
 */
async function unshowForgotten(config: AgentConfig, gone: readonly Forgotten[]): Promise<void> {
  const s = await readStatusFile(config.paths.statusFile).catch(() => undefined);
  const b = s?.bundle;
  if (!s || s.phase !== 'Ready' || !b?.version) return;
  const f = gone.find(
    (g) => compareVersions(g.version, b.version!) === 0 && (!b.arch || g.arch === b.arch),
  );
  if (!f) return;
  const now = new Date().toISOString();
  const next: NodeStatus = {
    ...s,
    phase: 'Idle',
    updatedAt: now,
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        reason: 'ReleaseForgotten',
        message: `update ${f.version} (${f.arch}) was forgotten on this node (bundle-agent releases forget): its images are no longer pinned`,
        lastTransitionTime: now,
      },
    ],
  };
  next.message = technicianLine(next);
  await writeStatusFile(config.paths.statusFile, next);
}

/**
 * Forgets `version` (every arch recorded, or only `arch`): unpins its images, removes its kept
 * layout, drops its records, and keeps the daemon from loading it again from any stick until
 * `releases unforget` or a by-hand `bundle-agent load`. The release the node runs is
 * refused: its images would become garbage the kubelet may collect while they run.
 */
export async function forgetRelease(
  config: AgentConfig,
  runtime: RuntimeTarget,
  version: string,
  arch?: string,
): Promise<Forgotten[]> {
  return withLoadLock(config.paths.stateDir, async () => {
    const records = await readReleases(config.paths.stateDir);
    // a release brought by more than one bundle has a record each: oldest first, as listed
    const targets = records
      .filter((r) => compareVersions(r.version, version) === 0 && (!arch || r.arch === arch))
      .sort((a, b) => a.arch.localeCompare(b.arch) || a.loadedAt.localeCompare(b.loadedAt));
    if (targets.length === 0) {
      const known =
        records
          .map((r) => r.version)
          .sort(compareVersions)
          .join(', ') || 'none';
      throw new AgentError(
        'NotRecorded',
        `no release ${version}${arch ? ` (${arch})` : ''} is recorded on this node (recorded: ${known}); see bundle-agent releases list`,
      );
    }
    const running = runningVersions(config, await historyOf(config));
    if (running.some((v) => compareVersions(v, version) === 0)) {
      throw new AgentError(
        'InUse',
        `${version} is the release this node runs: its images must stay pinned; forget it once a newer release runs`,
      );
    }
    const held = targets.find((r) => heldForPath(r, records, running));
    if (held) throw heldError(held, running);
    const out: Forgotten[] = [];
    for (const rec of targets)
      out.push(
        await forgetOne(
          config,
          runtime,
          rec,
          records.filter((r) => !targets.includes(r)),
        ),
      );
    await unshowForgotten(config, out);
    return out;
  });
}

/** The refusal to forget a path's earlier release while the node has not reached the path's final one. */
function heldError(r: ReleaseRecord, running: readonly string[]): AgentError {
  const final = pathFinal(r);
  const runs = running.length
    ? `it runs ${running.join(', ')}`
    : 'the release it runs is not known';
  return new AgentError(
    'InUse',
    `${r.version} is a release of the update path ${r.path!.join(' → ')} this node has not finished (${runs}): the cluster takes it before ${final}, so its images stay pinned; forget it once ${final} runs`,
  );
}

/**
 * Forgets every release older than the one the node runs (the oldest of those it runs while an
 * upgrade is under way): they can no longer be needed. Nothing happens while the running
 * release is unknown.
 */
export async function pruneReleases(
  config: AgentConfig,
  runtime: RuntimeTarget,
): Promise<{ running?: string; forgotten: Forgotten[]; ignored: string[] }> {
  return withLoadLock(config.paths.stateDir, async () => {
    const running = runningVersions(config, await historyOf(config))[0];
    if (!running) {
      throw new AgentError(
        'UnknownRunningVersion',
        'the release this node runs is not known (no version.current, and no release seen running or complete yet), so nothing can be called older: use bundle-agent releases forget VERSION',
      );
    }
    const ignored: string[] = [];
    const records = await readReleases(config.paths.stateDir, (why) => ignored.push(why));
    const runs = runningVersions(config, await historyOf(config));
    const old = records.filter(
      (r) => compareVersions(r.version, running) < 0 && !heldForPath(r, records, runs),
    );
    const forgotten: Forgotten[] = [];
    for (const rec of old)
      forgotten.push(
        await forgetOne(
          config,
          runtime,
          rec,
          records.filter((r) => !old.includes(r)),
        ),
      );
    await unshowForgotten(config, forgotten);
    return { running, forgotten, ignored };
  });
}

/**
 * Lets the daemon load `version` again (every arch, or only `arch`): undoes what forget and
 * prune recorded. A by-hand `bundle-agent load` of the release does the same.
 */
export async function unforgetRelease(
  config: AgentConfig,
  version: string,
  arch?: string,
): Promise<ForgottenRelease[]> {
  const cleared = await clearForgotten(config.paths.stateDir, version, arch);
  if (cleared.length === 0)
    throw new AgentError(
      'NotRecorded',
      `${version}${arch ? ` (${arch})` : ''} is not a forgotten release on this node: the daemon loads it from a stick already`,
    );
  return cleared;
}

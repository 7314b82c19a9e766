import { readdir, rename, rm, stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import {
  bundleIdentity,
  checkSignature,
  extractBundle,
  finishLayout,
  loadTrust,
  openBundle,
  partialBundle,
  readHeader,
  readLayoutDescription,
  releasePath,
  verifyBundle,
  writeResumeMarker,
  type BundleAgent,
  type BundleSource,
  type BundleManifest,
  type ExtractOptions,
  type TrustedKey,
  type Trust,
  type VerifiedBundle,
} from '@offline-bundle/format';
import { BundleFileStore, LayoutStore, catalogOf, type BlobStore } from '@offline-bundle/registry';
import {
  clusterReadFailure,
  forbiddenMessage,
  fromSpool,
  KEPT_COPY_MEDIA,
  markFailed,
  markLoaded,
  markRunningLoaded,
  observeRunning,
  readClusterRelease,
  recordIncoming,
  runningReleases,
  type ClusterReadFailure,
  type ClusterRelease,
  type Condition,
  type HistoryEntry,
  type NodeStatus,
  type StatusTracker,
} from '@offline-bundle/status';
import { escapeControls } from '@offline-bundle/host';
import { loadImages, runningNow } from './load-images.js';
import type { LoadStep, PipelineContext } from './pipeline-context.js';
import { planStaging, stageEntries, stagingPlace, type EntrySource } from './entry-staging.js';
import { StagingStore } from './staging-store.js';
import {
  clearPartialsFor,
  dropPartialsOf,
  reopenKeptLayout,
  removeStalePartials,
  stagingOptions,
} from './resume.js';
import { forgetPeerPartial, notePeerPartial } from './peer-partials.js';
import { missingImages } from '../runtime/runtime-checks.js';
import { layoutKept, type AgentConfig } from '../config.js';
import { AgentError, failureOf, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { POLICY_REFUSALS, checkPolicy, compareVersions } from './policy.js';
import { forgetKeptCopy, readKeptCopies, recordKeptCopy } from '../state/kept-copies.js';
import { readStagedHead, type StagedHead } from './kept-layout.js';
import { loadedAhead } from './loaded-ahead.js';
import { readServing } from '../state/serving-state.js';
import { imageRefs, type PullGate, type RuntimeTarget } from '../runtime/runtime-target.js';
import {
  STICK_WORDS,
  planSpace,
  type SpacePlan,
  type SpaceWords,
  type StageMode,
} from './space.js';
import {
  heldForPath,
  neededOfBundle,
  passedOnPath,
  readReleases,
  recordRelease,
  type ReleaseRecord,
} from '../state/release-records.js';
import { withLoadLock } from '../state/lock.js';
import { contentOf, keyOf, recordBundle } from '../state/bundle-records.js';
import { assertBundleFile, assertWhole, mediaGone } from './bundle-file.js';
import { switchAgentIfNewer } from '../self-upgrade/self-upgrade.js';
import { TOOL_VERSION } from '../version.js';
import { rememberClusterRelease, rememberedClusterRelease } from './running-release.js';
import { locateBase } from './delta-fill.js';
import { pathReleases, type PathRelease } from './path-releases.js';

export type { LoadStep, PipelineContext } from './pipeline-context.js';
export { removeStalePartials } from './resume.js';

export interface LoadResult {
  version: string;
  arch: string;
  mode: StageMode;
  images: number;
  refs: string[];
  fileDigest: string;
  /** The agent image the bundle carries, if any. */
  agent?: BundleAgent;
}

/** The running release, if known, and why the cluster did not say it when it did not. */
interface Running {
  release?: ClusterRelease;
  failure?: ClusterReadFailure;
}

/**
 * The release the node runs, for the version policy and the pins: from the config, else from
 * OpenShift's ClusterVersion (remembered in the state directory, and recorded in the history
 * so a completed upgrade releases older pins); when the cluster does not answer, the last one
 * seen there (the remembered file, else the status history's running entries: the node's own
 * records of what it ran).
 */
export async function runningVersion(
  ctx: Pick<PipelineContext, 'config' | 'tracker' | 'log'>,
): Promise<string | undefined> {
  return (await runningRelease(ctx)).release?.version;
}

async function runningRelease(
  ctx: Pick<PipelineContext, 'config' | 'tracker' | 'log'>,
): Promise<Running> {
  const { config, tracker, log } = ctx;
  if (config.version.current) return { release: { version: config.version.current } };
  if (!config.version.fromCluster || !config.status.kubeconfig) return {};
  let failure: ClusterReadFailure | undefined;
  try {
    const r = await readClusterRelease(config.status.kubeconfig, { timeoutMs: 10_000 });
    if (r) {
      tracker.update((s) => {
        s.history = observeRunning(s.history, r.version);
      });
      await rememberClusterRelease(config.paths.stateDir, r).catch((err) =>
        log.warn('version', `cannot remember the running version ${r.version}: ${oneLine(err)}`),
      );
      return { release: r };
    }
  } catch (err) {
    failure = clusterReadFailure(err);
  }
  const remembered = await rememberedClusterRelease(config.paths.stateDir);
  // the newest of the two: either may lag (a file not rewritten, a history pruned), and an older one lets a downgrade through
  const seen = runningReleases(tracker.current.history).reduce<HistoryEntry | undefined>(
    (a, e) => (!a || compareVersions(e.version, a.version) > 0 ? e : a),
    undefined,
  );
  const fromFile =
    remembered !== undefined && (!seen || compareVersions(remembered.version, seen.version) >= 0);
  const last = fromFile ? remembered : seen;
  if (last && failure) {
    const why = failure.kind === 'forbidden' ? forbiddenMessage(failure) : failure.detail;
    log.warn(
      'version',
      `cannot read the running version from the cluster (${why}); using the last one seen there, ${last.version}${fromFile ? ` at ${remembered!.seenAt}` : ''}`,
      { reason: failure.kind === 'forbidden' ? 'ClusterForbidden' : 'WaitingForCluster' },
    );
  }
  if (fromFile)
    return {
      release: {
        version: remembered!.version,
        ...(remembered!.image ? { image: remembered!.image } : {}),
      },
      ...(failure ? { failure } : {}),
    };
  if (last) return { release: { version: last.version }, ...(failure ? { failure } : {}) };
  return failure ? { failure } : {};
}

const CLUSTER_RETRY_FIRST_MS = 1000;
const CLUSTER_RETRY_MAX_MS = 30_000;

/**
 * A node that never saw its running version and cannot read it now waits: the load stays in
 * Verifying with Ready False (WaitingForCluster, or ClusterForbidden naming the missing rule),
 * logged once per cause, and the read is tried again with exponential backoff until it
 * answers or version.clusterWaitMinutes have passed (then a failure with the same cause).
 * SIGTERM (ctx.signal) ends the wait as any step.
 */
async function waitForCluster(ctx: PipelineContext, first: Running): Promise<Running> {
  const { config, log, tracker, signal } = ctx;
  const limitMs = config.version.clusterWaitMinutes * 60_000;
  const started = Date.now();
  let r = first;
  let delay = CLUSTER_RETRY_FIRST_MS;
  let logged: string | undefined;
  while (!r.release && r.failure) {
    const f = r.failure;
    const forbidden = f.kind === 'forbidden';
    const cause = forbidden
      ? forbiddenMessage(f)
      : `the cluster's API server did not answer (${f.detail})`;
    const fix = forbidden
      ? ''
      : `; or set version.current in the agent's config to load without the cluster`;
    if (Date.now() - started + delay > limitMs) {
      throw new AgentError(
        forbidden ? 'ClusterForbidden' : 'ClusterUnreachable',
        `${cause}; this node never saw its running version, so the update was not loaded (waited ${config.version.clusterWaitMinutes} min)${fix || ': plug the stick in again once it is fixed'}`,
      );
    }
    const reason = forbidden ? 'ClusterForbidden' : 'WaitingForCluster';
    // the same words on every try: the condition (and the cluster object) changes only with the cause
    const message = `${cause}; this node never saw its running version, so the update waits for the cluster (trying again for up to ${config.version.clusterWaitMinutes} min)${fix}`;
    tracker.condition('Ready', 'False', reason, message);
    if (logged !== reason) log.warn('version', message, { reason });
    logged = reason;
    await sleep(delay, undefined, signal ? { signal } : {}).catch((err: unknown) => {
      if (!signal?.aborted) throw err;
      throw new AgentError(
        'Interrupted',
        'stopped while waiting for the cluster to say which version it runs: nothing was loaded; the bundle is tried again at the next start (or run bundle-agent load again)',
      );
    });
    delay = Math.min(delay * 2, CLUSTER_RETRY_MAX_MS);
    r = await runningRelease(ctx);
  }
  if (logged) {
    tracker.update((s) => {
      s.conditions = s.conditions.filter((c) => c.type !== 'Ready');
    });
    log.info(
      'version',
      r.release
        ? `the cluster answered: it runs ${r.release.version}; the load goes on`
        : 'the cluster answered; the load goes on',
    );
  }
  return r;
}

/**
 * layoutKept on this node: OpenShift once it read a ClusterVersion (remembered in the state
 * directory); a load's own layout only if the daemon will serve it (`serves`), not one by hand.
 */
async function layoutKeptHere(
  config: AgentConfig,
  serves = true,
): Promise<boolean | 'untilComplete'> {
  return layoutKept(
    config,
    serves && (await rememberedClusterRelease(config.paths.stateDir)) !== undefined,
  );
}

/**
 * What a killed load (SIGKILL, power cut) leaves: partial staging, staged layouts no release
 * keeps, mirror drop-ins pointing at a registry that is gone. Run under the load lock before
 * every load and at daemon start, so neither waits for the other to clean up. A layout kept
 * with `staging.keep: untilComplete` goes once the cluster runs its release (`history`).
 */
export async function removeLeftovers(
  config: AgentConfig,
  runtime: RuntimeTarget,
  log: Logger,
  history: readonly HistoryEntry[],
  spare?: string,
): Promise<void> {
  const stale = await removeStalePartials(config.paths.upgradeDir);
  if (stale.length)
    log.warn('staging', `removed unfinished staging that names no bundle: ${stale.join(', ')}`);
  const releases = await readReleases(config.paths.stateDir);
  const runs = runningReleases(history).map((e) => e.version);
  // a path's earlier release (#43) is pending as long as its final one
  const pending = new Set([
    ...loadedAhead(history),
    ...history.filter((e) => e.state === 'installing').map((e) => e.version),
    ...releases.filter((r) => heldForPath(r, releases, runs)).map((r) => r.version),
  ]);
  // the layout a load is about to open, and the copies kept to be loaded again (a fetch's whole
  // staging is a partial directory under its resume marker: removeStalePartials keeps it)
  const unloaded = await readKeptCopies(config.paths.stateDir);
  // and the layout the daemon still serves (a release the cluster completed whose OS update this node has not applied yet)
  const served = (await readServing(config.paths.stateDir))?.layout;
  const keep = new Set<string>([
    ...(spare ? [spare] : []),
    ...(served ? [served] : []),
    ...unloaded.map((f) => f.layout),
  ]);
  const keeps = await layoutKeptHere(config);
  const recorded = new Set(releases.flatMap((r) => (r.layout ? [r.layout] : [])));
  for (const r of releases) {
    if (!r.layout) continue;
    if (
      keeps === true ||
      (keeps === 'untilComplete' && pending.has(r.version)) ||
      r.layout === served
    )
      keep.add(r.layout);
    else await recordRelease(config.paths.stateDir, { ...r, layout: undefined });
  }
  const names = await readdir(config.paths.upgradeDir).catch(() => [] as string[]);
  // staged layouts are "<version>-<arch>" directories holding a bundle.json
  const gone: string[] = [];
  for (const n of names) {
    const dir = join(config.paths.upgradeDir, n);
    // a partial staging is removeStalePartials' (one put back below keeps its bundle.json)
    if (
      n.endsWith('.partial') ||
      keep.has(dir) ||
      !(await stat(join(dir, 'bundle.json')).then(
        () => true,
        () => false,
      ))
    )
      continue;
    // no record: a load killed after the staging was whole (a fetch's, renamed before the pulls); its next staging re-hashes it, reads nothing again
    if (!recorded.has(dir) && (await backToPartial(dir, log))) continue;
    await rm(dir, { recursive: true, force: true });
    gone.push(n);
  }
  if (gone.length)
    log.warn('staging', `removed staged layouts no release needs any more: ${gone.join(', ')}`);
  await runtime
    .cleanup()
    .catch((err) => log.warn('mirror', `could not remove a stale mirror drop-in: ${oneLine(err)}`));
}

/**
 * A whole staged layout no load finished, put back as `<dir>.partial` under the resume marker
 * naming its bundle.json, as a staging cut short leaves it: the same bundle's next staging (a
 * stick's or a fetch's) hashes every entry again and reads only what no longer matches. Marked
 * before the rename, so a kill in between leaves a layout this runs on again, not an unmarked
 * partial removeStalePartials drops. False (the caller removes it) when its bundle.json is unreadable.
 */
async function backToPartial(dir: string, log: Logger): Promise<boolean> {
  // a staging under way there (its marker) is not this layout's to replace
  if (await partialBundle(`${dir}.partial`)) return false;
  try {
    const { manifestBytes } = await readLayoutDescription(dir);
    await writeResumeMarker(dir, manifestBytes);
    await rm(`${dir}.partial`, { recursive: true, force: true });
    await rename(dir, `${dir}.partial`);
  } catch (err) {
    log.warn(
      'staging',
      `cannot keep the unfinished layout ${dir} for the next staging (${oneLine(err)}): it is removed`,
    );
    return false;
  }
  log.info(
    'staging',
    `kept the layout ${dir} that no load finished as ${dir}.partial: the same bundle's next staging checks it again and reads only what is missing`,
  );
  return true;
}

/** Whether every image the agent recorded for a release (that bundle's, by digest) is still in the runtime (true where it cannot ask). */
export async function releaseImagesPresent(
  config: AgentConfig,
  runtime: RuntimeTarget,
  version: string,
  arch: string,
  digest?: string,
  running: readonly string[] = [],
): Promise<boolean> {
  // the record of that very bundle when there are several of one release (else any of them)
  const all = await readReleases(config.paths.stateDir);
  const recs = all.filter((r) => r.version === version && r.arch === arch);
  const rec = recs.find((r) => digest !== undefined && r.digest === digest) ?? recs[0];
  if (!rec) return false;
  const inspector = await runtime.inspector().catch(() => undefined);
  if (!inspector) return true;
  // an update path's releases the node has not gone past (#43) too: a stick brings back theirs as well
  return (
    (
      await missingImages(inspector, [
        ...new Set(neededOfBundle(rec, all, running).flatMap((r) => r.refs)),
      ])
    ).length === 0
  );
}

/** Progress with its rate and time left, at most once a second (what a stick's staging and a fetch from peers show). */
function rateTracker(tracker: StatusTracker) {
  const started = Date.now();
  let last = 0;
  // what a resume kept counts as done, not as read at this load's rate
  let base: number | undefined;
  return (done: number, total: number) => {
    base ??= done;
    const now = Date.now();
    if (now - last < 1000 && done < total) return;
    last = now;
    const secs = (now - started) / 1000;
    const rate = secs > 0 ? (done - base) / secs : 0;
    tracker.progress({
      bytesDone: done,
      bytesTotal: total,
      rate: Math.round(rate),
      ...(rate > 0 ? { etaSeconds: Math.round((total - done) / rate) } : {}),
    });
  };
}

/** What the checks before any write establish about a bundle file. */
interface Admitted {
  /** The bundle's bytes, open for the whole load (closed by loadBundle); none for a layout staged before the load. */
  source?: BundleSource;
  head: StagedHead;
  /** The layout staged before the load, when there is no source. */
  layout?: StagedLayout;
  /** An origin with no bundle file (peers), staged by this load (stageEntries). */
  entries?: EntryAttempt;
  signer?: TrustedKey;
  trust: Trust;
  releases: ReleaseRecord[];
  running?: ClusterRelease;
}

/**
 * Where a load's signed head comes from: a bundle file's source (kept open for the staging), a
 * layout staged before the load, or an origin with no file (`attempt`: the status shows the load
 * only once the head came, so a look that finds nothing to fetch writes nothing).
 */
interface HeadOrigin {
  read: (
    signal: AbortSignal | undefined,
  ) => Promise<{ head: StagedHead; source?: BundleSource; layout?: StagedLayout }>;
  attempt?: EntryAttempt;
}

/** One load from an EntrySource, as the pipeline follows it. */
interface EntryAttempt {
  source: EntrySource;
  /** The attempt's own stop (the origin's watch): its reason is the attempt's. */
  stop: AbortSignal;
  /** The status shows this attempt (admit read the head). */
  shown: boolean;
  /** Every entry is staged: from here a stop is the load's, not the fetch's. */
  filled: boolean;
  /** Where it is staged and the bundle's identity, once the head is known. */
  target?: string;
  identity?: string;
  /** The status just before the attempt showed itself: what a withdrawal gives back. */
  before?: NodeStatus;
  /** The pins began: a withdrawal from here no longer stops it (the load completes and records). */
  committed: boolean;
}

const step = (ctx: Pick<PipelineContext, 'onStep'>, name: LoadStep) => ctx.onStep?.(name);

/** A failure of an attempt its origin stopped (a withdrawn approval) is that stop, not the error it caused. */
function stoppedBy(attempt: EntryAttempt | undefined, err: unknown): unknown {
  return attempt?.stop.aborted && attempt.stop.reason instanceof AgentError
    ? attempt.stop.reason
    : err;
}

/** The space check's words for a file: from the part spool, "the media" is the node's own disk. */
const fileWords = (ctx: PipelineContext): SpaceWords =>
  fromSpool(ctx.media)
    ? {
        ...STICK_WORDS,
        media: "serving from the part spool on this node's disk: no USB stick is needed",
      }
    : STICK_WORDS;

/** The plan in the status and the log (SpaceAvailable). */
function showPlan(ctx: PipelineContext, plan: SpacePlan): void {
  ctx.tracker.condition(
    'SpaceAvailable',
    'True',
    plan.mode === 'staged' ? 'FitsOnDisk' : 'ServeFromMedia',
    plan.message,
  );
  ctx.tracker.update((s) => {
    s.bundle = { ...s.bundle!, mode: plan.mode };
  });
  ctx.log.info('space', plan.message, { mode: plan.mode });
}

/**
 * A bundle staged on this node before its load, in the place a stick's extraction stages it
 * (UPGRADE/<version>-<arch>): an origin's staging (stageFromEntries) whole in `<target>.partial`
 * under the same resume marker a stick's staging leaves (`head`: the signed head admit checked),
 * renamed into place as a stick's extraction ends; or a copy kept in `target` (no `head`: read
 * back from disk, every blob hashed again).
 */
export interface StagedLayout {
  target: string;
  /** sha256 of the signed bundle.json it was staged under (the approval, the retry record): the load is bound to it. */
  manifestDigest: string;
  head?: StagedHead;
}

const fromFile = (file: string, openSource: () => Promise<BundleSource>): HeadOrigin => ({
  read: async () => {
    await assertBundleFile(file);
    const source = await openSource();
    const head = await readHeader(source);
    await assertWhole(source);
    return { head, source };
  },
});

// Bound to what it was staged under, not to whatever signed bundle.json lies there now; the signature is checked again in admit.
const fromStaged = (s: StagedLayout): HeadOrigin => ({
  read: async () => {
    const which = `the one it was staged under (${s.manifestDigest})`;
    if (s.head && bundleIdentity(s.head.manifestBytes) !== s.manifestDigest)
      throw new AgentError(
        'Corrupt',
        `the bundle.json staged for ${s.target} is not ${which}: it is not used`,
      );
    return { head: s.head ?? (await readStagedHead(s.target, s.manifestDigest, which)), layout: s };
  },
});

const fromEntries = (attempt: EntryAttempt): HeadOrigin => ({
  read: async (signal) => ({ head: await attempt.source.head(signal ?? attempt.stop) }),
  attempt,
});

/** Step 3: signature (or digest) of bundle.json, then the arch and version policy. */
async function admit(file: string, ctx: PipelineContext, origin: HeadOrigin): Promise<Admitted> {
  const { config, log, tracker } = ctx;
  const show = (found: string) => {
    tracker.update((s) => {
      s.phase = 'Verifying';
      s.bundle = {
        file: found,
        media: ctx.media ?? 'file',
        ...(ctx.fromPeers?.length ? { fromPeers: ctx.fromPeers } : {}),
      };
      s.conditions = [];
      s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
    });
    tracker.condition('MediaDetected', 'True', 'BundleFound', `found ${found}`);
    log.info('media', `bundle found: ${found}`, { file: found, media: ctx.media });
  };
  const attempt = origin.attempt;
  if (!attempt) show(file);

  const trust = await loadTrust(config.trust.keys, config.trust.digest);
  const { head, source, layout } = await origin.read(ctx.signal);
  if (attempt) {
    // once there is something to load: a look that finds no peer leaves the node as it was
    await removeLeftovers(config, ctx.runtime, log, tracker.current.history);
    ({ target: attempt.target, identity: attempt.identity } = await stagingPlace(
      config.paths.upgradeDir,
      head,
    ));
    // taken here, not before the lock and the head: what other writers said meanwhile is what the status goes back to
    attempt.before = tracker.current;
    show(attempt.target);
    attempt.shown = true;
  }
  step(ctx, 'admit');
  const signer = checkSignature(
    head.manifestBytes,
    head.signature,
    head.manifest.signer.fingerprint,
    trust,
  );
  const rel = head.manifest.release;
  // an update path (#43) is named in the status, so `bundle cluster` sees both releases come from one bundle
  const path = rel.via?.length ? releasePath(head.manifest).map((h) => h.version) : undefined;
  tracker.update((s) => {
    s.bundle = {
      ...s.bundle!,
      name: rel.name,
      version: rel.version,
      arch: rel.arch,
      ...(signer ? { signer: signer.fingerprint } : {}),
      ...(path ? { path } : {}),
    };
  });
  const a: Admitted = {
    ...(source ? { source } : {}),
    head,
    ...(layout ? { layout } : {}),
    ...(attempt ? { entries: attempt } : {}),
    ...(signer ? { signer } : {}),
    trust,
    releases: [],
  };
  // an origin's bytes are staged first (its own refusals came with its head): a node that waits for the cluster meanwhile fetches, and serves what it fetched
  if (!attempt) await admitRelease(ctx, a);
  return a;
}

/**
 * Step 3, against what the node runs: the running release (waited for when the cluster does not
 * say it), the arch and version policy, the runtime's config; then the attempt in the history.
 */
async function admitRelease(ctx: PipelineContext, a: Admitted): Promise<void> {
  const { config, log, tracker } = ctx;
  const rel = a.head.manifest.release;
  const path = rel.via?.length ? releasePath(a.head.manifest).map((h) => h.version) : undefined;
  a.releases = await readReleases(config.paths.stateDir);
  let found = await runningRelease(ctx);
  if (!found.release && found.failure && !config.version.allowUnknown)
    found = await waitForCluster(ctx, found);
  const running = found.release;
  const current = running?.version;
  const entry = checkPolicy(a.head.manifest, config, current);
  if (path && current)
    log.info(
      'version',
      `the update path ${path.join(' → ')} is taken from the running ${current}, from ${path[entry]}`,
      { version: rel.version },
    );
  if (!current)
    log.warn(
      'version',
      `running version unknown: ${rel.version} loads without the downgrade and upgrade-source checks (version.allowUnknown)`,
      { version: rel.version },
    );
  await ctx.runtime.checkConfig?.(ctx.signal);
  tracker.update((s) => {
    s.history = recordIncoming(
      s.history,
      { version: rel.version },
      current ? { running: current } : {},
    );
  });
  if (running) a.running = running;
}

interface Staged {
  store: BlobStore;
  mode: StageMode;
  /** The staged layout's directory (staged mode). */
  target?: string;
  fileDigest: string;
  /** The layout was staged by an earlier load and kept (staging.keep): a failure of this one does not remove it. */
  reused?: boolean;
  /** Still being staged (overlapped with the pulls): see loadImages' `staging`. */
  staging?: {
    gate: PullGate;
    done: Promise<void>;
    signal: AbortSignal;
    stop: (reason: unknown) => void;
    release: () => void;
  };
  /** Every blob is on disk, verified: from here the stick is not needed (the technician was told so). */
  whole?: boolean;
}

type FileAdmitted = Admitted & { source: BundleSource };

/** Steps 4 and 5: a bundle file staged (or served from the media); a layout staged before the load, opened. */
function stage(ctx: PipelineContext, a: Admitted): Promise<Staged> {
  if (a.source) return stageFile(ctx, { ...a, source: a.source });
  return a.entries ? stageFromEntries(ctx, a, a.entries) : openStaged(ctx, a, a.layout!);
}

/** A signed head only vouches for a layout no file of this load backs. */
function needsSigner(
  ctx: PipelineContext,
  a: Admitted,
): asserts a is Admitted & { signer: TrustedKey } {
  const rel = a.head.manifest.release;
  if (!a.signer)
    throw new AgentError(
      'NoTrust',
      `bundle ${rel.version} was staged on this node with no file to check it against (${ctx.media ?? 'a layout'}), which only a signature can vouch for: add the factory's public key to trust.keys`,
    );
}

/**
 * Steps 4 and 5 for an origin with no bundle file (peers): the staging a stick's takes (the
 * space plan, the other partials dropped), its entries filled by the origin through the writer,
 * then the layout put in place and opened as a stick's staged layout is (openStaged).
 */
async function stageFromEntries(
  ctx: PipelineContext,
  a: Admitted,
  attempt: EntryAttempt,
): Promise<Staged> {
  const { config, log, tracker } = ctx;
  needsSigner(ctx, a);
  const identity = bundleIdentity(a.head.manifestBytes);
  // before any entry is written: its partial goes with its approval (the daemon's look), a stick's stays
  await notePeerPartial(config.paths.stateDir, identity);
  const r = await stageEntries(attempt.source, a.head, {
    upgradeDir: config.paths.upgradeDir,
    signal: ctx.signal ?? attempt.stop,
    log,
    onProgress: rateTracker(tracker),
    onStep: (n) => step(ctx, n),
    plan: (m, credit, words) => planSpace(m, config, credit, words),
    onPlan: (plan) => {
      showPlan(ctx, plan);
      // as a stick's staging shows itself once its plan is made; the origin's first entries follow at once
      tracker.update((s) => {
        s.phase = 'Staging';
        Object.assign(s.progress, { bytesDone: 0, bytesTotal: a.head.manifest.totals.layoutBytes });
      });
    },
  });
  attempt.filled = true;
  const from = attempt.source.senders?.() ?? [];
  if (from.length)
    tracker.update((s) => {
      s.bundle = { ...s.bundle!, fromPeers: from };
    });
  // before it is put in place: a stop here leaves the staging whole under its resume marker; the
  // version policy's refusal (the running version known only now) leaves nothing of it
  await admitRelease(ctx, a).catch(async (err: unknown) => {
    if (!r.already && err instanceof AgentError && POLICY_REFUSALS.has(err.reason)) {
      await rm(`${r.target}.partial`, { recursive: true, force: true });
      await forgetPeerPartial(config.paths.stateDir, identity);
      log.info(
        'staging',
        `bundle ${a.head.manifest.release.version} was fetched whole but refused by the version policy (${err.reason}): its staging ${r.target}.partial is removed`,
        { reason: err.reason },
      );
    }
    throw err;
  });
  const staged = await openStaged(
    ctx,
    a,
    { target: r.target, manifestDigest: identity, ...(r.already ? {} : { head: a.head }) },
    !r.already,
  );
  // in place: no partial of it left for the daemon's look
  await forgetPeerPartial(config.paths.stateDir, identity);
  return staged;
}

/**
 * A staged layout in `target` as the load's store, said in Verified and Staged: the one step
 * after the bytes are staged, whoever staged them. `verified`: this turn of the lock wrote and
 * hashed every blob against the signed bundle.json (a second full read would double the load's
 * IO), and a layout that does not open is removed; else every blob is hashed again here.
 */
async function openStagedStore(
  ctx: PipelineContext,
  target: string,
  m: BundleManifest,
  verified: boolean,
  verifiedBy: { reason: string; message: string },
): Promise<LayoutStore> {
  step(ctx, 'open-store');
  const store = await LayoutStore.open(target, catalogOf(m), { verified }).catch(
    async (err: unknown) => {
      if (verified) await rm(target, { recursive: true, force: true });
      throw new AgentError('StagingFailed', oneLine(err), { cause: err });
    },
  );
  showStaged(ctx, target, verifiedBy);
  return store;
}

function showStaged(
  ctx: PipelineContext,
  target: string,
  verifiedBy: { reason: string; message: string },
): void {
  ctx.tracker.condition('Verified', 'True', verifiedBy.reason, verifiedBy.message);
  ctx.tracker.condition('Staged', 'True', 'Staged', `layout in ${target}`);
}

/**
 * Step 5 for a layout staged before the load (StagedLayout): a fetch's whole staging renamed into
 * place as a stick's extraction ends, or a kept copy; then what a stick's staged layout goes
 * through. Only a signature vouches for a layout no file of this load backs.
 */
async function openStaged(
  ctx: PipelineContext,
  a: Admitted,
  s: StagedLayout,
  planned = false,
): Promise<Staged> {
  const rel = a.head.manifest.release;
  const target = join(ctx.config.paths.upgradeDir, `${rel.version}-${rel.arch}`);
  needsSigner(ctx, a);
  if (s.target !== target)
    throw new AgentError(
      'Corrupt',
      `${s.target} holds release ${rel.version} (${rel.arch}), whose place is ${target}: it is not used`,
    );
  if (s.head) {
    await finishLayout(`${target}.partial`, target, s.head).catch((err: unknown) => {
      throw new AgentError(
        'StagingFailed',
        `the staging of ${rel.version} in ${target}.partial cannot be put in place: ${oneLine(err)}`,
        { cause: err },
      );
    });
    step(ctx, 'finish-layout');
  }
  // staged by this load: the plan said it (showPlan)
  if (!planned)
    ctx.tracker.condition(
      'SpaceAvailable',
      'True',
      'FitsOnDisk',
      `staged on this node before the load, in ${target}`,
    );
  ctx.tracker.update((st) => {
    st.bundle = { ...st.bundle!, mode: 'staged' };
  });
  const store = await openStagedStore(ctx, target, a.head.manifest, s.head !== undefined, {
    reason: 'SignatureValid',
    message: `signed by ${a.signer.source}`,
  });
  return { store, mode: 'staged', target, fileDigest: '', whole: true };
}

/** Steps 4 and 5: the space check, then the verified copy to disk, or one full pass over the media. */
async function stageFile(ctx: PipelineContext, a: FileAdmitted): Promise<Staged> {
  const { config, log, tracker, signal } = ctx;
  const m = a.head.manifest;
  const rel = m.release;
  const place = await stagingPlace(config.paths.upgradeDir, a.head);
  const { target, identity, stagedBefore } = place;
  // a delta's base is found before anything is written: a node without it refuses at once
  const base =
    m.base && !stagedBefore
      ? { base: await locateBase(config, m, log, ctx.tracker.current.bundle?.file) }
      : {};
  const plan = await planStaging(
    config.paths.upgradeDir,
    place,
    a.head,
    fileWords(ctx),
    (mm, credit, words) => planSpace(mm, config, credit, words),
  );
  step(ctx, 'plan-space');
  showPlan(ctx, plan);

  const fileSize = a.source.size;
  const onProgress = rateTracker(tracker);
  const verifiedBy = a.signer
    ? { reason: 'SignatureValid', message: `signed by ${a.signer.source}` }
    : { reason: 'DigestMatches', message: `the file matches the expected ${config.trust.digest}` };
  // The full pass is what counts: its bundle.json must be the one the header check looked at.
  const sameBytes = (manifestBytes: Buffer) => {
    if (!manifestBytes.equals(a.head.manifestBytes))
      throw new AgentError(
        'Corrupt',
        'bundle.json changed between two reads of the media: the stick is failing; copy the bundle again',
      );
  };
  const sameDescription = (v: VerifiedBundle) => {
    sameBytes(v.manifestBytes);
    return v.fileDigest;
  };
  const catalog = catalogOf(m);
  signal?.throwIfAborted();
  let staged: Staged;
  await clearPartialsFor(
    config.paths.upgradeDir,
    plan.mode === 'staged' ? `${target}.partial` : undefined,
    identity,
    log,
  );
  // a fetch's partial of this bundle is the stick's from here: it stays when the approval goes
  await forgetPeerPartial(config.paths.stateDir, identity);
  step(ctx, 'clear-partials');
  if (plan.mode === 'staged') {
    tracker.update((s) => {
      s.phase = 'Staging';
      Object.assign(s.progress, { bytesDone: 0, bytesTotal: fileSize });
    });
    const kept = stagedBefore ? await reopenKeptLayout(target, catalog, log) : undefined;
    const reuse = !!kept;
    let fileDigest = '';
    // Signed: each blob is good once it hashes to its signed digest, so pulls may start then.
    // Digest-only trust knows nothing good before the whole file is hashed.
    if (!reuse && a.signer && config.preload.method !== 'none') {
      await rm(target, { recursive: true, force: true });
      return stageWhilePulling(ctx, a, target, onProgress, sameBytes, verifiedBy, base);
    }
    if (!reuse) {
      await rm(target, { recursive: true, force: true });
      step(ctx, 'write-entries');
      fileDigest = sameDescription(
        await extractBundle(a.source, target, {
          trust: a.trust,
          partialDir: `${target}.partial`,
          onProgress,
          ...base,
          ...stagingOptions(ctx, a.signer ? a.head : undefined),
          ...(signal ? { signal } : {}),
        }),
      );
    }
    // extractBundle ends with finishLayout, as a fetch's staging does in openStaged
    if (!reuse) step(ctx, 'finish-layout');
    // A layout found on disk was hashed again (reopenKeptLayout); one just extracted was checked as written.
    if (kept) showStaged(ctx, target, verifiedBy);
    const store = kept ?? (await openStagedStore(ctx, target, m, true, verifiedBy));
    staged = {
      store,
      mode: 'staged',
      target,
      fileDigest,
      whole: true,
      ...(reuse ? { reused: true } : {}),
    };
  } else {
    tracker.progress({ bytesDone: 0, bytesTotal: fileSize });
    // each frame's digest from this pass: what the registry serves later is held to it
    const v = await verifyBundle(a.source, {
      trust: a.trust,
      onProgress,
      frameDigests: true,
      ...(signal ? { signal } : {}),
    });
    const fileDigest = sameDescription(v);
    tracker.condition('Verified', 'True', verifiedBy.reason, verifiedBy.message);
    tracker.condition(
      'Staged',
      'False',
      'ServingFromMedia',
      'not enough disk to copy the bundle: the USB stick must stay in until Ready',
    );
    staged = {
      store: await BundleFileStore.open(a.source, m, catalog, {
        seekIndex: v.seekIndex,
        frameDigests: v.frameDigests!,
      }),
      mode: 'media',
      fileDigest,
    };
  }
  if (staged.fileDigest)
    tracker.update((s) => {
      s.bundle = { ...s.bundle!, digest: staged.fileDigest };
    });
  log.info('verified', `bundle ${rel.version} ${rel.arch} verified`, {
    digest: staged.fileDigest || undefined,
    signer: a.signer?.fingerprint,
  });
  return staged;
}

/**
 * Starts the verified extraction and returns at once with a store that serves each blob as soon
 * as the extraction has written and verified it; `staging.done` settles with the whole pass
 * (conditions Verified and Staged, the file digest). A failure of either side stops the other
 * (`staging.signal`): nothing is pinned, no Ready; what was verified stays for a resume (resume.ts).
 */
function stageWhilePulling(
  ctx: PipelineContext,
  a: FileAdmitted,
  target: string,
  onProgress: (done: number, total: number) => void,
  sameBytes: (manifestBytes: Buffer) => void,
  verifiedBy: { reason: string; message: string },
  base: Pick<ExtractOptions, 'base'>,
): Staged {
  const { log, tracker, signal } = ctx;
  const m = a.head.manifest;
  const partialDir = `${target}.partial`;
  const store = new StagingStore(partialDir, target, catalogOf(m), m);
  const stop = new AbortController();
  const onStop = () => stop.abort(signal!.reason);
  if (signal?.aborted) onStop();
  else signal?.addEventListener('abort', onStop, { once: true });
  const staged: Staged = { store, mode: 'staged', target, fileDigest: '' };
  step(ctx, 'write-entries');
  const extraction = extractBundle(a.source, target, {
    trust: a.trust,
    partialDir,
    onProgress,
    signal: stop.signal,
    ...base,
    ...stagingOptions(ctx, a.signer ? a.head : undefined),
    // what the blobs are held to is the bundle.json the header check admitted, byte for byte
    onManifest: (_m, bytes) => sameBytes(bytes),
    onVerified: (entry) => store.verified(entry.digest),
  });
  const done = extraction
    .then((v) => {
      sameBytes(v.manifestBytes);
      step(ctx, 'finish-layout');
      staged.fileDigest = v.fileDigest;
      store.staged();
      staged.whole = true;
      showStaged(ctx, target, verifiedBy);
      tracker.update((s) => {
        s.phase = 'Preloading';
        s.bundle = { ...s.bundle!, digest: staged.fileDigest };
      });
      // a resumed staging never read the file whole: no file digest to name, each entry was held to the signed bundle.json
      log.info(
        'verified',
        `bundle ${m.release.version} ${m.release.arch} verified${staged.fileDigest ? '' : ' (staging resumed: each entry checked against the signed bundle.json, the file not hashed whole)'}`,
        { digest: staged.fileDigest || undefined, signer: a.signer?.fingerprint },
      );
    })
    .catch((err: unknown) => {
      stop.abort(err);
      store.fail(err);
      throw err;
    });
  done.catch(() => undefined);
  // the stop signal follows ctx.signal (SIGTERM) for the whole load, pulls and pins included, not only the staging
  staged.staging = {
    gate: (ref) => store.image(ref),
    done,
    signal: stop.signal,
    stop: (reason) => stop.abort(reason),
    release: () => signal?.removeEventListener('abort', onStop),
  };
  return staged;
}

/**
 * Steps 3 to 10 of the data flow for one bundle file. Throws AgentError (or a library error)
 * on refusal; the caller records the failure. Whatever fails, the registry is stopped, the
 * mirror drop-ins are removed and no partial layout stays behind.
 */
export async function loadBundle(file: string, ctx: PipelineContext): Promise<LoadResult> {
  let source: BundleSource | undefined;
  const open = async () => (source = await (ctx.openBundle ?? openBundle)(file));
  try {
    return await loadFrom(file, ctx, fromFile(file, open));
  } finally {
    await source?.close();
  }
}

async function loadFrom(
  file: string,
  ctx: PipelineContext,
  origin: HeadOrigin,
): Promise<LoadResult> {
  const { config, log, tracker } = ctx;
  const a = await admit(file, ctx, origin);
  const m = a.head.manifest;
  const rel = m.release;
  const refs = imageRefs(m);
  let keepLayout = false;
  let staged: Staged | undefined;
  let ok = false;
  let retry = false;
  let stopped = false;
  let hops: PathRelease[] | undefined;
  try {
    staged = await stage(ctx, a);
    // after admitRelease (an origin's comes with its staging), which remembered the ClusterVersion it read: whether this load's layout outlives it
    keepLayout = (await layoutKeptHere(config, ctx.servesAfter === true)) !== false;
    const staging = staged.staging;
    try {
      step(ctx, 'load-images');
      await loadImages(staging ? { ...ctx, signal: staging.signal } : ctx, {
        manifest: m,
        store: staged.store,
        releases: a.releases,
        ...(a.running ? { running: a.running } : {}),
        ...(staging ? { staging: { gate: staging.gate, done: staging.done } } : {}),
        ...(a.entries
          ? {
              onPinning: () => {
                a.entries!.committed = true;
              },
            }
          : {}),
      });
    } catch (caught) {
      const err = stoppedBy(origin.attempt, caught);
      // the pulls failed: stop the staging too, and let it remove its partial layout
      staging?.stop(err);
      await staging?.done.catch(() => undefined);
      retry = await keepForRetry(ctx, a, staged, err);
      stopped = failureOf(err, config.paths.upgradeDir).reason === 'Interrupted';
      throw err;
    }
    // read from the store while it is open: which images are each release's of the path
    hops = await pathReleases(m, staged.store, log);
    ok = true;
  } finally {
    staged?.staging?.release();
    await staged?.store.close().catch(() => undefined);
    // A layout the config does not keep goes, Ready or not; a failed one is never trusted later (unless kept to be tried again, hashed anew).
    // A stop (SIGTERM) says nothing against a whole signed layout: the next staging of its bundle re-hashes it instead of reading it again.
    const drop =
      staged?.target !== undefined && ((!ok && !staged.reused && !retry) || (ok && !keepLayout));
    if (
      drop &&
      !(stopped && staged!.whole && a.signer && (await backToPartial(staged!.target!, log)))
    )
      await rm(staged!.target!, { recursive: true, force: true });
  }
  if (staged.target) await forgetKeptCopy(config.paths.stateDir, staged.target);
  const kept = staged.target && keepLayout ? { layout: staged.target } : {};
  const loadedAt = new Date().toISOString();
  const common = {
    arch: rel.arch,
    ...(staged.fileDigest ? { digest: staged.fileDigest } : {}),
    loadedAt,
    identity: bundleIdentity(a.head.manifestBytes),
    ...kept,
  };
  // a path's earlier releases first: a load killed between two writes leaves the final unrecorded, so loaded again
  const path = hops?.map((h) => h.version);
  // none for a release the node went past (#43): loadImages left its images out, and prune may take it
  const runs = runningNow(tracker.current.history, a.running);
  const recorded = (hops ?? [{ version: rel.version, refs }]).filter(
    (h) => !path || !passedOnPath({ version: h.version, path }, runs),
  );
  step(ctx, 'record-release');
  for (const h of recorded)
    await recordRelease(config.paths.stateDir, {
      version: h.version,
      ...common,
      refs: h.refs,
      ...(path ? { path } : {}),
    });
  // the release the cluster already runs (a node that joined later): now held here, as after an upgrade
  const loadedRunning =
    a.running?.version !== undefined && compareVersions(a.running.version, rel.version) === 0;
  tracker.update((s) => {
    s.phase = 'Ready';
    const digest = staged!.fileDigest ? { digest: staged!.fileDigest } : {};
    s.history = loadedRunning
      ? markRunningLoaded(s.history, rel.version, digest)
      : markLoaded(s.history, rel.version, digest);
  });
  if (config.preload.method === 'none')
    tracker.condition(
      'Ready',
      'True',
      'NotPreloaded',
      `update ${rel.version} verified, but its images were NOT loaded (preload.method is none): the node cannot install it from this`,
    );
  // from peers there is no stick to remove
  else
    tracker.condition(
      'Ready',
      'True',
      'Loaded',
      a.source
        ? `update ${rel.version} loaded: you may remove the USB stick`
        : ctx.media === KEPT_COPY_MEDIA
          ? `update ${rel.version} loaded from the copy kept on this node`
          : `update ${rel.version} loaded from other nodes`,
    );
  // the journal says what the technician's line says: with preload.method none nothing was loaded
  const done =
    config.preload.method === 'none'
      ? `update ${rel.version} verified, but NOT loaded on this node (preload.method is none): no image was pulled into the runtime`
      : `update ${rel.version} is loaded on this node`;
  log.info('ready', a.source ? `${done}; the USB stick may be removed` : done, {
    version: rel.version,
  });
  return {
    version: rel.version,
    arch: rel.arch,
    mode: staged.mode,
    images: m.images.length,
    refs,
    fileDigest: staged.fileDigest,
    ...(m.agent ? { agent: m.agent } : {}),
  };
}

/** Failures after the copy was whole that a later try from the same copy may get past (the runtime's, not the bundle's). */
export const RETRYABLE: ReadonlySet<string> = new Set([
  'PullFailed',
  'PullStalled',
  'PinFailed',
  'ReloadFailed',
  'RuntimeUnavailable',
  'Interrupted',
]);

/**
 * The technician was told the stick may go once the copy was whole: a failure after that keeps
 * the copy and the daemon loads it again from there (daemon/retry-kept.ts), so the promise holds.
 * Only a load of the daemon (it sets `servesAfter`), not from peers; returns whether it was kept.
 */
async function keepForRetry(
  ctx: PipelineContext,
  a: Pick<Admitted, 'head' | 'source' | 'signer'>,
  staged: Staged,
  err: unknown,
): Promise<boolean> {
  const { config, tracker, log } = ctx;
  // a stick's (or file's) copy, or one kept before and tried again; a fetch from peers is fetched again (its partial resumes).
  // Signed only: a copy is loaded again as a layout, which only a signature can vouch for.
  const stickCopy = a.source !== undefined || ctx.media === KEPT_COPY_MEDIA;
  if (!stickCopy || !a.signer || !staged.target || !staged.whole || ctx.servesAfter === undefined)
    return false;
  const { reason } = failureOf(err, config.paths.upgradeDir);
  if (!RETRYABLE.has(reason)) return false;
  const before = (await readKeptCopies(config.paths.stateDir)).find(
    (r) => r.layout === staged.target,
  );
  await recordKeptCopy(config.paths.stateDir, {
    layout: staged.target,
    manifestDigest: bundleIdentity(a.head.manifestBytes),
    at: new Date().toISOString(),
    ...(before?.tries ? { tries: before.tries } : {}),
  });
  tracker.condition(
    'Staged',
    'True',
    'KeptForRetry',
    `the verified copy in ${staged.target} is kept: the load is tried again from it, no USB stick needed`,
  );
  log.warn(
    'staging',
    `the load of ${a.head.manifest.release.version} failed (${reason}) after its copy was whole: ${staged.target} is kept and loaded again from there`,
    { reason },
  );
  return true;
}

/** A release this node loaded before, as a bundle record names it. */
interface LoadedBefore {
  file: string;
  media: string;
  version: string;
  arch: string;
  digest?: string;
}

/**
 * A bundle the daemon does not load again because this node holds its release: the status says
 * so, as that load ended, in place of what came since (another stick's failure, Idle). One
 * change, so no line in between says "Failed" or "Done" of the wrong thing.
 */
export function showLoadedBefore(
  ctx: Pick<PipelineContext, 'config' | 'tracker'>,
  b: LoadedBefore,
): void {
  const { config, tracker } = ctx;
  const now = new Date().toISOString();
  const cond = (
    type: Condition['type'],
    status: Condition['status'],
    reason: string,
    message: string,
  ): Condition => ({
    type,
    status,
    reason,
    message: escapeControls(message),
    lastTransitionTime: now,
  });
  const ready =
    config.preload.method === 'none'
      ? [
          cond(
            'Preloaded',
            'False',
            'PreloadDisabled',
            'preload.method is none: no image was pulled into the runtime',
          ),
          cond(
            'Ready',
            'True',
            'NotPreloaded',
            `update ${b.version} was verified before, but its images were NOT loaded (preload.method is none): ${b.file} is not read again`,
          ),
        ]
      : [
          cond(
            'Ready',
            'True',
            'LoadedBefore',
            `update ${b.version} was loaded on this node before and its images are in the runtime: ${b.file} is not read again; you may remove the USB stick`,
          ),
        ];
  tracker.update((s) => {
    s.phase = 'Ready';
    s.bundle = {
      file: b.file,
      media: b.media,
      version: b.version,
      arch: b.arch,
      ...(b.digest ? { digest: b.digest } : {}),
    };
    s.conditions = [cond('MediaDetected', 'True', 'BundleFound', `found ${b.file}`), ...ready];
    s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
  });
}

/**
 * The history after a failed attempt at `version`: failed, unless the node held it before the
 * attempt (loaded, or the release it runs): then its entry is as it was, so its pins stay.
 */
function failedAttempt(
  history: readonly HistoryEntry[],
  before: readonly HistoryEntry[],
  version: string,
): HistoryEntry[] {
  const held = before.find(
    (e) => e.version === version && e.state !== 'failed' && e.state !== 'installing',
  );
  if (!held) return markFailed(history, version);
  return history.some((e) => e.version === version)
    ? history.map((e) => (e.version === version ? { ...held } : e))
    : [...history, { ...held }];
}

/**
 * Loads a bundle file (loadBundle), a layout staged before the load (checked against the
 * trusted keys and the policy again, then served, pulled and pinned as from a stick; no
 * bundle-file record is kept for it), or a bundle from an origin with no file (an EntrySource:
 * peers), staged by this load as a stick's is, in one turn of the load lock; and turns any failure
 * into the Failed condition, leaving nothing half-done (an origin's withdrawals leave the status
 * as it was before the attempt).
 */
export async function runLoad(
  origin: string | StagedLayout | EntrySource,
  ctx: PipelineContext,
): Promise<LoadResult> {
  if (typeof origin === 'string')
    return runAttempt(origin, ctx, (c) => loadBundle(origin, c), 'file');
  if ('target' in origin)
    return runAttempt(
      origin.target,
      ctx,
      (c) => loadFrom(origin.target, c, fromStaged(origin)),
      'layout',
    );
  const stop = new AbortController();
  const attempt: EntryAttempt = {
    source: origin,
    stop: stop.signal,
    shown: false,
    filled: false,
    committed: false,
  };
  // the origin's watch (a withdrawn approval) stops the whole attempt, its load too, until the pins
  // begin: a stop there would leave pins no release record names, so the load completes
  const unwatch = origin.watch?.((reason) => {
    if (!attempt.committed) stop.abort(reason);
    else
      ctx.log.warn(
        'peers',
        `approval withdrawn after pinning began: the load completes; revoke takes effect for the next bundle (${reason.message})`,
        { reason: reason.reason },
      );
  });
  const signal = ctx.signal ? AbortSignal.any([ctx.signal, stop.signal]) : stop.signal;
  try {
    return await runAttempt(
      origin.media,
      { ...ctx, media: origin.media, signal },
      (c) => loadFrom(origin.media, c, fromEntries(attempt)),
      'entries',
      attempt,
    );
  } finally {
    unwatch?.();
    origin.close?.();
  }
}

/**
 * The history and display after an attempt its origin withdrew (nothing of this node failed):
 * what they said just before it showed itself, the attempted version's entry as it was; left as
 * they are when another writer (a stick's note, a bundle loaded before) has shown something since.
 */
function withdrawAttempt(ctx: PipelineContext, attempt: EntryAttempt): void {
  const was = attempt.before;
  const now = ctx.tracker.current.bundle;
  if (!attempt.shown || !was || now?.file !== attempt.target || now?.media !== attempt.source.media)
    return;
  ctx.tracker.update((s) => {
    Object.assign(s, { phase: was.phase, conditions: was.conditions, progress: was.progress });
    if (was.bundle) s.bundle = was.bundle;
    else delete s.bundle;
    if (now?.version) s.history = historyAsBefore(s.history, was.history, now.version);
  });
}

/**
 * A withdrawn approval leaves nothing of its bundle staged, under the load lock: every partial
 * its marker names (one found withdrawn at the head too, before this attempt knew its place);
 * a stick's staging of another build of the release stays.
 */
async function dropWithdrawn(
  ctx: PipelineContext,
  attempt: EntryAttempt,
  err: unknown,
): Promise<void> {
  const { stateDir, upgradeDir } = ctx.config.paths;
  if (failureOf(stoppedBy(attempt, err), upgradeDir).reason !== 'ApprovalRevoked') return;
  const identity = attempt.identity ?? attempt.source.identity;
  if (!identity) return;
  const gone = await dropPartialsOf(upgradeDir, identity);
  await forgetPeerPartial(stateDir, identity);
  if (gone.length)
    ctx.log.info(
      'staging',
      `removed the staging ${gone.join(', ')} of the withdrawn bundle ${identity}`,
    );
}

/** `version`'s entry in `history` as it was in `before` (none if there was none). */
function historyAsBefore(
  history: readonly HistoryEntry[],
  before: readonly HistoryEntry[],
  version: string,
): HistoryEntry[] {
  const was = before.find((e) => e.version === version);
  if (!was) return history.filter((e) => e.version !== version);
  return history.some((e) => e.version === version)
    ? history.map((e) => (e.version === version ? { ...was } : e))
    : [...history, { ...was }];
}

async function runAttempt(
  file: string,
  ctx: PipelineContext,
  load: (ctx: PipelineContext) => Promise<LoadResult>,
  from: 'file' | 'layout' | 'entries',
  attempt?: EntryAttempt,
): Promise<LoadResult> {
  // taken before the load: the outcome belongs to the copy that was read
  const key = from === 'file' ? await keyOf(file) : undefined;
  const content = from === 'file' ? await contentOf(file) : undefined;
  const stateDir = ctx.config.paths.stateDir;
  // what the history said before this attempt: a release loaded before stays so when a repeat load fails
  const before = ctx.tracker.current.history;
  try {
    const r = await withLoadLock(stateDir, async () => {
      // an origin's after its head (admit)
      if (!attempt)
        await removeLeftovers(
          ctx.config,
          ctx.runtime,
          ctx.log,
          ctx.tracker.current.history,
          from === 'layout' ? file : undefined,
        );
      // a load killed mid-way leaves this, so the next daemon start tries the file again
      if (key)
        await recordBundle(stateDir, {
          key,
          file,
          outcome: 'loading',
          at: new Date().toISOString(),
        });
      return attempt
        ? load(ctx).catch(async (err: unknown) => {
            await dropWithdrawn(ctx, attempt, err);
            throw err;
          })
        : load(ctx);
    });
    if (key)
      await recordBundle(stateDir, {
        key,
        ...(content ? { content } : {}),
        file,
        outcome: 'ready',
        version: r.version,
        arch: r.arch,
        ...(r.fileDigest ? { digest: r.fileDigest } : {}),
        at: new Date().toISOString(),
      });
    // only once Ready and recorded: the restart it may ask for stops this process
    // never throws (it reports in AgentUpgraded); the catch only guards the bundle's Ready
    await switchAgentIfNewer(
      { ...ctx, agentVersion: ctx.agentVersion ?? TOOL_VERSION },
      r.agent,
    ).catch((e) => ctx.log.error('agent', oneLine(e)));
    return r;
  } catch (caught) {
    const err = from === 'file' ? mediaGone(caught, file) : stoppedBy(attempt, caught);
    const { reason, message } = failureOf(err, ctx.config.paths.upgradeDir);
    const thrown =
      err instanceof AgentError ? err : new AgentError(reason, message, { cause: err });
    // another load holds the lock: its state is the node's, this attempt changed nothing (the daemon tries again; an origin that looks again says so itself)
    if (reason === 'Busy') {
      if (!attempt) ctx.log.warn('busy', message, { reason, file });
      throw thrown;
    }
    if (attempt?.source.withdraws(reason, attempt)) {
      withdrawAttempt(ctx, attempt);
      throw thrown;
    }
    // an origin's attempt is in the history once its entries are staged (admitRelease): before, its failure is the status's only
    const version = attempt && !attempt.filled ? undefined : ctx.tracker.current.bundle?.version;
    // a stop says nothing about the file
    if (key && reason !== 'Interrupted') {
      await recordBundle(stateDir, {
        key,
        file,
        outcome: 'failed',
        reason,
        ...(version ? { version } : {}),
        at: new Date().toISOString(),
      }).catch((e) => ctx.log.warn('state', `cannot record the outcome of ${file}: ${oneLine(e)}`));
    }
    // stopped before the attempt began (waiting for the cluster): there is no attempt to call failed
    const attempted =
      reason !== 'Interrupted' ||
      ctx.tracker.current.history.some((e) => e.version === version && e.state === 'installing');
    if (version && attempted)
      ctx.tracker.update((s) => {
        s.history = failedAttempt(s.history, before, version);
      });
    ctx.tracker.failed(reason, message);
    ctx.log.error('failed', message, { reason, file });
    throw thrown;
  }
}

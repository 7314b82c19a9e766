import {
  ClusterReporter,
  ConsoleWriter,
  Metrics,
  agentHealth,
  emptyStatus,
  observeRunning,
  onRemovableMedia,
  readStatusAndWriter,
  readStatusFile,
  runningReleases,
  startStatusServer,
  StatusFileWriter,
  StatusTracker,
  writerLiveness,
  type NodeStatus,
} from '@offline-bundle/status';
import { rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { writeFileAtomic } from '@offline-bundle/host';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { MediaWatcher, type FoundBundle } from './media.js';
import { loadEndsSpool, PartSpool } from './part-spool.js';
import { showRefusal } from './part-spool-status.js';
import { FIRST_LOOK_WAIT_MS, startPeers } from './peers.js';
import { startMetricsEndpoint } from './metrics-endpoint.js';
import { KeptServing, servesUntilComplete } from './kept-serving.js';
import { RetryKept } from './retry-kept.js';
import { StickTurn } from './stick-turn.js';
import { inspectHead } from '../load/bundle-file.js';
import {
  releaseImagesPresent,
  removeLeftovers,
  runLoad,
  showLoadedBefore,
} from '../load/pipeline.js';
import {
  alreadyDone,
  contentOf,
  isForgotten,
  keyOf,
  loadedByContent,
  readBundleRecords,
  readForgotten,
  type BundleRecord,
} from '../state/bundle-records.js';
import { restoreVanishedImages } from '../load/restore.js';
import type { KeptLayout } from '../load/kept-layout.js';
import { withLoadLock } from '../state/lock.js';
import { runtimeTarget } from '../runtime/runtime-target.js';
import { publishHoldings } from '../runtime/runtime-checks.js';
import { watchCrioPins } from '../runtime/crio-pins-watch.js';
import {
  dropOutdatedDropIn,
  settleAgentSwitch,
  unpinPreviousAgent,
} from '../self-upgrade/self-upgrade.js';
import { readAgentSwitch, type AgentSwitchRecord } from '../state/agent-switch-state.js';
import { TOOL_VERSION } from '../version.js';

/** Written in the state directory once the start-up is done (deploy/openshift/bundle-agent.container waits for it). */
const STARTED_MARKER = 'started';

/** How often a start whose load lock was busy tries again to unpin the previous agent image. */
const UNPIN_RETRY_MS = 60_000;

/** The status this process starts from: what the last one said, or why it stopped. */
export async function statusTracker(config: AgentConfig): Promise<StatusTracker> {
  const { file: previous, liveness } = await readStatusAndWriter(config.paths.statusFile);
  const initial = emptyStatus(config.nodeName);
  if (previous?.history) initial.history = previous.history;
  // a `bundle-agent load` still at work: its state is current, not interrupted
  const othersLoad = liveness === 'running';
  // After a restart the node says what it said before: a technician who saw "Done" must not
  // see "Waiting" (or, worse, "Copying") for a bundle that is loaded.
  if (previous && (previous.phase === 'Ready' || previous.phase === 'Failed' || othersLoad)) {
    Object.assign(initial, {
      phase: previous.phase,
      conditions: previous.conditions ?? [],
      progress: previous.progress ?? initial.progress,
      ...(previous.bundle ? { bundle: previous.bundle } : {}),
    });
  } else if (previous && previous.phase !== 'Idle') {
    Object.assign(
      initial,
      interrupted(
        previous,
        'the bundle agent stopped before the load finished (crash, reboot or kill); it starts again when the media is seen',
      ),
    );
  }
  const tracker = new StatusTracker(initial);
  tracker.update((s) => {
    if (config.version.current) s.history = observeRunning(s.history, config.version.current);
  });
  return tracker;
}

/** Phases no process stays in once it is gone: the load that was in them never finishes. */
const SETTLED: ReadonlySet<string> = new Set(['Idle', 'Ready', 'Failed']);

/** What a load killed in `previous`'s phase leaves on show: Failed, Interrupted, and why. */
function interrupted(
  previous: Pick<NodeStatus, 'bundle' | 'progress'>,
  message: string,
): Pick<NodeStatus, 'phase' | 'conditions'> & Partial<NodeStatus> {
  return {
    phase: 'Failed',
    ...(previous.bundle ? { bundle: previous.bundle } : {}),
    ...(previous.progress ? { progress: previous.progress } : {}),
    conditions: [
      {
        type: 'Failed',
        status: 'True',
        reason: 'Interrupted',
        message,
        lastTransitionTime: new Date().toISOString(),
      },
    ],
  };
}

/** A status another process wrote, as the daemon takes it over: a dead load's in-flight phase becomes Interrupted. */
function adopted(s: NodeStatus, writerGone: boolean): NodeStatus {
  if (!writerGone || SETTLED.has(s.phase)) return s;
  return {
    ...s,
    ...interrupted(
      s,
      'a bundle-agent load was stopped before it finished (killed, or its terminal closed); nothing it left is used: run it again',
    ),
  };
}

/** Whether a `bundle-agent run` daemon is alive and writing the status file of this node. */
export async function daemonRuns(config: AgentConfig): Promise<boolean> {
  const s = await readStatusFile(config.paths.statusFile).catch(() => undefined);
  return (
    s?.writer?.command === 'run' &&
    s.writer.pid !== process.pid &&
    (await writerLiveness(s.writer)) === 'running'
  );
}

/**
 * Everything that shows the status: the status file (with this process's pid and a
 * heartbeat, so `status` can tell a dead agent), the node's console, the cluster resource, and
 * (for the daemon) the loopback /status and /metrics endpoint. Each is written at once: after
 * a crash, the stale line of the dead process goes as soon as the next one starts. Returns the
 * shutdown, which sends the last state to the cluster if it can within a few seconds.
 */
export async function statusOutputs(
  config: AgentConfig,
  log: Logger,
  tracker: StatusTracker,
  command: 'run' | 'load',
): Promise<() => Promise<void>> {
  const withHttp = command === 'run';
  const closers: (() => Promise<unknown>)[] = [];
  const file = new StatusFileWriter(config.paths.statusFile, {
    command,
    heartbeatSeconds: config.status.heartbeatSeconds,
    // a `bundle-agent load` beside the daemon: the daemon reports its result, and owns the file again
    ...(command === 'run'
      ? {
          adopt: (s: NodeStatus, gone: boolean) =>
            tracker.update((mine) => Object.assign(mine, adopted(s, gone))),
        }
      : { handBack: true }),
    onError: (err) =>
      log.error('status', `cannot write ${config.paths.statusFile}: ${oneLine(err)}`),
  });
  tracker.onChange(file.sink, { replay: true });
  file.start();
  closers.push(() => file.stop());
  const metrics = new Metrics(Date.now, { build: { version: TOOL_VERSION } });
  tracker.onChange(metrics.sink, { replay: true });
  if (config.status.console) {
    const writer = new ConsoleWriter({
      root: config.root,
      onError: (e) => log.warn('console', `cannot update the console line: ${oneLine(e)}`),
    });
    tracker.onChange(writer.sink, { replay: true });
    closers.push(() => writer.idle());
  }
  if (config.status.kubeconfig) {
    const reporter = new ClusterReporter({
      node: config.nodeName,
      kubeconfig: config.status.kubeconfig,
      log,
    });
    tracker.onChange(reporter.sink, { replay: true });
    metrics.trackReporter(reporter);
    closers.push(() => reporter.close(5000));
  }
  if (withHttp && config.status.listen) {
    const health = agentHealth({
      statusFile: config.paths.statusFile,
      stateDir: config.paths.stateDir,
    });
    const server = await startStatusServer({
      status: tracker,
      metrics,
      health,
      host: config.status.listen.host,
      port: config.status.listen.port,
    });
    log.info('status', `status endpoint on ${server.url}`, { url: server.url });
    closers.push(() => server.close());
  }
  if (withHttp && config.metrics.enabled) closers.push(startMetricsEndpoint(config, log, metrics));
  return async () => {
    for (const c of closers) await c().catch(() => undefined);
  };
}

/** Runs one task at a time, in the order asked. */
type Exclusive = <T>(fn: () => Promise<T>) => Promise<T>;

function exclusiveQueue(): Exclusive {
  let chain: Promise<unknown> = Promise.resolve();
  return <T>(fn: () => Promise<T>): Promise<T> => {
    const run = chain.then(fn);
    chain = run.catch(() => undefined);
    return run;
  };
}

/** What the daemon's phases share. */
interface Daemon {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  signal: AbortSignal;
  agentVersion: string;
  /** One thing at a time in this process: a load, a re-merge of the CRI-O pins, a retried unpin. */
  exclusive: Exclusive;
  /** A load of a found bundle goes first: a fetch from peers under way stops for it. */
  sticks: StickTurn;
  /** The parts of a split bundle collected from sticks plugged one after another. */
  spool: PartSpool;
  /** A loaded release is served until the cluster completed it (KeptServing.enabled). */
  serves: boolean;
}

/**
 * A switch to a new agent: this start confirms it, or finds it undone. First, and needing
 * neither the load lock nor a clean start-up: the host's rollback timer is counting. Returns
 * the switch whose previous image's pin is to go once the lock is ours.
 */
async function settleSwitchAtStart(d: Daemon): Promise<AgentSwitchRecord | undefined> {
  const { config, log, tracker, agentVersion } = d;
  let unpinPending: AgentSwitchRecord | undefined;
  const rt = runtimeTarget(config, log);
  try {
    const wasPending = (await readAgentSwitch(config.paths.stateDir))?.state === 'pending';
    const settled = await settleAgentSwitch(
      { config, log, tracker, runtime: rt, agentVersion },
      Date.now(),
      { unpin: false },
    );
    // confirmed by this start: the previous image's pin goes once the lock is ours
    if (wasPending && settled?.state === 'done' && settled.from.image) unpinPending = settled;
    // a newer agent the MachineConfig brought, hidden by our drop-in naming this older one
    await dropOutdatedDropIn({ config, log, tracker, runtime: rt, agentVersion });
  } catch (err) {
    log.warn('agent', `cannot settle the agent switch: ${oneLine(err)}`);
  } finally {
    await rt.close();
  }
  return unpinPending;
}

/**
 * Leftovers of a load that was killed (crash, reboot): partial staging and mirror drop-ins
 * pointing at a registry that is gone. Skipped while a `bundle-agent load` holds the lock.
 * Returns the unpin still pending (the lock was busy).
 */
async function cleanUpAtStart(
  d: Daemon,
  unpin: AgentSwitchRecord | undefined,
): Promise<{ pending?: AgentSwitchRecord; checked: Map<string, KeptLayout> }> {
  const { config, log, tracker, agentVersion, signal } = d;
  let pending = unpin;
  let checked = new Map<string, KeptLayout>();
  await withLoadLock(config.paths.stateDir, async () => {
    const cleaner = runtimeTarget(config, log);
    try {
      await removeLeftovers(config, cleaner, log, tracker.current.history).catch((err) =>
        log.warn('start', `leftovers of an earlier load not removed: ${oneLine(err)}`),
      );
      // the previous agent image loses the switch's pin (the pins change: under the lock)
      if (pending)
        await unpinPreviousAgent({ config, log, tracker, runtime: cleaner, agentVersion }, pending);
      pending = undefined;
      checked = await restoreVanishedImages({ config, log, tracker, runtime: cleaner, signal });
      // what the runtime holds now (a crio-wipe may have taken it since the last load), for bundle cluster check
      const pins = [...(await cleaner.pinnedRefs().catch(() => new Set<string>()))];
      await publishHoldings(await cleaner.inspector().catch(() => undefined), tracker, pins, log);
    } finally {
      await cleaner.close();
    }
  }).catch((err) => log.warn('start', `start-up cleanup skipped: ${oneLine(err)}`));
  return { ...(pending ? { pending } : {}), checked };
}

/** The lock was busy at start (a `bundle-agent load` beside us): the unpin is tried again until it is done. */
function retryUnpin(d: Daemon, rec: AgentSwitchRecord): NodeJS.Timeout {
  const { config, log, tracker, agentVersion } = d;
  let pending: AgentSwitchRecord | undefined = rec;
  const timer = setInterval(() => {
    if (!pending) return void clearInterval(timer);
    const current = pending;
    void d
      .exclusive(() =>
        withLoadLock(config.paths.stateDir, async () => {
          const rt = runtimeTarget(config, log);
          try {
            await unpinPreviousAgent({ config, log, tracker, runtime: rt, agentVersion }, current);
            pending = undefined;
          } finally {
            await rt.close();
          }
        }),
      )
      .catch(() => undefined);
  }, UNPIN_RETRY_MS);
  timer.unref();
  return timer;
}

/** The bundles the watcher offered, waiting for their load, and those waiting to be offered again. */
export class BundleQueue {
  private readonly items: FoundBundle[] = [];
  private wake: (() => void) | undefined;
  private readonly retries = new Set<NodeJS.Timeout>();

  constructor(private readonly pollSeconds: number) {}

  offer(b: FoundBundle): void {
    // a newer copy of the same file replaces one still waiting: each change is loaded once
    const stale = this.items.findIndex((q) => q.file === b.file);
    if (stale >= 0) this.items.splice(stale, 1);
    this.items.push(b);
    this.wake?.();
  }

  /** Offers `b` again after a poll interval, unless its file changed or went meanwhile. */
  retryLater(b: FoundBundle): void {
    const timer = setTimeout(() => {
      this.retries.delete(timer);
      // offered again meanwhile (a newer copy), or gone, or changed: the watcher decides
      void keyOf(b.file).then((key) => {
        if (key !== b.key || this.items.some((q) => q.file === b.file)) return;
        this.items.push(b);
        this.wake?.();
      });
    }, this.pollSeconds * 1000);
    this.retries.add(timer);
  }

  /** The next bundle, waiting for one; undefined once `signal` aborts. */
  async next(signal: AbortSignal): Promise<FoundBundle | undefined> {
    while (!signal.aborted) {
      const next = this.items.shift();
      if (next) return next;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        signal.addEventListener('abort', () => resolve(), { once: true });
      });
      this.wake = undefined;
    }
    return undefined;
  }

  /**
   * After `delta` loaded: the base bundle offered beside it (and that one's base, for a chain)
   * is dropped, not loaded: it is an older release now. Returns the files dropped.
   */
  dropBasesOf(delta: FoundBundle): string[] {
    const dropped: string[] = [];
    for (let base = delta.base; base;) {
      const at = this.items.findIndex(
        (q) => q.identity === base && dirname(q.file) === dirname(delta.file),
      );
      if (at < 0) break;
      const [item] = this.items.splice(at, 1);
      dropped.push(item!.file);
      base = item!.base;
    }
    return dropped;
  }

  stop(): void {
    for (const r of this.retries) clearTimeout(r);
  }
}

/** Phases in which no load is under way: a note about the media may stand beside them. */
const RESTING: ReadonlySet<string> = new Set(['Idle', 'Ready', 'Failed']);

/**
 * Bundle files on the media found cut short (the watcher waits for them to change), as a note
 * the technician's line reads: a condition of its own type, so it displaces no other (a part
 * set being collected, a forgotten release), shown while no load runs and again after one.
 */
class CutShortNote {
  private files: string[] = [];

  constructor(private readonly tracker: StatusTracker) {}

  set(files: string[]): void {
    this.files = files;
    this.show();
  }

  /** Puts the note in the status, or takes it out, as the files last said; a load under way is left alone. */
  show(): void {
    const cur = this.tracker.current;
    const noted = cur.conditions.some((c) => c.type === 'MediaIncomplete');
    if (this.files.length === 0) {
      if (noted)
        this.tracker.update((s) => {
          s.conditions = s.conditions.filter((c) => c.type !== 'MediaIncomplete');
        });
      return;
    }
    if (!RESTING.has(cur.phase)) return;
    const named =
      this.files.length > 1
        ? `${this.files[0]} (and ${this.files.length - 1} more)`
        : this.files[0];
    this.tracker.condition(
      'MediaIncomplete',
      'True',
      'IncompleteFile',
      `${named} has no seek table at its end (cut short, or altered): it is not loaded; copy it again and wait until the copy has finished`,
    );
  }
}

/** A bundle of a release forgotten on this node is not loaded from media: says so, and how to load it. */
async function refuseForgotten(d: Daemon, next: FoundBundle): Promise<boolean> {
  const forgotten =
    next.release && isForgotten(await readForgotten(d.config.paths.stateDir), next.release);
  if (!forgotten) return false;
  const again = onRemovableMedia(next.media)
    ? 'plug the stick in again'
    : 'copy the file into the directory again';
  const why = `${next.file} holds release ${forgotten.version} (${forgotten.arch}), which was forgotten on this node (bundle-agent releases forget, ${forgotten.at}): not loading it; to load it, run bundle-agent releases unforget ${forgotten.version} and ${again}, or bundle-agent load ${next.file}`;
  d.log.warn('media', why, { file: next.file, version: forgotten.version });
  d.tracker.condition('MediaDetected', 'False', 'ReleaseForgotten', why);
  return true;
}

/** Loads one bundle the watcher found, unless it was decided before this start or is forgotten. Returns the load's error, if it failed; loaded: it is in (now or before this start). */
async function handleBundle(
  d: Daemon,
  next: FoundBundle,
  before: Map<string, BundleRecord>,
  queue: BundleQueue,
): Promise<{ err: unknown } | { loaded: true } | void> {
  const { config, log, tracker, signal, agentVersion } = d;
  if (await refuseForgotten(d, next)) return;
  const runtime = runtimeTarget(config, log);
  // by stat identity, else (a remount renumbers devices and FAT inodes) a loaded copy of the same content
  const rec = before.get(next.key) ?? loadedByContent(before.values(), await contentOf(next.file));
  if (rec) before.delete(rec.key);
  const running = runningReleases(tracker.current.history).map((e) => e.version);
  const done = await alreadyDone(rec, (version, arch, digest) =>
    releaseImagesPresent(config, runtime, version, arch, digest, running),
  ).catch(() => undefined);
  if (done) {
    // with preload.method none nothing was loaded: the journal says what the console says
    const earlier =
      config.preload.method === 'none'
        ? `was verified before this start (${rec!.version}; its images were NOT loaded: preload.method is none)`
        : `was loaded before this start (${rec!.version}) and its images are in the runtime`;
    log.info(
      'media',
      done === 'loaded'
        ? `${next.file} ${earlier}: not loading it again`
        : `${next.file} failed before this start (${rec!.reason}): not trying the same file again; replace it, plug the stick in again, or run bundle-agent load`,
      { file: next.file, reason: rec!.reason },
    );
    // A failure or Idle shown is about another stick (or none): the line answers for this one.
    // A Ready shown stays: the first scan of a start offers every file decided before.
    if (done === 'loaded' && rec!.version && rec!.arch && tracker.current.phase !== 'Ready') {
      showLoadedBefore(d, {
        file: next.file,
        media: next.media,
        version: rec!.version,
        arch: rec!.arch,
        ...(rec!.digest ? { digest: rec!.digest } : {}),
      });
    }
    await runtime.close();
    return done === 'loaded' ? { loaded: true } : undefined;
  }
  try {
    await d.sticks.take(() =>
      d.exclusive(() =>
        runLoad(next.file, {
          config,
          log,
          tracker,
          runtime,
          media: next.media,
          signal,
          agentVersion,
          servesAfter: d.serves,
        }),
      ),
    );
    return { loaded: true };
  } catch (err) {
    // a `bundle-agent load` by hand holds the lock: this bundle is tried again once it is free
    if (err instanceof AgentError && err.reason === 'Busy') {
      log.info(
        'media',
        `${next.file} waits: another bundle-agent is loading; it is tried again every ${config.media.pollSeconds} s`,
        { file: next.file },
      );
      queue.retryLater(next);
      return { err };
    }
    // already reported by runLoad; keep watching. A file written meanwhile (a copy that paused
    // longer than the quiet time) has a new identity: the watcher offers it again once stable.
    if ((await keyOf(next.file)) !== next.key)
      log.warn(
        'media',
        `${next.file} changed while it was read (still being copied?): it is loaded again once it stops changing`,
        { file: next.file },
      );
    return { err };
  } finally {
    await runtime.close();
  }
}

/**
 * A bundle found, loaded; the part spool ends with a verdict on its parts (loaded, or refused),
 * not with a load stopped or tried again (loadEndsSpool): a restart loads the parts held.
 */
async function loadFound(
  d: Daemon,
  next: FoundBundle,
  before: Map<string, BundleRecord>,
  queue: BundleQueue,
): Promise<void> {
  const ended = await handleBundle(d, next, before, queue);
  for (const base of ended && 'loaded' in ended ? queue.dropBasesOf(next) : []) {
    d.log.info(
      'media',
      `${base} is the base of ${next.file}, which is loaded: not loaded itself (it is an older release)`,
      { file: base },
    );
  }
  const spooled = d.spool.holds(next.file) || (await d.spool.collects(next.file));
  if (!spooled) return;
  if (!loadEndsSpool(ended && 'err' in ended ? ended.err : undefined, d.signal.aborted))
    return void d.log.info(
      'parts',
      `the parts held in ${d.spool.dir} are kept: the load ended without a verdict on them; they are loaded again at the next start`,
    );
  // the spool's parts, or the same bundle's whole set on one stick: the parts held are done with
  await d.spool
    .clear()
    .catch((err) => d.log.warn('parts', `cannot empty ${d.spool.dir}: ${oneLine(err)}`));
}

/** Some parts of a split bundle on a stick: copied into the spool; loaded from there once it holds every part. */
async function collectParts(
  d: Daemon,
  next: FoundBundle & { partial: { dir: string; names: string[] } },
  before: Map<string, BundleRecord>,
  queue: BundleQueue,
): Promise<void> {
  const stick = { dir: next.partial.dir, names: next.partial.names, media: next.media };
  const outcome = await d.sticks
    .take(() => d.exclusive(() => d.spool.collect(stick, d.tracker, d.signal)))
    .catch((err: unknown) => {
      showRefusal(d.tracker, d.log, { file: next.file, media: next.media }, err);
      return undefined;
    });
  if (!outcome?.complete) return;
  await loadFound(d, await spoolFound(d.spool, outcome.file), before, queue);
}

/** The spool's whole set as the watcher would offer it: with its release, so a forgotten one is refused as from a stick. */
async function spoolFound(spool: PartSpool, file: string): Promise<FoundBundle> {
  const head = await inspectHead(file).catch(() => undefined);
  const about =
    head?.kind === 'bundle'
      ? {
          release: { version: head.version, arch: head.arch },
          identity: head.identity,
          ...(head.base ? { base: head.base } : {}),
        }
      : {};
  return { file, key: (await keyOf(file)) ?? file, media: spool.media(), ...about };
}

/** The daemon's parts before anything starts: the status it resumes, its outputs, its part spool. */
async function openDaemon(
  config: AgentConfig,
  log: Logger,
  signal: AbortSignal,
  opts: { agentVersion?: string },
): Promise<{ d: Daemon; closeOutputs: () => Promise<void> }> {
  const exclusive = exclusiveQueue();
  const tracker = await statusTracker(config);
  const closeOutputs = await statusOutputs(config, log, tracker, 'run');
  const spool = new PartSpool(
    config.paths.upgradeDir,
    config.space.reserveBytes,
    log,
    config.paths.imageStoreDir,
  );
  const d: Daemon = {
    config,
    log,
    tracker,
    signal,
    agentVersion: opts.agentVersion ?? TOOL_VERSION,
    exclusive,
    sticks: new StickTurn(),
    spool,
    serves: servesUntilComplete(config),
  };
  return { d, closeOutputs };
}

/** The media watched, each bundle found queued: a spool left whole by a stop before its load first. */
async function watchMedia(d: Daemon): Promise<{ watcher: MediaWatcher; queue: BundleQueue }> {
  const { config, log, tracker, spool } = d;
  const watcher = new MediaWatcher({
    roots: config.media.roots,
    watchDirs: config.media.watchDirs,
    pollSeconds: config.media.pollSeconds,
    log,
  });
  const queue = new BundleQueue(config.media.pollSeconds);
  watcher.on('bundle', (b) => queue.offer(b));
  const cutShort = new CutShortNote(tracker);
  watcher.on('incomplete', (files) => cutShort.set(files));
  tracker.onChange((s) => {
    if (RESTING.has(s.phase) && !s.conditions.some((c) => c.type === 'MediaIncomplete'))
      cutShort.show();
  });
  // a spool left whole by a stop before its load: loaded now
  const spooled = await spool
    .startUp(tracker)
    .catch((err) => void log.warn('parts', `cannot read the part spool: ${oneLine(err)}`));
  if (spooled) queue.offer(await spoolFound(spool, spooled));
  await watcher.start();
  return { watcher, queue };
}

/** What the unit's ExecStartPost waits for, so the kubelet (ordered after the unit) starts once this is done. */
async function markStarted(d: Daemon): Promise<void> {
  await writeFileAtomic(
    join(d.config.paths.stateDir, STARTED_MARKER),
    `${JSON.stringify({ pid: process.pid, at: new Date().toISOString() })}\n`,
  ).catch((err) => d.log.warn('start', `cannot write the start-up marker: ${oneLine(err)}`));
}

/**
 * The daemon: watches for media and loads each new bundle, one at a time. A failing bundle
 * is reported and the daemon goes on watching for the next stick.
 */
export async function runDaemon(
  config: AgentConfig,
  log: Logger,
  signal: AbortSignal,
  opts: { agentVersion?: string } = {},
): Promise<void> {
  const { d, closeOutputs } = await openDaemon(config, log, signal, opts);
  const { pending: unpinPending, checked: checkedAtStart } = await cleanUpAtStart(
    d,
    await settleSwitchAtStart(d),
  );
  const unpinRetry = unpinPending ? retryUnpin(d, unpinPending) : undefined;
  // What was decided before this start: offered again by the first scan, left alone once (a
  // stick plugged in again is a new request, and is loaded).
  const before = new Map((await readBundleRecords(config.paths.stateDir)).map((r) => [r.key, r]));
  const { watcher, queue } = await watchMedia(d);
  // after the start-up restore: a release loaded but not yet run is served again before the kubelet asks for it
  const kept = new KeptServing({ ...d, checkedAtStart });
  await kept.start();
  // copies kept after a failed load (before this start too) are loaded again with no stick
  const retries = new RetryKept(d, () => kept.afterLoad());
  await retries.schedule();
  await markStarted(d);
  // the first look waited for briefly: an API server that does not answer holds back no stick
  const peers = await startPeers({ ...d, firstLookWaitMs: FIRST_LOOK_WAIT_MS });
  const stopPinsWatch =
    config.runtime === 'crio' ? watchCrioPins(config, log, d.exclusive) : () => undefined;
  log.info(
    'start',
    `bundle-agent watching ${[...config.media.roots, ...config.media.watchDirs].join(', ')}`,
    { node: config.nodeName, runtime: config.runtime },
  );
  try {
    for (let next = await queue.next(signal); next; next = await queue.next(signal)) {
      if (next.partial) await collectParts(d, { ...next, partial: next.partial }, before, queue);
      else await loadFound(d, next, before, queue);
      await kept.afterLoad();
      await retries.schedule();
      // a layout the stick's load kept is offered to the other nodes
      await peers
        ?.refresh()
        .catch((err) => log.warn('peers', `cannot offer what this node keeps: ${oneLine(err)}`));
    }
  } finally {
    await peers?.stop();
    retries.stop();
    await kept.stop();
    await rm(join(config.paths.stateDir, STARTED_MARKER), { force: true }).catch(() => undefined);
    if (unpinRetry) clearInterval(unpinRetry);
    queue.stop();
    watcher.stop();
    stopPinsWatch();
    await closeOutputs();
  }
}

/**
 * `bundle cluster upgrade` for a bundle of an update path (EUS to EUS, #43): the steps the
 * OpenShift docs give for a Control Plane Only update, in order: pause every pool but master,
 * hop one (desiredUpdate to the first release not yet run), wait for ClusterVersion's history to
 * say Completed, acknowledge what the running release's admin-gates asks for, hop two, wait,
 * unpause the pools. Each run reads where the cluster is and does the next step, then returns:
 * a hop takes an hour or more, and a site without network is better served by one command it
 * can run again at any time (over a dropped session, after a reboot of the admin's laptop) than
 * by one that must stay up for hours. Nothing is changed before the whole plan is known.
 */
import { truncate } from '@offline-bundle/status';
import { apiCall, ClusterError, requestOptions, type AdminApis } from '@offline-bundle/kube';
import { nextSteps, readRollup, type Rollup } from './cluster-rollup.js';
import {
  CV,
  gateRelease,
  keptReleases,
  ocCommand,
  passedReleases,
  readClusterVersion,
  releaseImageByDigest,
  requireSignatures,
  running,
  unpreparedKeys,
  type AdminBundle,
  type ClusterVersionDoc,
} from './cluster-upgrade.js';
import { acknowledge, acksNeeded, ocAck, ADMIN_GATES, type AdminGate } from './admin-acks.js';
import { ocPausePool, setPaused, workerPools, type PoolState } from './machine-pools.js';
import { applyPinnedImageSets, type PinnedSetsResult } from './pinned-image-sets.js';
import { pathPosition, pathWords, releasesOf, type PathRelease } from './release-path.js';
import { publishGate, type GateResult } from './upgrade-gate.js';

export type StepState = 'done' | 'now' | 'waiting' | 'blocked' | 'later';

export interface PlanStep {
  kind: 'pause' | 'ack' | 'update' | 'wait' | 'unpause';
  /** The hop (from 1) it belongs to. */
  hop?: number;
  text: string;
  /** The oc command that does the same (or shows it, for a wait). */
  oc: string;
  /** done: the cluster shows it; now: this run does it; waiting: on the cluster; blocked: on the admin; later: after those. */
  state: StepState;
}

export interface PathUpgradeResult {
  dryRun: boolean;
  path: { version: string; image: string }[];
  running?: string;
  /** The hop (from 1) under way or next; path.length + 1 once every hop completed. */
  hop: number;
  /** started: this run asked for a hop; waiting: a hop is under way; finished: this run unpaused the pools after the last hop; done: nothing left. */
  state: 'started' | 'waiting' | 'finished' | 'done';
  steps: PlanStep[];
  /** What stands in the way of the next step (a dry run names all; a real run throws the first). */
  blockers: ClusterError[];
  rollup: Rollup;
  gate?: GateResult;
  pinned?: PinnedSetsResult;
}

/** Whether desiredUpdate already names release `r` (by its image's digest, else its version). */
function asks(cv: ClusterVersionDoc, r: PathRelease): boolean {
  const d = cv.spec?.desiredUpdate;
  if (d?.image) return d.image.split('@')[1] === r.digest;
  return d?.version === r.version;
}

/** The newest history entry for `version`, as the CVO writes it (Partial while under way). */
const historyState = (cv: ClusterVersionDoc, version: string) =>
  cv.status?.history?.find((h) => h.version === version)?.state;

/** Characters of the CVO's own message quoted while a hop waits. */
const MAX_CVO_MESSAGE_CHARS = 300;

/** What the CVO says stands in the way of the hop under way (a refused signature, a failing operator), if anything. */
function cvoSays(cv: ClusterVersionDoc): string | undefined {
  const conds = Array.isArray(cv.status?.conditions) ? cv.status!.conditions : [];
  const c = conds.find(
    (x) =>
      (x?.type === 'ReleaseAccepted' && x.status === 'False') ||
      (x?.type === 'Failing' && x.status === 'True'),
  );
  return c && typeof c.message === 'string'
    ? `${c.type}: ${truncate(c.message, MAX_CVO_MESSAGE_CHARS)}`
    : undefined;
}

const WAIT_OC =
  'oc get clusterversion version -o jsonpath=\'{.status.history[0].version} {.status.history[0].state}{"\\n"}\'';

interface Where {
  path: PathRelease[];
  cv: ClusterVersionDoc;
  next: number;
  underWay: boolean;
  pools: PoolState[];
  acks: AdminGate[];
  given: Set<string>;
}

/** The hops' steps: ack, update, wait for each; states from where the cluster is. */
function hopSteps(w: Where): PlanStep[] {
  const steps: PlanStep[] = [];
  w.path.forEach((r, i) => {
    const hop = i + 1;
    const from =
      i === 0
        ? w.cv.status?.history?.find((h) => h.state === 'Completed')?.version
        : w.path[i - 1]!.version;
    const minorChange =
      from !== undefined &&
      from.split('.').slice(0, 2).join('.') !== r.version.split('.').slice(0, 2).join('.');
    if (i === w.next && !w.underWay) {
      for (const a of w.acks)
        steps.push({
          kind: 'ack',
          hop,
          text: `acknowledge admin gate ${a.gate}${a.reason ? ` ("${a.reason}")` : ''}`,
          oc: ocAck(a.gate),
          state: w.given.has(a.gate) ? 'now' : 'blocked',
        });
    } else if (i > w.next && minorChange) {
      steps.push({
        kind: 'ack',
        hop,
        text: `acknowledge what ConfigMap ${ADMIN_GATES.namespace}/${ADMIN_GATES.name} asks for once ${from} runs (read then; run this again to see it)`,
        oc: `oc -n ${ADMIN_GATES.namespace} get cm ${ADMIN_GATES.name} -o yaml`,
        state: 'later',
      });
    }
    const state: StepState =
      i < w.next || (i === w.next && w.underWay)
        ? 'done'
        : i === w.next
          ? w.acks.some((a) => !w.given.has(a.gate))
            ? 'blocked'
            : 'now'
          : 'later';
    steps.push({
      kind: 'update',
      hop,
      text: `hop ${hop} of ${w.path.length}: set ClusterVersion spec.desiredUpdate to ${r.version} (${releaseImageByDigest(r)})`,
      oc: ocCommand(releaseImageByDigest(r)),
      state,
    });
    const waitState: StepState =
      i < w.next ? 'done' : i === w.next && w.underWay ? 'waiting' : 'later';
    const says =
      i === w.next && w.underWay
        ? ` (it says ${historyState(w.cv, r.version) ?? 'nothing of it yet'}${cvoSays(w.cv) ? `; the CVO: ${cvoSays(w.cv)}` : ''})`
        : '';
    steps.push({
      kind: 'wait',
      hop,
      text: `wait until ClusterVersion's history says ${r.version} Completed${says}`,
      oc: WAIT_OC,
      state: waitState,
    });
  });
  return steps;
}

/** The whole plan, in order, with each step's state. */
function plan(w: Where, final: string): PlanStep[] {
  const finished = w.next === w.path.length;
  const starting = !finished && !w.underWay;
  // a pool someone else paused (a canary) is theirs: neither paused nor unpaused by us
  const ours = w.pools.filter((p) => !p.paused || p.pausedFor === final);
  const pause = ours.map((p): PlanStep => ({
    kind: 'pause',
    text: `pause MachineConfigPool ${p.name} (its nodes keep their OS until after the last hop, then reboot once)`,
    oc: ocPausePool(p.name, true),
    state: p.paused || finished ? 'done' : starting ? 'now' : 'later',
  }));
  const unpause = ours.map((p): PlanStep => ({
    kind: 'unpause',
    text: `unpause MachineConfigPool ${p.name} (its nodes update to ${final})`,
    oc: ocPausePool(p.name, false),
    state: finished ? (p.paused ? 'now' : 'done') : 'later',
  }));
  return [...pause, ...hopSteps(w), ...unpause];
}

/** What stands in the way of starting hop `w.next`: nodes, signatures, acks. */
async function blockersOf(
  apis: AdminApis,
  b: AdminBundle,
  w: Where,
  r: Rollup,
): Promise<ClusterError[]> {
  const out: ClusterError[] = [];
  if (!r.ready)
    out.push(
      new ClusterError(
        'NODES_NOT_READY',
        `${r.summary}: ${nextSteps(r)}, until "bundle cluster status" exits 0`,
      ),
    );
  const bare = requireSignatures(w.path);
  if (bare) out.push(bare);
  const missing = bare ? [] : await unpreparedKeys(apis, w.path);
  if (missing.length)
    out.push(
      new ClusterError(
        'NOT_PREPARED',
        `the release signature ConfigMap lacks ${missing.join(', ')}: run "bundle cluster prepare" with this bundle first`,
      ),
    );
  const unacked = w.acks.filter((a) => !w.given.has(a.gate));
  if (unacked.length) {
    const to = w.path[w.next]!.version;
    out.push(
      new ClusterError(
        'ADMIN_ACK_REQUIRED',
        `${to} waits on the admin's acknowledgement of ${unacked.map((a) => `${a.gate}${a.reason ? ` ("${a.reason}")` : ''}`).join(', ')}: read it, then run ${unacked.map((a) => ocAck(a.gate)).join(' && ')} (or this again with ${unacked.map((a) => `--ack ${a.gate}`).join(' ')})`,
      ),
    );
  }
  void b;
  return out;
}

/** Pins that are not this run's step (after the last hop): a failure is said, with what to do, and the run goes on. */
async function pinsAfterward(
  pins: () => Promise<PinnedSetsResult | undefined>,
): Promise<PinnedSetsResult | undefined> {
  try {
    return await pins();
  } catch (err) {
    return {
      applied: [],
      removed: [],
      skipped: `could not update them (${err instanceof Error ? err.message : String(err)}): run the command again`,
    };
  }
}

/** Does this run's step: unpause after the last hop (then the pins), or gate, pins, pause, ack and hop `w.next`; once done, the pins alone. */
async function act(
  apis: AdminApis,
  b: AdminBundle,
  w: Where,
  r: Rollup,
  opts: { selector?: string },
): Promise<Pick<PathUpgradeResult, 'gate' | 'pinned'>> {
  const writes = !opts.selector;
  // each run's pins from where the cluster is: a release it has moved past loses its sets from each pool whose nodes moved past it too
  const pins = (dropOnly = false) =>
    writes && r.ready
      ? applyPinnedImageSets(apis, b, keptReleases(w.cv, w.path), passedReleases(w.cv, w.path), {
          dropOnly,
        })
      : Promise.resolve(undefined);
  if (w.next === w.path.length) {
    // the unpause first: it needs no pin write (every release's sets are in place from the hops), and a paused pool keeps its pins
    const unpausing = w.pools.filter((p) => p.paused && p.pausedFor === b.version);
    for (const p of unpausing) await setPaused(apis, p.name, undefined);
    // once done, a run only drops what a pool no longer needs (it writes nothing else)
    const pinned = await pinsAfterward(() => pins(unpausing.length === 0));
    return pinned ? { pinned } : {};
  }
  // the gate and the pins before desiredUpdate, as for one release: the cluster's check then agrees with ours
  const gate = writes
    ? await publishGate(apis, r, { by: 'bundle cluster upgrade', release: gateRelease(b) })
    : undefined;
  const pinned = await pins();
  for (const p of w.pools) if (!p.paused) await setPaused(apis, p.name, b.version);
  await acknowledge(
    apis,
    w.acks.map((a) => a.gate),
  );
  const target = w.path[w.next]!;
  const patch = {
    spec: {
      desiredUpdate: { image: releaseImageByDigest(target), version: target.version, force: false },
    },
  };
  await apiCall('update ClusterVersion "version"', () =>
    apis.custom.patchClusterCustomObject(
      { ...CV, body: patch },
      requestOptions(undefined, 'application/merge-patch+json'),
    ),
  );
  return { ...(gate ? { gate } : {}), ...(pinned ? { pinned } : {}) };
}

/**
 * The next step of the path's upgrade, or (dryRun) the plan alone. Refuses, as for one release,
 * unless every node (of `selector`) is Ready for the bundle and prepare handed over every
 * release's signatures; a hop that leaves a minor version also waits on the acknowledgements
 * its admin-gates asks for, unless `ack` names them.
 */
export async function upgradePath(
  apis: AdminApis,
  b: AdminBundle,
  opts: {
    dryRun?: boolean;
    selector?: string;
    ack?: readonly string[];
    onPlan?: (r: PathUpgradeResult) => void;
  } = {},
): Promise<PathUpgradeResult> {
  const path = releasesOf(b);
  const images = path.map((r) => ({ version: r.version, image: releaseImageByDigest(r) }));
  const cv = await readClusterVersion(apis);
  const at = pathPosition(path, running(cv));
  const next = at.done + 1;
  const underWay =
    next < path.length &&
    asks(cv, path[next]!) &&
    historyState(cv, path[next]!.version) !== 'Completed';
  const starting = next < path.length && !underWay;
  const pools = await workerPools(apis);
  const acks = starting ? await acksNeeded(apis, at.running, path[next]!.version) : [];
  const w: Where = { path, cv, next, underWay, pools, acks, given: new Set(opts.ack ?? []) };
  const r = await readRollup(apis, {
    digest: b.fileDigest,
    clusterVersion: cv,
    ...(opts.selector ? { selector: opts.selector } : {}),
  });
  const blockers = starting ? await blockersOf(apis, b, w, r) : [];
  const steps = plan(w, b.version);
  const finishing =
    next === path.length && steps.some((s) => s.kind === 'unpause' && s.state === 'now');
  const state = starting ? 'started' : underWay ? 'waiting' : finishing ? 'finished' : 'done';
  const base = {
    dryRun: opts.dryRun === true,
    path: images,
    ...(at.running ? { running: at.running } : {}),
    hop: next + 1,
    state,
    steps,
    blockers,
    rollup: r,
  } as const;
  // the whole plan is shown before anything changes
  opts.onPlan?.(base);
  if (opts.dryRun || state === 'waiting') return base;
  if (blockers.length) throw blockers[0]!;
  return { ...base, ...(await act(apis, b, w, r, opts)) };
}

/** "hop 1 of 2 (4.14.30 → 4.15.40) under way" and the like, for status lines. */
export function hopLine(r: Pick<PathUpgradeResult, 'path' | 'running' | 'hop' | 'state'>): string {
  const n = r.path.length;
  const route = `path ${pathWords(r.path as PathRelease[], r.running && !r.path.some((p) => p.version === r.running) ? r.running : undefined)}`;
  if (r.hop > n) return `${route}: every hop completed; the cluster runs ${r.path[n - 1]!.version}`;
  const hop = `hop ${r.hop} of ${n} (${r.running ?? '?'} → ${r.path[r.hop - 1]!.version})`;
  return `${route}: ${hop} ${r.state === 'waiting' ? 'under way' : 'next'}`;
}

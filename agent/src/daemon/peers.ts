// The daemon's peers (issue #22), on by default and inert until approved (issue #42): every few
// seconds a look at the peer keys, and the approvals as a watch keeps them (approval-watch.ts),
// looked at again the moment they change. Only while a BundleApproval exists (and the
// keys are installed) does the peer server listen on the Node's InternalIP, serving the approved
// bundles this node keeps, with status.serving published, and are approved bundles fetched from
// the other nodes, one thing at a time with the stick's loads; the last approval withdrawn closes
// the port. It fails closed: approvals that cannot be read close it after APPROVALS_GRACE_MS (a
// refusal at once), and keys changed or gone since the last look close it (changed ones open it
// again with them). Why it is closed is the Peers condition, said once in the log. A server that
// cannot start (port taken) is said so in status.peers and tried again; while this node's own
// load runs it may pause serving (peers.pauseWhileLoading).
import { setTimeout as sleep } from 'node:timers/promises';
import {
  onRemovableMedia,
  PEER_MEDIA,
  type Condition,
  type NodeStatus,
  type PeersStatus,
  type StatusTracker,
} from '@offline-bundle/status';
import { ClusterError } from '@offline-bundle/kube';
import type { AgentConfig } from '../config.js';
import { failureOf, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { removeWithdrawnPeerPartials } from '../load/peer-partials.js';
import { ApiPeerDirectory } from '../peers/directory.js';
import { peerServerOptions } from '../peers/peer-config.js';
import { startPeerServer, type RunningPeerServer } from '../peers/peer-server.js';
import { PeerService } from '../peers/peer-service.js';
import { readPeerKeys, type PeerCredentials } from '../peers/peer-tls.js';
import type { PeerApproval } from '../peers/types.js';
import { runtimeTarget } from '../runtime/runtime-target.js';
import { ApprovalWatch } from './approval-watch.js';
import type { StickTurn } from './stick-turn.js';

/** How often the keys (and the approvals as the watch keeps them) are looked at, at least. */
const MIN_PEER_POLL_MS = 5000;
/** How long after a failed start the peer server is tried again. */
export const PEER_START_RETRY_MS = 60_000;
/**
 * How long an open port outlives looks at the approvals that fail (an API server restarting
 * during an upgrade): after it the port closes, as no approval is known to exist any more. A
 * refusal (401/403: the rule or the node's credentials taken away) closes it at once.
 */
export const APPROVALS_GRACE_MS = 2 * 60_000;
/** The daemon waits at most this long for the first look: a slow API server does not hold back the sticks. */
export const FIRST_LOOK_WAIT_MS = 5000;
/** status.serving follows a fetch under way (each verified blob changes its count) at most this often. */
const SERVING_PUBLISH_MS = 2000;

export interface DaemonPeers {
  /** Offers what this node keeps again (after a stick's load) and publishes it. */
  refresh(): Promise<void>;
  stop(): Promise<void>;
}

export interface PeerDaemon {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  signal: AbortSignal;
  agentVersion: string;
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Loads of found bundles (sticks, the drop directory): a fetch from peers gives way to them. */
  sticks?: StickTurn;
  /** A loaded release is served until the cluster completed it: a fetched layout is kept for that. */
  serves?: boolean;
  /** Tests: a shorter retry of a failed start, a shorter look, a shorter grace of failing looks. */
  retryMs?: number;
  pollMs?: number;
  approvalsGraceMs?: number;
  /** Tests: a shorter watch of the approvals (each followed by a list); unset, pollMs when that is set (the looks older tests time), else APPROVALS_RELIST_MS. */
  relistMs?: number;
  /** start() waits at most this long for the first look (the daemon: FIRST_LOOK_WAIT_MS); unset, for all of it. */
  firstLookWaitMs?: number;
}

/**
 * Whether this node's own load is in a phase that must not be slowed by serving others: a
 * stick being read or the images being pulled. A fetch from peers (Staging from peers) keeps
 * serving: it passes each blob on as it verified it.
 */
export function pausesServing(config: AgentConfig, s: NodeStatus): boolean {
  if (!config.peers.pauseWhileLoading) return false;
  if (s.phase === 'Staging' && s.bundle?.media === PEER_MEDIA) return false;
  return ['Verifying', 'Staging', 'Serving', 'Preloading', 'Pinning'].includes(s.phase);
}

/** The bundle whose copies elsewhere the technician waits for: one loaded Ready from a stick. */
const stickVersion = (s: NodeStatus): string | undefined =>
  s.phase === 'Ready' && s.bundle?.media !== PEER_MEDIA && onRemovableMedia(s.bundle?.media)
    ? s.bundle?.version
    : undefined;

/** Why the peer server did not start, with the fix where the cause is known. */
function startProblem(err: unknown, config: AgentConfig): { reason: string; message: string } {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'EADDRINUSE')
    return {
      reason: 'PeerPortInUse',
      message: `port ${config.peers.port} is taken by another program (${oneLine(err)}): stop it, or set peers.port to a free port in 9000-9999 on every node`,
    };
  if (code === 'EADDRNOTAVAIL')
    return {
      reason: 'PeerAddressUnavailable',
      message: `${oneLine(err)}: the Node's InternalIP is not an address of this machine`,
    };
  const { reason, message } = failureOf(err, config.paths.upgradeDir);
  return { reason: reason === 'Internal' ? 'PeerServerFailed' : reason, message };
}

/** The Peers condition while no approval exists: the ordinary state of a node between releases. */
const NOT_APPROVED = {
  reason: 'NotApproved',
  message:
    'no bundle is approved (bundle cluster approve): this node opens no peer port and fetches nothing from other nodes',
} as const;

/** What `shown` holds while neither status.serving nor status.peers is published. */
const UNSHOWN = 'none';

/** What an open port needs beyond the server and the keys: made at the first opening and kept, so offers and counters outlive a closed port. */
interface Base {
  service: PeerService;
  address: string;
  controlPlane: boolean;
}

/** The Peers condition's reason while the approvals cannot be read. */
const APPROVALS_UNREADABLE = 'ApprovalsUnreadable';

const sameKeys = (a: PeerCredentials, b: PeerCredentials) =>
  a.ca.equals(b.ca) && a.cert.equals(b.cert) && a.key.equals(b.key);
const refused = (err: unknown) => err instanceof ClusterError && err.code === 'FORBIDDEN';

type Said = { status: Condition['status']; reason: string; message: string };

class DaemonPeerRunner implements DaemonPeers {
  private readonly directory: ApiPeerDirectory;
  private base: Base | undefined;
  private server: RunningPeerServer | undefined;
  /** The keys of the last look: the open port's, and what a fetch starts with. */
  private keys: PeerCredentials | undefined;
  /** When the approvals were last read: a list, or an event or bookmark of the watch (ms since the epoch). */
  private lastLook = 0;
  /** Why looks fail, from the first failing one (so the condition does not change with each error's words). */
  private lookError: string | undefined;
  /** The approved digests at the last look: only they are served and published. */
  private approved: ReadonlySet<string> = new Set();
  private problem: PeersStatus['problem'];
  /** A failed opening is tried again only after this time (ms since the epoch). */
  private openAfter = 0;
  private said = '';
  private looking: Promise<void> | undefined;
  /** A change came while a look ran: one more look follows it. */
  private lookAgain = false;
  /** The approvals' watch, running while the keys are installed (without them nothing is asked of the API server). */
  private watch: ApprovalWatch | undefined;
  private timer: NodeJS.Timeout | undefined;
  private task: Promise<void> | undefined;
  private publishing: Promise<void> | undefined;
  private stopped = false;
  private shown = '';
  private servingTimer: NodeJS.Timeout | undefined;
  private servingShownAt = 0;
  /** Told of each change the watch reports: a fetch's approval check (PeerSource.watch). */
  private readonly approvalListeners = new Set<() => void>();

  constructor(private readonly d: PeerDaemon) {
    this.directory = new ApiPeerDirectory({
      node: d.config.nodeName,
      kubeconfig: d.config.status.kubeconfig!,
    });
    // a sink stays for the tracker's life: once stopped it does nothing
    d.tracker.onChange((s) => {
      if (!this.stopped) this.server?.setPaused(pausesServing(d.config, s));
    });
    d.sticks?.onTake(() => this.base?.service.yieldToStick());
  }

  private get ending(): boolean {
    return this.stopped || this.d.signal.aborted;
  }

  /** The first look (the port opens now if an approval exists; waited for firstLookWaitMs at most), then one every few seconds. */
  async start(): Promise<void> {
    const first = this.look();
    if (this.d.firstLookWaitMs === undefined) await first;
    else {
      const waited = new AbortController();
      await Promise.race([
        first,
        sleep(this.d.firstLookWaitMs, undefined, { signal: waited.signal }).catch(() => undefined),
      ]);
      waited.abort();
    }
    if (this.ending) return;
    this.timer = setInterval(
      () => void this.look(),
      this.d.pollMs ?? Math.max(MIN_PEER_POLL_MS, this.d.config.media.pollSeconds * 1000),
    );
  }

  /** One look at a time; a change during one is looked at once it is done. */
  private look(): Promise<void> {
    if (this.looking) {
      this.lookAgain = true;
      return this.looking;
    }
    this.looking = this.lookOnce()
      .catch((err: unknown) => this.lookFailed(err))
      .catch((err: unknown) =>
        this.d.log.warn('peers', `cannot close the peer port: ${oneLine(err)}`),
      )
      .finally(() => {
        this.looking = undefined;
        if (this.lookAgain && !this.ending) {
          this.lookAgain = false;
          void this.look();
        }
      });
    return this.looking;
  }

  private get graceMs(): number {
    return this.d.approvalsGraceMs ?? APPROVALS_GRACE_MS;
  }

  /** The watch of the approvals, started at the first look that found keys. */
  private watching(): ApprovalWatch {
    if (!this.watch) {
      const { config, log, pollMs, relistMs } = this.d;
      this.watch = new ApprovalWatch({
        kubeconfig: config.status.kubeconfig!,
        log,
        onChange: () => {
          void this.look();
          // a revoke stops a fetch under way as soon as the watch sees it, not at its next timed check
          for (const listener of this.approvalListeners) listener();
        },
        ...((relistMs ?? pollMs) ? { relistMs: relistMs ?? pollMs } : {}),
      });
      this.watch.start();
    }
    return this.watch;
  }

  /**
   * The keys, then the approvals as last read: the port opens or closes; an open one does its
   * work. Approvals not read for the grace (no list, event or bookmark) count as unreadable.
   */
  private async lookOnce(): Promise<void> {
    if (this.ending) return;
    if (!(await this.keysStill()) || this.ending) return;
    const watch = this.watching();
    await watch.first;
    if (this.ending) return;
    this.lastLook = watch.readAt;
    const approvals = watch.approvals;
    if (watch.error !== undefined || !approvals) throw watch.error ?? new Error('not read yet');
    const silentMs = Date.now() - watch.readAt;
    if (silentMs >= this.graceMs)
      throw new Error(
        `the API server sent no list, event or bookmark of them for ${Math.round(silentMs / 1000)} s`,
      );
    this.lookError = undefined;
    this.approved = new Set(approvals.map((a) => a.manifestDigest));
    await removeWithdrawnPeerPartials(this.d.config, this.approved, this.d.log);
    if (!approvals.length) {
      await this.close();
      return this.inert(NOT_APPROVED);
    }
    if (!this.server) await this.open();
    if (!this.server) return;
    this.say({
      status: 'True',
      reason: 'Listening',
      message: `a bundle is approved: serving the approved bundles this node keeps to other nodes on ${this.server.url} (mutual TLS) and fetching approved bundles from them`,
    });
    this.work();
  }

  /**
   * The keys read again at every look (a few KiB), so a renewed certificate or a rotated Secret
   * is used without a restart: changed ones close the port, which the look opens again with them;
   * gone or unusable ones close it and say why. False when there are none to use.
   */
  private async keysStill(): Promise<boolean> {
    const read = await readPeerKeys(this.d.config.peers);
    if ('reason' in read) {
      this.keys = undefined;
      const watch = this.watch;
      this.watch = undefined;
      await watch?.stop();
      await this.close();
      this.inert(read);
      return false;
    }
    if (this.keys && !sameKeys(this.keys, read.credentials)) {
      this.d.log.info(
        'peers',
        'the peer keys changed: the peer port opens again with the new ones',
      );
      await this.close();
      this.openAfter = 0;
    }
    this.keys = read.credentials;
    return true;
  }

  /**
   * A look that could not read the approvals. The port stays open through a short outage (an
   * API server restarting) but not beyond APPROVALS_GRACE_MS since the last look that read them,
   * and not at all once the API server refuses (the rule or the node's identity withdrawn).
   */
  private async lookFailed(err: unknown): Promise<void> {
    if (this.ending) return;
    const graceMs = this.graceMs;
    if (this.lookError === undefined || refused(err)) this.lookError = oneLine(err);
    if (this.server && (refused(err) || Date.now() - this.lastLook >= graceMs)) await this.close();
    const port = this.server
      ? `the peer port stays open for ${Math.round(graceMs / 1000)} s after the last look that read them, then closes`
      : 'this node opens no peer port and fetches nothing from other nodes until they can be read';
    this.say({
      status: 'Unknown',
      reason: APPROVALS_UNREADABLE,
      message: `cannot read the BundleApprovals (${this.lookError}); ${port}`,
    });
  }

  /** Starts the server, or says why not and tries again after retryMs. */
  private async open(): Promise<void> {
    if (Date.now() < this.openAfter || !this.keys) return;
    try {
      this.base ??= await this.makeBase();
      this.server = await this.listen(this.base);
    } catch (err) {
      this.openFailed(err);
      return;
    }
    this.problem = undefined;
    // the server listens: a cluster API that fails now is tried again at each look, never by a second start on the port
    await this.refresh().catch((err: unknown) =>
      this.d.log.warn(
        'peers',
        `cannot publish what this node serves yet: ${oneLine(err)}; tried again at the next look`,
      ),
    );
  }

  /**
   * The approvals for the service's looks and its fetch's checks (every few seconds through the
   * load): the watch's last read while it is fresh, so an open port costs the API server no list
   * of its own; a list when the watch has not read them within the grace.
   */
  private approvedNow(): Promise<PeerApproval[]> {
    const approvals = this.freshApprovals();
    return approvals ? Promise.resolve(approvals) : this.directory.approved();
  }

  /** The watch's approvals while it reads them without error within the grace; undefined otherwise. */
  private freshApprovals(): PeerApproval[] | undefined {
    const watch = this.watch;
    const approvals = watch?.approvals;
    return watch &&
      approvals &&
      watch.error === undefined &&
      Date.now() - watch.readAt < this.graceMs
      ? approvals
      : undefined;
  }

  private listenApprovals(listener: () => void): () => void {
    this.approvalListeners.add(listener);
    return () => this.approvalListeners.delete(listener);
  }

  private async makeBase(): Promise<Base> {
    const { config, log, tracker } = this.d;
    const own = await this.directory.ownNode();
    if (!own.address)
      throw new Error(`the Node ${config.nodeName} has no InternalIP to serve peers on`);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the service's fetches take the keys of the latest look
    const runner = this;
    const service = new PeerService({
      directory: {
        approved: () => this.approvedNow(),
        peersFor: (digest) => this.directory.peersFor(digest),
        onApprovalsChanged: (listener) => this.listenApprovals(listener),
      },
      get credentials() {
        return runner.keys!;
      },
      address: own.address,
      port: config.peers.port,
      context: {
        config,
        log,
        tracker,
        agentVersion: this.d.agentVersion,
        servesAfter: this.d.serves,
      },
      runtime: () => runtimeTarget(config, log),
      onServingChanged: () => this.servingChanged(),
    });
    return { service, address: own.address, controlPlane: own.controlPlane };
  }

  private async listen(b: Base): Promise<RunningPeerServer> {
    const { config, tracker } = this.d;
    const credentials = this.keys!;
    // an approval withdrawn since the last look: its bundle is not served even before the port closes
    const bundle = (m: string) => (this.approved.has(m) ? b.service.offer(m) : undefined);
    const server = await startPeerServer({
      ...peerServerOptions(config, credentials, {
        host: b.address,
        port: config.peers.port,
        controlPlane: b.controlPlane,
        bundle,
      }),
      counters: b.service.counters,
    });
    if (this.ending) {
      await server.close();
      throw new Error('stopped');
    }
    server.setPaused(pausesServing(config, tracker.current));
    return server;
  }

  /** Says why the server is not up and tries again later. */
  private openFailed(err: unknown): void {
    const retryMs = this.d.retryMs ?? PEER_START_RETRY_MS;
    this.openAfter = Date.now() + retryMs;
    const { reason, message } = startProblem(err, this.d.config);
    // said in status.peers too: the node meant to serve, and the count of copies waits for it
    this.problem = {
      reason,
      message: `not serving or fetching bundles between nodes: ${message}; trying again in ${Math.round(retryMs / 1000)} s`,
    };
    this.show();
    this.say({ status: 'False', ...this.problem });
  }

  /** The last approval was withdrawn: the port closes and this node is no peer any more. */
  private async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    await server.close();
    this.show();
  }

  /** Nothing to do, for `why` (no approval, no keys): the Peers condition says it. */
  private inert(why: { reason: string; message: string }): void {
    this.problem = undefined;
    this.show();
    this.say({ status: 'False', ...why });
  }

  /** The Peers condition, put back when a load cleared the conditions; the log says each change once. */
  private say(c: Said): void {
    const { log, tracker } = this.d;
    const key = JSON.stringify(c);
    if (key !== this.said) {
      this.said = key;
      const quiet = c.status === 'True' || c.reason === NOT_APPROVED.reason;
      if (quiet) log.info('peers', c.message, { reason: c.reason });
      else log.warn('peers', c.message, { reason: c.reason });
    }
    const now = tracker.current.conditions.find((x) => x.type === 'Peers');
    if (now?.status !== c.status || now.reason !== c.reason || now.message !== c.message)
      tracker.condition('Peers', c.status, c.reason, c.message);
  }

  async refresh(): Promise<void> {
    if (!this.server || !this.base) return;
    await this.base.service.offerKept();
    await this.publish();
  }

  /** While the port is open: what it serves and counts published, and the approvals looked at for a bundle to fetch. */
  private work(): void {
    const service = this.base?.service;
    if (this.ending || !service) return;
    // counters and copies go on while a fetch runs; a kept layout removed since (the release completed) is no longer offered
    this.publishing ??= service
      .offerKeptIfChanged()
      .then(() => this.publish())
      .catch((err: unknown) =>
        this.d.log.warn('peers', `cannot count the other nodes' copies: ${oneLine(err)}`),
      )
      .finally(() => {
        this.publishing = undefined;
      });
    if (this.task) return;
    // queued behind a stick's load, it may start after a stop, or before a stick's load that waits: it then does nothing
    this.task = this.d
      .exclusive(async () => {
        if (!this.ending && this.server && !this.d.sticks?.pending)
          await service.syncOnce(this.d.signal);
      })
      .then(
        () => this.publish(),
        (err: unknown) =>
          this.d.log.warn('peers', `cannot look for approved bundles: ${oneLine(err)}`),
      )
      .finally(() => {
        this.task = undefined;
      });
  }

  /**
   * A fetch under way began or verified a blob: status.serving says so now (its start: at once, in
   * the same write as the phase Staging) or within SERVING_PUBLISH_MS, so the nodes fetching the
   * same bundle find this one as a peer while it still fetches.
   */
  private servingChanged(): void {
    if (this.stopped || this.servingTimer) return;
    const wait = this.servingShownAt + SERVING_PUBLISH_MS - Date.now();
    const publish = () => {
      this.servingTimer = undefined;
      this.servingShownAt = Date.now();
      this.show();
    };
    if (wait <= 0) publish();
    else this.servingTimer = setTimeout(publish, wait);
  }

  /** status.serving and status.peers as they are now; the status is written only when they changed. */
  private async publish(): Promise<void> {
    if (!this.server || !this.base) return;
    const version = stickVersion(this.d.tracker.current);
    const copies = version ? await this.base.service.copies(version, this.approved) : undefined;
    this.show(copies);
  }

  private show(copies?: PeersStatus['copies']): void {
    if (this.stopped) return;
    // a node whose port is closed (never opened, or closed since: revoked, keys gone), and is not
    // failing to open it, has no status.peers, as with peers off: the technician's line then lets
    // the stick go, as nothing is passed on from this node
    if (!this.server && !this.problem) return this.unshown();
    // a closed port publishes nothing as served: others would try it
    const serving = this.server ? this.base?.service.serving(this.approved) : undefined;
    const peers: PeersStatus = {
      up: this.server !== undefined,
      ...(this.problem ? { problem: this.problem } : {}),
      transfer: this.base?.service.counters.snapshot() ?? {
        bytesServed: 0,
        bytesFetched: 0,
        fetchedFrom: [],
        suspect: [],
      },
      // a count from before (another bundle) is not shown as this one's
      ...(copies
        ? { copies }
        : this.d.tracker.current.peers?.copies
          ? { copies: this.d.tracker.current.peers.copies }
          : {}),
    };
    const next = JSON.stringify({ serving, peers });
    if (next === this.shown) return;
    this.shown = next;
    this.d.tracker.update((s) => {
      if (serving) s.serving = serving;
      else delete s.serving;
      s.peers = peers;
    });
  }

  /** status.serving and status.peers taken away (once; also what an earlier start left in the status file). */
  private unshown(): void {
    if (this.shown === UNSHOWN) return;
    this.shown = UNSHOWN;
    this.d.tracker.update((s) => {
      delete s.serving;
      delete s.peers;
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.servingTimer);
    await this.watch?.stop();
    await this.looking;
    // a look under way may have started it again
    await this.watch?.stop();
    await this.task;
    await this.publishing;
    await this.server?.close();
    // a stopped node is no peer: others would try it first
    this.d.tracker.update((s) => {
      delete s.serving;
    });
  }
}

/**
 * Looks at the keys every few seconds and watches the approvals, the port open only while an approval
 * exists; undefined when peers are off, or without status.kubeconfig (no approval can be read).
 */
export async function startPeers(d: PeerDaemon): Promise<DaemonPeers | undefined> {
  if (!d.config.peers.enabled) return undefined;
  if (!d.config.status.kubeconfig) {
    d.log.info(
      'peers',
      'bundles between nodes are on, but status.kubeconfig is not set: no approval can be read, so this node opens no peer port and fetches nothing from other nodes',
    );
    return undefined;
  }
  const runner = new DaemonPeerRunner(d);
  await runner.start();
  return runner;
}

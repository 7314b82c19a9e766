// The daemon's peers (issue #22), when peers.enabled: the peer server on the Node's InternalIP
// serving what this node keeps, status.serving published, and every few seconds a look at the
// approvals for a bundle to fetch from the other nodes, one thing at a time with the stick's loads.
// A server that cannot start (port taken, certificate unreadable) is said in status.peers and
// tried again; while this node's own load runs it may pause serving (peers.pauseWhileLoading).
import { onRemovableMedia, PEER_MEDIA, type NodeStatus, type PeersStatus, type StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { failureOf, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { ApiPeerDirectory } from '../peers/directory.js';
import { peerServerOptions } from '../peers/peer-config.js';
import { startPeerServer, type RunningPeerServer } from '../peers/peer-server.js';
import { PeerService } from '../peers/peer-service.js';
import { loadPeerCredentials } from '../peers/peer-tls.js';
import { runtimeTarget } from '../runtime/runtime-target.js';
import type { StickTurn } from './stick-turn.js';

/** How often the approvals are looked at, at least. */
const MIN_PEER_POLL_MS = 5000;
/** How long after a failed start the peer server is tried again. */
export const PEER_START_RETRY_MS = 60_000;
/** status.serving follows a fetch under way (each verified blob changes its count) at most this often. */
export const SERVING_PUBLISH_MS = 2000;

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
  /** Tests: a shorter retry of a failed start, a shorter look at the approvals. */
  retryMs?: number;
  pollMs?: number;
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
const stickVersion = (s: NodeStatus): string | undefined => (s.phase === 'Ready' && s.bundle?.media !== PEER_MEDIA && onRemovableMedia(s.bundle?.media) ? s.bundle?.version : undefined);

/** Why the peer server did not start, with the fix where the cause is known. */
function startProblem(err: unknown, config: AgentConfig): { reason: string; message: string } {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'EADDRINUSE') return { reason: 'PeerPortInUse', message: `port ${config.peers.port} is taken by another program (${oneLine(err)}): stop it, or set peers.port to a free port in 9000-9999 on every node` };
  if (code === 'EADDRNOTAVAIL') return { reason: 'PeerAddressUnavailable', message: `${oneLine(err)}: the Node's InternalIP is not an address of this machine` };
  const { reason, message } = failureOf(err, config.paths.upgradeDir);
  return { reason: reason === 'Internal' ? 'PeerServerFailed' : reason, message };
}

interface Running { server: RunningPeerServer; service: PeerService }

class DaemonPeerRunner implements DaemonPeers {
  private running: Running | undefined;
  private problem: PeersStatus['problem'];
  private timer: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  private task: Promise<void> | undefined;
  private publishing: Promise<void> | undefined;
  private stopped = false;
  private shown = '';
  private servingTimer: NodeJS.Timeout | undefined;
  private servingShownAt = 0;

  constructor(private readonly d: PeerDaemon) {
    // a sink stays for the tracker's life: once stopped it does nothing
    d.tracker.onChange((s) => { if (!this.stopped) this.running?.server.setPaused(pausesServing(d.config, s)); });
    d.sticks?.onTake(() => this.running?.service.yieldToStick());
  }

  /** Starts the server, or says why not and tries again later. */
  async start(): Promise<void> {
    const { log } = this.d;
    try {
      this.running = await this.setUp();
    } catch (err) {
      this.startFailed(err);
      return;
    }
    this.problem = undefined;
    // the server listens: a cluster API that fails now is tried again at each look, never by a second start on the port
    await this.refresh().catch((err: unknown) => log.warn('peers', `cannot publish what this node serves yet: ${oneLine(err)}; tried again at the next look`));
    log.info('peers', `serving other nodes on ${this.running.server.url}; fetching approved bundles from them`, { url: this.running.server.url });
    if (this.stopped) return;
    this.timer = setInterval(() => this.tick(), this.d.pollMs ?? Math.max(MIN_PEER_POLL_MS, this.d.config.media.pollSeconds * 1000));
  }

  /** Says why the server is not up and tries again later. */
  private startFailed(err: unknown): void {
    const retryMs = this.d.retryMs ?? PEER_START_RETRY_MS;
    const { reason, message } = startProblem(err, this.d.config);
    this.problem = { reason, message: `not serving or fetching bundles between nodes: ${message}; trying again in ${Math.round(retryMs / 1000)} s` };
    this.d.log.warn('peers', this.problem.message, { reason: this.problem.reason });
    this.show(undefined);
    if (!this.stopped && !this.d.signal.aborted) this.retry = setTimeout(() => void this.start(), retryMs);
  }

  private async setUp(): Promise<Running> {
    const { config, log, tracker } = this.d;
    const credentials = await loadPeerCredentials(config.peers);
    const directory = new ApiPeerDirectory({ node: config.nodeName, kubeconfig: config.status.kubeconfig! });
    const own = await directory.ownNode();
    if (!own.address) throw new Error(`the Node ${config.nodeName} has no InternalIP to serve peers on`);
    const service = new PeerService({
      directory, credentials, address: own.address, port: config.peers.port,
      context: { config, log, tracker, agentVersion: this.d.agentVersion, servesAfter: this.d.serves }, runtime: () => runtimeTarget(config, log),
      onServingChanged: () => this.servingChanged(),
    });
    const server = await startPeerServer({
      ...peerServerOptions(config, credentials, { host: own.address, port: config.peers.port, controlPlane: own.controlPlane, bundle: (m) => service.offer(m) }),
      counters: service.counters,
    });
    if (this.stopped) {
      await server.close();
      throw new Error('stopped');
    }
    server.setPaused(pausesServing(config, tracker.current));
    return { server, service };
  }

  async refresh(): Promise<void> {
    if (!this.running) return;
    await this.running.service.offerKept();
    await this.publish();
  }

  private tick(): void {
    if (this.stopped || this.d.signal.aborted || !this.running) return;
    // counters and copies go on while a fetch runs
    this.publishing ??= this.publish().catch((err: unknown) => this.d.log.warn('peers', `cannot count the other nodes' copies: ${oneLine(err)}`)).finally(() => { this.publishing = undefined; });
    if (this.task) return;
    const { service } = this.running;
    // queued behind a stick's load, it may start after a stop, or before a stick's load that waits: it then does nothing
    this.task = this.d.exclusive(async () => { if (!this.d.signal.aborted && !this.stopped && !this.d.sticks?.pending) await service.syncOnce(this.d.signal); })
      .then(() => this.publish(), (err: unknown) => this.d.log.warn('peers', `cannot look for approved bundles: ${oneLine(err)}`))
      .finally(() => { this.task = undefined; });
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
      this.show(this.running);
    };
    if (wait <= 0) publish();
    else this.servingTimer = setTimeout(publish, wait);
  }

  /** status.serving and status.peers as they are now; the status is written only when they changed. */
  private async publish(): Promise<void> {
    const r = this.running;
    if (!r) return;
    const version = stickVersion(this.d.tracker.current);
    const copies = version ? await r.service.copies(version) : undefined;
    this.show(r, copies);
  }

  private show(r: Running | undefined, copies?: PeersStatus['copies']): void {
    if (this.stopped) return;
    const serving = r?.service.serving();
    const peers: PeersStatus = {
      up: r !== undefined, ...(this.problem ? { problem: this.problem } : {}),
      transfer: r?.service.counters.snapshot() ?? { bytesServed: 0, bytesFetched: 0, fetchedFrom: [], suspect: [] },
      // a count from before (another bundle) is not shown as this one's
      ...(copies ? { copies } : this.d.tracker.current.peers?.copies ? { copies: this.d.tracker.current.peers.copies } : {}),
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

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.retry);
    clearTimeout(this.servingTimer);
    await this.task;
    await this.publishing;
    await this.running?.server.close();
    // a stopped node is no peer: others would try it first
    this.d.tracker.update((s) => { delete s.serving; });
  }
}

/** Starts serving and watching the approvals; undefined when peers are off. A failed start is said in status.peers and tried again. */
export async function startPeers(d: PeerDaemon): Promise<DaemonPeers | undefined> {
  if (!d.config.peers.enabled || !d.config.status.kubeconfig) return undefined;
  const runner = new DaemonPeerRunner(d);
  await runner.start();
  return runner;
}

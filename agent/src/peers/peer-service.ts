// The node's side of bundles between nodes (issue #22), between the daemon and the transfer:
// what it holds verified is offered to its peers (kept layouts, and a fetch under way, blob by
// blob, so nodes pass a bundle on as they get it), and a bundle an admin approved that this
// node lacks is fetched from them and loaded as a stick's would be (runLayoutLoad).
import { loadTrust } from '@offline-bundle/format';
import type { ServingStatus } from '@offline-bundle/status';
import { failureOf, oneLine } from '../errors.js';
import { runLayoutLoad, type LoadResult, type PipelineContext } from '../load/pipeline.js';
import { readReleases } from '../releases/state.js';
import type { RuntimeTarget } from '../runtime/runtime-target.js';
import { PeerCounters } from './peer-counters.js';
import { peerFetchBase } from './peer-config.js';
import { fetchFromPeers } from './peer-fetch.js';
import type { PeerCredentials } from './peer-tls.js';
import { ServedBundle, type PeerOffer } from './served-bundle.js';
import type { PeerApproval, PeerDirectory } from './types.js';

/** A refused or failed fetch of one approval is tried again only after this long (a new approval is tried at once). */
export const PEER_RETRY_MS = 10 * 60_000;

export interface PeerServiceOptions {
  directory: PeerDirectory;
  credentials: PeerCredentials;
  /** Where peers reach this node's server (the Node's InternalIP, peers.port): what status.serving publishes. */
  address: string;
  port: number;
  /** The load's context for a fetched layout (config, log, status, the agent's version), its runtime made per load and closed after it. */
  context: Omit<PipelineContext, 'runtime'>;
  runtime: () => RuntimeTarget;
  now?: () => number;
}

export class PeerService {
  private readonly offers = new Map<string, ServedBundle>();
  private readonly failedAt = new Map<string, number>();
  readonly counters = new PeerCounters();

  constructor(private readonly o: PeerServiceOptions) {}

  /** What the peer server serves under `manifestDigest`. */
  offer(manifestDigest: string): PeerOffer | undefined {
    return this.offers.get(manifestDigest);
  }

  /** The layouts this node keeps (staging.keep), offered; the newest is what status.serving publishes. */
  async offerKept(): Promise<ServingStatus | undefined> {
    const { config, log } = this.o.context;
    for (const r of await readReleases(config.paths.stateDir)) {
      if (!r.layout) continue;
      const served = await ServedBundle.fromLayout(r.layout).catch((err: unknown) => {
        log.warn('peers', `the layout kept in ${r.layout!} cannot be offered to other nodes: ${oneLine(err)}`);
        return undefined;
      });
      if (served) this.offers.set(served.manifestDigest, served);
    }
    return this.serving();
  }

  /** What status.serving says: the most complete offer (one per node: the resource has one field). */
  serving(): ServingStatus | undefined {
    const best = [...this.offers.values()].sort((a, b) => Number(b.complete) - Number(a.complete))[0];
    if (!best) return undefined;
    const verifiedBlobs = best.verifiedDigests(Number.MAX_SAFE_INTEGER).length;
    return { manifestDigest: best.manifestDigest, complete: best.complete, verifiedBlobs, address: this.o.address, port: this.o.port };
  }

  /**
   * One look at the approvals: the first one this node neither holds nor tried lately is fetched
   * and loaded. Returns the load's result, or undefined when there was nothing to do or it failed
   * (the failure is in the status, as a stick's is).
   */
  async syncOnce(signal?: AbortSignal): Promise<LoadResult | undefined> {
    const wanted = await this.nextWanted(this.o.context);
    if (!wanted) return undefined;
    const ctx: PipelineContext = { ...this.o.context, runtime: this.o.runtime(), media: 'peers', ...(signal ? { signal } : {}) };
    ctx.log.info('peers', `bundle ${wanted.version} (${wanted.manifestDigest}) is approved and not on this node: fetching it from other nodes`, { digest: wanted.manifestDigest });
    let loading = false;
    try {
      const r = await fetchFromPeers({
        ...peerFetchBase(ctx.config, this.o.credentials, await loadTrust(ctx.config.trust.keys)),
        approval: wanted, directory: this.o.directory, counters: this.counters, ...(signal ? { signal } : {}),
        onStaging: (head, partial, target) => this.offers.set(wanted.manifestDigest, ServedBundle.staging(partial, target, head)),
        onVerified: (e) => this.offers.get(wanted.manifestDigest)?.verified(e.digest),
      });
      this.offers.get(wanted.manifestDigest)?.staged();
      loading = true;
      const loaded = await runLayoutLoad(r.target, ctx);
      await this.afterLoad(wanted, r.target, ctx);
      return loaded;
    } catch (err) {
      this.failedAt.set(wanted.manifestDigest, (this.o.now ?? Date.now)());
      this.offers.delete(wanted.manifestDigest);
      // the load reports its own failure; a fetch's goes into the status here, as a stick's read would
      if (!loading) this.reportFetchFailure(err, wanted, ctx);
      return undefined;
    } finally {
      await ctx.runtime.close();
    }
  }

  private reportFetchFailure(err: unknown, a: PeerApproval, ctx: PipelineContext): void {
    const { reason, message } = failureOf(err, ctx.config.paths.upgradeDir);
    ctx.tracker.condition('Failed', 'True', reason, message);
    ctx.tracker.condition('Ready', 'False', reason, message);
    ctx.tracker.phase('Failed');
    ctx.log.error('peers', `bundle ${a.version} from other nodes: ${message}`, { reason, digest: a.manifestDigest });
  }

  /** A layout the config does not keep is gone after Ready: nothing of it to offer. */
  private async afterLoad(a: PeerApproval, target: string, ctx: Omit<PipelineContext, 'runtime'>): Promise<void> {
    this.offers.delete(a.manifestDigest);
    if (ctx.config.staging.keep === false) return;
    const served = await ServedBundle.fromLayout(target).catch(() => undefined);
    if (served) this.offers.set(a.manifestDigest, served);
  }

  /** The first approval this node does not hold (as an offer, or a release of that version loaded) and has not failed lately. */
  private async nextWanted(ctx: Omit<PipelineContext, 'runtime'>): Promise<PeerApproval | undefined> {
    const approvals = await this.o.directory.approved();
    const loaded = new Set((await readReleases(ctx.config.paths.stateDir)).map((r) => r.version));
    const now = (this.o.now ?? Date.now)();
    return approvals.find((a) => {
      if (this.offers.get(a.manifestDigest)?.complete || loaded.has(a.version)) return false;
      const failed = this.failedAt.get(a.manifestDigest);
      return failed === undefined || now - failed >= PEER_RETRY_MS;
    });
  }
}

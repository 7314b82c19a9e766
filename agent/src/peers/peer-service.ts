// The node's side of bundles between nodes (issue #22), between the daemon and the transfer:
// what it holds verified is offered to its peers (kept layouts, and a fetch under way, blob by
// blob, so nodes pass a bundle on as they get it), and a bundle an admin approved that this
// node lacks is fetched from them and loaded by the load pipeline, the peers its origin of the
// bytes (runLoad of a PeerSource), as a stick's load runs.
import { join } from 'node:path';
import { compareVersions, loadTrust } from '@offline-bundle/format';
import type { PeerCopies, ServingStatus } from '@offline-bundle/status';
import { AgentError, failureOf, oneLine } from '../errors.js';
import { checkPolicy } from '../load/policy.js';
import {
  runLoad,
  runningVersion,
  type LoadResult,
  type PipelineContext,
} from '../load/pipeline.js';
import { isForgotten, readForgotten } from '../state/bundle-records.js';
import { readReleases } from '../state/release-records.js';
import type { RuntimeTarget } from '../runtime/runtime-target.js';
import { PeerCounters } from './peer-counters.js';
import { peerFetchBase } from './peer-config.js';
import { NOT_FOR_THIS_NODE, PeerSource } from './peer-fetch.js';
import type { PeerCredentials } from './peer-tls.js';
import { ServedBundle, type PeerOffer } from './served-bundle.js';
import type { PeerApproval, PeerDirectory } from './types.js';

/** A refused or failed fetch of one approval is tried again only after this long (a new approval is tried at once). */
const PEER_RETRY_MS = 10 * 60_000;

/** The kept layouts of the release records, as one string to compare. */
const keptKey = (releases: readonly { layout?: string | undefined }[]) =>
  releases.map((r) => r.layout ?? '').join('\n');

interface PeerServiceOptions {
  directory: PeerDirectory;
  credentials: PeerCredentials;
  /** Where peers reach this node's server (the Node's InternalIP, peers.port): what status.serving publishes. */
  address: string;
  port: number;
  /** The load's context for a fetched layout (config, log, status, the agent's version), its runtime made per load and closed after it. */
  context: Omit<PipelineContext, 'runtime'>;
  runtime: () => RuntimeTarget;
  now?: () => number;
  /**
   * A fetch under way began serving, or verified one more blob: what serving() says changed.
   * The daemon publishes it (at most every few seconds), so nodes fetching the same bundle find
   * this one as a peer while it still fetches.
   */
  onServingChanged?: () => void;
}

export class PeerService {
  private readonly offers = new Map<string, ServedBundle>();
  private readonly failedAt = new Map<string, number>();
  /** The kept layouts offerKept last read: offered again only when they changed. */
  private keptSeen: string | undefined;
  /** Approvals waited for (no peer yet, the lock busy): said once in the log. */
  private readonly waitingFor = new Set<string>();
  /** Stops the fetch under way (not the load after it): a stick's load comes first (yieldToStick). */
  private fetching: AbortController | undefined;
  readonly counters = new PeerCounters();

  constructor(private readonly o: PeerServiceOptions) {}

  /** What the peer server serves under `manifestDigest`. */
  offer(manifestDigest: string): PeerOffer | undefined {
    return this.offers.get(manifestDigest);
  }

  /**
   * The layouts this node keeps (staging.keep, or serve-until-complete's until the cluster runs
   * the release), offered afresh: a layout forgotten or removed since is no longer offered; a
   * fetch under way stays. Returns what status.serving publishes.
   */
  async offerKept(): Promise<ServingStatus | undefined> {
    const { config, log } = this.o.context;
    const kept = new Map<string, ServedBundle>();
    const releases = await readReleases(config.paths.stateDir);
    this.keptSeen = keptKey(releases);
    for (const r of releases) {
      if (!r.layout) continue;
      const served = await ServedBundle.fromLayout(r.layout).catch((err: unknown) => {
        log.warn(
          'peers',
          `the layout kept in ${r.layout!} cannot be offered to other nodes: ${oneLine(err)}`,
        );
        return undefined;
      });
      if (served) kept.set(served.manifestDigest, served);
    }
    for (const [digest, offer] of this.offers)
      if (!offer.complete && !kept.has(digest)) kept.set(digest, offer);
    this.offers.clear();
    for (const [digest, offer] of kept) this.offers.set(digest, offer);
    return this.serving();
  }

  /**
   * offerKept when the kept layouts changed since it last ran: a load kept one, or the cleanup or
   * serve-until-complete removed one (its blobs must not be offered once they are gone).
   */
  async offerKeptIfChanged(): Promise<void> {
    if (keptKey(await readReleases(this.o.context.config.paths.stateDir)) !== this.keptSeen)
      await this.offerKept();
  }

  /**
   * What status.serving says: the newest release offered, held whole or being fetched (one per
   * node: the resource has one field); with `approved`, only among those digests.
   */
  serving(approved?: ReadonlySet<string>): ServingStatus | undefined {
    // a fetch under way of a newer release than the one kept is what the other nodes fetch now too:
    // published (complete: false, its count of verified blobs) so they take blobs from it
    const byVersion = (a: ServedBundle, b: ServedBundle) =>
      compareVersions(b.manifest.release.version, a.manifest.release.version);
    const best = [...this.offers.values()]
      .filter((o) => !approved || approved.has(o.manifestDigest))
      .sort((a, b) => byVersion(a, b) || Number(b.complete) - Number(a.complete))[0];
    if (!best) return undefined;
    const verifiedBlobs = best.verifiedDigests(Number.MAX_SAFE_INTEGER).length;
    return {
      manifestDigest: best.manifestDigest,
      complete: best.complete,
      verifiedBlobs,
      address: this.o.address,
      port: this.o.port,
    };
  }

  /**
   * How many other nodes hold the bundle of `version` (the one this node loaded) whole, found as
   * a fetch finds its peers: through the directory (status.serving checked against each Node).
   * The bundle is named by what this node offers, else by an approval of that version. With
   * `approved` (the daemon's last look), this node passes it on only if its digest is approved:
   * an offer the port never serves keeps no stick in.
   */
  async copies(version: string, approved?: ReadonlySet<string>): Promise<PeerCopies> {
    const ofVersion = [...this.offers.values()].filter(
      (o) => o.complete && o.manifest.release.version === version,
    );
    const offer =
      ofVersion.find((o) => !approved || approved.has(o.manifestDigest)) ?? ofVersion[0];
    const passedOn = offer !== undefined && (!approved || approved.has(offer.manifestDigest));
    // without an offer of its own the bundle is named by its approval: two of one version (two
    // arches, a rebuilt bundle) name none, so nothing is counted
    const approvals = offer
      ? []
      : (await this.o.directory.approved()).filter((a) => a.version === version);
    const digest =
      offer?.manifestDigest ?? (approvals.length === 1 ? approvals[0]!.manifestDigest : undefined);
    const nodes = digest
      ? (await this.o.directory.peersFor(digest)).filter((p) => p.complete).length
      : 0;
    return { version, nodes, serving: passedOn };
  }

  /**
   * A load of a bundle found on a stick (or in the drop directory) wants the node: the fetch
   * under way stops as a stop does (the blobs it verified whole are kept) and is looked at again after it.
   */
  yieldToStick(): void {
    this.fetching?.abort(
      new AgentError(
        'Interrupted',
        'a bundle found on a stick or in the drop directory is loaded first: the fetch from peers stopped; the blobs it verified whole are kept (one cut short is fetched again)',
      ),
    );
  }

  /**
   * One look at the approvals: the first one this node neither holds nor tried lately is fetched
   * and loaded, by the load itself (runLoad of a PeerSource: one turn of the load lock for the
   * fetch and the load, the approval watched until the load ends). Returns the load's result, or
   * undefined when there was nothing to do or it failed (the failure is in the status, as a
   * stick's is; a wait or a withdrawn approval leaves the status as it was).
   */
  async syncOnce(signal?: AbortSignal): Promise<LoadResult | undefined> {
    const { config, log } = this.o.context;
    // only a signature vouches for what peers send: a node that trusts a file digest takes sticks only
    if (!config.trust.keys.length) return undefined;
    // from the first await on: a stick's load that wants the node meanwhile stops the fetch before it begins
    const stop = new AbortController();
    this.fetching = stop;
    let runtime: RuntimeTarget | undefined;
    let wanted: PeerApproval | undefined;
    let source: PeerSource | undefined;
    try {
      wanted = await this.nextWanted();
      if (!wanted || stop.signal.aborted) return undefined;
      log.info(
        'peers',
        `bundle ${wanted.version} (${wanted.manifestDigest}) is approved and not on this node: fetching it from other nodes`,
        { digest: wanted.manifestDigest },
      );
      runtime = this.o.runtime();
      source = await this.source(wanted, stop.signal);
      const loaded = await runLoad(source, {
        ...this.o.context,
        runtime,
        ...(signal ? { signal } : {}),
      });
      await this.afterLoad(
        wanted,
        join(config.paths.upgradeDir, `${loaded.version}-${loaded.arch}`),
      );
      return loaded;
    } catch (err) {
      if (wanted) this.afterFailure(wanted, err, source?.filled === true);
      return undefined;
    } finally {
      this.fetching = undefined;
      await runtime?.close();
    }
  }

  /** The fetch that failed or waits: said in the log (the load put what failed in the status), tried again at the next look or after PEER_RETRY_MS. */
  private afterFailure(wanted: PeerApproval, err: unknown, filled: boolean): void {
    const { config, log } = this.o.context;
    this.offers.delete(wanted.manifestDigest);
    const { reason, message } = failureOf(err, config.paths.upgradeDir);
    // another load holds the lock, a stop, or no node holds it yet (the seed still loading): tried again at the next look
    if (reason === 'Busy' || reason === 'Interrupted' || reason === 'NoPeerHasBundle') {
      if (!this.waitingFor.has(wanted.manifestDigest))
        log.info('peers', `bundle ${wanted.version}: ${message}; looking again every few seconds`, {
          reason,
        });
      this.waitingFor.add(wanted.manifestDigest);
      return;
    }
    // the admin withdrew it: nothing of this node failed (the load gave the status back)
    if (reason === 'ApprovalRevoked') {
      log.info('peers', `bundle ${wanted.version}: ${message}`, {
        reason,
        digest: wanted.manifestDigest,
      });
      return;
    }
    this.failedAt.set(wanted.manifestDigest, (this.o.now ?? Date.now)());
    // approved for the cluster, not for this node (another arch, older than what it runs): refused before the fetch showed itself
    // or after it (the running version known only then): the load removed what was fetched
    const fate = filled ? 'fetched, then refused: its staging is removed' : 'not fetched';
    if (NOT_FOR_THIS_NODE.has(reason))
      log.info(
        'peers',
        `bundle ${wanted.version} is approved but not for this node: ${message}; ${fate}`,
        { reason, digest: wanted.manifestDigest },
      );
  }

  /** The peers as the load's origin of `wanted`: what it verifies is offered on as it comes. */
  private async source(wanted: PeerApproval, signal: AbortSignal): Promise<PeerSource> {
    const { config } = this.o.context;
    return new PeerSource({
      ...peerFetchBase(config, this.o.credentials, await loadTrust(config.trust.keys)),
      approval: wanted,
      directory: this.o.directory,
      counters: this.counters,
      signal,
      onStaging: (head, partial, target) => {
        this.offers.set(wanted.manifestDigest, ServedBundle.staging(partial, target, head));
        this.o.onServingChanged?.();
      },
      onVerified: (e) => {
        this.offers.get(wanted.manifestDigest)?.verified(e.digest);
        this.o.onServingChanged?.();
      },
      // verified pieces of a blob still arriving: served at once, found through /have (the status counts whole blobs)
      onPieces: (e, bytes) =>
        this.offers.get(wanted.manifestDigest)?.verifiedPrefix(e.digest, bytes),
      admit: async (m) => {
        const current = await runningVersion(this.o.context);
        // an unknown running version is the load's to wait for (it asks the cluster again); arch and a known version are refused now
        checkPolicy(
          m,
          current ? config : { ...config, version: { ...config.version, allowUnknown: true } },
          current,
        );
      },
    });
  }

  /**
   * A layout the load did not keep is gone after Ready: nothing of it to offer. One it kept (by
   * staging.keep, or for serve-until-complete: its release record names it) is offered on.
   */
  private async afterLoad(a: PeerApproval, target: string): Promise<void> {
    this.offers.delete(a.manifestDigest);
    if (
      !(await readReleases(this.o.context.config.paths.stateDir)).some((r) => r.layout === target)
    )
      return;
    const served = await ServedBundle.fromLayout(target).catch(() => undefined);
    if (served) this.offers.set(a.manifestDigest, served);
  }

  /** The first approval this node does not hold (an offer, a release of that version loaded), did not forget, and has not failed lately. */
  private async nextWanted(): Promise<PeerApproval | undefined> {
    const { config } = this.o.context;
    const approvals = await this.o.directory.approved();
    const loaded = new Set((await readReleases(config.paths.stateDir)).map((r) => r.version));
    const forgotten = await readForgotten(config.paths.stateDir);
    const now = (this.o.now ?? Date.now)();
    // an approval withdrawn and given again is a new request
    for (const digest of this.failedAt.keys())
      if (!approvals.some((a) => a.manifestDigest === digest)) this.failedAt.delete(digest);
    return approvals.find((a) => {
      if (this.offers.get(a.manifestDigest)?.complete || loaded.has(a.version)) return false;
      // `releases forget` holds for peers as for sticks: unforget to take it again
      if (isForgotten(forgotten, { version: a.version, arch: config.arch })) return false;
      const failed = this.failedAt.get(a.manifestDigest);
      return failed === undefined || now - failed >= PEER_RETRY_MS;
    });
  }
}

// A node without a stick fetches an approved bundle from its peers into its own staging, as
// the stick would have staged it: the peers are an origin of the bundle's bytes (PeerSource, an
// EntrySource) that the load (load/pipeline.ts runLoad) stages through its own steps and writer
// and then runs on unchanged (loopback registry, pre-pull, pins). What the daemon calls (README
// "Bundles between nodes: the transfer").
import type { LayoutEntry, TrustedKey, BundleManifest, Trust } from '@offline-bundle/format';
import { PEER_MEDIA } from '@offline-bundle/status';
import { AgentError, oneLine } from '../errors.js';
import { POLICY_REFUSALS } from '../load/policy.js';
import {
  stageEntries,
  type EntryFill,
  type EntrySource,
  type SpaceCheck,
} from '../load/entry-staging.js';
import type { StagedHead } from '../load/kept-layout.js';
import type { SpaceWords } from '../load/space.js';
import { BlobFetch } from './peer-blobs.js';
import { FETCH_DEADLINE_MS, type MinRate } from './peer-bounds.js';
import { PeerClient } from './peer-client.js';
import { PeerCounters } from './peer-counters.js';
import { fetchHead, type PeerHead } from './peer-head.js';
import type { PeerCredentials } from './peer-tls.js';
import type { PeerApproval, PeerDirectory } from './types.js';

interface PeerSourceOptions {
  approval: PeerApproval;
  directory: PeerDirectory;
  credentials: PeerCredentials;
  /** The node's pinned keys (config trust.keys): the fetched bundle.json must verify with one. */
  trust: Trust;
  /** config.paths.upgradeDir: the layout lands in UPGRADE/<version>-<arch>, as from a stick. */
  upgradeDir: string;
  /** Stops the fetch (not the load after it): SIGTERM, or the daemon's own reason; what was verified stays for the next try. */
  signal?: AbortSignal;
  /** Blobs fetched at once, each from another peer (default 4). */
  streams?: number;
  /** fsync each blob before its rename (default true: the staging survives a power cut). */
  fsync?: boolean;
  /** How long peers that are still fetching may hold nothing new before this fetch gives up (default 60 s). */
  stallMs?: number;
  /** How often the peer list and what peers still fetching hold are looked at again while blobs flow (default 2000 ms). */
  peerRefreshMs?: number;
  /** Where the fetch starts in the blob list and which holder it asks (default Math.random; tests: a fixed sequence). */
  random?: () => number;
  /** How often the approval is looked up again while fetching and loading, when the directory's watch is not fresh (default 5000 ms); each change the watch reports is looked at at once. */
  approvalCheckMs?: number;
  connectTimeoutMs?: number;
  idleTimeoutMs?: number;
  /** Every small answer (bundle.json, signature, a listing) whole within this (default: by its size, PeerClient.small); tests: shorter. */
  smallDeadlineMs?: number;
  /** The fetch ends (Interrupted, its verified blobs kept) this long after it began (default FETCH_DEADLINE_MS). */
  deadlineMs?: number;
  /** The least a blob transfer must bring in (default MIN_BLOB_RATE); tests: a shorter window. */
  minRate?: MinRate;
  /** 503s in a row a peer may answer before the next counts as a failed try and drops it (default FREE_BUSY_ANSWERS). */
  freeBusyAnswers?: number;
  counters?: PeerCounters;
  /** The head verified and the partial directory ready: serve it to others from here (ServedBundle.staging). */
  onStaging?: (head: PeerHead, partial: string, target: string) => void;
  /** An entry is in place and verified (a kept one on a resume, too): serve it, announce it. */
  onVerified?: (entry: LayoutEntry) => void;
  /** The first `bytes` of an entry being fetched are verified pieces (the head's `pieces`; 0: it starts over): serve them (ServedBundle.verifiedPrefix). */
  onPieces?: (entry: LayoutEntry, bytes: number) => void;
  /**
   * The node's own refusals of the verified bundle.json (arch, version policy): asked right
   * after the head, so a bundle this node would refuse at its load costs no blob.
   */
  admit?: (manifest: BundleManifest) => Promise<void>;
}

/** A fetch alone, without its load (the transfer's tests, a tool): the space check and the progress are the caller's. */
export interface PeerFetchOptions extends PeerSourceOptions {
  /** The load's space check (planSpace(m, config, credit, words)): only a staged layout can be fetched. */
  planSpace: SpaceCheck;
  onProgress?: (done: number, total: number) => void;
}

interface PeerFetchResult {
  /**
   * Where the layout goes: UPGRADE/<version>-<arch>. A fetch leaves it whole in
   * `<target>.partial` under its resume marker, as a stick's staging stands before its last
   * rename: the load puts it in place (finishLayout), and until then a restart keeps it and the
   * next fetch (or a stick of the same bundle) resumes it. `already`: found in `target`.
   */
  target: string;
  manifest: BundleManifest;
  manifestBytes: Buffer;
  signature: Buffer;
  signer: TrustedKey;
  /** Bytes of the layout kept from an interrupted staging (0 when none). */
  keptBytes: number;
  /** It was staged already (a kept layout of this very bundle.json): nothing fetched. */
  already: boolean;
}

async function stillApproved(directory: PeerDirectory, digest: string): Promise<boolean> {
  return (await directory.approved()).some((a) => a.manifestDigest === digest);
}

const revoked = (a: PeerApproval) =>
  new AgentError(
    'ApprovalRevoked',
    `the approval of bundle ${a.version} (${a.manifestDigest}) was withdrawn: nothing of it is kept; approve it again to fetch it`,
  );

const MAX_TIMER_MS = 2 ** 31 - 1;

/** Reasons a fetch was cut short, not judged: its verified entries are kept for the next try. */
const CUT_SHORT: ReadonlySet<string> = new Set(['Interrupted', 'NoPeerHasBundle', 'PeersSuspect']);

/** The version policy's refusals of a bundle: approved for the cluster, meant for other nodes (no failure of this node when refused before the fetch). */
export const NOT_FOR_THIS_NODE: ReadonlySet<string> = POLICY_REFUSALS;

/** Reasons a fetch that ended before its last entry leaves the status as it was: nothing of this node failed; tried again at the next look. */
const WAITS: ReadonlySet<string> = new Set(['Interrupted', 'NoPeerHasBundle']);

const overdue = (o: PeerSourceOptions, ms: number) =>
  new AgentError(
    'Interrupted',
    `the fetch of bundle ${o.approval.version} from peers ran past its ${Math.round(ms / 1000)} s deadline (the peers are too slow or keep failing): the blobs verified whole are kept (one cut short is fetched again); it goes on at the next look, or bring the bundle on a stick`,
  );

/** The space check's words for a fetch: no stick to plug in again, the fetch is tried again; never served from the media. */
const peerWords = (version: string): SpaceWords => ({
  lead: `bundle ${version} is not fetched from peers: `,
  again: '',
  after: '; the fetch is tried again later',
});

/**
 * The peers as an origin of a bundle's bytes (EntrySource): the signed head from one of them,
 * then the missing entries from all of them through the load's writer. The load holds it for
 * the whole attempt: the approval is watched until the load ends; the fetch's deadline and
 * `signal` stop the fetch only.
 */
export class PeerSource implements EntrySource {
  readonly media = PEER_MEDIA;
  readonly words: SpaceWords;
  readonly fsync: boolean;
  private readonly counters: PeerCounters;
  private readonly stop = new AbortController();
  private readonly client: PeerClient;
  private readonly sentBefore: Map<string, number>;
  private deadline: NodeJS.Timeout | undefined;
  private readonly onAbort = () => this.stop.abort(this.o.signal!.reason);
  /** The verified head, once asked (its signer: PeerFetchResult). */
  peerHead: PeerHead | undefined;
  /** Every missing entry was fetched (what a refusal after the fetch is said with). */
  filled = false;

  /** The approval names the bundle before any peer is asked. */
  get identity(): string {
    return this.o.approval.manifestDigest;
  }

  constructor(private readonly o: PeerSourceOptions) {
    this.words = peerWords(o.approval.version);
    this.fsync = o.fsync !== false;
    this.counters = o.counters ?? new PeerCounters();
    this.sentBefore = new Map(this.counters.fetchedFrom);
    this.client = new PeerClient({
      credentials: o.credentials,
      ...(o.connectTimeoutMs ? { connectTimeoutMs: o.connectTimeoutMs } : {}),
      ...(o.idleTimeoutMs ? { idleTimeoutMs: o.idleTimeoutMs } : {}),
      ...(o.smallDeadlineMs ? { smallDeadlineMs: o.smallDeadlineMs } : {}),
    });
  }

  /** The fetch's own stop: the attempt's, `o.signal`, the deadline, a withdrawn approval. */
  signal(): AbortSignal {
    return this.stop.signal;
  }

  async head(attempt: AbortSignal): Promise<PeerHead> {
    const o = this.o;
    const link = () => this.stop.abort(attempt.reason);
    if (attempt.aborted) link();
    attempt.addEventListener('abort', link, { once: true });
    if (o.signal?.aborted) this.onAbort();
    o.signal?.addEventListener('abort', this.onAbort, { once: true });
    const deadlineMs = o.deadlineMs ?? FETCH_DEADLINE_MS;
    // a timer past 2^31 ms would fire at once
    this.deadline = setTimeout(
      () => this.stop.abort(overdue(o, deadlineMs)),
      Math.min(deadlineMs, MAX_TIMER_MS),
    );
    try {
      if (!(await stillApproved(o.directory, o.approval.manifestDigest))) throw revoked(o.approval);
      const peers = await o.directory.peersFor(o.approval.manifestDigest);
      if (!peers.length)
        throw new AgentError(
          'NoPeerHasBundle',
          `no other node holds bundle ${o.approval.version} (${o.approval.manifestDigest}): wait for one that does, or bring it on a stick`,
        );
      const { head } = await fetchHead(
        o.approval,
        peers,
        o.trust,
        this.client,
        this.counters,
        this.stop.signal,
      );
      await o.admit?.(head.manifest);
      this.peerHead = head;
      return head;
    } catch (err) {
      throw this.failure(err);
    }
  }

  onStaging(head: StagedHead, partial: string, target: string): void {
    // the head stageEntries was given is the one head() verified
    this.o.onStaging?.({ ...this.peerHead!, ...head }, partial, target);
  }

  onEntry(e: LayoutEntry): void {
    this.o.onVerified?.(e);
  }

  async fill(job: EntryFill): Promise<void> {
    const o = this.o;
    try {
      await new BlobFetch(
        {
          files: job.files,
          manifestDigest: o.approval.manifestDigest,
          client: this.client,
          counters: this.counters,
          signal: this.stop.signal,
          streams: o.streams ?? 4,
          stallMs: o.stallMs ?? 60_000,
          refreshPeers: () => o.directory.peersFor(o.approval.manifestDigest),
          ...(o.peerRefreshMs ? { refreshMs: o.peerRefreshMs } : {}),
          ...(o.random ? { random: o.random } : {}),
          ...(o.minRate ? { minRate: o.minRate } : {}),
          ...(o.freeBusyAnswers !== undefined ? { freeBusyAnswers: o.freeBusyAnswers } : {}),
          onPlaced: job.onPlaced,
          onBytes: job.onBytes,
          begun: job.begun,
          ...(this.peerHead?.manifest.pieces ? { pieces: this.peerHead.manifest.pieces } : {}),
          ...(o.onPieces ? { onPieces: o.onPieces } : {}),
        },
        await o.directory.peersFor(o.approval.manifestDigest),
        job.missing,
      ).run();
      this.filled = true;
    } finally {
      // the deadline is the fetch's: the load after it has its own bounds
      clearTimeout(this.deadline);
    }
  }

  /** The reason the fetch ended with: the abort's own reason (a withdrawn approval) over the error it caused. */
  failure(err: unknown): unknown {
    const { signal } = this.stop;
    const o = this.o;
    if (signal.aborted && signal.reason instanceof AgentError) return signal.reason;
    if (signal.aborted)
      return new AgentError(
        'Interrupted',
        `stopped while fetching bundle ${o.approval.version} from peers: the blobs verified whole are kept for the next try (one cut short is fetched again)`,
        { cause: err },
      );
    const code = (err as NodeJS.ErrnoException)?.code;
    if (code === 'ENOSPC' || code === 'EDQUOT')
      return new AgentError(
        'InsufficientSpace',
        `the disk filled up while fetching bundle ${o.approval.version} from peers (${oneLine(err)}): nothing of it is kept; free space on the filesystem of ${o.upgradeDir}`,
        { cause: err },
      );
    return err;
  }

  // a verdict (withdrawn, disk full) leaves nothing; a fetch cut short keeps its verified entries
  keeps(err: unknown): boolean {
    return err instanceof AgentError && CUT_SHORT.has(err.reason);
  }

  withdraws(reason: string, at: { shown: boolean; filled: boolean }): boolean {
    return (
      reason === 'ApprovalRevoked' ||
      (!at.filled && WAITS.has(reason)) ||
      (!at.shown && NOT_FOR_THIS_NODE.has(reason))
    );
  }

  /**
   * Stops the attempt once the approval is gone: through the load too, not only the fetch. Looked
   * up at each change the directory's watch reports, and every approvalCheckMs as well: the
   * fallback should an event be missed (a look at a fresh watch reads its cache, not the API).
   */
  watch(stopAttempt: (reason: AgentError) => void): () => void {
    const o = this.o;
    let busy = false;
    let again = false;
    let gone = false;
    const check = (): void => {
      if (gone) return;
      // a change told while a look runs may come after that look read the approvals: one more follows
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      stillApproved(o.directory, o.approval.manifestDigest)
        .then(
          (ok) => {
            if (ok || gone) return;
            gone = true;
            const reason = revoked(o.approval);
            this.stop.abort(reason);
            stopAttempt(reason);
          },
          () => undefined,
        )
        .finally(() => {
          busy = false;
          if (again) {
            again = false;
            check();
          }
        });
    };
    const unlisten = o.directory.onApprovalsChanged?.(check);
    const timer = setInterval(check, o.approvalCheckMs ?? 5000);
    return () => {
      // a look in flight, or the one queued after it, ends with the attempt: never stops it afterwards
      gone = true;
      clearInterval(timer);
      unlisten?.();
    };
  }

  /** The nodes that sent bytes of this bundle (the counters hold every fetch since the start). */
  senders(): string[] {
    return [...this.counters.fetchedFrom]
      .filter(([n, bytes]) => bytes > (this.sentBefore.get(n) ?? 0))
      .map(([n]) => n);
  }

  close(): void {
    clearTimeout(this.deadline);
    this.client.close();
    this.o.signal?.removeEventListener('abort', this.onAbort);
  }
}

/**
 * Fetches the approved bundle from the peers the directory names into the node's staging,
 * without loading it (the load's own steps, stageEntries, with the caller's space check).
 * Throws an AgentError naming the reason (NoPeerHasBundle, PeersSuspect, ApprovalRevoked,
 * InsufficientSpace, UntrustedKey, Interrupted...). Only a fetch cut short (a stop, peers gone)
 * keeps anything for the next try: its verified entries, and, with a head that lists pieces, the
 * temp files of blobs it splits into pieces (the next try keeps only their verified pieces);
 * any other fetch leaves no temp file.
 */
export async function fetchFromPeers(o: PeerFetchOptions): Promise<PeerFetchResult> {
  const source = new PeerSource(o);
  const stop = new AbortController();
  const unwatch = source.watch((reason) => stop.abort(reason));
  try {
    const head = await source.head(stop.signal);
    const r = await stageEntries(source, head, {
      upgradeDir: o.upgradeDir,
      plan: o.planSpace,
      signal: stop.signal,
      ...(o.onProgress ? { onProgress: o.onProgress } : {}),
    });
    return {
      ...r,
      manifest: head.manifest,
      manifestBytes: head.manifestBytes,
      signature: head.signature,
      signer: head.signer,
    };
  } catch (err) {
    throw source.failure(err);
  } finally {
    unwatch();
    source.close();
  }
}

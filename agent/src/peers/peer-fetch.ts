// A node without a stick fetches an approved bundle from its peers into its own staging, as
// the stick would have staged it: the load (load/pipeline.ts runLoad of a StagedLayout) puts
// it in place as a stick's extraction ends and runs on it unchanged (loopback registry,
// pre-pull, pins). What the daemon calls (README "Bundles between nodes: the transfer").
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { EntryFiles, bundleIdentity, removeUnfinishedWrites, type BundleManifest, type LayoutEntry, type TrustedKey, type Trust } from '@offline-bundle/format';
import { AgentError, oneLine } from '../errors.js';
import { alreadyStaged, dropOtherPartials, partialCredit } from '../load/resume.js';
import type { SpaceCredit, StageMode } from '../load/space.js';
import { BlobFetch } from './peer-blobs.js';
import { FETCH_DEADLINE_MS, type MinRate } from './peer-bounds.js';
import { PeerClient } from './peer-client.js';
import { PeerCounters } from './peer-counters.js';
import { fetchHead, type PeerHead } from './peer-head.js';
import { preparePartial } from './peer-staging.js';
import type { PeerCredentials } from './peer-tls.js';
import type { PeerApproval, PeerDirectory } from './types.js';

export interface PeerFetchOptions {
  approval: PeerApproval;
  directory: PeerDirectory;
  credentials: PeerCredentials;
  /** The node's pinned keys (config trust.keys): the fetched bundle.json must verify with one. */
  trust: Trust;
  /** config.paths.upgradeDir: the layout lands in UPGRADE/<version>-<arch>, as from a stick. */
  upgradeDir: string;
  /** The load's space check (planSpace(m, config, credit)): only a staged layout can be fetched. */
  planSpace: (manifest: BundleManifest, credit: SpaceCredit) => Promise<{ mode: StageMode; message: string }>;
  /** SIGTERM, or the daemon's own reason to stop: what was verified stays for the next try. */
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
  /** How often the approval is looked up again while fetching (default 5000 ms). */
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
  onProgress?: (done: number, total: number) => void;
  /**
   * The node's own refusals of the verified bundle.json (arch, version policy): asked right
   * after the head, so a bundle this node would refuse at its load costs no blob.
   */
  admit?: (manifest: BundleManifest) => Promise<void>;
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

const revoked = (a: PeerApproval) => new AgentError('ApprovalRevoked', `the approval of bundle ${a.version} (${a.manifestDigest}) was withdrawn: nothing of it is kept; approve it again to fetch it`);

const MAX_TIMER_MS = 2 ** 31 - 1;

const overdue = (o: PeerFetchOptions, ms: number) => new AgentError('Interrupted', `the fetch of bundle ${o.approval.version} from peers ran past its ${Math.round(ms / 1000)} s deadline (the peers are too slow or keep failing): what was verified is kept; it goes on at the next look, or bring the bundle on a stick`);

/** Aborts `stop` once the approval is gone (looked up every `everyMs`); returns the stopper. */
function watchApproval(o: PeerFetchOptions, stop: AbortController): () => void {
  let busy = false;
  const timer = setInterval(() => {
    if (busy || stop.signal.aborted) return;
    busy = true;
    stillApproved(o.directory, o.approval.manifestDigest)
      .then((ok) => { if (!ok) stop.abort(revoked(o.approval)); }, () => undefined)
      .finally(() => { busy = false; });
  }, o.approvalCheckMs ?? 5000);
  return () => clearInterval(timer);
}

/**
 * Fetches the approved bundle from the peers the directory names into the node's staging.
 * Throws an AgentError naming the reason (NoPeerHasBundle, PeersSuspect, ApprovalRevoked,
 * InsufficientSpace, UntrustedKey, Interrupted...); no temp file is left, and only a fetch cut
 * short (a stop, peers gone) keeps its verified entries for the next try.
 */
export async function fetchFromPeers(o: PeerFetchOptions): Promise<PeerFetchResult> {
  const counters = o.counters ?? new PeerCounters();
  const stop = new AbortController();
  const onAbort = () => stop.abort(o.signal!.reason);
  if (o.signal?.aborted) onAbort();
  o.signal?.addEventListener('abort', onAbort, { once: true });
  const client = new PeerClient({ credentials: o.credentials, ...(o.connectTimeoutMs ? { connectTimeoutMs: o.connectTimeoutMs } : {}), ...(o.idleTimeoutMs ? { idleTimeoutMs: o.idleTimeoutMs } : {}), ...(o.smallDeadlineMs ? { smallDeadlineMs: o.smallDeadlineMs } : {}) });
  const unwatch = watchApproval(o, stop);
  const deadlineMs = o.deadlineMs ?? FETCH_DEADLINE_MS;
  // a timer past 2^31 ms would fire at once
  const deadline = setTimeout(() => stop.abort(overdue(o, deadlineMs)), Math.min(deadlineMs, MAX_TIMER_MS));
  try {
    if (!(await stillApproved(o.directory, o.approval.manifestDigest))) throw revoked(o.approval);
    const peers = await o.directory.peersFor(o.approval.manifestDigest);
    if (!peers.length) throw new AgentError('NoPeerHasBundle', `no other node holds bundle ${o.approval.version} (${o.approval.manifestDigest}): wait for one that does, or bring it on a stick`);
    const { head } = await fetchHead(o.approval, peers, o.trust, client, counters, stop.signal);
    await o.admit?.(head.manifest);
    return await stageFromPeers(o, head, client, counters, stop);
  } catch (err) {
    throw stopReason(err, stop.signal, o);
  } finally {
    clearTimeout(deadline);
    unwatch();
    client.close();
    o.signal?.removeEventListener('abort', onAbort);
  }
}

/** The reason the fetch ended with: the abort's own reason (a withdrawn approval) over the error it caused. */
function stopReason(err: unknown, signal: AbortSignal, o: PeerFetchOptions): unknown {
  if (signal.aborted && signal.reason instanceof AgentError) return signal.reason;
  if (signal.aborted) return new AgentError('Interrupted', `stopped while fetching bundle ${o.approval.version} from peers: what was verified is kept for the next try`, { cause: err });
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new AgentError('InsufficientSpace', `the disk filled up while fetching bundle ${o.approval.version} from peers (${oneLine(err)}): nothing of it is kept; free space on the filesystem of ${o.upgradeDir}`, { cause: err });
  return err;
}

/** The load's space refusal (the kubelet's thresholds, the reserve) said for a fetch: no stick is plugged in again, the fetch is. */
function forPeers(err: unknown, version: string): unknown {
  if (!(err instanceof AgentError) || err.reason !== 'InsufficientSpace') return err;
  return new AgentError('InsufficientSpace', `bundle ${version} is not fetched from peers: ${err.message.replace(' and plug the stick in again', '')}; the fetch is tried again later`, { cause: err });
}

async function stageFromPeers(o: PeerFetchOptions, head: PeerHead, client: PeerClient, counters: PeerCounters, stop: AbortController): Promise<PeerFetchResult> {
  const rel = head.manifest.release;
  const target = join(o.upgradeDir, `${rel.version}-${rel.arch}`);
  const partial = `${target}.partial`;
  const result = { target, manifest: head.manifest, manifestBytes: head.manifestBytes, signature: head.signature, signer: head.signer };
  if (await alreadyStaged(target, head.manifestBytes)) return { ...result, keptBytes: 0, already: true };
  const identity = bundleIdentity(head.manifestBytes);
  const plan = await o.planSpace(head.manifest, await partialCredit(o.upgradeDir, partial, identity)).catch((err: unknown) => { throw forPeers(err, rel.version); });
  if (plan.mode !== 'staged') throw new AgentError('InsufficientSpace', `not enough disk space to stage bundle ${rel.version} fetched from peers (${plan.message.replace(/; serving from the media.*$/, '')}): free space on ${o.upgradeDir}`);
  await dropOtherPartials(o.upgradeDir, partial, identity);
  await rm(target, { recursive: true, force: true });
  let keep = false;
  try {
    const total = head.manifest.totals.layoutBytes;
    let done = 0;
    o.onStaging?.(head, partial, target);
    // the writer a stick's extraction writes through: its temp names, hashing and renames
    const files = new EntryFiles(partial, o.fsync !== false);
    const { missing, keptBytes } = await preparePartial(files, partial, head, stop.signal, (e) => o.onVerified?.(e));
    keep = true;
    // in place already: what was kept, and oci-layout (written here, not fetched)
    done = total - missing.reduce((n, e) => n + e.size, 0);
    o.onProgress?.(done, total);
    await new BlobFetch({
      files, manifestDigest: o.approval.manifestDigest, client, counters, signal: stop.signal, streams: o.streams ?? 4, stallMs: o.stallMs ?? 60_000,
      refreshPeers: () => o.directory.peersFor(o.approval.manifestDigest),
      ...(o.peerRefreshMs ? { refreshMs: o.peerRefreshMs } : {}), ...(o.random ? { random: o.random } : {}),
      ...(o.minRate ? { minRate: o.minRate } : {}), ...(o.freeBusyAnswers !== undefined ? { freeBusyAnswers: o.freeBusyAnswers } : {}),
      onPlaced: (e) => o.onVerified?.(e),
      onBytes: (n) => { done += n; o.onProgress?.(done, total); },
    }, await o.directory.peersFor(o.approval.manifestDigest), missing).run();
    return { ...result, keptBytes, already: false };
  } catch (err) {
    // a verdict (withdrawn, disk full) leaves nothing; a fetch cut short keeps its verified entries
    const reason = stopReason(err, stop.signal, o);
    const cutShort = reason instanceof AgentError && ['Interrupted', 'NoPeerHasBundle', 'PeersSuspect'].includes(reason.reason);
    if (keep && cutShort) await removeUnfinishedWrites(partial);
    else await rm(partial, { recursive: true, force: true });
    throw reason;
  }
}

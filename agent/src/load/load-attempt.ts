// What one load attempt carries from phase to phase: where its head came from, what admit
// established, what the staging left to load from.
import type { BundleAgent, BundleSource, TrustedKey, Trust } from '@offline-bundle/format';
import type { BlobStore } from '@offline-bundle/registry';
import type { ClusterRelease, NodeStatus } from '@offline-bundle/status';
import type { LoadStep, PipelineContext } from './pipeline-context.js';
import type { EntrySource } from './entry-staging.js';
import { AgentError } from '../errors.js';
import type { StagedHead } from './kept-layout.js';
import type { PullGate } from '../runtime/runtime-target.js';
import type { StageMode } from './space.js';
import type { ReleaseRecord } from '../state/release-records.js';

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

/** What the checks before any write establish about a bundle file. */
export interface Admitted {
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
export interface HeadOrigin {
  read: (
    signal: AbortSignal | undefined,
  ) => Promise<{ head: StagedHead; source?: BundleSource; layout?: StagedLayout }>;
  attempt?: EntryAttempt;
}

/** One load from an EntrySource, as the pipeline follows it. */
export interface EntryAttempt {
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

export const step = (ctx: Pick<PipelineContext, 'onStep'>, name: LoadStep) => ctx.onStep?.(name);

/** A failure of an attempt its origin stopped (a withdrawn approval) is that stop, not the error it caused. */
export function stoppedBy(attempt: EntryAttempt | undefined, err: unknown): unknown {
  return attempt?.stop.aborted && attempt.stop.reason instanceof AgentError
    ? attempt.stop.reason
    : err;
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

export interface Staged {
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

export type FileAdmitted = Admitted & { source: BundleSource };

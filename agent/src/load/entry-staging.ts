// A staging whose bytes come from an origin with no bundle file (peers): the load's own steps
// around it (the staging place, the space plan, the other partials dropped, the partial kept or
// removed when it fails) are the ones a stick's staging takes; the origin gives only the signed
// head and the entries still missing, written through format's staged-layout writer
// (EntryFiles), the writer a stick's extraction writes through.
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  EntryFiles,
  bundleIdentity,
  type BundleManifest,
  type EntryAppend,
  type LayoutEntry,
} from '@offline-bundle/format';
import { AgentError } from '../errors.js';
import type { Logger } from '../log.js';
import type { StagedHead } from './kept-layout.js';
import type { LoadStep } from './pipeline-context.js';
import { leaveForResume, preparePartial } from './partial-fill.js';
import { alreadyStaged, clearPartialsFor, dropOtherPartials, partialCredit } from './resume.js';
import { planText, type SpaceCredit, type SpacePlan, type SpaceWords } from './space.js';

/** Where a bundle is staged, and whether that very bundle is staged there already. */
interface StagingPlace {
  /** UPGRADE/<version>-<arch>. */
  target: string;
  partial: string;
  identity: string;
  stagedBefore: boolean;
}

export async function stagingPlace(upgradeDir: string, head: StagedHead): Promise<StagingPlace> {
  const rel = head.manifest.release;
  const target = join(upgradeDir, `${rel.version}-${rel.arch}`);
  return {
    target,
    partial: `${target}.partial`,
    identity: bundleIdentity(head.manifestBytes),
    stagedBefore: await alreadyStaged(target, head.manifestBytes),
  };
}

/** The space plan of staging `head` at `place`, counting the agent's own partial staging (partialCredit). */
export async function planStaging(
  upgradeDir: string,
  place: StagingPlace,
  head: StagedHead,
  words: SpaceWords,
  plan: SpaceCheck,
): Promise<SpacePlan> {
  return plan(head.manifest, await partialCredit(upgradeDir, place.partial, place.identity), words);
}

/** The load's space check (planSpace with the node's config). */
export type SpaceCheck = (
  m: BundleManifest,
  credit: SpaceCredit,
  words: SpaceWords,
) => Promise<SpacePlan>;

/** What an origin's fill is given: the writer over the partial, the entries still missing, how to say progress. */
export interface EntryFill {
  files: EntryFiles;
  partial: string;
  target: string;
  head: StagedHead;
  missing: LayoutEntry[];
  /** By entry path: the writers of missing entries whose first verified pieces a cut left (kept by preparePartial): each goes on after them. */
  begun: ReadonlyMap<string, EntryAppend>;
  signal: AbortSignal;
  /** An entry is in place and verified. */
  onPlaced: (e: LayoutEntry) => void;
  /** Bytes written (progress). */
  onBytes: (n: number) => void;
}

/**
 * An origin of a bundle's bytes with no bundle file behind it: it gives the signed head and fills
 * the missing entries of a partial staging; the load does the rest (runLoad of an EntrySource).
 */
export interface EntrySource {
  /** Where the bytes come from, for the status (bundle.media). */
  media: string;
  /** The bundle's identity (sha256 of its signed bundle.json) as the origin names it before its head: a withdrawal found at the head removes its partial by it. */
  readonly identity?: string;
  /** How a space verdict is said for this origin (it cannot be served from the media). */
  words: SpaceWords;
  /** fsync each entry before its rename (default true). */
  fsync?: boolean;
  /** The signed head, checked against the node's trust, and the origin's own refusals: asked before the status shows anything. */
  head(signal: AbortSignal): Promise<StagedHead>;
  /** The partial is ready for `head`'s entries (kept ones are announced next, through onEntry). */
  onStaging?(head: StagedHead, partial: string, target: string): void;
  /** An entry is in place and verified (a kept one on a resume, too). */
  onEntry?(e: LayoutEntry): void;
  fill(job: EntryFill): Promise<void>;
  /** The signal its staging runs under: the attempt's, and the origin's own stops (a deadline). */
  signal?(): AbortSignal;
  /** The error the staging ended with, named (a stop's own reason over the error it caused). */
  failure(err: unknown): unknown;
  /** Whether a staging that ended with `err` keeps its verified entries for the next try (cut short) or is removed (a verdict). */
  keeps(err: unknown): boolean;
  /**
   * Whether an attempt that ended for `reason` is withdrawn rather than failed: nothing of this
   * node failed, so the status says again what it said before. `shown`: the status showed the
   * attempt (the head came); `filled`: the entries were all staged.
   */
  withdraws(reason: string, at: { shown: boolean; filled: boolean }): boolean;
  /** Watches, for the whole attempt (staging and load), for a reason to stop it; returns the unwatch. */
  watch?(stop: (reason: AgentError) => void): () => void;
  /** The nodes that sent bytes, once filled (status bundle.fromPeers). */
  senders?(): string[];
  /** The attempt ended: what the origin holds open goes. */
  close?(): void;
}

interface EntryStaging {
  target: string;
  /** Bytes of the layout kept from an interrupted staging (0 when none). */
  keptBytes: number;
  /** That very bundle was staged in `target` already: nothing filled. */
  already: boolean;
}

interface EntryStagingOptions {
  upgradeDir: string;
  plan: SpaceCheck;
  signal: AbortSignal;
  /** The plan admitted the staging: said in the status and log by the load. */
  onPlan?: (plan: SpacePlan) => void;
  onProgress?: (done: number, total: number) => void;
  log?: Logger;
  onStep?: (step: LoadStep) => void;
}

/**
 * Stages `head`'s bundle from `source` into `<target>.partial`, left whole under its resume
 * marker (the load puts it in place with finishLayout, as a stick's extraction ends). A failure
 * keeps the verified entries when the origin says it was cut short, else removes the partial.
 */
export async function stageEntries(
  source: EntrySource,
  head: StagedHead,
  o: EntryStagingOptions,
): Promise<EntryStaging> {
  const place = await stagingPlace(o.upgradeDir, head);
  const { target, partial } = place;
  if (place.stagedBefore) return { target, keptBytes: 0, already: true };
  const plan = await planStaging(o.upgradeDir, place, head, source.words, o.plan);
  if (plan.mode !== 'staged') {
    const w = source.words;
    throw new AgentError(
      'InsufficientSpace',
      `${w.lead ?? ''}not enough disk space to stage it (${planText(plan, w)}): free space on ${o.upgradeDir}${w.after ?? ''}`,
    );
  }
  o.onStep?.('plan-space');
  o.onPlan?.(plan);
  if (o.log) await clearPartialsFor(o.upgradeDir, partial, place.identity, o.log);
  else await dropOtherPartials(o.upgradeDir, partial, place.identity);
  o.onStep?.('clear-partials');
  await rm(target, { recursive: true, force: true });
  const signal = source.signal?.() ?? o.signal;
  let keep = false;
  const files = new EntryFiles(partial, source.fsync !== false);
  try {
    o.onStep?.('write-entries');
    source.onStaging?.(head, partial, target);
    const { missing, keptBytes, begun } = await preparePartial(
      files,
      partial,
      head,
      signal,
      (e) => source.onEntry?.(e),
      // a stop while what was kept is checked again keeps it too
      () => (keep = true),
    );
    const total = head.manifest.totals.layoutBytes;
    // in place already: what was kept (verified pieces of entries begun too), and oci-layout (written by preparePartial)
    let done = total - missing.reduce((n, e) => n + e.size - (begun.get(e.path)?.got ?? 0), 0);
    o.onProgress?.(done, total);
    await source.fill({
      files,
      partial,
      target,
      head,
      missing,
      begun,
      signal,
      onPlaced: (e) => source.onEntry?.(e),
      onBytes: (n) => {
        done += n;
        o.onProgress?.(done, total);
      },
    });
    return { target, keptBytes, already: false };
  } catch (err) {
    const reason = source.failure(err);
    if (keep && source.keeps(reason)) await leaveForResume(partial, head);
    else await rm(partial, { recursive: true, force: true });
    throw reason;
  }
}

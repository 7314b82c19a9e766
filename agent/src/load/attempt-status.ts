// An attempt's history and display: failed, withdrawn, or loaded before.
import { markFailed, type Condition, type HistoryEntry } from '@offline-bundle/status';
import { escapeControls } from '@offline-bundle/host';
import type { PipelineContext } from './pipeline-context.js';
import { dropPartialsOf } from './resume.js';
import { forgetPeerPartial } from './peer-partials.js';
import { AgentError, failureOf, oneLine } from '../errors.js';
import { mediaGone } from './bundle-file.js';
import { recordBundle } from '../state/bundle-records.js';
import { type EntryAttempt, stoppedBy } from './load-attempt.js';

/** A release this node loaded before, as a bundle record names it. */
interface LoadedBefore {
  file: string;
  media: string;
  version: string;
  arch: string;
  digest?: string;
}

/**
 * A bundle the daemon does not load again because this node holds its release: the status says
 * so, as that load ended, in place of what came since (another stick's failure, Idle). One
 * change, so no line in between says "Failed" or "Done" of the wrong thing.
 */
export function showLoadedBefore(
  ctx: Pick<PipelineContext, 'config' | 'tracker'>,
  b: LoadedBefore,
): void {
  const { config, tracker } = ctx;
  const now = new Date().toISOString();
  const cond = (
    type: Condition['type'],
    status: Condition['status'],
    reason: string,
    message: string,
  ): Condition => ({
    type,
    status,
    reason,
    message: escapeControls(message),
    lastTransitionTime: now,
  });
  const ready =
    config.preload.method === 'none'
      ? [
          cond(
            'Preloaded',
            'False',
            'PreloadDisabled',
            'preload.method is none: no image was pulled into the runtime',
          ),
          cond(
            'Ready',
            'True',
            'NotPreloaded',
            `update ${b.version} was verified before, but its images were NOT loaded (preload.method is none): ${b.file} is not read again`,
          ),
        ]
      : [
          cond(
            'Ready',
            'True',
            'LoadedBefore',
            `update ${b.version} was loaded on this node before and its images are in the runtime: ${b.file} is not read again; you may remove the USB stick`,
          ),
        ];
  tracker.update((s) => {
    s.phase = 'Ready';
    s.bundle = {
      file: b.file,
      media: b.media,
      version: b.version,
      arch: b.arch,
      ...(b.digest ? { digest: b.digest } : {}),
    };
    s.conditions = [cond('MediaDetected', 'True', 'BundleFound', `found ${b.file}`), ...ready];
    s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
  });
}

/**
 * The history after a failed attempt at `version`: failed, unless the node held it before the
 * attempt (loaded, or the release it runs): then its entry is as it was, so its pins stay.
 */
function failedAttempt(
  history: readonly HistoryEntry[],
  before: readonly HistoryEntry[],
  version: string,
): HistoryEntry[] {
  const held = before.find(
    (e) => e.version === version && e.state !== 'failed' && e.state !== 'installing',
  );
  if (!held) return markFailed(history, version);
  return history.some((e) => e.version === version)
    ? history.map((e) => (e.version === version ? { ...held } : e))
    : [...history, { ...held }];
}

/**
 * The history and display after an attempt its origin withdrew (nothing of this node failed):
 * what they said just before it showed itself, the attempted version's entry as it was; left as
 * they are when another writer (a stick's note, a bundle loaded before) has shown something since.
 */
function withdrawAttempt(ctx: PipelineContext, attempt: EntryAttempt): void {
  const was = attempt.before;
  const now = ctx.tracker.current.bundle;
  if (!attempt.shown || !was || now?.file !== attempt.target || now?.media !== attempt.source.media)
    return;
  ctx.tracker.update((s) => {
    Object.assign(s, { phase: was.phase, conditions: was.conditions, progress: was.progress });
    if (was.bundle) s.bundle = was.bundle;
    else delete s.bundle;
    if (now?.version) s.history = historyAsBefore(s.history, was.history, now.version);
  });
}

/**
 * A withdrawn approval leaves nothing of its bundle staged, under the load lock: every partial
 * its marker names (one found withdrawn at the head too, before this attempt knew its place);
 * a stick's staging of another build of the release stays.
 */
export async function dropWithdrawn(
  ctx: PipelineContext,
  attempt: EntryAttempt,
  err: unknown,
): Promise<void> {
  const { stateDir, upgradeDir } = ctx.config.paths;
  if (failureOf(stoppedBy(attempt, err), upgradeDir).reason !== 'ApprovalRevoked') return;
  const identity = attempt.identity ?? attempt.source.identity;
  if (!identity) return;
  const gone = await dropPartialsOf(upgradeDir, identity);
  await forgetPeerPartial(stateDir, identity);
  if (gone.length)
    ctx.log.info(
      'staging',
      `removed the staging ${gone.join(', ')} of the withdrawn bundle ${identity}`,
    );
}

/** `version`'s entry in `history` as it was in `before` (none if there was none). */
function historyAsBefore(
  history: readonly HistoryEntry[],
  before: readonly HistoryEntry[],
  version: string,
): HistoryEntry[] {
  const was = before.find((e) => e.version === version);
  if (!was) return history.filter((e) => e.version !== version);
  return history.some((e) => e.version === version)
    ? history.map((e) => (e.version === version ? { ...was } : e))
    : [...history, { ...was }];
}

/** What failed an attempt, as it was read. */
interface FailedAttempt {
  file: string;
  from: 'file' | 'layout' | 'entries';
  /** The history before the attempt: a release loaded before stays so when a repeat load fails. */
  before: readonly HistoryEntry[];
  /** The bundle file's record key (a file's attempt only). */
  key?: string;
  attempt?: EntryAttempt;
}

/**
 * A failed attempt said where it belongs: nothing for a busy lock, the status as before for a
 * withdrawal, else the file's outcome, the history and the Failed condition. Returns the error
 * the attempt throws.
 */
export async function failAttempt(
  ctx: PipelineContext,
  caught: unknown,
  { file, from, before, key, attempt }: FailedAttempt,
): Promise<AgentError> {
  const stateDir = ctx.config.paths.stateDir;
  const err = from === 'file' ? mediaGone(caught, file) : stoppedBy(attempt, caught);
  const { reason, message } = failureOf(err, ctx.config.paths.upgradeDir);
  const thrown = err instanceof AgentError ? err : new AgentError(reason, message, { cause: err });
  // another load holds the lock: its state is the node's, this attempt changed nothing (the daemon tries again; an origin that looks again says so itself)
  if (reason === 'Busy') {
    if (!attempt) ctx.log.warn('busy', message, { reason, file });
    return thrown;
  }
  if (attempt?.source.withdraws(reason, attempt)) {
    withdrawAttempt(ctx, attempt);
    return thrown;
  }
  // an origin's attempt is in the history once its entries are staged (admitRelease): before, its failure is the status's only
  const version = attempt && !attempt.filled ? undefined : ctx.tracker.current.bundle?.version;
  // a stop says nothing about the file
  if (key && reason !== 'Interrupted') {
    await recordBundle(stateDir, {
      key,
      file,
      outcome: 'failed',
      reason,
      ...(version ? { version } : {}),
      at: new Date().toISOString(),
    }).catch((e) => ctx.log.warn('state', `cannot record the outcome of ${file}: ${oneLine(e)}`));
  }
  // stopped before the attempt began (waiting for the cluster): there is no attempt to call failed
  const attempted =
    reason !== 'Interrupted' ||
    ctx.tracker.current.history.some((e) => e.version === version && e.state === 'installing');
  if (version && attempted)
    ctx.tracker.update((s) => {
      s.history = failedAttempt(s.history, before, version);
    });
  ctx.tracker.failed(reason, message);
  ctx.log.error('failed', message, { reason, file });
  return thrown;
}

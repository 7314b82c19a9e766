// The node's status while the parts of a split update are collected from several sticks.
import { escapeControls } from '@offline-bundle/host';
import type { NodeStatus, StatusTracker } from '@offline-bundle/status';
import { AgentError, oneLine, reasonOf } from '../errors.js';
import type { Logger } from '../log.js';
import { checkingLine, copyingLine, waitingLine } from './part-spool-words.js';

/** The stick (or sticks) a step is about: the bundle's name there and how the media is named. */
export interface SpoolShown {
  file: string;
  media: string;
}

/**
 * Sets the MediaDetected line in the same change as the phase: a status written between the
 * two would show the previous line ("You may remove this stick") while the stick is read.
 */
function setLine(s: NodeStatus, reason: string, line: string): void {
  const message = escapeControls(line);
  const now = new Date().toISOString();
  const existing = s.conditions.find((c) => c.type === 'MediaDetected');
  if (existing?.status === 'True') Object.assign(existing, { reason, message });
  else
    s.conditions = [
      ...s.conditions.filter((c) => c.type !== 'MediaDetected'),
      { type: 'MediaDetected', status: 'True', reason, message, lastTransitionTime: now },
    ];
}

/** A step on the stick: Staging, the technician's line in MediaDetected. */
function showOnStick(
  tracker: StatusTracker,
  at: SpoolShown,
  line: string,
  bytes: { done: number; total: number },
): void {
  tracker.update((s) => {
    s.phase = 'Staging';
    s.bundle = { file: at.file, media: at.media };
    s.conditions = s.conditions.filter((c) => c.type === 'MediaDetected');
    s.progress = { bytesDone: bytes.done, bytesTotal: bytes.total, imagesDone: 0, imagesTotal: 0 };
    setLine(s, 'PartsCopying', line);
  });
}

/** "Copying part 2 of 5 of u.bundle — do not remove this stick yet.", with the bytes of this stick's copy as progress. */
export function showCopying(
  tracker: StatusTracker,
  at: SpoolShown,
  n: number,
  count: number,
  bytes: { done: number; total: number },
  base: string,
): void {
  showOnStick(tracker, at, copyingLine(n, count, base), bytes);
}

/** "Checking part 2 of 5 of u.bundle — do not remove this stick yet.": a part held already is read from the stick (GBs) to compare. */
export function showChecking(
  tracker: StatusTracker,
  at: SpoolShown,
  n: number,
  count: number,
  base: string,
): void {
  showOnStick(tracker, at, checkingLine(n, count, base), { done: 0, total: 0 });
}

/** Progress within one stick's copy, at most once a second (a status write each time). */
export function copyProgress(tracker: StatusTracker): (done: number, total: number) => void {
  let last = 0;
  return (done, total) => {
    const now = Date.now();
    if (now - last < 1000) return;
    last = now;
    tracker.progress({ bytesDone: done, bytesTotal: total });
  };
}

/** "Copied parts 1–2 of 5 of u.bundle. You may remove this stick. Insert the stick with part 3 of 5 of u.bundle." */
export function showWaiting(
  tracker: StatusTracker,
  at: SpoolShown,
  have: readonly number[],
  count: number,
  base: string,
): void {
  tracker.update((s) => {
    s.phase = 'Idle';
    s.bundle = { file: at.file, media: at.media };
    s.conditions = s.conditions.filter((c) => c.type === 'MediaDetected');
    s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
    setLine(s, 'PartsWaiting', waitingLine(have, count, base));
  });
}

/**
 * At a restart with parts held: a Ready or Failed the technician saw stays (it is the last word
 * on a load); the parts held are said beside it, as a condition. Otherwise, and after a failure
 * that only cut the collecting short (a stop, a pulled stick), the waiting line: what to bring next.
 */
export function showHeldAtStart(
  tracker: StatusTracker,
  at: SpoolShown,
  have: readonly number[],
  count: number,
  base: string,
): void {
  const { phase, conditions } = tracker.current;
  const cutShort = ['Interrupted', 'MediaRemoved'].includes(
    conditions.find((c) => c.type === 'Failed')?.reason ?? '',
  );
  if (phase !== 'Ready' && (phase !== 'Failed' || cutShort))
    return showWaiting(tracker, at, have, count, base);
  tracker.update((s) => setLine(s, 'PartsWaiting', waitingLine(have, count, base)));
}

/** A stick whose parts were refused (or whose copy broke off): Failed, with the one-line cause, as a load's failure is. */
export function showRefusal(
  tracker: StatusTracker,
  log: Logger,
  at: SpoolShown,
  err: unknown,
): void {
  const reason = reasonOf(err);
  const message = err instanceof AgentError ? err.message : oneLine(err);
  tracker.update((s) => {
    s.bundle = { file: at.file, media: at.media };
    s.conditions = [];
  });
  tracker.failed(reason, message);
  log.error('parts', message, { reason, file: at.file });
}

// The node's status while the parts of a split update are collected from several sticks.
import type { StatusTracker } from '@offline-bundle/status';
import { AgentError, oneLine, reasonOf } from '../errors.js';
import type { Logger } from '../log.js';
import { copyingLine, waitingLine } from './part-spool-words.js';

/** The stick (or sticks) a step is about: the bundle's name there and how the media is named. */
export interface SpoolShown {
  file: string;
  media: string;
}

/** "Copying part 2 of 5 — do not remove this stick yet.", with the bytes of this stick's copy as progress. */
export function showCopying(tracker: StatusTracker, at: SpoolShown, n: number, count: number, bytes: { done: number; total: number }): void {
  tracker.update((s) => {
    s.phase = 'Staging';
    s.bundle = { file: at.file, media: at.media };
    s.conditions = s.conditions.filter((c) => c.type === 'MediaDetected');
    s.progress = { bytesDone: bytes.done, bytesTotal: bytes.total, imagesDone: 0, imagesTotal: 0 };
  });
  tracker.condition('MediaDetected', 'True', 'PartsCopying', copyingLine(n, count));
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

/** "Copied parts 1–2 of 5. You may remove this stick. Insert the stick with part 3 of 5." */
export function showWaiting(tracker: StatusTracker, at: SpoolShown, have: readonly number[], count: number): void {
  tracker.update((s) => {
    s.phase = 'Idle';
    s.bundle = { file: at.file, media: at.media };
    s.conditions = [];
    s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
  });
  tracker.condition('MediaDetected', 'True', 'PartsWaiting', waitingLine(have, count));
}

/** A stick whose parts were refused (or whose copy broke off): Failed, with the one-line cause, as a load's failure is. */
export function showRefusal(tracker: StatusTracker, log: Logger, at: SpoolShown, err: unknown): void {
  const reason = reasonOf(err);
  const message = err instanceof AgentError ? err.message : oneLine(err);
  tracker.update((s) => {
    s.bundle = { file: at.file, media: at.media };
    s.conditions = [];
  });
  tracker.condition('Failed', 'True', reason, message);
  tracker.condition('Ready', 'False', reason, message);
  tracker.phase('Failed');
  log.error('parts', message, { reason, file: at.file });
}

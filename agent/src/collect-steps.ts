// `bundle-agent collect` runs its parts one after the other within one deadline: each part is
// bounded on its own (commands, answers, sizes), but together they were not, and a part stuck on
// a hung filesystem or socket held the archive forever. What is not collected by the deadline
// is named in NOTES.txt; the archive is written with the rest.
import type { CollectArchive } from './collect-archive.js';

/** The most `bundle-agent collect` takes in all before it writes what it has. */
export const COLLECT_DEADLINE_MS = 120_000;

/** A part of the archive: the entries it adds (named in the note when it is not collected), and how. */
type CollectStep = readonly [what: string, run: () => Promise<void>];

/**
 * Runs `steps` in order until `a.deadline` aborts: the step running then is left behind (its
 * commands killed, its late entries dropped: the archive is sealed when written) and it and the
 * steps after it are named in one note.
 */
export async function runSteps(
  a: CollectArchive,
  steps: readonly CollectStep[],
  deadlineMs: number,
): Promise<void> {
  const late = new Promise<'late'>((resolve) => {
    if (a.deadline.aborted) resolve('late');
    a.deadline.addEventListener('abort', () => resolve('late'), { once: true });
  });
  for (let i = 0; i < steps.length; i++) {
    const done = a.deadline.aborted
      ? 'late'
      : await Promise.race([steps[i]![1]().then(() => 'done' as const), late]);
    if (done === 'late') {
      a.note(
        `not collected: ${steps
          .slice(i)
          .map(([what]) => what)
          .join(', ')}: collect's deadline of ${deadlineMs / 1000} s passed (COLLECT_DEADLINE_MS)`,
      );
      return;
    }
  }
}

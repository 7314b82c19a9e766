/**
 * An AbortSignal raised by the first of `signals`, and a promise that settles then: the
 * foreground commands stop their work (or their registry) on Ctrl-C or SIGTERM.
 */
export function untilSignal(signals: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM']): {
  signal: AbortSignal;
  done: Promise<void>;
} {
  const ac = new AbortController();
  const done = new Promise<void>((res) => {
    for (const s of signals)
      process.once(s, () => {
        ac.abort();
        res();
      });
  });
  return { signal: ac.signal, done };
}

/** The terminal's width, or undefined when stdout is not one (a log or a pipe keeps one line per sentence). */
export const terminalColumns = () => (process.stdout.isTTY ? process.stdout.columns : undefined);

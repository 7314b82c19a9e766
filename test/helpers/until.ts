import { setTimeout as sleep } from 'node:timers/promises';

/** What a probe returns while its condition does not hold yet. */
export type NotYet = undefined | null | false;

export interface UntilOptions {
  /** Gives up after this long (default 60 s): a bound against a hang, never a time asserted. */
  timeoutMs?: number;
  /** Between probes (default 10 ms). */
  stepMs?: number;
  /** Added to the timeout's error: what the test saw last (a log's tail, a status). */
  detail?: () => string | Promise<string>;
}

/**
 * The tests' one polling loop: probes until `probe` gives a value (anything but undefined, null or
 * false) and returns it, or throws after `timeoutMs` naming `what`. A probe may throw to end the
 * wait at once (the process it waits on exited).
 */
export async function until<V>(
  what: string,
  probe: () => V | Promise<V>,
  opts: UntilOptions = {},
): Promise<Exclude<V, NotYet>> {
  const { timeoutMs = 60_000, stepMs = 10 } = opts;
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== null && v !== false) return v as Exclude<V, NotYet>;
    if (Date.now() > end)
      throw new Error(
        `not within ${timeoutMs / 1000} s: ${what}${opts.detail ? `\n${await opts.detail()}` : ''}`,
      );
    await sleep(stepMs);
  }
}

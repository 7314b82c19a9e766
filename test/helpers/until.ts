import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `ok` every 10 ms, at most `rounds` times: a bound for a condition to become true, not a timing asserted. */
export async function until(ok: () => boolean, rounds = 3000): Promise<boolean> {
  for (let i = 0; i < rounds && !ok(); i++) await sleep(10);
  return ok();
}

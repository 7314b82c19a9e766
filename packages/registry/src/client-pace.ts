/**
 * Each connection's share of a store's shared frame budget (issue #44): a response holds its
 * frames until its client takes their bytes, so eight local clients that never read held the
 * whole budget, and every other pull waited behind them until REGISTRY_IDLE_MS (120 s) cut
 * them. While others wait for the budget, a response backed up on its client (the socket
 * not taking what it was given) that has taken almost nothing (STALL_FLOOR_BYTES) in
 * REGISTRY_STALL_MS is cut, and its frames go to the next in line. The floor is far below any
 * real pull (CRI-O unpacking small files onto a busy disk still takes MB/s): only a client that
 * stopped reading is cut. Without contention a slow client is left alone.
 * A connection answers one request at a time, and a stream reads ahead only while the budget
 * is at most half used and nobody waits (FrameStream): under contention one connection holds
 * at most two frames, for at most REGISTRY_STALL_MS, while it does not read.
 */
import type { ServerResponse } from 'node:http';

/** How long a response may hold frames others wait for while its client takes under STALL_FLOOR_BYTES. */
export const REGISTRY_STALL_MS = 30_000;
/** What a client must take per REGISTRY_STALL_MS while others wait (about 2 KB/s): a reader, however slow, passes; one that stopped does not. */
const STALL_FLOOR_BYTES = 64 * 1024;
/** How often a backed-up response looks at the budget. */
const CHECK_MS = 1000;

export interface ClientPace {
  /** The socket did not take a write at once. */
  backedUp(): void;
  /** The socket took `n` bytes. */
  took(n: number): void;
  stop(): void;
}

/**
 * Watches `res`'s client from its answer's first byte; cuts it as above when `contended()`. Only a
 * client backed up for a whole CHECK_MS is blamed: a fast one never leaves a write untaken that long.
 */
export function watchClientPace(
  res: ServerResponse,
  contended: () => boolean,
  stallMs = REGISTRY_STALL_MS,
): ClientPace {
  let since = performance.now();
  let taken = 0;
  let backedUpAt: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  const stop = () => {
    clearInterval(timer);
    timer = undefined;
  };
  const check = () => {
    const now = performance.now();
    if (
      backedUpAt === undefined ||
      now - backedUpAt < CHECK_MS ||
      now - since < stallMs ||
      !contended()
    )
      return;
    stop();
    res.destroy(
      new Error(
        `the client took under ${STALL_FLOOR_BYTES} bytes in ${stallMs / 1000} s while others waited for the frame budget: cut`,
      ),
    );
  };
  res.once('close', stop);
  res.on('drain', () => {
    backedUpAt = undefined;
  });
  return {
    backedUp: () => {
      backedUpAt ??= performance.now();
      if (timer || res.destroyed) return;
      timer = setInterval(check, CHECK_MS);
      timer.unref();
    },
    took: (n) => {
      taken += n;
      if (taken < STALL_FLOOR_BYTES) return;
      taken = 0;
      since = performance.now();
    },
    stop,
  };
}

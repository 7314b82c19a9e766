// The bounds a fetch from peers keeps whatever its peers do (issue #44): a peer may claim to be
// complete and hold nothing, answer 503 forever, or drip a byte every few seconds. None of that
// may keep a fetch (and the load lock it holds) running for ever: each blob transfer must move
// at a minimum rate, each blob is asked for a bounded number of times, and the fetch as a whole
// ends by a deadline (the blobs it verified whole are kept; the next look goes on from there).
import type { IncomingMessage } from 'node:http';
import { PeerFault } from './peer-client.js';

/** A fetch from peers ends by then: it is looked at again (its verified blobs kept) at the daemon's next look. */
export const FETCH_DEADLINE_MS = 60 * 60_000;

export interface MinRate {
  /** Bytes a blob transfer must bring in each window (fewer when less of the blob is left). */
  bytes: number;
  windowMs: number;
}

/**
 * About 1 KiB/s over 30 s: far below what a real peer sends (peers.uploadRate is at least
 * 64 KiB/s, shared by its downloaders), far above a peer that drips to hold its blob.
 */
export const MIN_BLOB_RATE: MinRate = { bytes: 32 * 1024, windowMs: 30_000 };

/**
 * 503s in a row (each waited for its Retry-After, held to 1-30 s) a peer may answer before the
 * next counts as a failed try and the peer is dropped from the fetch: about a minute at the 2 s
 * our peers send (a seed paused while it loads is dropped then; the fetch goes on from the other
 * peers, or at the next try with what it verified), at most 15 minutes; one that says busy
 * forever holds no fetch.
 */
export const FREE_BUSY_ANSWERS = 30;

/**
 * 404s a peer still fetching may answer for pieces of one blob its listing named before it is
 * asked for that blob no more in this fetch: one is a listing a step behind, several a peer
 * that names pieces it does not hold (each costs a request of the fetch's bounded number).
 */
export const MAX_PIECE_MISSES = 3;

/** Blob requests per listed file one fetch may make in all: a backstop behind the per-blob bounds. */
export const MAX_REQUESTS_PER_ENTRY = 100;

/**
 * Cuts `res` (a PeerFault 'slow') once a window of `rate` brings fewer bytes than it asks;
 * `got` is the blob's bytes so far, `size` its signed size. Returns the stopper.
 */
export function guardRate(
  res: IncomingMessage,
  got: () => number,
  size: number,
  rate: MinRate,
  what: string,
): () => void {
  let last = got();
  const timer = setInterval(() => {
    const now = got();
    const wanted = Math.min(rate.bytes, size - last);
    if (now - last < wanted)
      res.destroy(
        new PeerFault(
          'slow',
          `${what}: ${now - last} bytes in ${rate.windowMs} ms, under the ${rate.bytes} required`,
        ),
      );
    last = now;
  }, rate.windowMs);
  return () => clearInterval(timer);
}

// One request for a blob the head splits into pieces: from the start of the piece the blob's
// temp file ends in, to the blob's end or (a peer still fetching it) the end of the run of
// pieces that peer holds. Every piece is checked on arrival (piece-check.ts) before it reaches
// the writer, so a peer's wrong piece costs that piece only: the verified ones stay. A verified
// piece is announced (to be served) only once its bytes are in the temp file.
import { stat } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import type { EntryAppend, PieceDigests } from '@offline-bundle/format';
import { guardRate, type MinRate } from './peer-bounds.js';
import { PeerFault, type PeerClient } from './peer-client.js';
import { PieceCheck } from './piece-check.js';

interface PieceRequest {
  client: PeerClient;
  url: string;
  signal: AbortSignal;
  node: string;
  write: EntryAppend;
  digests: PieceDigests;
  /** The piece the temp file ends in starts here. */
  from: number;
  /** Asked up to here (the blob's size, or the end of a partial peer's run). */
  to: number;
  /** The peer holds the blob whole (else it is asked for its verified pieces only). */
  whole: boolean;
  /** The blob's temp file (the writer's): what of it is on disk is what may be announced. */
  temp: string;
  minRate: MinRate;
  /** The peer answered (not busy, not missing). */
  onAnswer: () => void;
  onBytes: (n: number) => void;
  /** The blob's first `end` bytes are verified and in its temp file. */
  onLanded: (end: number) => void;
}

/** How often the temp file is looked at for verified pieces that landed, while a response flows. */
const LANDED_POLL_MS = 25;

/** The Range header for [from, to) of a blob of `size` bytes: none for the whole blob of a peer that holds it whole. */
function rangeHeader(
  from: number,
  to: number,
  size: number,
  whole: boolean,
): Record<string, string> {
  // a peer still fetching serves a range of its verified pieces only (all of them, before its rename)
  if (whole && from === 0 && to === size) return {};
  return { range: `bytes=${from}-${to < size ? to - 1 : ''}` };
}

/**
 * The verified prefix, told only as far as the temp file holds it: a peer asking for an
 * announced piece finds it on disk, and a piece dropped with a failed response (the writer
 * backed up) was never announced.
 */
class LandedPrefix {
  private verified = 0;
  private told = 0;
  private looking = false;
  private stopped = false;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly r: PieceRequest) {
    this.timer = setInterval(() => void this.look(), LANDED_POLL_MS);
  }

  verifiedTo(end: number): void {
    this.verified = Math.max(this.verified, end);
  }

  private async look(): Promise<void> {
    if (this.looking || this.verified <= this.told) return;
    this.looking = true;
    try {
      const onDisk = await stat(this.r.temp).then(
        (s) => s.size,
        () => 0,
      );
      this.tell(Math.min(onDisk, this.verified));
    } finally {
      this.looking = false;
    }
  }

  private tell(end: number): void {
    if (this.stopped || end <= this.told) return;
    this.told = end;
    this.r.onLanded(end);
  }

  /** The response ended: `landed` says whether every verified byte is on disk (the writer closed). */
  stop(landed: boolean): void {
    clearInterval(this.timer);
    if (landed) this.tell(this.verified);
    // after a failure the caller counts the file again and tells the true prefix
    this.stopped = true;
  }
}

/** Where the answer starts in the blob: its Content-Range's start, or 0 when the peer ignored the range and sends it whole. */
function answerStart(res: IncomingMessage, r: PieceRequest): number {
  if (res.statusCode !== 206) return 0;
  if (!String(res.headers['content-range'] ?? '').startsWith(`bytes ${r.from}-`)) {
    res.destroy();
    throw new PeerFault(
      'refused',
      `${r.node} answered a range from ${r.from} with ${String(res.headers['content-range'])}`,
    );
  }
  return r.from;
}

/** Fetches what `r` asks into its writer; throws a PeerFault when the peer fails it ('refused' for a wrong piece). */
export async function fetchPieces(r: PieceRequest): Promise<void> {
  const { entry } = r.write;
  const res = await r.client.get(r.url, r.signal, rangeHeader(r.from, r.to, entry.size, r.whole));
  r.onAnswer();
  const start = answerStart(res, r);
  const check = new PieceCheck({
    digests: r.digests,
    blob: entry.digest,
    size: entry.size,
    from: start,
    keepFrom: r.write.got,
    mismatch: (i) =>
      new PeerFault(
        'refused',
        `${r.node} sent piece ${i} of ${entry.path} that does not match its digest in the signed bundle.json`,
      ),
    overflow: () =>
      new PeerFault(
        'refused',
        `${r.node} sent more than the ${entry.size} bytes bundle.json lists for ${entry.path}`,
      ),
    onVerified: (end) => landed.verifiedTo(end),
  });
  const landed = new LandedPrefix(r);
  // pipe() passes no error on: a cut response must end the check, a wrong piece the response
  res.on('error', (err) => check.destroy(err));
  check.on('error', () => res.destroy());
  // the rate counts bytes received, not verified ones: a slow link delivers a piece in more than one window
  const unguard = guardRate(
    res,
    () => check.received,
    (start === r.from ? r.to : entry.size) - start,
    r.minRate,
    `${r.node} sending ${entry.path}`,
  );
  let ok = false;
  try {
    await r.write.append(res.pipe(check), {
      onBytes: r.onBytes,
      overflow: () =>
        new PeerFault(
          'refused',
          `${r.node} sent more than the ${entry.size} bytes bundle.json lists for ${entry.path}`,
        ),
    });
    ok = true;
  } finally {
    unguard();
    landed.stop(ok);
  }
}

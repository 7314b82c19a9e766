// The blobs of an approved bundle fetched from its peers into the partial staging directory:
// several at once, each from a different peer, each hashed while it streams and renamed into
// place only once it matched its signed digest. A peer whose bytes do not match is suspect and
// the blob comes from another; a dead one is dropped; a blob cut short goes on with a Range
// request to the next peer. While blobs flow, the peer list and what the peers still fetching
// hold are looked at again every few seconds, so nodes that fetch together take blobs from
// each other (peer-choice.ts says who sends which). The bytes go to disk through format's
// staged-layout writer (EntryFiles, as a stick's extraction): its temp names, hashing, refusal
// of a wrong digest and rename are the same for every origin; what is the peers' own here is
// whom to ask, what to remember of each, and the Range that continues a cut blob.
// A head with `pieces` (format pieces.ts) has each large blob checked piece by piece as it
// arrives (piece-transfer.ts): a wrong piece is refused alone, the peer suspect, the verified
// pieces kept, and the blob goes on from another holder; a peer still fetching lists the
// verified pieces of the blobs it is writing, and is asked for the run of them it holds from
// where this node's copy ends (pieces of one blob in order, blobs rarest first).
import { setTimeout as sleep } from 'node:timers/promises';
import {
  FormatError,
  PieceDigests,
  type BundlePieces,
  type EntryAppend,
  type EntryFiles,
  type LayoutEntry,
} from '@offline-bundle/format';
import { AgentError } from '../errors.js';
import type { PeerCounters } from './peer-counters.js';
import {
  FREE_BUSY_ANSWERS,
  MAX_PIECE_MISSES,
  MAX_REQUESTS_PER_ENTRY,
  MIN_BLOB_RATE,
  guardRate,
  type MinRate,
} from './peer-bounds.js';
import { PeerFault, type PeerClient } from './peer-client.js';
import { holds, rarestFirst, rotated, weightedPick, type Holder } from './peer-choice.js';
import { bundleUrl } from './peer-head.js';
import { parsePieceListing, piecesSet, runEnd } from './piece-listing.js';
import { fetchPieces } from './piece-transfer.js';
import type { PeerEndpoint } from './types.js';

/** How often a stalled fetch asks peers that are still fetching what they hold now. */
const HAVE_POLL_MS = 500;
/** How often, while blobs flow, the peer list and what the peers still fetching hold are looked at again. */
const PEER_REFRESH_MS = 2000;
/**
 * What the peers still fetching hold is at most this old when a complete peer (the stick node)
 * is asked for a blob: a blob passes between nodes in less than PEER_REFRESH_MS on a fast link,
 * and a listing that old would send every node to the stick node for what a neighbour just got.
 */
const FRESH_BEFORE_COMPLETE_MS = 300;

/** One entry being fetched: what of it is in its temp file already (the writer's `got`), and from whom. */
interface Job {
  entry: LayoutEntry;
  write: EntryAppend;
  /** Verified-to-be bytes by peer node: counted as fetched from it once the entry matched. */
  bytesBy: Map<string, number>;
  attempts: number;
}

interface Peer extends Holder {
  ep: PeerEndpoint;
  busy: boolean;
  dead: boolean;
  notBefore: number;
  /** Digests it failed in this fetch (404, too slow): it is not asked for them again. */
  failed: Set<string>;
  /** It said it was complete and lacked a blob: from then on only its listing's word counts. */
  demoted: boolean;
  /** 503s in a row: free up to freeBusyAnswers; the next counts as a failed try and drops the peer from this fetch. */
  busyStreak: number;
  /** Bitmaps of the verified pieces of blobs it holds in part (its listing's `pieces`; none from an older agent). */
  pieces: Map<string, Buffer>;
  /** 404s for pieces its listing named, by blob: at MAX_PIECE_MISSES it is not asked for that blob again. */
  pieceMisses: Map<string, number>;
  /** Blobs whose piece misses were forgiven once it listed them whole (forgive). */
  forgiven: Set<string>;
}

interface BlobFetchOptions {
  /** The staging's writer (format's EntryFiles over the partial directory): every blob goes to disk through it. */
  files: EntryFiles;
  manifestDigest: string;
  client: PeerClient;
  counters: PeerCounters;
  /** Stops every transfer at once (the approval withdrawn, SIGTERM, a failure elsewhere). */
  signal: AbortSignal;
  /** Transfers at once, each from its own peer. */
  streams: number;
  /** How long peers still fetching the bundle themselves may hold nothing new before the fetch gives up. */
  stallMs: number;
  /** The other peers now: asked every refreshMs while blobs flow, and when those known hold nothing more that is needed. */
  refreshPeers: () => Promise<PeerEndpoint[]>;
  /** How often the peers are looked at again while blobs flow (default PEER_REFRESH_MS). */
  refreshMs?: number;
  /** Where this node starts in the blob list and which holder it asks (default Math.random; tests: a fixed sequence). */
  random?: () => number;
  /** The least a blob transfer must bring in (default MIN_BLOB_RATE): a slower peer is cut and the blob asked of another. */
  minRate?: MinRate;
  /** 503s in a row a peer may answer before it is dropped from this fetch (default FREE_BUSY_ANSWERS). */
  freeBusyAnswers?: number;
  onPlaced: (entry: LayoutEntry) => void;
  onBytes: (n: number) => void;
  /** By entry path: writers of entries whose first verified pieces a cut left (preparePartial kept them): each goes on after them. */
  begun?: ReadonlyMap<string, EntryAppend>;
  /** The verified head's `pieces`: its blobs are checked piece by piece and served in part. */
  pieces?: BundlePieces;
  /** The first `bytes` of a blob being fetched are verified pieces (0: it starts over): serve them. */
  onPieces?: (entry: LayoutEntry, bytes: number) => void;
}

/** Errors of this node's own disk: no peer can help, the fetch stops. */
function localFailure(err: unknown): boolean {
  const e = err as NodeJS.ErrnoException;
  return (
    ['ENOSPC', 'EDQUOT', 'EROFS', 'EACCES', 'EPERM', 'EIO'].includes(e?.code ?? '') ||
    e?.syscall === 'write' ||
    e?.syscall === 'open'
  );
}

export class BlobFetch {
  private readonly peers = new Map<string, Peer>();
  private readonly queue: Job[];
  private readonly running = new Set<Promise<void>>();
  private failure: unknown;
  private readonly maxAttempts: number;
  /** Blob requests made, and how many the fetch may make in all. */
  private requests = 0;
  private readonly maxRequests: number;
  /** When a peer's listing last grew: a peer still fetching is waited for while it does. */
  private lastGrowth = Date.now();
  /** When the partial peers' listings were last read. */
  private lastLook = 0;
  private readonly random: () => number;
  /** The look at the peers due next while blobs flow (one at a time). */
  private refresher: Promise<void> | undefined;
  /** Ends the looks at the peers when the fetch ends. */
  private readonly ended = new AbortController();
  private readonly lookSignal: AbortSignal;
  /** The writer's last refusal of a peer's bytes: what a fetch every peer lied to ends with as its cause. */
  private refusal: FormatError | undefined;
  private readonly digests: PieceDigests | undefined;
  /** The blobs this fetch needs (a resumed one: fewer than the head lists). */
  private readonly needed = new Set<string>();

  constructor(
    private readonly opts: BlobFetchOptions,
    peers: PeerEndpoint[],
    entries: LayoutEntry[],
  ) {
    this.random = opts.random ?? Math.random;
    this.digests = opts.pieces ? new PieceDigests(opts.pieces) : undefined;
    for (const e of entries) this.needed.add(e.digest);
    this.lookSignal = AbortSignal.any([opts.signal, this.ended.signal]);
    this.addPeers(peers);
    // nodes fetching together each begin elsewhere: they soon hold different blobs to give each other
    this.queue = rotated(entries, this.random).map((entry) => ({
      entry,
      write: opts.begun?.get(entry.path) ?? opts.files.appender(entry),
      bytesBy: new Map(),
      attempts: 0,
    }));
    this.maxAttempts = 3 + 2 * peers.length;
    this.maxRequests = MAX_REQUESTS_PER_ENTRY * entries.length;
  }

  private addPeers(peers: PeerEndpoint[]): void {
    for (const ep of peers) {
      if (this.peers.has(ep.node) || this.opts.counters.suspect.has(ep.node)) continue;
      this.peers.set(ep.node, {
        ep,
        have: ep.complete ? undefined : new Set(),
        busyAt: 0,
        busy: false,
        dead: false,
        notBefore: 0,
        failed: new Set(),
        demoted: false,
        busyStreak: 0,
        pieces: new Map(),
        pieceMisses: new Map(),
        forgiven: new Set(),
      });
    }
  }

  private usable(): Peer[] {
    return [...this.peers.values()].filter(
      (p) => !p.dead && !this.opts.counters.suspect.has(p.ep.node),
    );
  }

  /** Whether `p` may be asked for `job`: it holds the blob, or the piece its copy here ends in, and did not fail it in this fetch. */
  private offers(p: Peer, job: Job): boolean {
    const { digest } = job.entry;
    if (p.failed.has(digest)) return false;
    return holds(p, digest) || (this.covered(job) && this.span(job, p).to > job.write.got);
  }

  /** The head splits this blob into pieces: each is checked as it arrives. */
  private covered(job: Job): boolean {
    return this.digests?.covers(job.entry.digest) === true;
  }

  /** A request to `p` for a covered blob: from the piece this node's copy ends in, to the blob's end or the end of the run `p` holds. */
  private span(job: Job, p: Peer): { from: number; to: number } {
    const { size, digest } = job.entry;
    const ps = this.digests!.size;
    const from = Math.floor(job.write.got / ps) * ps;
    return { from, to: holds(p, digest) ? size : runEnd(p.pieces.get(digest), from, size, ps) };
  }

  /** A free peer that holds what `job` needs next (peer-choice.ts: a peer still fetching before a complete one, a busy one avoided). */
  private pick(job: Job, usable: Peer[], now: number): Peer | undefined {
    return weightedPick(
      usable.filter((p) => !p.busy && p.notBefore <= now && this.offers(p, job)),
      now,
      this.random,
    );
  }

  /** Every entry fetched and in place, or the reason none can be. */
  async run(): Promise<void> {
    // the pieces a cut left, verified again: served from the start, as if fetched now
    for (const { entry, write } of this.queue)
      if (write.got > 0 && this.digests?.covers(entry.digest))
        this.opts.onPieces?.(entry, write.got);
    try {
      await this.refreshHave();
      await this.loop();
      // the renames on disk, as a stick's staging ends
      await this.opts.files.settle();
    } finally {
      // a look under way ends at once (its requests aborted); one in the directory's call finds nothing to do after it
      this.ended.abort();
    }
  }

  private async loop(): Promise<void> {
    while (this.queue.length || this.running.size) {
      if (this.failure) break;
      // a stop waits for the transfers under way: their writes are over before the temp files are left for a resume
      if (this.opts.signal.aborted) await Promise.allSettled(this.running);
      this.opts.signal.throwIfAborted();
      if (this.assign() === 'stale') {
        // what the nodes still fetching hold, read afresh before the stick node is asked
        await this.refreshHave().catch(() => undefined);
        continue;
      }
      if (this.running.size) {
        // a transfer ended, or the peers were looked at again: assign anew
        await Promise.race([...this.running, this.lookSoon()]);
        continue;
      }
      if (!this.queue.length) break;
      await this.stuck();
    }
    await Promise.allSettled(this.running);
    if (this.failure) throw this.failure;
    this.opts.signal.throwIfAborted();
  }

  /** The next look at the peers (refreshMs from the last), started once and shared by every wait. */
  private lookSoon(): Promise<void> {
    this.refresher ??= sleep(this.opts.refreshMs ?? PEER_REFRESH_MS, undefined, {
      signal: this.lookSignal,
    })
      .then(() => this.look())
      // a stop is the loop's to see; a failed look leaves the peers known as they were
      .catch(() => undefined)
      .finally(() => {
        this.refresher = undefined;
      });
    return this.refresher;
  }

  /** New peers from the directory, and what the peers still fetching hold now. */
  private async look(): Promise<void> {
    try {
      this.addPeers(await this.opts.refreshPeers());
    } catch {
      // the API away for a moment: the peers known go on
    }
    await this.refreshHave();
  }

  /** Starts what can start; 'stale' when a complete peer would be asked while the partial peers' listings are old. */
  private assign(): 'stale' | undefined {
    const now = Date.now();
    const usable = this.usable();
    const stale = usable.some((p) => p.have) && now - this.lastLook > FRESH_BEFORE_COMPLETE_MS;
    let deferred: 'stale' | undefined;
    // what few peers hold first: blobs only the stick node holds go to it, the rest to the others
    for (const job of rarestFirst(
      this.queue,
      (j) => usable.filter((p) => this.offers(p, j)).length,
    )) {
      if (this.running.size >= this.opts.streams) break;
      const peer = this.pick(job, usable, now);
      if (!peer) continue;
      if (!peer.have && stale) {
        deferred = 'stale';
        continue;
      }
      this.queue.splice(this.queue.indexOf(job), 1);
      peer.busy = true;
      const p: Promise<void> = this.transfer(job, peer)
        .catch((err: unknown) => {
          this.failure ??= err;
        })
        .finally(() => {
          peer.busy = false;
          this.running.delete(p);
        });
      this.running.add(p);
    }
    return deferred;
  }

  /** Nothing running and nothing assignable: wait for a busy peer, look again, or give up. */
  private async stuck(): Promise<void> {
    const now = Date.now();
    const waiting = this.usable().filter((p) => p.notBefore > now);
    if (waiting.length) {
      await sleep(Math.min(...waiting.map((p) => p.notBefore)) - now, undefined, {
        signal: this.opts.signal,
      });
      return;
    }
    const before = this.usable().length;
    const held = (j: Job) => this.usable().some((p) => this.offers(p, j));
    this.addPeers(await this.opts.refreshPeers());
    await this.refreshHave();
    if (this.queue.some(held)) return;
    // fan-out: a peer that is itself fetching serves each blob once it verified it
    // one that lied about being complete is not waited for
    if (
      this.usable().some((p) => p.have && !p.demoted) &&
      Date.now() - this.lastGrowth < this.opts.stallMs
    ) {
      await sleep(HAVE_POLL_MS, undefined, { signal: this.opts.signal });
      return;
    }
    const missing = this.queue[0]!.entry;
    const all = [...this.peers.keys()];
    if (all.length && all.every((n) => this.opts.counters.suspect.has(n))) {
      throw new AgentError(
        'PeersSuspect',
        `every peer (${all.join(', ')}) served bytes that do not match the signed bundle.json: check those nodes, or bring the bundle on a stick`,
        { cause: this.refusal },
      );
    }
    const busy = [...this.peers.values()]
      .filter((p) => p.busyStreak > this.freeBusy())
      .map((p) => p.ep.node);
    const unreachable = busy.length
      ? `every peer is dropped (${busy.join(', ')} answered busy ${this.freeBusy() + 1} times in a row)`
      : 'no peer is reachable';
    const why = before === 0 ? unreachable : `no reachable peer holds ${missing.path}`;
    throw new AgentError(
      'NoPeerHasBundle',
      `${why} (${this.queue.length} of the bundle's files still missing; peers: ${all.join(', ') || 'none'}): wait for a node that holds the bundle, or bring it on a stick`,
    );
  }

  /** What each incomplete peer holds now (a peer still fetching serves more as it goes). */
  private async refreshHave(): Promise<void> {
    try {
      await this.readListings();
    } finally {
      // from when the answers arrived: a slow listing does not make the next one due at once
      this.lastLook = Date.now();
    }
  }

  private async readListings(): Promise<void> {
    // each under PeerClient.small's deadline: a listing that drips holds this look that long, once
    const reads = await Promise.allSettled(
      this.usable()
        .filter((p) => p.have)
        .map(async (p) => {
          try {
            const body = await this.opts.client.small(
              `${bundleUrl(p.ep, this.opts.manifestDigest)}/have`,
              4 * 1024 * 1024,
              this.lookSignal,
            );
            const parsed = JSON.parse(body.toString('utf8')) as {
              complete?: unknown;
              digests?: unknown;
              pieces?: unknown;
            };
            const before = (p.have?.size ?? 0) + piecesSet(p.pieces);
            const listed = Array.isArray(parsed.digests)
              ? parsed.digests.filter((d): d is string => typeof d === 'string')
              : [];
            p.have = parsed.complete === true && !p.demoted ? undefined : new Set(listed);
            p.pieces = p.have
              ? parsePieceListing(parsed.pieces, this.digests, (d) => this.needed.has(d))
              : new Map();
            if (p.have) this.forgive(p);
            if (!p.have || p.have.size + piecesSet(p.pieces) > before) this.lastGrowth = Date.now();
          } catch (err) {
            if (this.lookSignal.aborted) throw err;
            // no listing at all: it does not hold this bundle (any more); one too slow to list would hold every look
            if (err instanceof PeerFault && (err.kind === 'missing' || err.kind === 'slow'))
              p.dead = true;
            else this.fault(p, err);
          }
        }),
    );
    const stopped = reads.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (stopped) throw stopped.reason;
  }

  private fault(peer: Peer, err: unknown): void {
    const kind = err instanceof PeerFault ? err.kind : 'cut';
    if (kind === 'unreachable') peer.dead = true;
    else if (kind === 'refused') this.suspect(peer);
    else if (kind === 'missing') peer.have = new Set();
    else {
      if (kind === 'busy') peer.busyAt = Date.now();
      // busy, or cut mid-blob (killed? paused?): the next request says which
      peer.notBefore =
        Date.now() + (err instanceof PeerFault && err.retryAfterMs ? err.retryAfterMs : 1000);
    }
  }

  /**
   * A 404 for one blob: a peer still fetching listed what it does not hold (or dropped its
   * fetch; its listing will say), one that said it was complete does not hold what it said. It
   * is not asked for that blob again in this fetch; a complete one is demoted to what it lists.
   */
  private lacks(peer: Peer, digest: string): void {
    peer.failed.add(digest);
    if (peer.have) peer.have.delete(digest);
    else {
      peer.have = new Set();
      peer.demoted = true;
    }
  }

  /** A 404 for pieces a partial peer listed: its next listing says again, up to MAX_PIECE_MISSES times for one blob. */
  private missedPieces(peer: Peer, digest: string): void {
    peer.pieces.delete(digest);
    const misses = (peer.pieceMisses.get(digest) ?? 0) + 1;
    peer.pieceMisses.set(digest, misses);
    if (misses >= MAX_PIECE_MISSES) peer.failed.add(digest);
  }

  /**
   * A partial peer that missed pieces of a blob (its rename fell between its listing and the
   * ask) and now lists that blob whole is asked for it again, once: it is not to be shut out of
   * a blob it holds for a race.
   */
  private forgive(peer: Peer): void {
    for (const digest of peer.have!) {
      if (!peer.pieceMisses.has(digest) || peer.forgiven.has(digest)) continue;
      peer.forgiven.add(digest);
      peer.failed.delete(digest);
    }
  }

  private suspect(peer: Peer): void {
    this.opts.counters.suspect.add(peer.ep.node);
  }

  private async transfer(job: Job, peer: Peer): Promise<void> {
    if (this.covered(job)) return this.transferPieces(job, peer);
    job.attempts++;
    this.spend();
    const node = peer.ep.node;
    const { entry, write } = job;
    const url = `${bundleUrl(peer.ep, this.opts.manifestDigest)}/blobs/${entry.digest}`;
    let unguard: () => void = () => undefined;
    try {
      const res = await this.opts.client.get(
        url,
        this.opts.signal,
        write.got ? { range: `bytes=${write.got}-` } : {},
      );
      peer.busyStreak = 0;
      // a peer that ignores the range sends the whole blob: start it over
      if (write.got && res.statusCode !== 206) await this.restart(job);
      else if (
        write.got &&
        !String(res.headers['content-range'] ?? '').startsWith(`bytes ${write.got}-`)
      ) {
        res.destroy();
        throw new PeerFault(
          'refused',
          `${node} answered a range from ${write.got} with ${String(res.headers['content-range'])}`,
        );
      }
      // from where the answer starts (a peer that ignored the range starts the blob over)
      unguard = guardRate(
        res,
        () => write.got,
        entry.size,
        this.opts.minRate ?? MIN_BLOB_RATE,
        `${node} sending ${entry.path}`,
      );
      await write.append(res, {
        onBytes: (n) => {
          job.bytesBy.set(node, (job.bytesBy.get(node) ?? 0) + n);
          this.opts.onBytes(n);
        },
        overflow: () =>
          new PeerFault(
            'refused',
            `${node} sent more than the ${entry.size} bytes bundle.json lists for ${entry.path}`,
          ),
      });
    } catch (err) {
      if (this.opts.signal.aborted || localFailure(err)) throw err;
      return this.failed(job, peer, err);
    } finally {
      unguard();
    }
    // the response ended early without an error: a cut like any other, its bytes kept
    if (write.got < entry.size) {
      this.fault(
        peer,
        new PeerFault(
          'cut',
          `${peer.ep.node} ended ${entry.path} at ${write.got} of ${entry.size} bytes`,
        ),
      );
      await this.recount(job, node);
      return this.requeue(job);
    }
    await this.finish(job, peer);
  }

  /** A covered blob: its pieces from where this node's copy ends, each checked as it arrives (piece-transfer.ts). */
  private async transferPieces(job: Job, peer: Peer): Promise<void> {
    job.attempts++;
    this.spend();
    const node = peer.ep.node;
    const { entry, write } = job;
    const { from, to } = this.span(job, peer);
    const whole = holds(peer, entry.digest);
    const before = write.got;
    try {
      await fetchPieces({
        client: this.opts.client,
        url: `${bundleUrl(peer.ep, this.opts.manifestDigest)}/blobs/${entry.digest}`,
        signal: this.opts.signal,
        node,
        write,
        digests: this.digests!,
        from,
        to,
        minRate: this.opts.minRate ?? MIN_BLOB_RATE,
        whole,
        temp: this.opts.files.tempOf(entry.path),
        // an answer, as in transfer(): the 503s before it are forgiven
        onAnswer: () => {
          peer.busyStreak = 0;
        },
        onBytes: (n) => {
          job.bytesBy.set(node, (job.bytesBy.get(node) ?? 0) + n);
          this.opts.onBytes(n);
        },
        onLanded: (end) => this.opts.onPieces?.(entry, end),
      });
    } catch (err) {
      if (this.opts.signal.aborted || localFailure(err)) throw err;
      return this.failed(job, peer, err, !whole);
    }
    if (write.got >= entry.size) return this.finish(job, peer);
    if (write.got < to) {
      // the response ended early without an error: a cut like any other, its verified pieces kept
      this.fault(
        peer,
        new PeerFault('cut', `${node} ended ${entry.path} at ${write.got} of ${entry.size} bytes`),
      );
      await this.recount(job, node);
    } else if (write.got > before) {
      // a partial peer's run, sent whole: progress, no failed try; the rest from whoever holds it
      job.attempts--;
      this.requests--;
    }
    this.requeue(job);
  }

  /** One more blob request, or the end of a fetch whose peers keep failing past every bound per blob. */
  private spend(): void {
    if (++this.requests <= this.maxRequests) return;
    throw new AgentError(
      'NoPeerHasBundle',
      `${this.requests - 1} blob requests to peers ${[...this.peers.keys()].join(', ')} did not fetch the bundle's ${this.queue.length + this.running.size} files still missing: the peers keep failing; bring the bundle on a stick`,
    );
  }

  private freeBusy(): number {
    return this.opts.freeBusyAnswers ?? FREE_BUSY_ANSWERS;
  }

  /** A request that failed: the peer answers for it, the blob goes back in the queue (its verified bytes kept where they can be). */
  private async failed(job: Job, peer: Peer, err: unknown, pieceAsk = false): Promise<void> {
    const kind = err instanceof PeerFault ? err.kind : 'cut';
    // a partial peer's pieces moved on (its blob placed, or its fetch gone): its next listing says
    if (kind === 'missing' && pieceAsk) this.missedPieces(peer, job.entry.digest);
    else if (kind === 'missing') this.lacks(peer, job.entry.digest);
    else this.fault(peer, err);
    // a dripping peer holds no blob: another is asked for the rest of it
    if (kind === 'slow') peer.failed.add(job.entry.digest);
    // asking the wrong peer is no failed try, nor is waiting for a slot, until a peer keeps every request waiting
    if (kind === 'missing' || (kind === 'busy' && ++peer.busyStreak <= this.freeBusy()))
      job.attempts--;
    else if (kind === 'busy') peer.dead = true;
    // a wrong piece never reached the file: the verified ones before it stay
    if (kind === 'refused' && !this.covered(job)) await this.restart(job);
    else await this.recount(job, peer.ep.node);
    this.requeue(job);
  }

  /** After a cut: the temp file's bytes are what counts (writes in flight may have been lost). */
  private async recount(job: Job, node: string): Promise<void> {
    const lost = await job.write.recount();
    if (lost > 0) job.bytesBy.set(node, Math.max(0, (job.bytesBy.get(node) ?? 0) - lost));
    // what is served of it in part is what is in its file, whatever was told before
    if (this.covered(job)) this.opts.onPieces?.(job.entry, job.write.got);
  }

  /** Its bytes so far are not trusted to be a prefix of the right ones: from the start. */
  private async restart(job: Job): Promise<void> {
    job.bytesBy.clear();
    this.opts.onPieces?.(job.entry, 0);
    await job.write.discard();
  }

  private requeue(job: Job): void {
    if (job.attempts >= this.maxAttempts) {
      throw new AgentError(
        'NoPeerHasBundle',
        `${job.entry.path} could not be fetched whole after ${job.attempts} tries from peers ${[...this.peers.keys()].join(', ')}: the peers keep failing; bring the bundle on a stick`,
      );
    }
    this.queue.push(job);
  }

  private async finish(job: Job, peer: Peer): Promise<void> {
    try {
      await job.write.commit();
    } catch (err) {
      // the disk's own failure (sync, rename) is no peer's
      if (!(err instanceof FormatError)) throw err;
      // refused as a stick's damaged entry is, its temp file gone; one sender: it is to blame;
      // several (a resumed blob): fetch it whole from one to learn which
      this.refusal = err;
      this.opts.onPieces?.(job.entry, 0);
      if (job.bytesBy.size === 1) this.suspect(peer);
      job.bytesBy.clear();
      return this.requeue(job);
    }
    for (const [n, bytes] of job.bytesBy) this.opts.counters.fetched(n, bytes);
    this.opts.onPlaced(job.entry);
  }
}

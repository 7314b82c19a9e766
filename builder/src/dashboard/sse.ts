/**
 * One page's Server-Sent Events stream, bounded against a reader that stops reading (a hung tab,
 * a local process that opens /events and never reads). Each snapshot is serialized once, into
 * one Buffer all streams write (a string written to a socket that cannot take it at once is
 * copied per socket: 16 such streams of a 200 MB snapshot held 3.28 GB). While the socket is
 * backed up, the newest snapshot waits (a reference) and is written on 'drain'; poll times and
 * keepalives are dropped meanwhile. A stream that is still behind when a second change comes,
 * or backed up for STREAM_STALL_MS, is dropped: it is sent 'reload' and closed, and the page
 * reconnects, its first event the whole current snapshot. What was unsent is never queued more.
 */
import type { ServerResponse } from 'node:http';
import type { Snapshot } from './snapshot.js';
import { cutSnapshot, MAX_SNAPSHOT_BYTES } from './snapshot-size.js';

/** A quiet stream still sends a comment this often, so proxies and the browser keep it open. */
const KEEPALIVE_MS = 15_000;
/** Bytes a stream may hold unsent: one snapshot and the socket's own high-water mark. */
const MAX_STREAM_UNSENT_BYTES = MAX_SNAPSHOT_BYTES + 256 * 1024;
/** A stream backed up this long (no 'drain') is dropped, even with no change to send: it holds a slot. */
export const STREAM_STALL_MS = 30_000;
/** A dropped stream's 'reload' has this long to go out before its connection is cut. */
const RELOAD_GRACE_MS = 1000;

const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
const RELOAD_EVENT = sse('reload', {});

/** One serialization per snapshot, however many pages are open, cut to MAX_SNAPSHOT_BYTES. */
const stateEvents = new WeakMap<Snapshot, Buffer>();
function stateEvent(s: Snapshot): Buffer {
  let e = stateEvents.get(s);
  if (e === undefined) stateEvents.set(s, (e = Buffer.from(sse('state', cutSnapshot(s)))));
  return e;
}

export class SnapshotStream {
  private pending: Snapshot | undefined;
  private backedUpSince: number | undefined;
  private dropped = false;
  private readonly keepalive: NodeJS.Timeout;

  constructor(
    private readonly res: ServerResponse,
    first: Snapshot,
  ) {
    res.write('retry: 2000\n');
    this.state(first);
    res.on('drain', () => this.flush());
    this.keepalive = setInterval(() => this.tick(), KEEPALIVE_MS);
    res.on('close', () => {
      clearInterval(this.keepalive);
      this.pending = undefined;
    });
  }

  /** Bytes written and not yet taken by the client. */
  get buffered(): number {
    return this.res.writableLength;
  }

  /** Whether a snapshot waits for the client to read. */
  get waiting(): boolean {
    return this.pending !== undefined;
  }

  state(s: Snapshot): void {
    if (this.dropped) return;
    if (!this.res.writableNeedDrain) return this.write(stateEvent(s));
    // behind on one change is a slow reader; behind on two, one that is not reading
    if (this.pending) return this.drop();
    this.pending = s;
  }

  poll(at: string): void {
    this.extra(sse('poll', { at }));
  }

  end(): void {
    this.res.end();
  }

  private write(event: Buffer): void {
    if (this.res.writableLength + event.length > MAX_STREAM_UNSENT_BYTES) return this.drop();
    if (!this.res.write(event)) this.backedUpSince ??= Date.now();
  }

  /** Liveness only: worthless behind a backlog that the next snapshot supersedes. */
  private extra(text: string): void {
    if (!this.dropped && !this.res.writableNeedDrain) this.res.write(text);
  }

  private tick(): void {
    if (this.backedUpSince !== undefined && Date.now() - this.backedUpSince >= STREAM_STALL_MS)
      this.drop();
    else this.extra(': keepalive\n\n');
  }

  private flush(): void {
    this.backedUpSince = undefined;
    const s = this.pending;
    this.pending = undefined;
    if (s) this.state(s);
  }

  /** Stops sending: 'reload' goes out if the client reads within RELOAD_GRACE_MS, else the connection is cut, and what it held with it. */
  private drop(): void {
    this.dropped = true;
    this.pending = undefined;
    clearInterval(this.keepalive);
    this.res.end(RELOAD_EVENT);
    const cut = setTimeout(() => this.res.destroy(), RELOAD_GRACE_MS);
    this.res.on('close', () => clearTimeout(cut));
  }
}

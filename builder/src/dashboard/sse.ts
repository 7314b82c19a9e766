/**
 * One page's Server-Sent Events stream, bounded against a reader that stops reading (a hung tab,
 * a local process that opens /events and never reads): each snapshot replaces the previous one,
 * so while the socket is backed up only the newest waits (a reference, not a copy) and is written
 * on 'drain'; poll times and keepalives are dropped meanwhile. A stream so holds at most one
 * snapshot event beyond the socket's high-water mark, however many changes arrive.
 */
import type { ServerResponse } from 'node:http';
import type { Snapshot } from './snapshot.js';

/** A quiet stream still sends a comment this often, so proxies and the browser keep it open. */
const KEEPALIVE_MS = 15_000;

const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

/** One serialization per snapshot, however many pages are open. */
const stateEvents = new WeakMap<Snapshot, string>();
function stateEvent(s: Snapshot): string {
  let e = stateEvents.get(s);
  if (e === undefined) stateEvents.set(s, (e = sse('state', s)));
  return e;
}

export class SnapshotStream {
  private pending: Snapshot | undefined;
  private readonly keepalive: NodeJS.Timeout;

  constructor(private readonly res: ServerResponse, first: Snapshot) {
    res.write('retry: 2000\n');
    this.state(first);
    res.on('drain', () => this.flush());
    this.keepalive = setInterval(() => this.extra(': keepalive\n\n'), KEEPALIVE_MS);
    res.on('close', () => { clearInterval(this.keepalive); this.pending = undefined; });
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
    if (this.res.writableNeedDrain) this.pending = s;
    else this.res.write(stateEvent(s));
  }

  poll(at: string): void {
    this.extra(sse('poll', { at }));
  }

  end(): void {
    this.res.end();
  }

  /** Liveness only: worthless behind a backlog that the next snapshot supersedes. */
  private extra(text: string): void {
    if (!this.res.writableNeedDrain) this.res.write(text);
  }

  private flush(): void {
    const s = this.pending;
    this.pending = undefined;
    if (s) this.state(s);
  }
}

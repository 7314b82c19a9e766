// The BundleApprovals as a watch keeps them (issue #42): one list, then a watch from its
// resourceVersion with bookmarks, as an informer does. An approval or a revoke reaches the node
// as the API server accepts it, and 500 nodes cost the API server one watch each instead of a
// list every 5 s. The list is read again when the watch expires (410), breaks, or has run its
// length (APPROVALS_RELIST_MS and up to WATCH_LENGTH_SPREAD more: its bound, and a safety re-list
// so a missed event is not wrong for long). A list that fails, and a watch that gives nothing
// before it ends or fails, are tried again after a growing backoff. What was read last, when,
// and why reading fails now is what the peers' looks decide the port by (fail closed:
// daemon/peers.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import { APPROVAL_PLURAL, GROUP, pickApproval, VERSION } from '@offline-bundle/status';
import {
  adminApis,
  ClusterError,
  listAllAt,
  requestOptions,
  watchCustomObjects,
  type WatchEvent,
} from '@offline-bundle/kube';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { DIRECTORY_REQUEST_MS } from '../peers/directory.js';
import type { PeerApproval } from '../peers/types.js';

/**
 * The shortest watch (timeoutSeconds, and cut here if the server runs it on): then the list is
 * read again. A quiet cluster may send no bookmark within it, so its longest
 * (× (1 + WATCH_LENGTH_SPREAD)) plus a list's deadline stays under the peers' grace
 * (APPROVALS_GRACE_MS, 2 min): a healthy quiet watch never closes the port.
 */
export const APPROVALS_RELIST_MS = 60_000;
/** Each watch runs 1 to 1 + this times APPROVALS_RELIST_MS, drawn anew (client-go: 1× to 2×), so nodes started together do not re-list in step. */
export const WATCH_LENGTH_SPREAD = 0.5;
/** The first wait before a failed list, or a watch that gave nothing, is tried again; and the least time between two lists. */
export const WATCH_RETRY_MIN_MS = 500;
/** The backoff's bound: an API server back after an outage is read within this. */
const WATCH_RETRY_MAX_MS = 10_000;
/** A watch that gave nothing and ended before this share of its length ended as no healthy watch does (a proxy that ends streams): it backs off. */
const EARLY_END_SHARE = 0.5;

/** One watch's length: relistMs to relistMs × (1 + WATCH_LENGTH_SPREAD). */
export function watchLengthMs(relistMs: number, random = Math.random()): number {
  return Math.round(relistMs * (1 + WATCH_LENGTH_SPREAD * Math.min(1, Math.max(0, random))));
}

interface ApprovalWatchOptions {
  kubeconfig: string;
  context?: string;
  log: Logger;
  /** Tests: a shorter watch (and so a more frequent list). */
  relistMs?: number;
  requestMs?: number;
  /** The approvals changed, or reading them began or stopped failing. */
  onChange: () => void;
}

/** The shipped rule's fix, instead of the admin's that apiCall names; a watch's names its verb (a rule with list alone lets the list through). */
function asNodeRefusal(err: unknown, verb: 'list' | 'watch'): unknown {
  if (!(err instanceof ClusterError) || err.code !== 'FORBIDDEN') return err;
  const needs =
    verb === 'watch' ? ': the node needs the verb watch (as well as list) on bundleapprovals' : '';
  return new ClusterError(
    'FORBIDDEN',
    `${err.message.replace(/: bind your user.*$/, '')}${needs}: apply deploy/rbac.yaml (ClusterRole offline-bundle:peer-discovery, bound to group system:nodes)`,
    { cause: err },
  );
}

const toPeerApproval = (item: Record<string, unknown>): [string, PeerApproval] | undefined => {
  const a = pickApproval(item);
  return a
    ? [a.name, { manifestDigest: a.manifestDigest, version: a.version, signer: a.signer }]
    : undefined;
};

/** How a watch's stream broke a bound: said in the journal, and the lists after it back off. */
const STREAM_REFUSALS = new Set(['API_TOO_LARGE', 'API_TOO_FAST', 'API_NOT_JSON']);

/** A watch's own ending (its length reached, or a stop), told apart from a failure. */
const ENDED = Symbol('ended');

export class ApprovalWatch {
  /** By object name; undefined until a list succeeded. */
  private byName: Map<string, PeerApproval> | undefined;
  /** When the API server last answered: a list, or an event or bookmark of the watch (ms since the epoch). */
  readAt = 0;
  /** Why reading fails now (a list failed or was refused, or the watch was refused); undefined while reading works. */
  error: unknown;
  /** The watch's refusal (403, 401): it holds through lists that succeed, until a watch is accepted. */
  private watchRefusal: unknown;
  /** The watch under way gave an event or a bookmark. */
  private delivered = false;
  /** Settles once the first list succeeded or failed. */
  readonly first: Promise<void>;
  private firstDone!: () => void;
  private readonly stopping = new AbortController();
  private current: AbortController | undefined;
  private running: Promise<void> | undefined;
  private resourceVersion = '';
  /** Lists, and watches that gave nothing, failed in a row (or ended early): the backoff's exponent. */
  private failures = 0;
  /** Streams refused past a bound since a watch last ran most of its length. */
  private refusals = 0;

  constructor(private readonly o: ApprovalWatchOptions) {
    this.first = new Promise((resolve) => {
      this.firstDone = resolve;
    });
  }

  /** The approvals at the last read; undefined before any. */
  get approvals(): PeerApproval[] | undefined {
    return this.byName && [...this.byName.values()];
  }

  start(): void {
    this.running ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    this.current?.abort(ENDED);
    await this.running;
  }

  private get relistMs(): number {
    return this.o.relistMs ?? APPROVALS_RELIST_MS;
  }

  private async run(): Promise<void> {
    while (!this.stopping.signal.aborted) {
      const listedAt = Date.now();
      try {
        await this.list();
      } catch (err) {
        if (this.stopping.signal.aborted) break;
        this.unreadable(err);
        this.failures++;
        await this.backoff(0);
        continue;
      }
      await this.watchOnce();
      if (this.stopping.signal.aborted) break;
      // never two lists within WATCH_RETRY_MIN_MS, whatever the watch between them did
      await this.backoff(Math.max(0, listedAt + WATCH_RETRY_MIN_MS - Date.now()));
    }
    this.firstDone();
  }

  /**
   * One watch, and what its end says of the API server: one that gave an event or a bookmark, or
   * ran most of its length, was healthy (the list again at once); one that gave nothing and ended
   * or failed early backs off, as does a stream past a bound until a watch runs its length.
   */
  private async watchOnce(): Promise<void> {
    const lengthMs = watchLengthMs(this.relistMs);
    const startedAt = Date.now();
    this.delivered = false;
    let failed = false;
    try {
      await this.watch(lengthMs);
    } catch (err) {
      if (this.stopping.signal.aborted) return;
      failed = true;
      this.watchFailed(err);
      if (err instanceof ClusterError && STREAM_REFUSALS.has(err.code)) {
        this.refusals++;
        return;
      }
    }
    const ranLength = !failed && Date.now() - startedAt >= EARLY_END_SHARE * lengthMs;
    if (this.delivered || ranLength) this.failures = 0;
    else this.failures++;
    if (ranLength) this.refusals = 0;
  }

  /**
   * The wait before the next list: `gapMs` while all is well, else doubling from WATCH_RETRY_MIN_MS
   * up to WATCH_RETRY_MAX_MS (a stream past a bound backs off until a watch runs most of its length).
   */
  private async backoff(gapMs: number): Promise<void> {
    const n = Math.max(this.failures, this.refusals);
    const capMs = Math.min(WATCH_RETRY_MAX_MS, this.relistMs);
    // jitter: 500 nodes back after an outage do not list in step
    const waitMs =
      n === 0
        ? gapMs
        : Math.max(
            gapMs,
            Math.min(capMs, Math.min(WATCH_RETRY_MIN_MS, capMs) * 2 ** (n - 1)) *
              (0.8 + 0.4 * Math.random()),
          );
    await sleep(waitMs, undefined, { signal: this.stopping.signal }).catch(() => undefined);
  }

  /** One list of the approvals; a stop ends one under way (an API server that hangs does not hold the daemon's stop). */
  private async list(): Promise<void> {
    const { kubeconfig, context } = this.o;
    let apis;
    try {
      apis = await adminApis(kubeconfig, context, {
        deadlineMs: this.o.requestMs ?? DIRECTORY_REQUEST_MS,
      });
    } catch (cause) {
      throw new ClusterError(
        'KUBECONFIG',
        `cannot use kubeconfig ${kubeconfig}${context ? ` (context ${context})` : ''}: ${(cause as Error).message}: check status.kubeconfig`,
        { cause },
      );
    }
    const list = await listAllAt(
      `list ${APPROVAL_PLURAL}.${GROUP}`,
      (q) =>
        apis.custom.listClusterCustomObject(
          { group: GROUP, version: VERSION, plural: APPROVAL_PLURAL, ...q },
          requestOptions(this.stopping.signal),
        ),
      toPeerApproval,
      { notFound: () => [] },
    ).catch((err: unknown) => {
      throw asNodeRefusal(err, 'list');
    });
    if (this.stopping.signal.aborted) return;
    const before = this.key();
    this.byName = new Map(list.items.filter((x) => x !== undefined));
    this.resourceVersion = list.resourceVersion;
    this.readAt = Date.now();
    const errorBefore = this.error;
    // a list is no answer to a refused watch: the approvals stay unreadable until a watch is accepted
    this.error = this.watchRefusal;
    this.firstDone();
    if (errorBefore !== this.error || before !== this.key()) this.o.onChange();
  }

  /** Runs one watch to its end (the server's, or lengthMs here); throws how it failed otherwise. */
  private async watch(lengthMs: number): Promise<void> {
    if (this.stopping.signal.aborted) return;
    const cut = new AbortController();
    this.current = cut;
    const timer = setTimeout(() => cut.abort(ENDED), lengthMs);
    try {
      await watchCustomObjects({
        kubeconfig: this.o.kubeconfig,
        ...(this.o.context ? { context: this.o.context } : {}),
        group: GROUP,
        version: VERSION,
        plural: APPROVAL_PLURAL,
        resourceVersion: this.resourceVersion,
        timeoutSeconds: Math.max(1, Math.ceil(lengthMs / 1000)),
        signal: cut.signal,
        deadlineMs: this.o.requestMs ?? DIRECTORY_REQUEST_MS,
        onOpen: () => this.accepted(),
        onEvent: (e) => this.event(e),
      });
    } catch (err) {
      if (cut.signal.reason !== ENDED) throw asNodeRefusal(err, 'watch');
    } finally {
      clearTimeout(timer);
      this.current = undefined;
    }
  }

  private event(e: WatchEvent): void {
    const meta = (e.object.metadata ?? {}) as Record<string, unknown>;
    if (typeof meta.resourceVersion === 'string') this.resourceVersion = meta.resourceVersion;
    this.readAt = Date.now();
    this.delivered = true;
    if (e.type === 'BOOKMARK' || !this.byName) return;
    const before = this.key();
    const name = typeof meta.name === 'string' ? meta.name : '';
    const picked = e.type === 'DELETED' ? undefined : toPeerApproval(e.object);
    // an object that is no approval (any more) approves nothing
    if (picked) this.byName.set(...picked);
    else this.byName.delete(name);
    if (before !== this.key()) this.o.onChange();
  }

  /** The API server accepted a watch (its headers): a refusal of an earlier one no longer holds. */
  private accepted(): void {
    if (this.watchRefusal === undefined) return;
    if (this.error === this.watchRefusal) this.error = undefined;
    this.watchRefusal = undefined;
    this.o.onChange();
  }

  /** Reading fails now (a list failed, or the watch was refused): the peers' looks decide the port by it. */
  private unreadable(err: unknown): void {
    this.error = err;
    this.firstDone();
    this.o.onChange();
  }

  /**
   * A watch that failed is followed by a list: only a refusal makes the approvals unreadable at
   * once, and until a watch is accepted; a stream past a bound is said (one line), an expiry (410)
   * or a cut is ordinary.
   */
  private watchFailed(err: unknown): void {
    if (!(err instanceof ClusterError)) return;
    if (err.code === 'FORBIDDEN') {
      this.watchRefusal = err;
      this.unreadable(err);
    } else if (STREAM_REFUSALS.has(err.code))
      this.o.log.warn('peers', oneLine(err), { reason: err.code });
  }

  private key(): string {
    return this.byName ? JSON.stringify([...this.byName].sort(([a], [b]) => (a < b ? -1 : 1))) : '';
  }
}

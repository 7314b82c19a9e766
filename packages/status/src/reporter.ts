/**
 * Sends a node's status to its NodeBundleStatus object in the cluster, without ever making the
 * pipeline wait: `report()` only records the newest state; a background loop applies it.
 *
 * - Server-side apply (content type application/apply-patch+yaml, fieldManager
 *   bundle-agent-<node>, force=true) of the status subresource. The object is first created
 *   (or adopted) by an apply of the main resource carrying metadata only; a 404 on the status
 *   means the object went away and it is created again.
 * - Only the newest state is kept: states reported while a write is in flight or while the API
 *   server is unreachable replace each other, and the newest one is what eventually arrives.
 * - Unreachable, timed out, 5xx, 409, 429 (Retry-After honoured), 401/403 (credentials may be
 *   rotated or RBAC not yet installed) and 404 from the main resource (CRD not yet installed)
 *   are retried with exponential backoff and jitter, capped at maxBackoffMs, for ever. Other
 *   4xx (400, 422: the state itself is refused) are logged and that state is dropped; the next
 *   report is tried normally.
 * - Except that a 422 naming the refused fields (a newer agent's value in an older CRD) is
 *   answered once more at once with the same state without those fields (refused.ts), so one
 *   unknown value never keeps the rest of the status from the cluster; what was left out is
 *   logged.
 * - Rate: at most one write per minIntervalMs while only progress (and the technician message
 *   that follows it) changes; a change of phase, condition, bundle identity or history is sent
 *   at once (as soon as the write in flight, if any, ends).
 * - Heartbeat: with nothing new to say for heartbeatMs, the last state goes out again with a
 *   fresh updatedAt, and every write carries status.heartbeatSeconds, so the admin's side can
 *   tell a quiet agent from a dead one (as the kubelet's Lease does for the Node).
 */
import { createHash } from 'node:crypto';
import type { CustomObjectsApi, ConfigurationOptions } from '@kubernetes/client-node';
import {
  APPLY_PATCH,
  customObjectsApi,
  isApiException,
  requestOptions,
  ClusterError,
  apiDetail,
  apiMessage,
} from '@offline-bundle/kube';
import type { NodeStatus } from './model.js';
import { withoutRefused, refusedFields } from './refused.js';
import {
  API_VERSION,
  GROUP,
  isValidNodeName,
  KIND,
  PLURAL,
  toResource,
  VERSION,
  type ResourceStatus,
} from './resource.js';

/** Compatible with the agent's journald logger. */
export interface StatusLogger {
  info(
    event: string,
    msg: string,
    fields?: Record<string, string | number | boolean | undefined>,
  ): void;
  warn(
    event: string,
    msg: string,
    fields?: Record<string, string | number | boolean | undefined>,
  ): void;
  error(
    event: string,
    msg: string,
    fields?: Record<string, string | number | boolean | undefined>,
  ): void;
}

export interface ClusterReporterOptions {
  /** The node's name: the object's name and the field manager's suffix. */
  node: string;
  /** Path of the kubeconfig to use (the node's own, e.g. /var/lib/kubelet/kubeconfig, where allowed). */
  kubeconfig: string;
  /** Context in the kubeconfig; default: its current context. */
  context?: string;
  /** Least time between two writes while only progress changes. Default 5000. */
  minIntervalMs?: number;
  /** First retry delay. Default 1000. */
  initialBackoffMs?: number;
  /** Longest retry delay. Default 60000. */
  maxBackoffMs?: number;
  /** Time limit of one HTTP request. Default 15000. */
  requestTimeoutMs?: number;
  /** The most time between two writes while the state stays the same; 0: never again. Default 60000. */
  heartbeatMs?: number;
  log?: StatusLogger;
  /** For tests: the jitter source, in [0, 1). */
  random?: () => number;
}

export interface ReporterStats {
  /** Successful status writes. */
  writes: number;
  /** Failed attempts (each retry counts). */
  failures: number;
  /** Consecutive failed attempts now (0 when the last attempt succeeded). */
  retrying: number;
  /** States dropped because the API server refused them (400, 422, ...). */
  rejected: number;
  /** States sent again without the fields the API server refused (422 naming them). */
  reduced: number;
  lastError?: string;
  lastWriteAt?: string;
  /** A newer state than the last one written is waiting or being sent. */
  pending: boolean;
}

/** Why an attempt failed, and whether to try the same (or a newer) state again. */
interface Failure {
  retry: boolean;
  message: string;
  status?: number;
  retryAfterMs?: number;
  /** Drop the API client: load the kubeconfig again on the next attempt. */
  reload: boolean;
  /** For 422: the fields the answer names as invalid (details.causes[].field). */
  fields?: string[];
}

/** How often an agent with nothing new says it is alive; the admin's side counts a row stale after a few. */
export const DEFAULT_HEARTBEAT_MS = 60_000;

/** `bundle-agent-<node>`, kept within the API server's 128-character limit for field managers. */
export function fieldManagerFor(node: string): string {
  const name = `bundle-agent-${node}`;
  if (name.length <= 128) return name;
  const h = createHash('sha256').update(node).digest('hex').slice(0, 8);
  return `bundle-agent-${node.slice(0, 128 - 13 - 9)}-${h}`;
}

/** What makes a change worth sending at once (everything but progress, message and time). */
function significantKey(s: NodeStatus): string {
  return JSON.stringify([
    s.phase,
    s.bundle ?? null,
    s.conditions.map((c) => [c.type, c.status, c.reason, c.message]),
    s.history,
    // a new reading of the runtime (its names, or what of the bundle it lacks) is news too
    s.runtime
      ? [
          s.runtime.digest,
          s.runtime.pinned,
          s.runtime.bundle?.missing?.length,
          s.runtime.bundle?.unpinned?.length,
        ]
      : null,
  ]);
}

function classify(err: unknown, main: boolean): Failure {
  if (isApiException(err)) {
    const code = err.code;
    const headers = (err.headers ?? {}) as Record<string, string>;
    const ra = Number(headers['retry-after']);
    const retryAfterMs = Number.isFinite(ra) && ra > 0 ? ra * 1000 : undefined;
    let body = err.body as { message?: string; details?: unknown } | string | undefined;
    if (typeof body === 'string') {
      try {
        body = JSON.parse(body) as { message?: string; details?: unknown };
      } catch {
        /* plain text */
      }
    }
    // the one cut the admin's commands use too: one line, at most MAX_API_DETAIL_CHARS
    const text = apiMessage(body) || (typeof body === 'string' ? apiDetail(body) : '');
    const detail = text ? `: ${text}` : '';
    const message = `HTTP ${code}${detail}`;
    // a refusal by RBAC or the admission policy: name the rule that grants the write
    if (code === 403)
      return {
        retry: true,
        message: `${message}: apply deploy/rbac.yaml (ClusterRole offline-bundle:node-status-writer, bound to group system:nodes, and its admission policy), or before Kubernetes 1.30 / OpenShift 4.17 the output of bundle cluster rbac`,
        status: code,
        reload: true,
      };
    if (code === 401) return { retry: true, message, status: code, reload: true };
    if (code === 404 && main)
      return {
        retry: true,
        message: `${message} (is deploy/crd.yaml installed?)`,
        status: code,
        reload: false,
      };
    if (code === 408 || code === 409 || code === 429 || code >= 500)
      return {
        retry: true,
        message,
        status: code,
        ...(retryAfterMs ? { retryAfterMs } : {}),
        reload: false,
      };
    return {
      retry: false,
      message,
      status: code,
      reload: false,
      ...(code === 422 ? { fields: refusedFields(body) } : {}),
    };
  }
  const e = err as { name?: string; code?: string; message?: string } | undefined;
  // the bounded client's refusals (cluster-http.ts) say what the server did in their message
  const what =
    e?.name === 'AbortError' || e?.name === 'TimeoutError'
      ? 'timed out'
      : err instanceof ClusterError
        ? err.message
        : (e?.code ?? e?.message ?? String(err));
  return {
    retry: true,
    message: `API server unreachable: ${String(what).split('\n')[0]}`,
    reload: true,
  };
}

export class ClusterReporter {
  readonly node: string;
  readonly fieldManager: string;
  private readonly opts: Required<Omit<ClusterReporterOptions, 'context' | 'log'>> &
    Pick<ClusterReporterOptions, 'context' | 'log'>;

  /** Newest state not yet written (undefined: nothing waiting). */
  private latest: NodeStatus | undefined;
  private urgent = false;
  private lastKey: string | undefined;
  private lastAttemptAt = Number.NEGATIVE_INFINITY;
  private backoffUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private inflight: Promise<void> | undefined;
  private closed = false;
  private readonly closing = new AbortController();
  private flushing = 0;
  private waiters: (() => void)[] = [];
  /** Whether the last state taken from the queue was written (false after a refusal). */
  private delivered = true;
  private api: CustomObjectsApi | undefined;
  private objectReady = false;
  private generation: number | undefined;
  /** The last status the API server accepted: what the object holds for the fields this agent owns. */
  private accepted: ResourceStatus | undefined;
  /** The last state written, sent again at each heartbeat. */
  private lastSent: NodeStatus | undefined;
  private beat: NodeJS.Timeout | undefined;
  private readonly counters = { writes: 0, failures: 0, retrying: 0, rejected: 0, reduced: 0 } as {
    writes: number;
    failures: number;
    retrying: number;
    rejected: number;
    reduced: number;
    lastError?: string;
    lastWriteAt?: string;
  };

  constructor(options: ClusterReporterOptions) {
    if (!isValidNodeName(options.node))
      throw new TypeError(
        `node name ${JSON.stringify(options.node)} is not a valid Kubernetes object name`,
      );
    this.node = options.node;
    this.fieldManager = fieldManagerFor(options.node);
    const ms = (v: number | undefined, dflt: number): number =>
      typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : dflt;
    this.opts = {
      node: options.node,
      kubeconfig: options.kubeconfig,
      context: options.context,
      log: options.log,
      minIntervalMs: ms(options.minIntervalMs, 5000),
      initialBackoffMs: Math.max(1, ms(options.initialBackoffMs, 1000)),
      maxBackoffMs: Math.max(1, ms(options.maxBackoffMs, 60_000)),
      requestTimeoutMs: Math.max(1, ms(options.requestTimeoutMs, 15_000)),
      heartbeatMs: ms(options.heartbeatMs, DEFAULT_HEARTBEAT_MS),
      random: options.random ?? Math.random,
    };
  }

  /** Records the newest state and returns at once; the background loop sends it. */
  report(status: NodeStatus): void {
    if (this.closed) return;
    const key = significantKey(status);
    if (key !== this.lastKey) this.urgent = true;
    this.lastKey = key;
    this.latest = structuredClone(status);
    this.schedule();
  }

  /** A StatusTracker sink: `tracker.onChange(reporter.sink)`. */
  readonly sink = (status: NodeStatus): void => this.report(status);

  get stats(): ReporterStats {
    return { ...this.counters, pending: this.latest !== undefined || this.inflight !== undefined };
  }

  /**
   * Sends what is waiting now, ignoring minIntervalMs (retry delays still apply). Resolves true
   * once the newest state is written, false if that did not happen within `timeoutMs` or the
   * API server refused it.
   */
  flush(timeoutMs = 5000): Promise<boolean> {
    if (this.idle()) return Promise.resolve(this.delivered);
    if (this.closed) return Promise.resolve(false);
    this.flushing++;
    this.schedule();
    return new Promise<boolean>((resolve) => {
      let done = false;
      const finish = (ok: boolean): void => {
        if (done) return;
        done = true;
        clearTimeout(t);
        this.flushing--;
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(ok);
      };
      const waiter = (): void => finish(this.delivered);
      // Not unref'd: whoever awaits flush() keeps the process alive until it settles.
      const t = setTimeout(() => finish(false), timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** Flushes (up to `timeoutMs`), then stops: later reports are ignored, a request in flight is aborted. */
  async close(timeoutMs = 5000): Promise<boolean> {
    if (this.closed) return this.idle() && this.delivered;
    const ok = await this.flush(timeoutMs);
    this.closed = true;
    clearTimeout(this.timer);
    clearTimeout(this.beat);
    this.timer = undefined;
    this.closing.abort();
    await this.inflight?.catch(() => undefined);
    return ok;
  }

  private idle(): boolean {
    return this.latest === undefined && this.inflight === undefined;
  }

  private schedule(): void {
    if (this.closed || this.inflight || !this.latest) return;
    const now = Date.now();
    let due = this.urgent || this.flushing > 0 ? now : this.lastAttemptAt + this.opts.minIntervalMs;
    due = Math.max(due, this.backoffUntil);
    if (this.timer && this.timerAt <= due) return;
    clearTimeout(this.timer);
    this.timerAt = due;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Number.POSITIVE_INFINITY;
        this.run();
      },
      Math.max(0, due - now),
    );
    // The reporter never keeps the process alive on its own: close() is how to wait for it.
    this.timer.unref();
  }

  private run(): void {
    if (this.closed || this.inflight || !this.latest) return;
    const snapshot = this.latest;
    const wasUrgent = this.urgent;
    this.latest = undefined;
    this.urgent = false;
    this.lastAttemptAt = Date.now();
    this.inflight = this.deliver(snapshot)
      .then(
        () => {
          if (this.counters.retrying > 0)
            this.opts.log?.info(
              'cluster-status',
              `status reaches the cluster again after ${this.counters.retrying} failed attempt(s)`,
              { node: this.node },
            );
          this.counters.writes++;
          this.counters.retrying = 0;
          this.counters.lastWriteAt = new Date().toISOString();
          this.backoffUntil = 0;
          this.delivered = true;
          this.lastSent = snapshot;
          this.armBeat();
        },
        (err: unknown) => {
          const f = (err as { failure?: Failure }).failure ?? classify(err, false);
          this.counters.failures++;
          this.counters.lastError = f.message;
          if (f.reload) this.api = undefined;
          if (!f.retry) {
            this.counters.rejected++;
            this.counters.retrying = 0;
            this.delivered = false;
            this.opts.log?.error(
              'cluster-status',
              `the API server refused the status of ${this.node}: ${f.message}; dropped, the next change is sent normally`,
              { node: this.node, status: f.status },
            );
            // an older state re-sent as fresh would say what no longer holds: the row goes stale instead
            this.lastSent = undefined;
            clearTimeout(this.beat);
            return;
          }
          // Keep the newest state: a newer report (if any) replaces this one.
          if (!this.latest) this.latest = snapshot;
          this.urgent ||= wasUrgent;
          this.counters.retrying++;
          const exp = Math.min(
            this.opts.maxBackoffMs,
            this.opts.initialBackoffMs * 2 ** Math.min(30, this.counters.retrying - 1),
          );
          // "Equal jitter": between half and all of the exponential delay.
          let delay = exp / 2 + (this.opts.random() * exp) / 2;
          if (f.retryAfterMs)
            delay = Math.max(delay, Math.min(f.retryAfterMs, this.opts.maxBackoffMs));
          this.backoffUntil = Date.now() + delay;
          if (this.counters.retrying === 1 || this.counters.retrying % 10 === 0) {
            this.opts.log?.warn(
              'cluster-status',
              `cannot write the status of ${this.node} to the cluster (${f.message}); retrying in ${Math.round(delay / 100) / 10} s, the node keeps working`,
              { node: this.node, attempt: this.counters.retrying, status: f.status },
            );
          }
        },
      )
      .finally(() => {
        this.inflight = undefined;
        if (this.idle()) for (const w of [...this.waiters]) w();
        this.schedule();
      });
  }

  /** Sends the last state again, newly dated, once heartbeatMs pass with nothing else sent. */
  private armBeat(): void {
    clearTimeout(this.beat);
    if (this.closed || this.opts.heartbeatMs === 0) return;
    this.beat = setTimeout(() => {
      if (this.closed || this.latest || this.inflight || !this.lastSent) return;
      this.latest = { ...structuredClone(this.lastSent), updatedAt: new Date().toISOString() };
      this.schedule();
    }, this.opts.heartbeatMs);
    this.beat.unref();
  }

  private async client(): Promise<CustomObjectsApi> {
    return (this.api ??= await customObjectsApi(this.opts.kubeconfig, this.opts.context));
  }

  /** Per-request options: the apply content type, and a timeout that close() also cuts short. */
  private requestOptions(): ConfigurationOptions {
    return requestOptions(
      AbortSignal.any([AbortSignal.timeout(this.opts.requestTimeoutMs), this.closing.signal]),
      APPLY_PATCH,
    );
  }

  private async attempt<T>(main: boolean, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw Object.assign(new Error('apply failed'), {
        failure: classify(err, main),
        cause: err,
        code404: isApiException(err) && err.code === 404,
      });
    }
  }

  private async ensureObject(api: CustomObjectsApi): Promise<void> {
    const obj = (await this.attempt(true, () =>
      api.patchClusterCustomObject(
        {
          group: GROUP,
          version: VERSION,
          plural: PLURAL,
          name: this.node,
          body: {
            apiVersion: API_VERSION,
            kind: KIND,
            metadata: {
              name: this.node,
              labels: { 'app.kubernetes.io/managed-by': 'bundle-agent' },
            },
          },
          fieldManager: this.fieldManager,
          force: true,
        },
        this.requestOptions(),
      ),
    )) as { metadata?: { generation?: number } } | undefined;
    this.noteGeneration(obj);
    this.objectReady = true;
  }

  private noteGeneration(obj: { metadata?: { generation?: number } } | undefined): void {
    const g = obj?.metadata?.generation;
    if (typeof g === 'number' && Number.isSafeInteger(g) && g >= 0) this.generation = g;
  }

  /** `reduce` shapes the status just before it is sent (after the generation is known). */
  private async applyStatus(
    api: CustomObjectsApi,
    status: NodeStatus,
    reduce?: (s: ResourceStatus) => ResourceStatus,
  ): Promise<void> {
    const beat = this.opts.heartbeatMs
      ? { heartbeatSeconds: Math.ceil(this.opts.heartbeatMs / 1000) }
      : {};
    const body = toResource(status, this.node, {
      ...(this.generation !== undefined ? { generation: this.generation } : {}),
      ...beat,
    });
    if (reduce) body.status = reduce(body.status);
    const obj = (await this.attempt(false, () =>
      api.patchClusterCustomObjectStatus(
        {
          group: GROUP,
          version: VERSION,
          plural: PLURAL,
          name: this.node,
          body,
          fieldManager: this.fieldManager,
          force: true,
        },
        this.requestOptions(),
      ),
    )) as { metadata?: { generation?: number } } | undefined;
    this.noteGeneration(obj);
    this.accepted = body.status;
  }

  /** The status write, creating the object again when it went away (404: deleted by an admin). */
  private async writeStatus(
    api: CustomObjectsApi,
    status: NodeStatus,
    reduce?: (s: ResourceStatus) => ResourceStatus,
  ): Promise<void> {
    try {
      await this.applyStatus(api, status, reduce);
    } catch (err) {
      if (!(err as { code404?: boolean }).code404) throw err;
      this.objectReady = false;
      await this.ensureObject(api);
      await this.applyStatus(api, status, reduce);
    }
  }

  /**
   * A reducer for the retry after a 422 that named fields, or undefined (no retry). It throws
   * `refusal` itself when the fields cannot be left out, so the state is dropped as any refusal.
   */
  private reducerFor(refusal: unknown): ((s: ResourceStatus) => ResourceStatus) | undefined {
    const f = (refusal as { failure?: Failure }).failure;
    if (f?.status !== 422 || !f.fields?.length) return undefined;
    const fields = f.fields;
    return (s) => {
      const r = withoutRefused(s, fields, this.accepted);
      if (!r) throw refusal;
      this.counters.reduced++;
      const kept = r.kept.length ? `; kept what the cluster holds for ${r.kept.join(', ')}` : '';
      const left = r.dropped.length ? ` without ${r.dropped.join(', ')}` : '';
      this.opts.log?.warn(
        'cluster-status',
        `the cluster's NodeBundleStatus schema refused part of the status of ${this.node} (${f.message}): sending it${left}${kept}; apply this agent's deploy/crd.yaml to report it all`,
        { node: this.node, status: 422 },
      );
      return r.status;
    };
  }

  private async deliver(status: NodeStatus): Promise<void> {
    let api: CustomObjectsApi;
    try {
      api = await this.client();
    } catch (err) {
      const msg = String((err as Error)?.message ?? err).split('\n')[0];
      throw Object.assign(new Error(msg), {
        failure: {
          retry: true,
          message: `cannot load kubeconfig ${this.opts.kubeconfig}: ${msg}`,
          reload: true,
        } satisfies Failure,
      });
    }
    if (!this.objectReady) await this.ensureObject(api);
    try {
      await this.writeStatus(api, status);
    } catch (err) {
      const reduce = this.reducerFor(err);
      if (!reduce) throw err;
      // Once: a second refusal drops the state like any other.
      await this.writeStatus(api, status, reduce);
    }
  }
}

/**
 * A Kubernetes watch (GET …?watch=true), as the kubelet's informers run one, read through the
 * same client and credentials as every other call here, with bounds on what the server streams:
 * one event's bytes, events and bytes per second, the watch's length (timeoutSeconds, and the
 * caller's signal). The stream is one JSON event per line; an ERROR event ends the watch as an error
 * (410 Expired: API_GONE, the caller lists again).
 */
import { JsonNestingGauge, MAX_NESTING_DEPTH } from '@offline-bundle/host';
import { apiCall, apiMessage } from './cluster-api.js';
import { ClusterError } from './cluster-errors.js';
import { isApiException } from './k8s.js';
import { requestOptions, streamingCustomObjectsApi } from './kube.js';

/**
 * One event's line: a Kubernetes object is at most 1.5 MiB (etcd's request limit), an approval
 * some KiB; a longer line is never parsed and ends the watch.
 */
export const MAX_WATCH_EVENT_BYTES = 2 * 1024 * 1024;
/**
 * Events read per second, bookmarks included: an object changed by hand or by a controller
 * changes a few times a second at most; a stream past it ends (nothing of it is held) and the
 * caller lists again after its backoff.
 */
export const MAX_WATCH_EVENTS_PER_SECOND = 50;
/**
 * Bytes read per second: two events of the largest size; under the event rate alone a stream
 * could carry 50 × 2 MiB a second, each parsed. Past it the watch ends as past the event rate.
 */
export const MAX_WATCH_BYTES_PER_SECOND = 2 * MAX_WATCH_EVENT_BYTES;

type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK';
export interface WatchEvent {
  type: WatchEventType;
  object: Record<string, unknown>;
}

const TYPES = new Set<string>(['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK']);
const NEWLINE = 0x0a;

interface WatchLimits {
  maxEventBytes: number;
  maxEventsPerSecond: number;
  maxBytesPerSecond: number;
}

const LIMITS: WatchLimits = {
  maxEventBytes: MAX_WATCH_EVENT_BYTES,
  maxEventsPerSecond: MAX_WATCH_EVENTS_PER_SECOND,
  maxBytesPerSecond: MAX_WATCH_BYTES_PER_SECOND,
};
const MIB = 1024 * 1024;

/** Splits a watch's body into events as it arrives, each bounded; throws a ClusterError on the first that breaks a bound. */
export class WatchEventReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private windowStart = 0;
  private inWindow = 0;
  private bytesInWindow = 0;

  constructor(
    private readonly what: string,
    private readonly onEvent: (e: WatchEvent) => void,
    private readonly limits: WatchLimits = LIMITS,
  ) {}

  feed(chunk: Buffer): void {
    // a chunk arrives at one instant: its events are of the window it arrives in
    const now = Date.now();
    if (now - this.windowStart >= 1000) {
      this.windowStart = now;
      this.inWindow = 0;
      this.bytesInWindow = 0;
    }
    this.bytesInWindow += chunk.length;
    if (this.bytesInWindow > this.limits.maxBytesPerSecond) {
      throw new ClusterError(
        'API_TOO_FAST',
        `the API server sent over ${this.limits.maxBytesPerSecond / MIB} MiB of watch events in one second to ${this.what}: the watch is dropped unread and the list read again later`,
      );
    }
    let from = 0;
    for (let nl = chunk.indexOf(NEWLINE); nl >= 0; nl = chunk.indexOf(NEWLINE, from)) {
      this.hold(chunk.subarray(from, nl));
      const line = Buffer.concat(this.pending, this.pendingBytes);
      this.pending = [];
      this.pendingBytes = 0;
      from = nl + 1;
      if (line.some((c) => c !== 0x20 && c !== 0x0d && c !== 0x09)) this.event(line);
    }
    this.hold(chunk.subarray(from));
  }

  private hold(part: Buffer): void {
    if (!part.length) return;
    this.pendingBytes += part.length;
    if (this.pendingBytes > this.limits.maxEventBytes) {
      throw new ClusterError(
        'API_TOO_LARGE',
        `the API server sent a watch event over ${this.limits.maxEventBytes / MIB} MiB to ${this.what}: refused unread (no object is that large); the list is read again`,
      );
    }
    this.pending.push(part);
  }

  private event(line: Buffer): void {
    if (++this.inWindow > this.limits.maxEventsPerSecond) {
      throw new ClusterError(
        'API_TOO_FAST',
        `the API server sent over ${this.limits.maxEventsPerSecond} watch events in one second to ${this.what}: the watch is dropped unread and the list read again later`,
      );
    }
    const gauge = new JsonNestingGauge();
    if (!gauge.feed(line))
      throw new ClusterError(
        'API_TOO_LARGE',
        `the API server sent a watch event nested deeper than ${MAX_NESTING_DEPTH} levels to ${this.what}: not an API server's event; refused`,
      );
    let e: { type?: unknown; object?: unknown };
    try {
      e = JSON.parse(line.toString('utf8')) as typeof e;
    } catch {
      throw new ClusterError(
        'API_NOT_JSON',
        `the API server sent a watch event that is not JSON to ${this.what}: is --kubeconfig's server an API server?`,
      );
    }
    const object =
      typeof e?.object === 'object' && e.object !== null
        ? (e.object as Record<string, unknown>)
        : undefined;
    if (e?.type === 'ERROR') throw watchError(this.what, object ?? {});
    if (typeof e?.type !== 'string' || !TYPES.has(e.type) || !object) {
      throw new ClusterError(
        'API_NOT_JSON',
        `the API server sent a watch event of type ${JSON.stringify(String(e?.type).slice(0, 40))} without an object to ${this.what}: not a Kubernetes watch`,
      );
    }
    this.onEvent({ type: e.type as WatchEventType, object });
  }
}

/** An ERROR event's Status as the error apiCall would have made of the same answer. */
function watchError(what: string, status: Record<string, unknown>): ClusterError {
  const code = typeof status.code === 'number' ? status.code : 0;
  const detail = apiMessage(status);
  if (code === 410)
    return new ClusterError(
      'API_GONE',
      `the API server's watch to ${what} expired (410${detail ? `: ${detail}` : ''}): the list is read again`,
    );
  if (code === 401 || code === 403)
    return new ClusterError(
      'FORBIDDEN',
      `the API server refused to ${what} (${code}${detail ? `: ${detail}` : ''})`,
    );
  return new ClusterError(
    'API_ERROR',
    `the API server ended the watch to ${what} with ${code || 'an error'}${detail ? `: ${detail}` : ''}`,
  );
}

interface CustomObjectsWatch {
  kubeconfig: string;
  context?: string;
  group: string;
  version: string;
  plural: string;
  /** Where the watch starts: the resourceVersion of the list it follows, or of its last event. */
  resourceVersion: string;
  /** The server ends the watch after this long (its own end, read as a normal one). */
  timeoutSeconds: number;
  /** Ends the watch from this side (the caller's bound on its length, or a stop). */
  signal: AbortSignal;
  /** Until the answer's headers. */
  deadlineMs?: number;
  /** The server accepted the watch (a 2xx JSON answer's headers), before any event. */
  onOpen?: () => void;
  onEvent: (e: WatchEvent) => void;
  limits?: WatchLimits;
}

/**
 * Watches the cluster-scoped custom objects of one kind from `resourceVersion`, with bookmarks,
 * until the server ends it (resolves) or it fails (rejects with a ClusterError: API_GONE for a
 * 410, FORBIDDEN, API_TOO_LARGE, API_TOO_FAST, UNREACHABLE for a cut or the signal).
 */
export async function watchCustomObjects(o: CustomObjectsWatch): Promise<void> {
  const what = `watch ${o.plural}.${o.group}`;
  const reader = new WatchEventReader(what, o.onEvent, o.limits);
  let api;
  try {
    api = await streamingCustomObjectsApi(o.kubeconfig, o.context, {
      deadlineMs: o.deadlineMs,
      onData: (c) => reader.feed(c),
      ...(o.onOpen ? { onOpen: o.onOpen } : {}),
    });
  } catch (cause) {
    throw new ClusterError(
      'KUBECONFIG',
      `cannot use kubeconfig ${o.kubeconfig}${o.context ? ` (context ${o.context})` : ''}: ${(cause as Error).message}`,
      { cause },
    );
  }
  await apiCall(what, async () => {
    try {
      await api.listClusterCustomObject(
        {
          group: o.group,
          version: o.version,
          plural: o.plural,
          watch: true,
          allowWatchBookmarks: true,
          resourceVersion: o.resourceVersion,
          timeoutSeconds: o.timeoutSeconds,
        },
        requestOptions(o.signal),
      );
    } catch (err) {
      // an API server without a watch cache answers a too old resourceVersion with a 410 of its own
      if (isApiException(err) && err.code === 410)
        throw new ClusterError(
          'API_GONE',
          `the API server answered 410 to ${what} from resourceVersion ${o.resourceVersion.slice(0, 40)}: the list is read again`,
          { cause: err },
        );
      throw err;
    }
  });
}

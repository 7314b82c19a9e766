import { Worker } from 'node:worker_threads';
import { addPhase, timedAsync } from './phase-times.js';

/**
 * The worker's code, as a string: the CLIs are bundled into one file (scripts/package.mjs), so
 * there is no separate worker file to point at. One gunzip per layer id; it counts what each
 * unpacks to (up to the layer's limit), acknowledges every chunk once decoded, and answers
 * `end` with the figure (null: the stream did not decode).
 */
const WORKER = `
const { parentPort } = require('node:worker_threads');
const { createGunzip } = require('node:zlib');
const { readFileSync } = require('node:fs');
const layers = new Map();
const cpu = () => { try { return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1e9; } catch { return undefined; } };
const report = (id, l) => {
  if (!l.endAsked || l.reported || l.state === 'running') return;
  l.reported = true;
  layers.delete(id);
  parentPort.postMessage({ id, result: l.state === 'failed' ? null : l.state === 'capped' ? l.limit : l.unpacked, cpu: cpu() });
};
const start = (id, limit) => {
  const decoder = createGunzip({ chunkSize: ${64 * 1024} });
  const l = { decoder, limit, unpacked: 0, state: 'running', endAsked: false, reported: false };
  decoder.on('data', (out) => {
    l.unpacked += out.length;
    if (l.unpacked > limit && l.state === 'running') { l.state = 'capped'; decoder.destroy(); report(id, l); }
  });
  decoder.once('end', () => { if (l.state === 'running') l.state = 'ended'; report(id, l); });
  decoder.on('error', () => { if (l.state === 'running') l.state = 'failed'; report(id, l); });
  layers.set(id, l);
};
parentPort.on('message', (m) => {
  if (m.op === 'start') return start(m.id, m.limit);
  const l = layers.get(m.id);
  if (m.op === 'data') {
    if (!l || l.state !== 'running') return parentPort.postMessage({ id: m.id, acked: m.chunk.length });
    return l.decoder.write(m.chunk, () => parentPort.postMessage({ id: m.id, acked: m.chunk.length }));
  }
  if (!l) return;
  if (m.op === 'abandon') { layers.delete(m.id); l.reported = true; l.decoder.destroy(); return; }
  l.endAsked = true;
  if (l.state === 'running') l.decoder.end(); else report(m.id, l);
});
`;

/** Bytes posted to the thread and not yet decoded, per layer, before a push waits: bounds the copies queued. */
const MAX_QUEUED_BYTES = 1024 * 1024;

/** A chunk whose buffer is this much larger is copied first: posting it clones the whole buffer. */
const SLICE_COPY_FACTOR = 2;

interface Layer {
  sent: number;
  acked: number;
  wake: (() => void) | undefined;
  done: (n: number | undefined) => void;
}

/**
 * One thread that counts what gzip layers unpack to, for every download at once. Decoding on the
 * main thread made a fresh output buffer per 1 MiB unpacked, and that churn of external memory
 * set off most of the build's full garbage collections (#45: a 355 MB build ran 46-72 of them,
 * 2-7 without measuring, each marking a heap of 17 MB on the V8 helper threads); the thread's own
 * heap is tiny, so its collections cost little. Only the chunks cross (copied, as messages are).
 */
class GzipCountThread {
  private worker: Worker | undefined;
  private readonly layers = new Map<number, Layer>();
  private nextId = 1;
  private cpuSeen = 0;
  private waiting = 0;

  private started(): Worker {
    if (this.worker) return this.worker;
    // not this process's flags: --input-type=module would make the CommonJS above an ES module
    const worker = new Worker(WORKER, { eval: true, execArgv: [] });
    worker.on('message', (m: { id: number; acked?: number; result?: number | null; cpu?: number }) => this.onMessage(m));
    // a thread that dies gives no figures: the estimate falls back to 3x those layers' size
    const lost = () => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      for (const l of this.layers.values()) {
        l.done(undefined);
        l.wake?.();
      }
      this.layers.clear();
    };
    worker.on('error', lost);
    worker.on('exit', lost);
    worker.unref();
    this.worker = worker;
    return worker;
  }

  private onMessage(m: { id: number; acked?: number; result?: number | null; cpu?: number }): void {
    const l = this.layers.get(m.id);
    if (!l) return;
    if (m.acked !== undefined) {
      l.acked += m.acked;
      if (l.sent - l.acked <= MAX_QUEUED_BYTES / 2) l.wake?.();
      return;
    }
    if (m.cpu !== undefined) {
      addPhase('estimate: gzip counting thread', undefined, { cpu: m.cpu - this.cpuSeen });
      this.cpuSeen = m.cpu;
    }
    this.forget(m.id);
    l.done(m.result ?? undefined);
  }

  private forget(id: number): void {
    // a push waiting on it goes on: the figure is settled
    this.layers.get(id)?.wake?.();
    this.layers.delete(id);
  }

  /**
   * Keeps the process alive while `p` (an answer from the thread) is awaited, and only then: a
   * layer whose download failed before its end was asked must not hold the process open.
   */
  private async awaited<T>(p: Promise<T>): Promise<T> {
    if (this.waiting++ === 0) this.worker?.ref();
    try {
      return await p;
    } finally {
      if (--this.waiting === 0) this.worker?.unref();
    }
  }

  /** Starts counting one gzip stream; more than `limit` unpacked bytes count as `limit`. */
  open(limit: number): GzipCount {
    const worker = this.started();
    const id = this.nextId++;
    let done!: (n: number | undefined) => void;
    const result = new Promise<number | undefined>((resolve) => { done = resolve; });
    const layer: Layer = { sent: 0, acked: 0, wake: undefined, done };
    this.layers.set(id, layer);
    worker.postMessage({ op: 'start', id, limit });
    return {
      push: async (chunk) => {
        if (!this.layers.has(id)) return;
        const copy = chunk.buffer.byteLength > SLICE_COPY_FACTOR * chunk.length ? Uint8Array.prototype.slice.call(chunk) : chunk;
        worker.postMessage({ op: 'data', id, chunk: copy });
        layer.sent += chunk.length;
        if (layer.sent - layer.acked <= MAX_QUEUED_BYTES) return;
        await timedAsync('estimate: waits on decompression', () => this.awaited(new Promise<void>((resolve) => { layer.wake = resolve; })));
        layer.wake = undefined;
      },
      finish: () => {
        if (!this.layers.has(id)) return result;
        worker.postMessage({ op: 'end', id });
        return this.awaited(result);
      },
      abandon: () => {
        if (!this.layers.has(id)) return;
        worker.postMessage({ op: 'abandon', id });
        this.forget(id);
        done(undefined);
      },
    };
  }
}

/** One gzip stream being counted on the thread. */
export interface GzipCount {
  push(chunk: Buffer): Promise<void>;
  /** What it unpacked to; undefined when it did not decode. */
  finish(): Promise<number | undefined>;
  abandon(): void;
}

let thread: GzipCountThread | undefined;

/** Starts counting a gzip stream on the process's counting thread (started on first use). */
export function countGzip(limit: number): GzipCount {
  thread ??= new GzipCountThread();
  return thread.open(limit);
}

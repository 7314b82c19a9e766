import { Worker } from 'node:worker_threads';
import { addPhase, timedAsync } from '@offline-bundle/oci';

/**
 * Decoded bytes between the thread's young-generation collections. zlib hands every output
 * chunk over in a buffer of its own, dropped at once; V8 collects such buffers only once 32 MiB
 * of them are young (twice its default semi-space: `resourceLimits` does not lower that), and
 * glibc keeps the thread's arena at that peak. Those 32 MiB and the arena were most of the
 * thread's cost (#45 follow-up); a scavenge of its tiny heap takes well under a millisecond.
 */
const GC_EVERY_BYTES = 4 * 1024 * 1024;

/**
 * The worker's code, as a string: the CLIs are bundled into one file (scripts/package.mjs), so
 * there is no separate worker file to point at. One gunzip per layer id, fed views of the
 * layer's ring; it counts what each unpacks to (up to the layer's limit), acknowledges every
 * piece once decoded, and answers `end` with the figure (null: the stream did not decode).
 */
const WORKER = `
const { parentPort } = require('node:worker_threads');
const { createGunzip } = require('node:zlib');
const { readFileSync } = require('node:fs');
const v8 = require('node:v8');
const layers = new Map();
// a worker may not be given --expose-gc: the flag is set just for this one context, then unset
let collect;
try {
  v8.setFlagsFromString('--expose-gc');
  collect = require('node:vm').runInNewContext('gc');
} catch {} finally { v8.setFlagsFromString('--no-expose-gc'); }
let decodedSinceGc = 0;
const collectNow = () => {
  if (decodedSinceGc < ${GC_EVERY_BYTES} || typeof collect !== 'function') return;
  decodedSinceGc = 0;
  collect({ type: 'minor' });
};
const cpu = () => { try { return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1e9; } catch { return undefined; } };
const report = (id, l) => {
  if (!l.endAsked || l.reported || l.state === 'running') return;
  l.reported = true;
  layers.delete(id);
  parentPort.postMessage({ id, result: l.state === 'failed' ? null : l.state === 'capped' ? l.limit : l.unpacked, cpu: cpu() });
};
const start = (id, limit, ring) => {
  const decoder = createGunzip({ chunkSize: ${64 * 1024} });
  const l = { decoder, ring, limit, unpacked: 0, state: 'running', endAsked: false, reported: false };
  decoder.on('data', (out) => {
    l.unpacked += out.length;
    decodedSinceGc += out.length;
    if (l.unpacked > limit && l.state === 'running') { l.state = 'capped'; decoder.destroy(); report(id, l); }
  });
  decoder.once('end', () => { if (l.state === 'running') l.state = 'ended'; report(id, l); });
  decoder.on('error', () => { if (l.state === 'running') l.state = 'failed'; report(id, l); });
  layers.set(id, l);
};
parentPort.on('message', (m) => {
  if (m.op === 'start') return start(m.id, m.limit, m.ring);
  const l = layers.get(m.id);
  if (m.op === 'data') {
    const ack = () => {
      parentPort.postMessage({ id: m.id, acked: m.length });
      // between writes: what was decoded is dropped, and the one output buffer still filling is replaced long before a second collection
      collectNow();
    };
    if (!l || l.state !== 'running') return ack();
    // a view of the ring, not a copy: the bytes stay put until the ack frees them
    return l.decoder.write(Buffer.from(l.ring, m.at, m.length), ack);
  }
  if (!l) return;
  if (m.op === 'abandon') { layers.delete(m.id); l.reported = true; l.decoder.destroy(); return; }
  l.endAsked = true;
  if (l.state === 'running') l.decoder.end(); else report(m.id, l);
});
`;

/**
 * Each layer's ring, shared with the thread: the bytes handed over and not yet decoded; a push
 * waits while it is full. Posting the chunks instead cloned each into a message and again into
 * a buffer on the thread, young garbage there that a collection (see GC_EVERY_BYTES) would
 * promote while it was still queued.
 */
const RING_BYTES = 1024 * 1024;

interface Layer {
  ring: SharedArrayBuffer;
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
 * heap is tiny, so its collections cost little. The compressed bytes cross through a ring per layer.
 */
class GzipCountThread {
  private worker: Worker | undefined;
  private readonly layers = new Map<number, Layer>();
  private nextId = 1;
  private cpuSeen = 0;
  private waiting = 0;
  /** Rings of layers settled, for the next ones: a build's layers reuse the few a download's concurrency needs. */
  private readonly rings: SharedArrayBuffer[] = [];

  private started(): Worker {
    if (this.worker) return this.worker;
    // not this process's flags: --input-type=module would make the CommonJS above an ES module
    const worker = new Worker(WORKER, { eval: true, execArgv: [] });
    worker.on(
      'message',
      (m: { id: number; acked?: number; result?: number | null; cpu?: number }) =>
        this.onMessage(m),
    );
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
      if (l.sent - l.acked <= RING_BYTES / 2) l.wake?.();
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
    const l = this.layers.get(id);
    if (!l) return;
    // a push waiting on it goes on: the figure is settled
    l.wake?.();
    this.layers.delete(id);
    // the next layer's: a decoder given up on may still read it, but its figure is no longer wanted
    this.rings.push(l.ring);
  }

  /** Copies `chunk` into the layer's ring piece by piece, as the thread frees room, and hands each piece over. */
  private async send(worker: Worker, id: number, layer: Layer, chunk: Buffer): Promise<void> {
    const ring = new Uint8Array(layer.ring);
    for (let at = 0; at < chunk.length;) {
      if (!this.layers.has(id)) return;
      const left = chunk.length - at;
      if (RING_BYTES - (layer.sent - layer.acked) < Math.min(left, RING_BYTES / 2)) {
        await timedAsync('estimate: waits on decompression', () =>
          this.awaited(
            new Promise<void>((resolve) => {
              layer.wake = resolve;
            }),
          ),
        );
        layer.wake = undefined;
        continue;
      }
      const offset = layer.sent % RING_BYTES;
      const length = Math.min(left, RING_BYTES - offset, RING_BYTES - (layer.sent - layer.acked));
      ring.set(chunk.subarray(at, at + length), offset);
      worker.postMessage({ op: 'data', id, at: offset, length });
      layer.sent += length;
      at += length;
    }
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
    const result = new Promise<number | undefined>((resolve) => {
      done = resolve;
    });
    const layer: Layer = {
      ring: this.rings.pop() ?? new SharedArrayBuffer(RING_BYTES),
      sent: 0,
      acked: 0,
      wake: undefined,
      done,
    };
    this.layers.set(id, layer);
    worker.postMessage({ op: 'start', id, limit, ring: layer.ring });
    return {
      push: (chunk) => this.send(worker, id, layer, chunk),
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

import { Worker } from 'node:worker_threads';
import { addPhase, timedAsync } from '@offline-bundle/oci';

/**
 * The worker's code, as a string: the CLIs are bundled into one file (scripts/package.mjs), so
 * there is no separate worker file to point at. Any number of streams at once, by id: it hashes
 * each piece of the ring's bytes as PieceHasher does (pieces.ts), acknowledges each handover
 * once hashed (in the order given: one ring serves every stream), and answers `end` with the
 * base64 list. `file` reads a file itself, a chunk at a time between the other messages.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const { readFileSync } = require('node:fs');
const { open } = require('node:fs/promises');
const ring = Buffer.from(workerData.ring);
const streams = new Map();
const fresh = (size) => ({ size, hash: createHash('sha256'), filled: 0, out: [] });
const feed = (s, buf) => {
  let at = 0;
  while (at < buf.length) {
    const take = Math.min(buf.length - at, s.size - s.filled);
    s.hash.update(buf.subarray(at, at + take));
    s.filled += take;
    at += take;
    if (s.filled === s.size) { s.out.push(s.hash.digest()); s.hash = createHash('sha256'); s.filled = 0; }
  }
};
const list = (s) => { if (s.filled > 0) s.out.push(s.hash.digest()); return Buffer.concat(s.out).toString('base64'); };
const cpu = () => { try { return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1e9; } catch { return undefined; } };
async function hashFile(path, size) {
  const fh = await open(path, 'r');
  try {
    const s = fresh(size);
    const buf = Buffer.allocUnsafe(${1024 * 1024});
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) return list(s);
      feed(s, buf.subarray(0, bytesRead));
    }
  } finally { await fh.close(); }
}
parentPort.on('message', (m) => {
  if (m.op === 'start') { streams.set(m.id, fresh(m.size)); return; }
  if (m.op === 'data') {
    const s = streams.get(m.id);
    if (s) feed(s, ring.subarray(m.at, m.at + m.length));
    parentPort.postMessage({ acked: m.length });
    return;
  }
  if (m.op === 'abandon') { streams.delete(m.id); return; }
  if (m.op === 'file') {
    hashFile(m.path, m.size).then((l) => parentPort.postMessage({ id: m.id, list: l, cpu: cpu() }), (e) => parentPort.postMessage({ id: m.id, error: String(e && e.message || e) }));
    return;
  }
  const s = streams.get(m.id);
  streams.delete(m.id);
  parentPort.postMessage(s ? { id: m.id, list: list(s), cpu: cpu() } : { id: m.id, error: 'no such stream' });
});
`;

/**
 * Bytes handed over and not yet hashed, shared by every stream; a push waits while the ring is
 * full. Eight of the writer's 1 MiB reads: on a busy machine the thread is off its core for a
 * while, and a ring of two made the packing wait on it (0.4-0.8 s per GiB at a load of 14 on 2 cores).
 */
const RING_BYTES = 8 * 1024 * 1024;

/** One blob's bytes being hashed piece by piece on the thread. */
export interface PieceStream {
  /** Resolves once `chunk` is copied into the ring: the caller may reuse its buffer then. */
  push(chunk: Uint8Array): Promise<void>;
  /** The blob's list (pieces.blobs' value), once every byte was pushed. */
  end(): Promise<string>;
  /** The bytes stop (a failed download): no list. */
  abandon(): void;
}

let running = 0;

/** Test hook: piece hashing threads started and not yet exited (a stopped one is gone). */
export const pieceThreadsRunning = (): number => running;

/**
 * Hashes blobs' pieces on a thread of its own, any number at once: `bundle create` as it
 * fetches each blob (beside the digest check), or from a cached file. On the main thread,
 * sha256 took some 0.6 s per GiB; the copy into the shared ring takes a tenth of that. Posting
 * each chunk instead would clone it twice (the message, then a buffer on the thread).
 */
export class PieceHashThread {
  private readonly worker: Worker;
  private readonly ring = new SharedArrayBuffer(RING_BYTES);
  private sent = 0;
  private acked = 0;
  private wakers: (() => void)[] = [];
  private readonly answers = new Map<
    number,
    { resolve: (list: string) => void; reject: (err: Error) => void }
  >();
  private ids = 0;
  private waiting = 0;
  private failure: Error | undefined;
  private cpuSeen = 0;

  constructor() {
    // not this process's flags: --input-type=module would make the CommonJS above an ES module
    this.worker = new Worker(WORKER, { eval: true, execArgv: [], workerData: { ring: this.ring } });
    running++;
    this.worker.on(
      'message',
      (m: { acked?: number; id?: number; list?: string; error?: string; cpu?: number }) =>
        this.onMessage(m),
    );
    const lost = (err: unknown) => {
      this.failure ??=
        err instanceof Error ? err : new Error(`the piece hashing thread ended (${String(err)})`);
      this.wakeUp();
      for (const a of this.answers.values()) a.reject(this.failure);
      this.answers.clear();
    };
    this.worker.on('error', lost);
    this.worker.once('exit', (code) => {
      running--;
      lost(`exit ${code}`);
    });
    this.worker.unref();
  }

  private onMessage(m: {
    acked?: number;
    id?: number;
    list?: string;
    error?: string;
    cpu?: number;
  }): void {
    if (m.acked !== undefined) {
      this.acked += m.acked;
      if (this.sent - this.acked <= RING_BYTES / 2) this.wakeUp();
      return;
    }
    if (m.cpu !== undefined) {
      addPhase('piece digests: its thread', undefined, { cpu: m.cpu - this.cpuSeen });
      this.cpuSeen = m.cpu;
    }
    const answer = this.answers.get(m.id!);
    this.answers.delete(m.id!);
    if (m.error !== undefined) answer?.reject(new Error(m.error));
    else answer?.resolve(m.list!);
  }

  private wakeUp(): void {
    const w = this.wakers;
    this.wakers = [];
    for (const wake of w) wake();
  }

  /** Keeps the process alive while `p` (an answer from the thread) is awaited, and only then. */
  private async awaited<T>(p: Promise<T>): Promise<T> {
    if (this.waiting++ === 0) this.worker.ref();
    try {
      return await p;
    } finally {
      if (--this.waiting === 0) this.worker.unref();
    }
  }

  private check(): void {
    if (this.failure) throw this.failure;
  }

  private answer(id: number): Promise<string> {
    return this.awaited(
      new Promise<string>((resolve, reject) => this.answers.set(id, { resolve, reject })),
    );
  }

  /** Starts a blob: the thread cuts what is pushed into pieces of `pieceSize` bytes. */
  open(pieceSize: number): PieceStream {
    this.check();
    const id = ++this.ids;
    this.worker.postMessage({ op: 'start', id, size: pieceSize });
    return {
      push: (chunk) => this.push(id, chunk),
      end: () => {
        this.check();
        const list = this.answer(id);
        this.worker.postMessage({ op: 'end', id });
        return list;
      },
      abandon: () => {
        if (!this.failure) this.worker.postMessage({ op: 'abandon', id });
      },
    };
  }

  /** The list of a file's pieces, read and hashed on the thread (no byte crosses to it). */
  hashFile(path: string, pieceSize: number): Promise<string> {
    this.check();
    const id = ++this.ids;
    const list = this.answer(id);
    this.worker.postMessage({ op: 'file', id, path, size: pieceSize });
    return list;
  }

  /** Copies `chunk` into the ring as room frees up, and hands each part over. */
  private async push(id: number, chunk: Uint8Array): Promise<void> {
    const ring = new Uint8Array(this.ring);
    for (let at = 0; at < chunk.length;) {
      this.check();
      const free = RING_BYTES - (this.sent - this.acked);
      if (free < Math.min(chunk.length - at, RING_BYTES / 2)) {
        await timedAsync('piece digests: waits on its thread', () =>
          this.awaited(
            new Promise<void>((resolve) => {
              this.wakers.push(resolve);
            }),
          ),
        );
        continue;
      }
      const offset = this.sent % RING_BYTES;
      const length = Math.min(chunk.length - at, RING_BYTES - offset, free);
      ring.set(chunk.subarray(at, at + length), offset);
      this.worker.postMessage({ op: 'data', id, at: offset, length });
      this.sent += length;
      at += length;
    }
  }

  async stop(): Promise<void> {
    await this.worker.terminate();
  }
}

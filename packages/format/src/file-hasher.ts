import { Worker } from 'node:worker_threads';
import { addPhase } from '@offline-bundle/oci';

/**
 * The worker's code, as a string: the CLIs are bundled into one file (scripts/package.mjs), so
 * there is no separate worker file to point at. It hashes the file from byte 0 up to the
 * latest `upTo` it was told, waits for more, and posts the digest once told the end.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { openSync, readSync, closeSync } = require('node:fs');
const { createHash } = require('node:crypto');
const fd = openSync(workerData.path, 'r');
const hash = createHash('sha256');
const buf = Buffer.allocUnsafe(8 * 1024 * 1024);
let pos = 0;
let upTo = 0;
let end;
const catchUp = () => {
  while (pos < upTo) {
    const n = readSync(fd, buf, 0, Math.min(buf.length, upTo - pos), pos);
    if (n === 0) throw new Error('the file ended at byte ' + pos + ' while being hashed');
    hash.update(buf.subarray(0, n));
    pos += n;
  }
  if (end !== undefined && pos >= end) {
    closeSync(fd);
    let cpu;
    try { cpu = Number(require('node:fs').readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1e9; } catch {}
    parentPort.postMessage({ digest: 'sha256:' + hash.digest('hex'), cpu, bytes: pos });
    parentPort.close();
  }
};
parentPort.on('message', (m) => {
  if (m.end !== undefined) { end = m.end; upTo = m.end; }
  else upTo = Math.max(upTo, m.upTo);
  catchUp();
});
`;

/**
 * The sha256 of a file being written, taken by reading it back on another thread as its
 * start is written: the bundle's head is written last of its front, after the layout behind
 * it, so the digest cannot be taken in order as bytes are appended, and reading the whole
 * file back afterwards on the main thread would add that time after packing ends.
 */
export class FileHasher {
  private readonly worker: Worker;
  private readonly result: Promise<string>;
  private told = 0;

  constructor(path: string) {
    this.worker = new Worker(WORKER, { eval: true, workerData: { path } });
    this.result = new Promise<string>((resolve, reject) => {
      this.worker.once('message', (m: { digest: string; cpu?: number; bytes: number }) => {
        // its thread's whole life: reading the file back and hashing it
        addPhase('whole-file hash: its thread', undefined, {
          ...(m.cpu === undefined ? {} : { cpu: m.cpu }),
          bytes: m.bytes,
        });
        resolve(m.digest);
      });
      this.worker.once('error', reject);
      this.worker.once('exit', (code) =>
        reject(new Error(`the hashing thread ended (exit ${code}) before the digest`)),
      );
    });
    this.result.catch(() => undefined);
  }

  /** Bytes [0, n) are written and will not change. */
  upTo(n: number): void {
    // small steps are not worth a message
    if (n - this.told < STEP) return;
    this.told = n;
    this.worker.postMessage({ upTo: n });
  }

  /** The file is `size` bytes, all written: its digest. */
  async digest(size: number): Promise<string> {
    this.worker.postMessage({ end: size });
    return this.result;
  }

  async stop(): Promise<void> {
    await this.worker.terminate();
  }
}

const STEP = 4 * 1024 * 1024;

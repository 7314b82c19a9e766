// The local status file: the node's status plus who wrote it and when it last said it was
// alive, so a reader can tell a live agent's word from a dead one's last word.
import { readFile } from 'node:fs/promises';
import { makeDirs, writeFileAtomic } from '@offline-bundle/oci';
import { dirname } from 'node:path';
import type { NodeStatus } from './model.js';
import { processIdentity, type ProcessIdentity } from './liveness.js';

export interface StatusWriter extends ProcessIdentity {
  pid: number;
  /** run: the daemon; load: a one-shot `bundle-agent load`. */
  command: 'run' | 'load';
  /** Last time the writer said it was alive (each write, and every heartbeatSeconds). */
  heartbeatAt: string;
  heartbeatSeconds: number;
}

export interface StatusFile extends NodeStatus {
  /** Absent in files written before the agent recorded it. */
  writer?: StatusWriter;
}

export async function writeStatusFile(path: string, status: NodeStatus | StatusFile): Promise<void> {
  await makeDirs(dirname(path));
  await writeFileAtomic(path, JSON.stringify(status, null, 2) + '\n');
}

export async function readStatusFile(path: string): Promise<StatusFile | undefined> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as StatusFile;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

export interface StatusFileWriterOptions {
  command: StatusWriter['command'];
  /** How often the file is rewritten with a fresh heartbeat when nothing changes. Default 30. */
  heartbeatSeconds?: number;
  onError?: (err: unknown) => void;
  clock?: () => Date;
}

/**
 * Writes every status it is given (atomically, in order) stamped with this process's identity
 * and a heartbeat, and rewrites the last one every heartbeatSeconds. A StatusTracker sink.
 */
export class StatusFileWriter {
  private last: NodeStatus | undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private identity: Promise<ProcessIdentity> | undefined;
  private readonly heartbeatSeconds: number;
  private readonly clock: () => Date;

  constructor(readonly path: string, private readonly opts: StatusFileWriterOptions) {
    this.heartbeatSeconds = opts.heartbeatSeconds ?? 30;
    this.clock = opts.clock ?? (() => new Date());
  }

  readonly sink = (s: NodeStatus): void => {
    this.last = s;
    this.enqueue();
  };

  /** Starts the heartbeat; it does not keep the process alive by itself. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.enqueue(), this.heartbeatSeconds * 1000);
    this.timer.unref();
  }

  /** Stops the heartbeat and waits for the writes asked for so far. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.chain;
  }

  private enqueue(): void {
    this.chain = this.chain.then(() => this.writeNow()).catch((err) => this.opts.onError?.(err));
  }

  private async writeNow(): Promise<void> {
    if (!this.last) return;
    const id = await (this.identity ??= processIdentity(process.pid));
    const writer: StatusWriter = { pid: process.pid, ...id, command: this.opts.command, heartbeatAt: this.clock().toISOString(), heartbeatSeconds: this.heartbeatSeconds };
    await writeStatusFile(this.path, { ...this.last, writer });
  }
}

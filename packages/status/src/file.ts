// The local status file: the node's status plus who wrote it and when it last said it was
// alive, so a reader can tell a live agent's word from a dead one's last word.
import { OciError } from '@offline-bundle/oci';
import { makeDirs, readSmallFile, writeFileAtomic } from '@offline-bundle/host';
import { dirname } from 'node:path';
import { CONDITION_STATUSES, HISTORY_STATES, PHASES, type NodeStatus } from './model.js';
import {
  processIdentity,
  writerLiveness,
  type Liveness,
  type ProcessIdentity,
} from './liveness.js';

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

export async function writeStatusFile(
  path: string,
  status: NodeStatus | StatusFile,
): Promise<void> {
  await makeDirs(dirname(path));
  await writeFileAtomic(path, JSON.stringify(inFileForm(status), null, 2) + '\n');
}

/**
 * The bundle fields that are lists (path #43, fromPeers #22). An agent before 70d0cb9 takes a
 * file whose bundle holds anything but strings for damaged and starts from an empty status, its
 * history lost (the agent-switch guard may roll back to one): the file holds each as one
 * comma-joined string under <field>List (versions and node names hold no comma), which goes
 * with the bundle it describes when an older agent replaces it.
 */
const BUNDLE_LISTS = ['path', 'fromPeers'] as const;
const LIST_SUFFIX = 'List';

function inFileForm<T extends NodeStatus>(status: T): T {
  const b = status.bundle;
  if (!b || !BUNDLE_LISTS.some((k) => b[k] !== undefined)) return status;
  const bundle: Record<string, unknown> = { ...b };
  for (const k of BUNDLE_LISTS) {
    const list = bundle[k];
    delete bundle[k];
    if (Array.isArray(list)) bundle[k + LIST_SUFFIX] = list.join(',');
  }
  return { ...status, bundle };
}

const isStringList = (v: unknown): v is string[] => Array.isArray(v) && v.every(isString);

/**
 * The bundle as read: each list from its <field>List string, or as an array (files of 70d0cb9,
 * or fromPeers of earlier agents); any other value that is not a string (a newer agent's field)
 * is dropped, not the whole status with it.
 */
function bundleFromFile(b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(b))
    if (isString(v) && !BUNDLE_LISTS.some((l) => k === l + LIST_SUFFIX)) out[k] = v;
  for (const k of BUNDLE_LISTS) {
    const joined = b[k + LIST_SUFFIX];
    const list = isStringList(b[k])
      ? b[k]
      : isString(joined) && joined !== ''
        ? joined.split(',')
        : undefined;
    if (list) out[k] = list;
  }
  return out;
}

/**
 * The most a status file may hold: a status is a few KB (conditions, a bounded history); a
 * larger file is not ours, and reading it whole would cost its size in memory.
 */
const MAX_STATUS_FILE_BYTES = 1024 * 1024;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const isString = (v: unknown): v is string => typeof v === 'string';
const isCount = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** What makes `v` unusable as a status (every reader relies on these), or undefined. */
function statusDefect(v: unknown): string | undefined {
  if (!isObject(v)) return 'not a JSON object';
  if (!(PHASES as readonly unknown[]).includes(v.phase)) return 'unknown phase';
  if (!isString(v.node) || !isString(v.message) || !isString(v.updatedAt))
    return 'node, message or updatedAt is not a string';
  const p = v.progress;
  if (
    !isObject(p) ||
    !['bytesDone', 'bytesTotal', 'imagesDone', 'imagesTotal'].every((k) => isCount(p[k]))
  )
    return 'progress is not four counts';
  const conditionOk = (c: unknown) =>
    isObject(c) &&
    isString(c.type) &&
    (CONDITION_STATUSES as readonly unknown[]).includes(c.status) &&
    isString(c.reason) &&
    isString(c.message);
  if (!Array.isArray(v.conditions) || !v.conditions.every(conditionOk))
    return 'conditions are not a list of conditions';
  const entryOk = (h: unknown) =>
    isObject(h) &&
    isString(h.version) &&
    (HISTORY_STATES as readonly unknown[]).includes(h.state) &&
    isString(h.at);
  if (!Array.isArray(v.history) || !v.history.every(entryOk))
    return 'history is not a list of releases';
  // its fields that are not strings are dropped as it is read (bundleFromFile)
  if (v.bundle !== undefined && !isObject(v.bundle)) return 'bundle is not a list of names';
  const w = v.writer;
  if (
    w !== undefined &&
    !(
      isObject(w) &&
      Number.isInteger(w.pid) &&
      isString(w.heartbeatAt) &&
      !Number.isNaN(Date.parse(w.heartbeatAt)) &&
      isCount(w.heartbeatSeconds)
    )
  )
    return 'writer is not a process record';
  return undefined;
}

/**
 * The status file, or undefined when there is none. Whatever else is there (a damaged file, a
 * FIFO, a huge file, a valid JSON of another shape) is one STATUS_DAMAGED error that says the
 * agent rewrites it, never a crash deep in a reader.
 */
export async function readStatusFile(path: string): Promise<StatusFile | undefined> {
  let text: string;
  try {
    text = (await readSmallFile(path, MAX_STATUS_FILE_BYTES)).bytes.toString('utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'NOT_A_REGULAR_FILE' || code === 'FILE_TOO_LARGE')
      throw damaged(path, (err as Error).message);
    throw err;
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw damaged(path, 'not JSON');
  }
  const defect = statusDefect(v);
  if (defect) throw damaged(path, defect);
  const file = v as StatusFile;
  return file.bundle
    ? {
        ...file,
        bundle: bundleFromFile(
          file.bundle as unknown as Record<string, unknown>,
        ) as unknown as StatusFile['bundle'],
      }
    : file;
}

const damaged = (path: string, why: string) =>
  new OciError(
    'STATUS_DAMAGED',
    `status file ${path} is damaged (${why}): the agent writes it anew when it starts (systemctl restart bundle-agent); remove it if it stays damaged`,
  );

/** How another writer's liveness is told (writerLiveness, or a test's). */
type LivenessCheck = (w: StatusWriter, now: Date) => Promise<Liveness>;

export interface StatusFileWriterOptions {
  command: StatusWriter['command'];
  /** How often the file is rewritten with a fresh heartbeat when nothing changes. Default 30. */
  heartbeatSeconds?: number;
  onError?: (err: unknown) => void;
  clock?: () => Date;
  /**
   * The daemon: called at a heartbeat with a newer status another process (a `bundle-agent
   * load`) wrote meanwhile, so the daemon reports that load's result instead of its own stale one.
   * `writerGone`: that process is dead (SIGKILL, a closed terminal), so an in-flight phase it
   * left will never move on; also called, with the status as it stands, when a writer adopted
   * alive dies before writing again.
   */
  adopt?: (s: NodeStatus, writerGone: boolean) => void;
  /** How another writer's liveness is told (default writerLiveness). */
  liveness?: LivenessCheck;
  /**
   * A `bundle-agent load` next to a running daemon: its last write names the daemon as the
   * writer again, so `status` does not call the node's agent dead once the load has exited.
   */
  handBack?: boolean;
}

/**
 * The status file (undefined when unreadable) and the liveness of its writer (undefined: none,
 * or this process).
 */
export async function readStatusAndWriter(
  path: string,
  liveness: LivenessCheck = writerLiveness,
  clock = () => new Date(),
): Promise<{ file?: StatusFile; liveness?: Liveness }> {
  const file = await readStatusFile(path).catch(() => undefined);
  return file ? lastWordOf(path, file, liveness, clock) : {};
}

/**
 * `file` as read from `path`, and its writer's liveness. A writer found dead may have written
 * its last status between the read and the check (a load that ends Ready and exits at that
 * moment): the file is then read once more, or the in-flight phase it wrote before would be
 * taken for a load that was killed.
 */
export async function lastWordOf(
  path: string,
  file: StatusFile,
  liveness: LivenessCheck = writerLiveness,
  clock = () => new Date(),
): Promise<{ file: StatusFile; liveness?: Liveness }> {
  const livenessOf = async (w: StatusWriter | undefined) =>
    w && w.pid !== process.pid ? liveness(w, clock()) : undefined;
  const first = await livenessOf(file.writer);
  if (first !== 'stopped') return { file, liveness: first };
  const again = await readStatusFile(path).catch(() => undefined);
  if (!again || JSON.stringify(again) === JSON.stringify(file)) return { file, liveness: first };
  return { file: again, liveness: await livenessOf(again.writer) };
}

/** One write of the status file: when, by whom, at which heartbeat. */
const writeId = (f: StatusFile) => `${f.updatedAt}|${f.writer?.pid}|${f.writer?.heartbeatAt}`;

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
  /** The daemon that wrote the file before this load, while it runs (handBack). */
  private daemon: Promise<StatusWriter | undefined> | undefined;
  /** The other process whose status was adopted while it ran (adopt): watched until it writes again or dies. */
  private foreign: StatusWriter | undefined;
  /** The status file as this writer last read or wrote it (writeId), to tell another process's write (adopt). */
  private seen: string | undefined;
  private readonly livenessCheck: LivenessCheck;

  constructor(
    readonly path: string,
    private readonly opts: StatusFileWriterOptions,
  ) {
    this.heartbeatSeconds = opts.heartbeatSeconds ?? 30;
    this.clock = opts.clock ?? (() => new Date());
    this.livenessCheck = opts.liveness ?? writerLiveness;
  }

  readonly sink = (s: NodeStatus): void => {
    this.last = s;
    this.enqueue();
  };

  /** Starts the heartbeat; it does not keep the process alive by itself. */
  start(): void {
    if (this.opts.handBack) this.daemon ??= this.runningDaemon();
    if (this.timer) return;
    this.timer = setInterval(() => this.enqueue(true), this.heartbeatSeconds * 1000);
    this.timer.unref();
  }

  /** Stops the heartbeat and waits for the writes asked for so far. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.chain;
    const daemon = await this.daemon;
    if (
      daemon &&
      this.last &&
      (await writerLiveness(
        { ...daemon, heartbeatAt: this.clock().toISOString() },
        this.clock(),
      )) === 'running'
    ) {
      await writeStatusFile(this.path, {
        ...this.last,
        writer: { ...daemon, heartbeatAt: this.clock().toISOString() },
      }).catch((err) => this.opts.onError?.(err));
    }
  }

  private async runningDaemon(): Promise<StatusWriter | undefined> {
    const w = (await readStatusFile(this.path).catch(() => undefined))?.writer;
    return w &&
      w.command === 'run' &&
      w.pid !== process.pid &&
      (await writerLiveness(w, this.clock())) === 'running'
      ? w
      : undefined;
  }

  /**
   * Hands the status file to `adopt` when another process wrote it (a load, which may also have
   * handed it back to us): the file is not the one we last read or wrote (before either, its
   * status is newer than ours). Whether it did. Checked before every write, not only at
   * heartbeats: a load's last write landing between our read and our write-back would be
   * overwritten for good.
   */
  private async adoptChanged(
    adopt: NonNullable<StatusFileWriterOptions['adopt']>,
  ): Promise<boolean> {
    const ours = this.last!.updatedAt;
    const onDisk = await readStatusFile(this.path).catch(() => undefined);
    if (!onDisk) return false;
    // once this writer has read or written the file, only another write counts: a time ahead of
    // ours (a clock stepped back) would otherwise be adopted again at every write-back, for ever
    const changed =
      this.seen !== undefined
        ? writeId(onDisk) !== this.seen
        : onDisk.writer?.pid !== process.pid && Date.parse(onDisk.updatedAt) > Date.parse(ours);
    if (!changed) return false;
    const { file, liveness } = await lastWordOf(this.path, onDisk, this.livenessCheck, this.clock);
    this.seen = writeId(file);
    const { writer, ...status } = file;
    this.foreign = liveness === 'running' || liveness === 'unresponsive' ? writer : undefined;
    // the adopter's tracker hands the status back through sink(): that write stamps us
    adopt(status, liveness === 'stopped');
    return true;
  }

  private enqueue(heartbeat = false): void {
    this.chain = this.chain
      .then(() => this.writeNow(heartbeat))
      .catch((err) => this.opts.onError?.(err));
  }

  private async writeNow(heartbeat: boolean): Promise<void> {
    if (!this.last) return;
    if (this.opts.adopt) {
      if (await this.adoptChanged(this.opts.adopt)) return;
      if (
        heartbeat &&
        this.foreign &&
        (await this.livenessCheck(this.foreign, this.clock())) === 'stopped'
      ) {
        this.foreign = undefined;
        // its last write may have landed after the read above: that one is its last word
        if (!(await this.adoptChanged(this.opts.adopt))) this.opts.adopt(this.last, true);
        return;
      }
    }
    const id = await (this.identity ??= processIdentity(process.pid));
    const writer: StatusWriter = {
      pid: process.pid,
      ...id,
      command: this.opts.command,
      heartbeatAt: this.clock().toISOString(),
      heartbeatSeconds: this.heartbeatSeconds,
    };
    const file = { ...this.last, writer };
    await writeStatusFile(this.path, file);
    this.seen = writeId(file);
  }
}

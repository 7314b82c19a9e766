import { formatBytes, formatDuration } from '@offline-bundle/status';

/** Human progress on a terminal (one redrawn line), sparse log lines otherwise; nothing with --quiet. */
export interface ProgressOptions {
  stream?: NodeJS.WriteStream;
  quiet?: boolean;
  /** Seconds between log lines when not on a terminal. */
  logEverySeconds?: number;
}

export class Progress {
  private readonly stream: NodeJS.WriteStream;
  private readonly tty: boolean;
  private phase = '';
  private done = 0;
  private total = 0;
  private items = '';
  private started = Date.now();
  private lastDraw = 0;
  private lastLog = 0;

  constructor(private readonly opts: ProgressOptions = {}) {
    this.stream = opts.stream ?? process.stderr;
    this.tty = this.stream.isTTY === true;
  }

  /** A permanent line (phase changes, warnings). */
  log(message: string): void {
    if (this.opts.quiet) return;
    if (this.tty) this.stream.write('\r\x1b[K');
    this.stream.write(message + '\n');
    this.lastDraw = 0;
  }

  start(phase: string, total: number): void {
    this.phase = phase;
    this.total = total;
    this.done = 0;
    this.items = '';
    this.started = Date.now();
    this.lastLog = Date.now();
    this.log(`${phase}: ${formatBytes(total)}`);
  }

  update(done: number, items = this.items, total = this.total): void {
    this.done = done;
    this.items = items;
    this.total = total;
    if (this.opts.quiet) return;
    const now = Date.now();
    if (this.tty) {
      if (now - this.lastDraw < 100 && done < this.total) return;
      this.lastDraw = now;
      this.stream.write(`\r\x1b[K${this.line()}`);
    } else if (now - this.lastLog >= (this.opts.logEverySeconds ?? 5) * 1000) {
      this.lastLog = now;
      this.stream.write(this.line() + '\n');
    }
  }

  finish(message?: string): void {
    if (this.opts.quiet) return;
    if (this.tty) this.stream.write('\r\x1b[K');
    if (message) this.stream.write(message + '\n');
  }

  private line(): string {
    const secs = (Date.now() - this.started) / 1000;
    const rate = secs > 0 ? this.done / secs : 0;
    const pct = this.total > 0 ? Math.floor((this.done / this.total) * 100) : 100;
    const left = rate > 0 ? (this.total - this.done) / rate : Infinity;
    return `${this.phase}: ${formatBytes(this.done)} / ${formatBytes(this.total)} (${pct}%)${this.items ? `, ${this.items}` : ''}, ${formatBytes(rate)}/s, ${formatDuration(left)} left`;
  }
}

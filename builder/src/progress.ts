import { formatBytes, timeLeft } from '@offline-bundle/cli';

/** Human progress on a terminal (one redrawn line), sparse log lines otherwise; nothing with --quiet. */
export interface ProgressOptions {
  stream?: NodeJS.WriteStream;
  quiet?: boolean;
  /** Seconds between log lines when not on a terminal. */
  logEverySeconds?: number;
  /** Terminal width when the stream does not tell (tests); else the stream's columns, then $COLUMNS, then 80. */
  columns?: number;
  now?: () => number;
}

/** What one progress line says. */
export interface ProgressState {
  phase: string;
  done: number;
  total: number;
  items?: string;
  /** Bytes per second, once measured. */
  rate?: number;
  /** Seconds left, once the rate is stable. */
  eta?: number;
  /** Everything is written; the last step (sync, rename) is under way. */
  finishing?: string;
}

const ELLIPSIS = '…';

function clip(text: string, width: number): string {
  if (width <= 0) return '';
  return [...text].length <= width
    ? text
    : [...text].slice(0, Math.max(0, width - 1)).join('') + ELLIPSIS;
}

/** Which extras give way first when the line is too wide: the rate, then the item count; the time left last. */
const GIVE_WAY = ['rate', 'items', 'eta'] as const;

/**
 * One line that fits `width` columns: the phase (shortened first), bytes and percentage
 * always; the time left, item count and rate while there is room, dropped rate first.
 */
export function formatProgressLine(s: ProgressState, width: number): string {
  const pct = s.total > 0 ? Math.min(100, Math.floor((s.done / s.total) * 100)) : 100;
  const bytes = `${formatBytes(s.done)} / ${formatBytes(s.total)} (${pct}%)`;
  const all = s.finishing
    ? [{ key: 'eta', text: s.finishing }]
    : [
        { key: 'items', text: s.items },
        { key: 'rate', text: s.rate !== undefined ? `${formatBytes(s.rate)}/s` : undefined },
        { key: 'eta', text: s.eta !== undefined ? timeLeft(s.eta) : undefined },
      ].filter((x): x is { key: string; text: string } => Boolean(x.text));
  for (let dropped = 0; dropped <= GIVE_WAY.length; dropped++) {
    const gone = GIVE_WAY.slice(0, dropped) as readonly string[];
    const extras = all.filter((x) => !gone.includes(x.key)).map((x) => x.text);
    const rest = [bytes, ...extras].join(', ');
    const room = width - [...rest].length - 2;
    // the phase may be shortened down to a few characters; below that, drop an extra instead
    if (room >= Math.min(12, [...s.phase].length) || dropped === GIVE_WAY.length)
      return clip(`${clip(s.phase, Math.max(room, 1))}: ${rest}`, width);
  }
  return clip(bytes, width);
}

/** Rate over a sliding window: the first seconds of a transfer (connection setup, a cache hit) say little. */
const WINDOW_MS = 10_000;
/** An ETA is shown once the window spans this long. */
const STABLE_MS = 3_000;

export class Progress {
  private readonly stream: NodeJS.WriteStream;
  private readonly tty: boolean;
  private readonly now: () => number;
  private state: ProgressState = { phase: '', done: 0, total: 0 };
  private samples: { t: number; done: number }[] = [];
  private started = 0;
  private lastDraw = 0;
  private lastLine = '';
  private lastLog = 0;
  private active = false;

  constructor(private readonly opts: ProgressOptions = {}) {
    this.stream = opts.stream ?? process.stderr;
    this.tty = this.stream.isTTY === true;
    this.now = opts.now ?? Date.now;
  }

  private width(): number {
    const env = Number(process.env.COLUMNS);
    return (
      this.opts.columns ?? (this.stream.columns || (Number.isInteger(env) && env > 0 ? env : 80))
    );
  }

  private clearLine(): void {
    if (this.tty && this.lastLine) this.stream.write('\r\x1b[K');
    this.lastLine = '';
  }

  /** A permanent line (phase changes, warnings). */
  log(message: string): void {
    if (this.opts.quiet) return;
    this.clearLine();
    this.stream.write(message + '\n');
    this.lastDraw = 0;
  }

  start(phase: string, total: number): void {
    const t = this.now();
    this.state = { phase, done: 0, total };
    this.samples = [{ t, done: 0 }];
    this.started = t;
    this.lastLog = t;
    this.active = true;
    this.log(`${phase}: ${formatBytes(total)}`);
  }

  update(done: number, items = this.state.items, total = this.state.total): void {
    const t = this.now();
    this.state = { ...this.state, done, total, ...(items !== undefined ? { items } : {}) };
    const last = this.samples[this.samples.length - 1];
    if (!last || t - last.t >= 250) {
      this.samples.push({ t, done });
      while (this.samples.length > 2 && t - this.samples[1]!.t >= WINDOW_MS) this.samples.shift();
    }
    this.draw(false);
  }

  /** The last step of a phase (sync, rename, checking): shown instead of a rate at 100 %. */
  phaseNote(note: string): void {
    this.state = { ...this.state, finishing: note };
    this.draw(true);
  }

  /** Rate and time left from the window; the time left only once the window is long enough to trust. */
  private measured(): Pick<ProgressState, 'rate' | 'eta'> {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (!first || !last || last.t - first.t < 1000) return {};
    const rate = (last.done - first.done) / ((last.t - first.t) / 1000);
    if (rate <= 0) return { rate: 0 };
    const stable = last.t - this.started >= STABLE_MS && last.t - first.t >= STABLE_MS;
    return stable && this.state.done < this.state.total
      ? { rate, eta: (this.state.total - this.state.done) / rate }
      : { rate };
  }

  private draw(force: boolean): void {
    if (this.opts.quiet || !this.active) return;
    const t = this.now();
    if (this.tty) {
      if (!force && t - this.lastDraw < 100 && this.state.done < this.state.total) return;
      const line = formatProgressLine({ ...this.state, ...this.measured() }, this.width() - 1);
      // nothing changed: no redraw (a finished phase would otherwise flicker at 100 %)
      if (line === this.lastLine) return;
      this.lastDraw = t;
      this.lastLine = line;
      this.stream.write(`\r\x1b[K${line}`);
    } else if (
      t - this.lastLog >= (this.opts.logEverySeconds ?? 5) * 1000 ||
      (force && t - this.started >= (this.opts.logEverySeconds ?? 5) * 1000)
    ) {
      // a log says "finishing" only after a phase long enough to have logged: short ones stay quiet
      this.lastLog = t;
      this.stream.write(
        formatProgressLine({ ...this.state, ...this.measured() }, Number.MAX_SAFE_INTEGER) + '\n',
      );
    }
  }

  finish(message?: string): void {
    this.active = false;
    if (this.opts.quiet) return;
    this.clearLine();
    if (message) this.stream.write(message + '\n');
  }
}

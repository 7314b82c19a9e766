import { readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { PerformanceObserver, performance } from 'node:perf_hooks';

/**
 * Where a build's time goes, per phase (issue #45): on only when BUNDLE_PHASE_TIMES names a
 * file, written there as JSON when the build ends. Off, every hook is one boolean test. The
 * bench sets it for its build rows; nothing else does.
 */
const PHASE_TIMES_ENV = 'BUNDLE_PHASE_TIMES';

interface Phase {
  wall?: number;
  cpu?: number;
  count: number;
  bytes?: number;
}

const file = process.env[PHASE_TIMES_ENV];
/** Whether phases are being recorded: callers test it before taking a clock. */
const phaseTimesOn = file !== undefined && file !== '';
const phases = new Map<string, Phase>();
let gcSeconds = 0;
let gcObserver: PerformanceObserver | undefined;

const now = () => Number(process.hrtime.bigint()) / 1e9;

/** Adds `wall` seconds (undefined: another thread's work, `cpu` only) and `cpu` or `bytes` when known to `name`. */
export function addPhase(
  name: string,
  wall: number | undefined,
  more: { cpu?: number; bytes?: number } = {},
): void {
  if (!phaseTimesOn) return;
  const p: Phase = phases.get(name) ?? { count: 0 };
  if (wall !== undefined) p.wall = (p.wall ?? 0) + wall;
  p.count++;
  if (more.cpu !== undefined) p.cpu = (p.cpu ?? 0) + more.cpu;
  if (more.bytes !== undefined) p.bytes = (p.bytes ?? 0) + more.bytes;
  phases.set(name, p);
}

/** Runs synchronous `fn` and adds its time to `name`: on the thread that runs it, its wall time is its CPU time unless the machine preempts it. */
export function timedSync<T>(name: string, fn: () => T, bytes?: number): T {
  if (!phaseTimesOn) return fn();
  const t0 = now();
  try {
    return fn();
  } finally {
    addPhase(name, now() - t0, bytes === undefined ? {} : { bytes });
  }
}

/** Awaits `p` and adds the wait to `name` (wall only: the work runs elsewhere, or is I/O). */
export async function timedAsync<T>(name: string, p: () => Promise<T>): Promise<T> {
  if (!phaseTimesOn) return p();
  const t0 = now();
  try {
    return await p();
  } finally {
    addPhase(name, now() - t0);
  }
}

/** The main thread's CPU seconds (its task id is the pid). */
function mainThreadCpu(): number | undefined {
  try {
    return (
      Number(
        readFileSync(`/proc/${process.pid}/task/${process.pid}/schedstat`, 'utf8').split(' ')[0],
      ) / 1e9
    );
  } catch {
    return undefined;
  }
}

/** Every thread's user and system CPU seconds (/proc's utime, stime), by task id: the pool's, V8's and ours apart. */
function threadTimes(): { tid: number; user: number; system: number }[] {
  try {
    return readdirSync('/proc/self/task')
      .map((tid) => {
        const f = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        return { tid: Number(tid), user: Number(f[11]) / CLK_TCK, system: Number(f[12]) / CLK_TCK };
      })
      .sort((a, b) => a.tid - b.tid);
  } catch {
    return [];
  }
}

/** /proc's clock ticks per second (getconf CLK_TCK: 100 on Linux). */
const CLK_TCK = 100;

/** Starts counting the main thread's garbage-collection pauses (the last profile blamed them). */
export function startPhaseTimes(): void {
  if (!phaseTimesOn || gcObserver) return;
  gcObserver = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcSeconds += e.duration / 1000;
  });
  gcObserver.observe({ entryTypes: ['gc'] });
}

/**
 * Writes what was recorded (temp + rename) with the process's own totals: its CPU, the main
 * thread's, and the time from the process's start to this module's first use.
 */
export function writePhaseTimes(extra: Record<string, unknown> = {}): void {
  if (!phaseTimesOn) return;
  gcObserver?.disconnect();
  const cpu = process.cpuUsage();
  const out = {
    phases: Object.fromEntries(phases),
    process: {
      wall: performance.now() / 1000,
      cpu: (cpu.user + cpu.system) / 1e6,
      user: cpu.user / 1e6,
      system: cpu.system / 1e6,
      threads: threadTimes(),
      mainThreadCpu: mainThreadCpu(),
      gcPauses: gcSeconds,
      // node's own start-up, before any of our code ran
      bootstrap: performance.nodeTiming.bootstrapComplete / 1000,
      maxRss: process.resourceUsage().maxRSS * 1024,
    },
    ...extra,
  };
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(out, null, 2)}\n`);
  renameSync(tmp, file!);
}

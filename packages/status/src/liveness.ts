// Whether the process that wrote a status file still runs. A pid alone is not enough: after a
// crash or a reboot another process may hold the same number, so the boot and the process's
// start time (in clock ticks since boot, /proc/PID/stat field 22) are compared too.
import { readFile } from 'node:fs/promises';
import { pidExists } from '@offline-bundle/host';

export { pidExists };

export interface ProcessIdentity {
  /** /proc/sys/kernel/random/boot_id: changes at every boot. */
  bootId?: string;
  /** /proc/PID/stat starttime: a reused pid has another. */
  startTicks?: string;
}

/** The boot id and start time of `pid`, each absent where /proc cannot tell. */
export async function processIdentity(pid: number): Promise<ProcessIdentity> {
  const bootId = await readFile('/proc/sys/kernel/random/boot_id', 'utf8').then(
    (t) => t.trim(),
    () => undefined,
  );
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // the command name (field 2) may hold spaces and parentheses: count fields after the last ')'
  const fields = stat?.slice(stat.lastIndexOf(')') + 2).split(' ');
  const startTicks = fields?.[19];
  return { ...(bootId ? { bootId } : {}), ...(startTicks ? { startTicks } : {}) };
}

/**
 * Whether a recorded identity is proven to belong to another process than `current`: each part
 * is compared where both sides have it (the unit's ProcSubset=pid hides /proc/sys from the
 * daemon, so a boot id may be missing).
 */
export function otherProcess(recorded: ProcessIdentity, current: ProcessIdentity): boolean {
  if (recorded.bootId && current.bootId && recorded.bootId !== current.bootId) return true;
  return (
    !!recorded.startTicks && !!current.startTicks && recorded.startTicks !== current.startTicks
  );
}

export type Liveness = 'running' | 'stopped' | 'unresponsive' | 'unknown';

export interface WriterRecord extends ProcessIdentity {
  pid: number;
  heartbeatAt: string;
  heartbeatSeconds: number;
}

/** Heartbeats missed before a writer with no comparable identity counts as gone. */
const MISSED_BEATS_GONE = 3;
/** Heartbeats missed by a live process before it counts as hung (never under two minutes). */
const MISSED_BEATS_HUNG = 5;

/**
 * running: the writer is this very process still; stopped: it is gone (no such pid, another
 * boot, another process under its pid, or, where /proc cannot tell, no heartbeat for three
 * intervals); unresponsive: it runs but stopped beating; unknown: the file names no writer.
 */
export async function writerLiveness(
  w: WriterRecord | undefined,
  now = new Date(),
): Promise<Liveness> {
  if (!w || !Number.isInteger(w.pid) || w.pid <= 0) return 'unknown';
  if (!pidExists(w.pid)) return 'stopped';
  const ageMs = now.getTime() - Date.parse(w.heartbeatAt);
  const beatMs = Math.max(1, w.heartbeatSeconds) * 1000;
  const current = await processIdentity(w.pid);
  if (otherProcess(w, current)) return 'stopped';
  // without a start time to compare, only the heartbeat tells
  if (!w.startTicks || !current.startTicks)
    return ageMs > MISSED_BEATS_GONE * beatMs ? 'stopped' : 'running';
  return ageMs > Math.max(MISSED_BEATS_HUNG * beatMs, 120_000) ? 'unresponsive' : 'running';
}

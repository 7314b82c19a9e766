import { randomBytes } from 'node:crypto';
import { link, open, rm, writeFile } from 'node:fs/promises';
import { makeDirs } from '@offline-bundle/host';
import {
  otherProcess,
  pidExists,
  processIdentity,
  type ProcessIdentity,
} from '@offline-bundle/status';
import { join } from 'node:path';
import { AgentError } from '../errors.js';

const LOCK = 'load.lock';
/**
 * What a holder writes: its pid, then its start time and boot id ("-" where /proc cannot tell),
 * and a line feed, so a complete file is told from a damaged one. The lock lives in the state
 * directory, which outlives a power cut: after it another process may have the same pid, and
 * only the start time and boot tell them apart. A bare pid (an older agent's lock) is accepted.
 */
const PID_FILE = /^([1-9]\d*)(?: (\d+|-) ([0-9a-f-]+))?\n$/;

let ownLine: Promise<string> | undefined;
/** This process's lock line, computed once. */
function lockLine(): Promise<string> {
  ownLine ??= processIdentity(process.pid).then(
    (id) => `${process.pid} ${id.startTicks ?? '-'} ${id.bootId ?? '-'}\n`,
  );
  return ownLine;
}

/** Lock paths this process holds: the same pid in the file may be us now or a former process. */
const heldHere = new Set<string>();

const code = (err: unknown) => (err as NodeJS.ErrnoException).code;

/**
 * Creates `path` holding our pid and counts it held here, or returns false when it exists. The pid goes into a
 * private temp file that is then hard-linked into place: link() never replaces a file, and
 * the lock appears complete or not at all (creating the file, then writing the pid, let a
 * contender read it empty and take it for stale).
 */
async function createPidFile(path: string): Promise<boolean> {
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, await lockLine(), { flag: 'wx', mode: 0o600 });
  try {
    await link(tmp, path);
    // at once, before any other await: from here on a contender of this process reads our pid
    heldHere.add(path);
    return true;
  } catch (err) {
    if (code(err) === 'EEXIST') return false;
    throw err;
  } finally {
    await rm(tmp, { force: true });
  }
}

interface PidFile {
  /** This incarnation of the file: a new file may reuse a freed inode, never with the same ctime. */
  id: string;
  /** undefined when the file is not a complete pid file. */
  owner: number | undefined;
  /** The owner's start time and boot, where it recorded them. */
  identity: ProcessIdentity;
}

async function readPidFile(path: string): Promise<PidFile | undefined> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    if (code(err) === 'ENOENT') return undefined;
    throw err;
  }
  // One descriptor for both: the identity and the pid must be those of the same file.
  try {
    const st = await fh.stat({ bigint: true });
    const m = PID_FILE.exec(await fh.readFile('utf8'));
    const known = (v: string | undefined) => (v && v !== '-' ? v : undefined);
    const startTicks = known(m?.[2]);
    const bootId = known(m?.[3]);
    return {
      id: `${st.ino}-${st.ctimeNs}`,
      owner: m ? Number(m[1]) : undefined,
      identity: { ...(startTicks ? { startTicks } : {}), ...(bootId ? { bootId } : {}) },
    };
  } finally {
    await fh.close();
  }
}

/** Whether the process that wrote a pid file still holds it (and not another under its pid). */
async function held(path: string, seen: PidFile & { owner: number }): Promise<boolean> {
  if (seen.owner === process.pid) return heldHere.has(path);
  if (!pidExists(seen.owner)) return false;
  return !otherProcess(seen.identity, await processIdentity(seen.owner));
}

/**
 * Removes the pid file `path` of a dead owner, as seen (`seen`). Only one contender may remove
 * a given stale file: it first creates a marker named after that incarnation of the file, then
 * checks the file is still that one. A live lock is only ever removed by its holder, so the
 * file cannot change between that check and the unlink. A marker left by a contender that died
 * meanwhile is cleared the same way. The caller looks at the lock again afterwards.
 */
async function removeIfStale(path: string, seen: PidFile, depth = 0): Promise<void> {
  const marker = `${path}.${seen.id}.break`;
  if (!(await createPidFile(marker))) {
    const other = await readPidFile(marker);
    // One level of markers at most: a marker read just before its holder removed it looks
    // stale, and following such looks down a chain of markers grows the name past NAME_MAX.
    if (
      other?.owner !== undefined &&
      depth < 1 &&
      !(await held(marker, { ...other, owner: other.owner }))
    )
      await removeIfStale(marker, other, depth + 1);
    else await new Promise((r) => setTimeout(r, 10)); // another contender is clearing it
    return;
  }
  try {
    if ((await readPidFile(path))?.id === seen.id) await rm(path);
  } finally {
    await rm(marker, { force: true }).finally(() => heldHere.delete(marker));
  }
}

const busy = (owner: number) =>
  new AgentError(
    'Busy',
    `another bundle-agent (pid ${owner}) is loading a bundle on this node: wait until it reports Ready or Failed`,
  );

/**
 * One load at a time per node: the daemon and `bundle-agent load` share the staging
 * directory, the mirror drop-in and the pins. The lock file holds the owner's pid; a lock
 * left by a process that died is taken over; one whose content is not a complete pid is not.
 */
export async function withLoadLock<T>(stateDir: string, fn: () => Promise<T>): Promise<T> {
  await makeDirs(stateDir);
  const path = join(stateDir, LOCK);
  // A few rounds only: each takes the lock, finds a live owner, or clears a dead one's file.
  for (let round = 0; ; round++) {
    if (round >= 20)
      throw new AgentError(
        'Busy',
        `${path} keeps changing hands: other bundle-agent processes are starting loads; try again`,
      );
    if (!heldHere.has(path) && (await createPidFile(path))) break;
    const seen = await readPidFile(path);
    if (!seen) continue; // released meanwhile
    if (seen.owner === undefined) {
      throw new AgentError(
        'Busy',
        `${path} does not hold a process id: if no bundle-agent is running, remove it`,
      );
    }
    // Our own pid is a live lock only if this process holds it: otherwise a former process
    // with the same pid (a restarted container) left it.
    if (await held(path, { ...seen, owner: seen.owner })) throw busy(seen.owner);
    await removeIfStale(path, seen);
  }
  try {
    return await fn();
  } finally {
    // Still ours until the file is gone: a contender of this process must not clear it as a
    // former process's meanwhile.
    await rm(path, { force: true }).finally(() => heldHere.delete(path));
  }
}

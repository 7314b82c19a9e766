import { mkdir, open, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentError } from './errors.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * One load at a time per node: the daemon and `bundle-agent load` share the staging
 * directory, the mirror drop-in and the pins. The lock file holds the owner's pid; a lock
 * left by a process that died is taken over.
 */
export async function withLoadLock<T>(stateDir: string, fn: () => Promise<T>): Promise<T> {
  await mkdir(stateDir, { recursive: true });
  const path = join(stateDir, 'load.lock');
  for (let attempt = 0; ; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o600);
      await fh.writeFile(String(process.pid));
      await fh.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
      const owner = Number((await readFile(path, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner)) {
        throw new AgentError('Busy', `another bundle-agent (pid ${owner}) is loading a bundle on this node: wait until it reports Ready or Failed`);
      }
      await rm(path, { force: true });
    }
  }
  try {
    return await fn();
  } finally {
    await rm(path, { force: true });
  }
}

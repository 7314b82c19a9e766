// CRI-O takes pinned_images from the last crio.conf.d file that sets it, and ours sorts after
// the MCO's 50-pinned-images: our file holds a copy of the other files' pins, which must follow
// them. The daemon re-makes that union whenever crio.conf or any crio.conf.d file changes.
import { readdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import { withLoadLock } from '../state/lock.js';
import type { Logger } from '../log.js';
import { CrioTarget } from './runtime-target.js';

/** Names, sizes and mtimes of every file CRI-O reads pins from: changes when any of them does. */
async function fingerprint(config: AgentConfig): Promise<string> {
  const dir = config.paths.crioDropInDir;
  const names = (await readdir(dir).catch(() => [] as string[])).sort();
  const files = [join(dirname(dir), 'crio.conf'), ...names.map((n) => join(dir, n))];
  const parts: string[] = [];
  for (const f of files) {
    const st = await stat(f).catch(() => undefined);
    if (st) parts.push(`${f}:${st.size}:${st.mtimeMs}:${st.ino}`);
  }
  return parts.join('\n');
}

/**
 * Polls (every media.pollSeconds: inotify misses edits on some overlay and network mounts)
 * and re-merges our pins under the load lock; `exclusive` keeps it apart from the daemon's
 * own loads. Returns the stop function.
 */
export function watchCrioPins(
  config: AgentConfig,
  log: Logger,
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>,
): () => void {
  let last: string | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const tick = async () => {
    try {
      const now = await fingerprint(config);
      if (now !== last) {
        // after the daemon's own load (which pins by itself), and never beside another process's
        await exclusive(() =>
          withLoadLock(config.paths.stateDir, async () => {
            const target = new CrioTarget(config, log);
            try {
              if (await target.remerge())
                log.info('pin', 'another crio.conf.d file changed: our pins file follows it again');
            } finally {
              await target.close();
            }
          }),
        );
        // after our own write, so that write is not seen as a change next time
        last = await fingerprint(config);
      }
    } catch (err) {
      // a `bundle-agent load` elsewhere holds the lock: it pins (and merges) by itself
      if (!(err instanceof AgentError && err.reason === 'Busy'))
        log.warn('pin', `cannot re-merge the CRI-O pins now (${oneLine(err)}); trying again`);
    }
    if (!stopped) timer = setTimeout(tick, config.media.pollSeconds * 1000);
  };
  void tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

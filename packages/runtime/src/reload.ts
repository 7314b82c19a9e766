// Ask the runtime to re-read its configuration (CRI-O: `systemctl reload crio`, i.e. SIGHUP,
// which re-reads pinned_images and registries.conf.d).
import { RuntimeError, firstLine } from './errors.js';
import { execFile } from './exec.js';

export interface ReloadOptions {
  /** Default 60 s. */
  timeoutMs?: number;
}

/** Run `command` (argv, no shell). Non-zero exit, failure to start or timeout: RELOAD_FAILED. */
export async function reloadRuntime(command: string[], opts: ReloadOptions = {}): Promise<void> {
  const [file, ...args] = command;
  if (!file) throw new RuntimeError('INVALID_SPEC', 'the reload command is empty');
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const shown = command.join(' ');
  const r = await execFile(file, args, timeoutMs);
  if (r.spawnError) {
    throw new RuntimeError(
      'RELOAD_FAILED',
      `${shown}: cannot run ${file}: ${r.spawnError.message}`,
      { cause: r.spawnError },
    );
  }
  if (r.timedOut)
    throw new RuntimeError(
      'RELOAD_FAILED',
      `${shown}: did not finish within ${Math.round(timeoutMs / 1000)} s`,
    );
  if (r.code !== 0) {
    const why =
      firstLine(r.stderr) ||
      firstLine(r.stdout) ||
      (r.signal ? `killed by ${r.signal}` : `exit code ${r.code}`);
    throw new RuntimeError('RELOAD_FAILED', `${shown}: ${why}`);
  }
}

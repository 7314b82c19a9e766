// The lifecycle of a long-running child process used by tests and the demo (a
// docker-registry, a containerd, ...): spawn it with stdout+stderr captured, wait
// until it is ready, never leave it behind, and stop it exactly once.
import { spawn } from 'node:child_process';

/** How much of the captured output goes into an error message (its end). */
const ERROR_LOG_CHARS = 4000;

/**
 * @typedef {object} Service
 * @property {number} pid            pid of the child process
 * @property {() => string} logs     captured stdout+stderr so far (the first `maxLogChars` or a chunk more)
 * @property {() => Promise<void>} stop  idempotent: SIGTERM, SIGKILL after `killAfterMs`, await the exit, then `cleanup`
 */

/**
 * @typedef {object} ServiceOptions
 * @property {string} name       used in error messages, e.g. 'docker-registry'
 * @property {string} command    executable (a path, or a name looked up in PATH)
 * @property {string[]} args
 * @property {NodeJS.ProcessEnv} [env]  the child's environment (default: this process's)
 * @property {() => Promise<boolean>} ready  polled until it resolves true; a rejection counts as "not yet"
 * @property {string} readyWhat  what `ready` waits for, for the timeout message, e.g. 'answer GET http://127.0.0.1:5000/v2/'
 * @property {number} timeoutMs  how long `ready` may take
 * @property {number} [pollMs]   pause between `ready` polls (default 50)
 * @property {number} [killAfterMs]  SIGKILL this long after SIGTERM if still running (default 3000)
 * @property {number} [maxLogChars]  stop capturing output beyond this many characters (default 65536)
 * @property {() => Promise<unknown>} [cleanup]  run once by stop() after the process is gone
 *   (also when startup fails)
 */

/**
 * Spawn `command` and resolve once `ready()` says so. If the process cannot be spawned,
 * exits before it is ready, or is not ready within `timeoutMs`, it is stopped (`cleanup`
 * included) and the promise rejects with an error that carries the end of its output.
 * A `process.on('exit')` hook SIGKILLs the child if the test process ends without stop().
 *
 * @param {ServiceOptions} opts
 * @returns {Promise<Service>}
 */
export async function startService(opts) {
  const { name, command, timeoutMs } = opts;
  const pollMs = opts.pollMs ?? 50;
  const killAfterMs = opts.killAfterMs ?? 3000;
  const maxLogChars = opts.maxLogChars ?? 65536;

  const child = spawn(command, opts.args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: opts.env ?? process.env,
  });
  let logs = '';
  const onData = (/** @type {Buffer} */ d) => {
    if (logs.length < maxLogChars) logs += d.toString('utf8');
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  /** @type {Promise<void>} */
  const exited = new Promise((resolve) => child.once('exit', () => resolve()));
  /** @type {Error | undefined} */
  let spawnError;
  child.once('error', (e) => {
    spawnError = e;
  });

  // Safety net: never leave the process behind if the test process exits.
  const killOnExit = () => {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  };
  process.once('exit', killOnExit);

  /** @type {Promise<void> | undefined} */
  let stopping;
  const stop = () =>
    (stopping ??= (async () => {
      process.removeListener('exit', killOnExit);
      const pid = child.pid;
      if (!gone() && pid !== undefined) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          /* gone */
        }
        const timer = setTimeout(() => {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }, killAfterMs);
        await exited;
        clearTimeout(timer);
      }
      await opts.cleanup?.();
    })());

  /** @param {string} message */
  const fail = async (message) => {
    const out = logs.trim().slice(-ERROR_LOG_CHARS);
    await stop().catch(() => {});
    return new Error(`${message}; output: ${out || '(none)'}`);
  };

  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (spawnError) throw await fail(`${name} failed to start (${command}): ${spawnError.message}`);
    if (gone())
      throw await fail(
        `${name} exited during startup (code ${child.exitCode}, signal ${child.signalCode})`,
      );
    let ok = false;
    try {
      ok = await opts.ready();
    } catch {
      // not ready yet
    }
    if (ok) break;
    if (Date.now() > deadline)
      throw await fail(`${name} did not ${opts.readyWhat} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, pollMs));
  }

  return { pid: /** @type {number} */ (child.pid), logs: () => logs, stop };
}

// The unit tier's rule, enforced while a file marked `// tier: unit` runs (test/run.mjs loads
// this into every test process): no child process, no socket, no listening port. A marked file
// that needs one fails here, in `pnpm test` as in `pnpm test:unit`, instead of the tier
// silently growing slow. Files without the mark are not touched.
import childProcess from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { syncBuiltinESMExports } from 'node:module';
import { UNIT_MARK } from '../tiers.mjs';

const file = process.env.TAP_CHILD_ID ? process.argv[1] : undefined;
const marked = (() => {
  try {
    return (
      !!file && readFileSync(file, 'utf8').slice(0, 400).split('\n').slice(0, 3).includes(UNIT_MARK)
    );
  } catch {
    return false;
  }
})();

/**
 * tsx, which compiles the TypeScript test files (.taprc), looks for a `tsx` command above the
 * test process (its watch mode) at TMPDIR/tsx-<uid>/<parent pid>.pipe as it loads: the loader's
 * own probe, not the test's, so it may connect (and finds nothing there).
 * @param {unknown} arg the first argument of Socket#connect (options, a path, or the normalized
 *   [options, callback] of net.connect)
 */
function isTsxParentPipe(arg) {
  const o = Array.isArray(arg) ? arg[0] : arg;
  const p = typeof o === 'string' ? o : /** @type {{ path?: unknown }} */ (o)?.path;
  const uid = process.geteuid ? process.geteuid() : os.userInfo().username;
  return p === path.join(os.tmpdir(), `tsx-${uid}`, `${process.ppid}.pipe`);
}

if (marked) {
  const seen = [];
  const refuse = (what) => () => {
    const line = `unit tier: ${file} ${what}; a unit test runs no process and opens no socket: remove its "${UNIT_MARK}" line (or the ${what.split(' ')[0]} call)`;
    seen.push(line);
    throw new Error(line);
  };
  // a test that catches the refusal (a probe that skips when a tool "is not installed") still fails the file
  process.on('exit', () => {
    if (!seen.length) return;
    process.stderr.write(`${seen[0]}${seen.length > 1 ? ` (and ${seen.length - 1} more)` : ''}\n`);
    process.exitCode = 1;
  });
  for (const fn of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork'])
    childProcess[fn] = refuse(`${fn}s a process`);
  net.Server.prototype.listen = refuse('listens on a port');
  const connect = net.Socket.prototype.connect;
  const refuseConnect = refuse('connects a socket');
  net.Socket.prototype.connect = function (...args) {
    return isTsxParentPipe(args[0]) ? connect.apply(this, args) : refuseConnect();
  };
  syncBuiltinESMExports();
}

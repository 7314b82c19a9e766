// `bundle-agent load` run by hand while the daemon runs: both write the one status file. The
// load's result must stay what `status` says, and the daemon must stay the live writer.
import t from 'tap';
import { spawn } from 'node:child_process';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { makeBundle } from '../format/craft.js';
import { AGENT, nodeRoot, run } from './fixtures.js';

t.test('a load beside a running daemon: status names the load\'s result and the daemon as alive, then and after its heartbeats', async (t) => {
  const b = await makeBundle(t);
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  await chmod(b.dir, 0o755);
  const root = join(b.dir, 'node');
  const config = await nodeRoot(root, pub, 'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\nstatus:\n  heartbeatSeconds: 1\n');
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const readStatus = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);

  const daemon = spawn(process.execPath, [AGENT, 'run', '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.teardown(() => daemon.kill('SIGKILL'));
  for (let i = 0; i < 200 && (await readStatus())?.writer?.pid !== daemon.pid; i++) await sleep(100);
  t.equal((await readStatus())?.writer?.pid, daemon.pid, 'the daemon writes the status file');

  const load = await run(AGENT, ['load', b.path, '--config', config]);
  t.equal(load.code, 0, `the load succeeds: ${load.stderr}`);
  const right = await run(AGENT, ['status', '--config', config]);
  t.equal(right.code, 0, 'right after the load: the agent is running (exit 0), not "not running" (exit 3)');
  t.match(right.stdout, /NOT loaded/, `and the line is the load's result: ${right.stdout}`);

  await sleep(3500); // three of the daemon's heartbeats
  const later = await run(AGENT, ['status', '--config', config]);
  t.equal(later.code, 0, 'after the daemon\'s heartbeats: still running');
  t.match(later.stdout, /NOT loaded/, `still the load's result, not the daemon's older line: ${later.stdout}`);
  const s = await readStatus();
  t.equal(s.writer.pid, daemon.pid, 'the daemon owns the file again');
  t.equal(s.writer.command, 'run');
});

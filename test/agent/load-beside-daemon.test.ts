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

t.test('a by-hand load that changes nothing leaves a Ready daemon\'s console line and status alone', async (t) => {
  const b = await makeBundle(t);
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  await chmod(b.dir, 0o755);
  const root = join(b.dir, 'node');
  const config = await nodeRoot(root, pub, 'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\nstatus:\n  heartbeatSeconds: 1\n');
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const consoleFile = join(root, 'run/issue.d/bundle-agent.issue');
  const readStatus = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
  const daemon = spawn(process.execPath, [AGENT, 'run', '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.teardown(() => daemon.kill('SIGKILL'));
  for (let i = 0; i < 200 && (await readStatus())?.writer?.pid !== daemon.pid; i++) await sleep(100);
  // the node is Ready: the load's result, which the daemon adopts and shows
  t.equal((await run(AGENT, ['load', b.path, '--config', config])).code, 0);
  for (let i = 0; i < 100 && (await readStatus())?.writer?.pid !== daemon.pid; i++) await sleep(100);
  const ready = await readFile(consoleFile, 'utf8');
  t.match(ready, /NOT loaded/, 'the console shows the Ready line');

  await writeFile(join(b.dir, 'images.txt'), 'quay.io/acme/app:v1\n');
  const text = await run(AGENT, ['load', join(b.dir, 'images.txt'), '--config', config]);
  t.equal(text.code, 2, 'a text file is a usage error');
  t.match(text.stderr, /images\.txt is not a bundle/, `named as not a bundle: ${text.stderr}`);
  t.equal(await readFile(consoleFile, 'utf8'), ready, 'the console still shows the technician\'s Ready line');

  // a real bundle this node refuses (signed by a key it does not trust): this command's answer, not the node's state
  const other = await makeBundle(t);
  const refused = await run(AGENT, ['load', other.path, '--config', config]);
  t.equal(refused.code, 1, `refused: ${refused.stderr}`);
  t.match(refused.stderr, /UntrustedKey|BadSignature/, 'the refusal is printed to whoever ran it');

  t.equal(await readFile(consoleFile, 'utf8'), ready, 'after a refused bundle too, the console shows the technician\'s Ready line');
  const s = await readStatus();
  t.equal(s.phase, 'Ready', 'and the status is still Ready');
  t.equal(s.writer.pid, daemon.pid, 'written by the daemon');
});

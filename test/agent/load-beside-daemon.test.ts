// `bundle-agent load` run by hand while the daemon runs: both write the one status file. The
// load's result must stay what `status` says, and the daemon must stay the live writer.
import t from 'tap';
import { spawn } from 'node:child_process';
import { chmod, copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { makeBundle } from '../format/craft.js';
import { AGENT, daemonChild, nodeRoot, run } from './fixtures.js';
import { until } from '../helpers/until.js';

/**
 * A node for these tests (CRI-O, running 1.2.2). `gated`: its CRI-O reload blocks while `gate`
 * exists, so a load holds in Serving (its mirror's reload) until the test lets it go.
 */
async function testNode(t: any, opts: { gated?: boolean; extra?: string } = {}) {
  const b = await makeBundle(t);
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  await chmod(b.dir, 0o755);
  const root = join(b.dir, 'node');
  const gate = join(b.dir, 'reload.gate');
  const reload = opts.gated
    ? JSON.stringify(['sh', '-c', `while [ -e ${JSON.stringify(gate)} ]; do sleep 0.05; done`])
    : '["true"]';
  const config = await nodeRoot(
    root,
    pub,
    `runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ${reload}\nstatus:\n  heartbeatSeconds: 1\n${opts.extra ?? ''}`,
  );
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const readStatus = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
  const consoleFile = join(root, 'run/issue.d/bundle-agent.issue');
  return { b, root, gate, config, statusFile, readStatus, consoleFile };
}

/** The daemon, once it writes the status file (stopped with SIGTERM at the end of the test). */
async function startDaemon(t: any, config: string, statusFile: string) {
  const daemon = daemonChild(t, config, statusFile);
  await daemon.until('the daemon writes the status', (s) => s?.writer?.pid === daemon.child.pid);
  return daemon;
}

t.test(
  "a load beside a running daemon: status names the load's result and the daemon as alive, then and after its heartbeats",
  async (t) => {
    const { b, config, statusFile, readStatus } = await testNode(t);
    const daemon = await startDaemon(t, config, statusFile);
    t.equal(
      (await readStatus())?.writer?.pid,
      daemon.child.pid,
      'the daemon writes the status file',
    );

    const load = await run(AGENT, ['load', b.path, '--config', config]);
    t.equal(load.code, 0, `the load succeeds: ${load.stderr}`);
    const right = await run(AGENT, ['status', '--config', config]);
    t.equal(
      right.code,
      0,
      'right after the load: the agent is running (exit 0), not "not running" (exit 3)',
    );
    t.match(right.stdout, /NOT loaded/, `and the line is the load's result: ${right.stdout}`);

    await sleep(3500); // three of the daemon's heartbeats
    const later = await run(AGENT, ['status', '--config', config]);
    t.equal(later.code, 0, "after the daemon's heartbeats: still running");
    t.match(
      later.stdout,
      /NOT loaded/,
      `still the load's result, not the daemon's older line: ${later.stdout}`,
    );
    const s = await readStatus();
    t.equal(s.writer.pid, daemon.child.pid, 'the daemon owns the file again');
    t.equal(s.writer.command, 'run');
  },
);

t.test(
  "a by-hand load that changes nothing leaves a Ready daemon's console line and status alone",
  async (t) => {
    const { b, config, statusFile, readStatus, consoleFile } = await testNode(t);
    const daemon = await startDaemon(t, config, statusFile);
    // the node is Ready: the load's result, which the daemon adopts and shows
    t.equal((await run(AGENT, ['load', b.path, '--config', config])).code, 0);
    await daemon.until(
      'the daemon writes the status and the console shows the Ready line',
      async (s) =>
        s?.writer?.pid === daemon.child.pid &&
        /NOT loaded/.test(await readFile(consoleFile, 'utf8').catch(() => '')),
    );
    const ready = await readFile(consoleFile, 'utf8');
    t.match(ready, /NOT loaded/, 'the console shows the Ready line');

    await writeFile(join(b.dir, 'images.txt'), 'quay.io/acme/app:v1\n');
    const text = await run(AGENT, ['load', join(b.dir, 'images.txt'), '--config', config]);
    t.equal(text.code, 2, 'a text file is a usage error');
    t.match(text.stderr, /images\.txt is not a bundle/, `named as not a bundle: ${text.stderr}`);
    t.equal(
      await readFile(consoleFile, 'utf8'),
      ready,
      "the console still shows the technician's Ready line",
    );

    // a real bundle this node refuses (signed by a key it does not trust): this command's answer, not the node's state
    const other = await makeBundle(t);
    const refused = await run(AGENT, ['load', other.path, '--config', config]);
    t.equal(refused.code, 1, `refused: ${refused.stderr}`);
    t.match(
      refused.stderr,
      /UntrustedKey|BadSignature/,
      'the refusal is printed to whoever ran it',
    );

    t.equal(
      await readFile(consoleFile, 'utf8'),
      ready,
      "after a refused bundle too, the console shows the technician's Ready line",
    );
    const s = await readStatus();
    t.equal(s.phase, 'Ready', 'and the status is still Ready');
    t.equal(s.writer.pid, daemon.child.pid, 'written by the daemon');
  },
);

t.test(
  'a by-hand load killed (SIGKILL) beside the daemon: the daemon shows it Interrupted, not its last phase for good',
  async (t) => {
    const n = await testNode(t, { gated: true });
    const daemon = await startDaemon(t, n.config, n.statusFile);
    await writeFile(n.gate, '');
    t.teardown(() => rm(n.gate, { force: true }));
    const load = spawn(process.execPath, [AGENT, 'load', n.b.path, '--config', n.config], {
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    const exited = new Promise((r) => load.on('close', r));
    await until(
      'the load holds in Serving',
      async () => (await n.readStatus())?.phase === 'Serving',
      { timeoutMs: 30_000, stepMs: 50 },
    );
    t.equal(
      (await n.readStatus())?.phase,
      'Serving',
      'the load holds in Serving (its mirror reload)',
    );
    load.kill('SIGKILL');
    await exited;
    await rm(n.gate, { force: true });
    const s = await daemon.until('the daemon says Failed', (st) => st?.phase === 'Failed');
    t.equal(s?.phase, 'Failed', `the daemon does not keep the dead load's phase (${s?.phase})`);
    t.match(
      s.conditions.find((c: any) => c.type === 'Failed'),
      { reason: 'Interrupted', message: /bundle-agent load was stopped before it finished/ },
    );
    t.notOk(
      s.conditions.some((c: any) => c.type === 'Serving' && c.status === 'True'),
      'no registry is said to be serving',
    );
    t.equal(s.writer.pid, daemon.child.pid, 'written by the daemon');
    const line = await readFile(n.consoleFile, 'utf8');
    t.notMatch(
      line,
      /Finishing up|Serving|Loading/i,
      `the console no longer says the load goes on: ${line}`,
    );
    await sleep(2500); // two more of the daemon's heartbeats: it stays so
    t.equal((await n.readStatus())?.phase, 'Failed');
  },
);

t.test(
  'SIGHUP (terminal closed) stops a by-hand load as Ctrl-C does: Failed Interrupted, not killed mid-way',
  async (t) => {
    const n = await testNode(t, { gated: true });
    await writeFile(n.gate, '');
    t.teardown(() => rm(n.gate, { force: true }));
    const load = spawn(process.execPath, [AGENT, 'load', n.b.path, '--config', n.config], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    load.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    const exited = new Promise<[number | null, string | null]>((r) =>
      load.on('close', (code, sig) => r([code, sig])),
    );
    await until(
      'the load holds in Serving',
      async () => (await n.readStatus())?.phase === 'Serving',
      { timeoutMs: 30_000, stepMs: 50 },
    );
    t.equal((await n.readStatus())?.phase, 'Serving');
    load.kill('SIGHUP');
    await rm(n.gate, { force: true });
    const [code, sig] = await exited;
    t.same(
      [code, sig],
      [1, null],
      `exits as a stopped load, not killed by the signal: ${stderr.slice(-500)}`,
    );
    t.match(stderr, /Interrupted/);
    const s = await n.readStatus();
    t.equal(s.phase, 'Failed');
    t.match(
      s.conditions.find((c: any) => c.type === 'Failed'),
      { reason: 'Interrupted' },
    );
  },
);

t.test(
  'releases forget of the release the status shows Ready, beside the daemon: the status and console stop saying it is loaded',
  async (t) => {
    const { b, config, statusFile, readStatus, consoleFile } = await testNode(t);
    const daemon = await startDaemon(t, config, statusFile);
    t.equal((await run(AGENT, ['load', b.path, '--config', config])).code, 0);
    await daemon.until(
      'the daemon writes the status',
      (st) => st?.writer?.pid === daemon.child.pid,
    );
    t.equal((await readStatus()).phase, 'Ready');

    const forget = await run(AGENT, ['releases', 'forget', '1.2.3', '--config', config]);
    t.equal(forget.code, 0, forget.stderr);
    const s = await daemon.until(
      'the daemon says Idle, the console says removed',
      async (st) =>
        st?.phase === 'Idle' &&
        st.writer.pid === daemon.child.pid &&
        /removed/.test(await readFile(consoleFile, 'utf8')),
    );
    t.equal(s.phase, 'Idle', 'no longer Ready');
    t.match(
      s.conditions.find((c: any) => c.type === 'Ready'),
      { status: 'False', reason: 'ReleaseForgotten', message: /1\.2\.3.*forgotten/ },
    );
    t.equal(
      s.message,
      'Update 1.2.3 was removed from this node by the administrator. Waiting for a USB stick with an update bundle.',
    );
    t.equal(s.writer.pid, daemon.child.pid, 'the daemon took it over');
    const line = await readFile(consoleFile, 'utf8');
    t.notMatch(line, /Done|is loaded/, `the console no longer says it is loaded: ${line}`);
    const st = await run(AGENT, ['status', '--config', config]);
    t.match(st.stdout, /^Update 1\.2\.3 was removed/, 'bundle-agent status too');
    await sleep(2500); // the daemon's heartbeats do not bring Ready back
    t.equal((await readStatus()).phase, 'Idle');
  },
);

t.test(
  'a stick (drop directory) found while a by-hand load holds the lock: tried again once it is free, no Busy failure left',
  async (t) => {
    const n = await testNode(t, {
      gated: true,
      extra:
        'media:\n  roots: [/media]\n  watchDirs: [/var/lib/bundle-agent/drop]\n  pollSeconds: 1\n',
    });
    const drop = join(n.root, 'var/lib/bundle-agent/drop');
    await mkdir(drop, { recursive: true });
    const daemon = await startDaemon(t, n.config, n.statusFile);
    await writeFile(n.gate, '');
    t.teardown(() => rm(n.gate, { force: true }));
    const load = spawn(process.execPath, [AGENT, 'load', n.b.path, '--config', n.config], {
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    const exited = new Promise<number | null>((r) => load.on('close', r));
    await until(
      'the hand load holds in Serving',
      async () => (await n.readStatus())?.phase === 'Serving',
      { timeoutMs: 30_000, stepMs: 50 },
    );
    t.equal((await n.readStatus())?.phase, 'Serving', 'the hand load holds the lock');

    await copyFile(n.b.path, join(drop, 'update.bundle'));
    await daemon.until('the daemon finds the lock taken', (_s, log) =>
      /another bundle-agent \(pid/.test(log),
    );
    t.match(
      daemon.out.log,
      /another bundle-agent \(pid \d+\) is loading/,
      'the daemon found the dropped bundle and the lock taken',
    );
    await rm(n.gate, { force: true });
    t.equal(await exited, 0, 'the hand load finishes');
    await daemon.until('the dropped bundle loaded', (_s, log) =>
      /bundle found: \S*drop\/update\.bundle[\s\S]*event=ready/.test(log),
    );
    t.match(
      daemon.out.log,
      /bundle found: \S*drop\/update\.bundle[\s\S]*event=ready/,
      'the dropped bundle is loaded once the lock is free',
    );
    // the journal line comes before the status file's write of the same change
    const s = await daemon.until('the status says Ready', (st) => st?.phase === 'Ready');
    t.equal(s.phase, 'Ready');
    t.notOk(
      s.conditions.some((c: any) => c.type === 'Failed'),
      'no Failed condition',
    );
    t.notMatch(
      await readFile(n.consoleFile, 'utf8'),
      /already loading/,
      'the console has no Busy line',
    );
    t.notOk(
      s.history.some((e: any) => e.state === 'failed'),
      'no failed history entry for the busy refusal',
    );
  },
);

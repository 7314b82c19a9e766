// The Quadlet unit holds the kubelet (ordered after it) until the agent's start-up is done: a
// loaded release served again, images crio-wipe took restored. ExecStartPre removes the last
// start's marker, ExecStartPost waits for the new one (bounded: a stuck agent never keeps the
// kubelet down), the daemon writes it (test/agent/serve-until-complete.test.ts).
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { BOOTSTRAP as SCRIPT } from './lib.js';

const UNIT = join(SCRIPT, '../bundle-agent.container');

function waitStarted(
  root: string,
  seconds: string,
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stderr: string; ms: number }> {
  const began = Date.now();
  return new Promise((resolve) => {
    const c = spawn('bash', [SCRIPT, '--wait-started', seconds, '--root', root], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ...env },
    });
    let stderr = '';
    c.stderr.on('data', (b: Buffer) => {
      stderr += b;
    });
    c.on('close', (code) => resolve({ code, stderr, ms: Date.now() - began }));
  });
}

t.test(
  'the unit orders the kubelet after it and waits, bounded, for the start-up marker',
  async (t) => {
    const unit = await readFile(UNIT, 'utf8');
    t.match(unit, /^Before=kubelet\.service$/m);
    t.match(
      unit,
      /^ExecStartPre=-\/bin\/rm -f \/var\/lib\/bundle-agent\/started$/m,
      "the last start's marker goes before the agent starts",
    );
    const wait = Number(/--wait-started (\d+)$/m.exec(unit)?.[1]);
    const timeout = Number(/^TimeoutStartSec=(\d+)$/m.exec(unit)?.[1]);
    t.ok(
      wait > 0 && timeout > wait,
      `the wait (${wait} s) ends before systemd's start timeout (${timeout} s) would kill the agent`,
    );
  },
);

t.test('--wait-started returns once the marker appears, and at the bound without it', async (t) => {
  const root = await tmpdir(t, 'ob-wait-started-');
  await mkdir(join(root, 'var/lib/bundle-agent'), { recursive: true });
  setTimeout(() => void writeFile(join(root, 'var/lib/bundle-agent/started'), '{}\n'), 700);
  const seen = await waitStarted(root, '30');
  t.equal(seen.code, 0);
  t.ok(seen.ms >= 600 && seen.ms < 5_000, `returned when the marker came (${seen.ms} ms)`);
  t.equal(seen.stderr, '');

  const root2 = await tmpdir(t, 'ob-wait-started-none-');
  const none = await waitStarted(root2, '1');
  t.equal(none.code, 0, 'never fails the unit: the kubelet starts anyway');
  t.ok(none.ms >= 900, `waited the bound (${none.ms} ms)`);
  t.match(none.stderr, /did not finish its start-up within 1 s: the kubelet starts anyway/);

  // the agent's main process died (a crash loop): not waited for, so systemd restarts it at once
  const dead = spawn('true');
  await new Promise((r) => dead.once('exit', r));
  const gone = await waitStarted(root2, '30', { MAINPID: String(dead.pid) });
  t.equal(gone.code, 0);
  t.ok(gone.ms < 5_000, `a dead main process is not waited for (${gone.ms} ms)`);

  const bad = await waitStarted(root2, 'soon');
  t.equal(bad.code, 2);
  t.match(bad.stderr, /--wait-started soon: give seconds/);
});

// The boot guard of the agent switch, deploy/openshift/switch-guard.sh (contract test: the
// script run with /bin/sh in a temporary root, systemctl and systemd-run replaced by scripts
// that record their arguments; no systemd, Quadlet or podman here). It is the unit's
// ExecStartPre=: the rollback of an unconfirmed switch survives a reboot (which loses the
// agent's systemd-run timer, kept in /run) and a new agent that crash-loops.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  createLogger,
  parseConfig,
  pendingMarker,
  readAgentSwitch,
  renderImageDropIn,
  settleAgentSwitch,
  switchAgentIfNewer,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { tmpdir } from '../helpers/tmp.mjs';
import { nodeRoot } from './fixtures.js';

const GUARD = new URL('../../deploy/openshift/switch-guard.sh', import.meta.url).pathname;
const REPO = 'localhost/offline-bundle/bundle-agent';
const dg = (c: string) => `sha256:${c.repeat(64)}`;
const ref = (c: string) => `${REPO}@${dg(c)}`;
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

async function host(t: Tap.Test) {
  const dir = await tmpdir(t, 'ob-guard-');
  const state = join(dir, 'var/lib/bundle-agent');
  const dropInDir = join(dir, 'etc/containers/systemd/bundle-agent.container.d');
  await mkdir(state, { recursive: true });
  await mkdir(dropInDir, { recursive: true });
  const calls = join(dir, 'calls.log');
  const bin = join(dir, 'bin');
  await mkdir(bin);
  for (const cmd of ['systemctl', 'systemd-run']) {
    await writeFile(join(bin, cmd), `#!/bin/sh\necho "${cmd} $*" >> ${calls}\n`);
    await chmod(join(bin, cmd), 0o755);
  }
  const file = join(dropInDir, 'image.conf');
  const marker = join(state, 'agent-switch.pending');
  const guard = (mode?: string) => {
    const r = spawnSync(
      '/bin/sh',
      [GUARD, state, dropInDir, 'bundle-agent', ...(mode ? [mode] : [])],
      { env: { PATH: `${bin}:/usr/bin:/bin` }, encoding: 'utf8' },
    );
    return { code: r.status, stderr: r.stderr };
  };
  return {
    dir,
    state,
    dropInDir,
    file,
    marker,
    guard,
    calls: async () => (await readFile(calls, 'utf8').catch(() => '')).split('\n').filter(Boolean),
    clear: () => writeFile(calls, ''),
    age: async (seconds: number) => {
      const then = new Date(Date.now() - seconds * 1000);
      await utimes(marker, then, then);
    },
  };
}

t.test(
  'no pending switch, or the drop-in does not name its image: the guard does nothing',
  async (t) => {
    const h = await host(t);
    t.equal(h.guard().code, 0);
    await writeFile(h.file, renderImageDropIn(ref('a')));
    await writeFile(h.marker, `${dg('b')}\n600\n${ref('a')}\n`);
    await h.age(3600);
    t.equal(h.guard().code, 0, 'the previous agent starts: nothing to undo');
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
    t.ok(await exists(h.marker));
    t.strictSame(await h.calls(), []);
  },
);

t.test(
  'after a reboot within the window: the start is counted and a timer for the rest of the window scheduled',
  async (t) => {
    const h = await host(t);
    await writeFile(h.file, renderImageDropIn(ref('b')));
    await writeFile(h.marker, `${dg('b')}\n600\n${ref('a')}\n`);
    await h.age(100);
    t.equal(h.guard().code, 0, 'the new agent may start');
    t.equal((await readFile(join(h.state, 'agent-switch.starts'), 'utf8')).trim(), '1');
    const [run] = await h.calls();
    t.match(
      run,
      new RegExp(
        `^systemd-run --collect --no-block --unit=bundle-agent-rollback-${'b'.repeat(12)} --on-active=(49\\d|500)s /bin/sh ${GUARD} \\S+ \\S+ bundle-agent timer$`,
      ),
    );
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('b')), 'the drop-in stays');
    // the timer fires inside the window (the new agent has not confirmed, but there is time): nothing
    await h.clear();
    t.equal(h.guard('timer').code, 0);
    t.strictSame(await h.calls(), []);
    // ... and after it: rolled back and restarted
    await h.age(700);
    t.equal(h.guard('timer').code, 0);
    t.equal(
      await readFile(h.file, 'utf8'),
      renderImageDropIn(ref('a')),
      'the previous drop-in, byte for byte what the agent writes',
    );
    t.notOk(await exists(h.marker));
    t.strictSame(await h.calls(), ['systemctl daemon-reload', 'systemctl restart bundle-agent']);
  },
);

t.test(
  'a start after the window (a reboot lost the timer): the previous drop-in is put back and this start fails, so Restart=on-failure runs the previous image',
  async (t) => {
    const h = await host(t);
    await writeFile(h.file, renderImageDropIn(ref('b')));
    await writeFile(h.marker, `${dg('b')}\n600\n${ref('a')}\n`);
    await h.age(601);
    const r = h.guard();
    t.equal(r.code, 1, 'this start fails');
    t.match(r.stderr, /was not confirmed .*putting the previous agent image back/);
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
    t.notOk(await exists(`${h.file}.rollback`), 'no temporary file left');
    t.notOk(await exists(h.marker), 'the marker is gone');
    t.strictSame(await h.calls(), ['systemctl daemon-reload']);
    // the next start (the previous image): nothing
    await h.clear();
    t.equal(h.guard().code, 0);
    t.strictSame(await h.calls(), []);
  },
);

t.test('a first switch (no previous drop-in, marker says -): the drop-in is removed', async (t) => {
  const h = await host(t);
  await writeFile(h.file, renderImageDropIn(ref('b')));
  await writeFile(h.marker, `${dg('b')}\n600\n-\n`);
  await h.age(900);
  t.equal(h.guard().code, 1);
  t.notOk(await exists(h.file));
});

t.test(
  'a new agent that crash-loops: rolled back after 5 starts, even within the window and with no timer',
  async (t) => {
    const h = await host(t);
    await writeFile(h.file, renderImageDropIn(ref('b')));
    await writeFile(h.marker, `${dg('b')}\n600\n${ref('a')}\n`);
    for (let i = 1; i <= 5; i++) t.equal(h.guard().code, 0, `start ${i} goes ahead`);
    t.equal(h.guard().code, 1, 'the 6th does not');
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
    t.notOk(await exists(join(h.state, 'agent-switch.starts')), 'the count goes with the marker');
  },
);

t.test(
  'a hostile marker (a line 1 that is not a digest, an image with a newline or a space) changes nothing it should not',
  async (t) => {
    const h = await host(t);
    await writeFile(h.file, renderImageDropIn(ref('b')));
    await writeFile(h.marker, `sha256:../../x\n600\n${ref('a')}\n`);
    await h.age(900);
    t.equal(h.guard().code, 0);
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('b')));
    await writeFile(h.marker, `${dg('b')}\n600\nevil image\n`);
    await h.age(900);
    t.equal(h.guard().code, 1);
    t.notOk(
      await exists(h.file),
      "an image the guard would not write: back to the unit's own image",
    );
  },
);

t.test(
  'the marker the agent writes is the one the guard reads (the switch, then the guard in its state)',
  async (t) => {
    const h = await host(t);
    const cfgFile = await nodeRoot(
      h.dir,
      undefined,
      `runtime: crio
trust:
  digest: sha256:${'0'.repeat(64)}
selfUpgrade:
  mode: quadlet
  confirmMinutes: 3
  daemonReload: ["true"]
  restart: ["true"]
  scheduleRollback: []
`,
    );
    const config = parseConfig(await readFile(cfgFile, 'utf8'), cfgFile);
    t.equal(config.paths.stateDir, h.state);
    t.equal(config.selfUpgrade.dropInDir, h.dropInDir);
    await writeFile(h.file, renderImageDropIn(ref('a')));
    const runtime = {
      inspector: async () => ({ imageStatus: async () => ({}), listImages: async () => [] }),
      pinnedRefs: async () => new Set<string>(),
      pin: async () => undefined,
    } as unknown as RuntimeTarget;
    const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
    const tracker = new StatusTracker(emptyStatus('node-a'));
    const ctx = { config, log, tracker, runtime, agentVersion: '0.5.0' };
    t.equal(
      await switchAgentIfNewer(ctx, { version: '0.6.0', repository: REPO, digest: dg('b') }),
      'switching',
    );
    t.equal(await readFile(pendingMarker(h.state), 'utf8'), `${dg('b')}\n180\n${ref('a')}\n`);
    await h.age(181);
    t.equal(h.guard().code, 1, 'past the 3 minutes: undone at the start');
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
    // the old agent then reports the rollback
    t.equal((await settleAgentSwitch(ctx))?.state, 'rolledBack');
    t.equal((await readAgentSwitch(h.state))?.state, 'rolledBack');
    await rm(h.file, { force: true });
  },
);

t.test('the switch schedules the rollback before it writes the drop-in', async (t) => {
  const h = await host(t);
  const seen = join(h.dir, 'seen');
  const cfgFile = await nodeRoot(
    h.dir,
    undefined,
    `runtime: crio
trust:
  digest: sha256:${'0'.repeat(64)}
selfUpgrade:
  mode: quadlet
  daemonReload: ["true"]
  restart: ["true"]
  scheduleRollback: [sh, -c, "cat ${h.file} > ${seen} 2>/dev/null || echo none > ${seen}", --]
`,
  );
  const config = parseConfig(await readFile(cfgFile, 'utf8'), cfgFile);
  await writeFile(h.file, renderImageDropIn(ref('a')));
  const runtime = {
    inspector: async () => ({ imageStatus: async () => ({}), listImages: async () => [] }),
    pinnedRefs: async () => new Set<string>(),
    pin: async () => undefined,
  } as unknown as RuntimeTarget;
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const ctx = {
    config,
    log,
    tracker: new StatusTracker(emptyStatus('node-a')),
    runtime,
    agentVersion: '0.5.0',
  };
  t.equal(
    await switchAgentIfNewer(ctx, { version: '0.6.0', repository: REPO, digest: dg('b') }),
    'switching',
  );
  t.equal(
    await readFile(seen, 'utf8'),
    renderImageDropIn(ref('a')),
    'when the timer was scheduled, the drop-in still named the running image',
  );
  t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('b')));
});

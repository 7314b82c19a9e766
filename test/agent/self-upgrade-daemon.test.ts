// The daemon settles a pending agent switch at its start (the real `bundle-agent run`): the
// version it runs is its own package version, so a switch to that version is confirmed, and a
// switch to another whose drop-in is gone is reported as rolled back.
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, keygen, nodeRoot } from './fixtures.js';

const VERSION = JSON.parse(
  await readFile(new URL('../../agent/package.json', import.meta.url), 'utf8'),
).version as string;
const image = (c: string) => `localhost/offline-bundle/bundle-agent@sha256:${c.repeat(64)}`;

async function node(t: any, rec: object, dropIn?: string) {
  const dir = await tmpdir(t, 'ob-agent-switch-');
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const config = await nodeRoot(
    root,
    keys.pub,
    `runtime: crio
reload:
  command: ["true"]
version:
  current: "1.0.0"
media:
  roots: [/media]
  watchDirs: [/var/lib/bundle-agent/drop]
selfUpgrade:
  mode: quadlet
  daemonReload: ["true"]
  restart: ["true"]
  scheduleRollback: []
`,
  );
  const state = join(root, 'var/lib/bundle-agent');
  await mkdir(join(state, 'drop'), { recursive: true });
  await writeFile(join(state, 'agent-switch.json'), JSON.stringify(rec));
  await writeFile(join(state, 'agent-switch.pending'), 'x\n');
  if (dropIn) {
    await mkdir(join(root, 'etc/containers/systemd/bundle-agent.container.d'), { recursive: true });
    await writeFile(
      join(root, 'etc/containers/systemd/bundle-agent.container.d/image.conf'),
      dropIn,
    );
  }
  return { config, state };
}

/** Runs the daemon until its status file has an AgentUpgraded condition, then stops it. */
async function startAndRead(config: string, state: string) {
  const child = spawn(process.execPath, [AGENT, 'run', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout.on('data', (d: Buffer) => {
    log += d;
  });
  child.stderr.on('data', (d: Buffer) => {
    log += d;
  });
  const exited = new Promise((r) => child.once('exit', r));
  try {
    for (let i = 0; i < 600; i++) {
      const s = await readFile(join(state, 'status.json'), 'utf8').then(
        JSON.parse,
        () => undefined,
      );
      const c = s?.conditions?.find((x: { type: string }) => x.type === 'AgentUpgraded');
      if (c) return { condition: c, log };
      await sleep(100);
    }
    throw new Error(`no AgentUpgraded condition; log: ${log.slice(-1500)}`);
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

t.test(`a switch to this agent's own version (${VERSION}): the start confirms it`, async (t) => {
  const n = await node(t, {
    state: 'pending',
    from: { version: '0.0.1' },
    to: { version: VERSION, image: image('b'), digest: `sha256:${'b'.repeat(64)}` },
    at: new Date().toISOString(),
  });
  const { condition } = await startAndRead(n.config, n.state);
  t.equal(condition.status, 'True');
  t.equal(condition.reason, 'AgentUpgraded');
  t.match(condition.message, `bundle-agent ${VERSION} runs (was 0.0.1)`);
  t.equal(JSON.parse(await readFile(join(n.state, 'agent-switch.json'), 'utf8')).state, 'done');
  t.notOk(
    await stat(join(n.state, 'agent-switch.pending')).then(
      () => true,
      () => false,
    ),
    'the rollback marker is gone',
  );
});

t.test(
  'a switch to another version whose drop-in is gone (the rollback timer fired): the old agent reports the rollback',
  async (t) => {
    const n = await node(t, {
      state: 'pending',
      from: { version: VERSION },
      to: { version: '99.0.0', image: image('c'), digest: `sha256:${'c'.repeat(64)}` },
      at: new Date().toISOString(),
      written: true,
    });
    const { condition } = await startAndRead(n.config, n.state);
    t.equal(condition.status, 'False');
    t.equal(condition.reason, 'AgentUpgradeRolledBack');
    t.equal(
      JSON.parse(await readFile(join(n.state, 'agent-switch.json'), 'utf8')).state,
      'rolledBack',
    );
  },
);

t.test(
  'the start confirms a switch even while a `bundle-agent load` holds the load lock (Busy), and whatever the leftovers cleanup does',
  async (t) => {
    const n = await node(t, {
      state: 'pending',
      from: { version: '0.0.1' },
      to: { version: VERSION, image: image('d'), digest: `sha256:${'d'.repeat(64)}` },
      at: new Date().toISOString(),
      written: true,
    });
    const holder: ChildProcess = spawn('sleep', ['60'], { stdio: 'ignore' });
    t.teardown(() => {
      holder.kill('SIGKILL');
    });
    await writeFile(join(n.state, 'load.lock'), `${holder.pid}\n`);
    const { condition } = await startAndRead(n.config, n.state);
    t.equal(condition.status, 'True', 'confirmed');
    t.equal(JSON.parse(await readFile(join(n.state, 'agent-switch.json'), 'utf8')).state, 'done');
    t.notOk(
      await stat(join(n.state, 'agent-switch.pending')).then(
        () => true,
        () => false,
      ),
      'the rollback marker is gone: the timer does nothing',
    );
  },
);

t.test(
  'a pending switch cut short before its drop-in was written (power loss): not a failed agent, not refused later',
  async (t) => {
    const n = await node(t, {
      state: 'pending',
      from: { version: VERSION },
      to: { version: '99.0.0', image: image('e'), digest: `sha256:${'e'.repeat(64)}` },
      at: new Date().toISOString(),
    });
    const { condition } = await startAndRead(n.config, n.state);
    t.equal(condition.status, 'False');
    t.equal(condition.reason, 'AgentSwitchInterrupted');
    t.notOk(
      await stat(join(n.state, 'agent-switch.json')).then(
        () => true,
        () => false,
      ),
      'forgotten: the digest is not refused next time',
    );
    t.notOk(
      await stat(join(n.state, 'agent-switch.pending')).then(
        () => true,
        () => false,
      ),
    );
  },
);

// The agent's switch to a newer agent image a bundle carries (selfUpgrade.mode quadlet), with
// real bundles from the `bundle` CLI loaded into the CRI-O contract stand-in
// (test/helpers/crio-standin.mjs; CRI-O cannot run here, and podman, which the Quadlet unit
// runs, reads CRI-O's image store, so quadlet mode is for CRI-O nodes). The pins are read
// from the crio.conf.d file CRI-O reads. No systemd or podman runs here: the daemon-reload,
// restart and rollback-timer commands are scripts that record their arguments, and the
// Quadlet drop-in is checked as a file (the unit's side is test/package/deploy.test.ts, a
// contract test). The host-side rollback script the agent schedules is run for real with /bin/sh.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  createLogger,
  parseConfig,
  pendingMarker,
  readAgentSwitch,
  renderImageDropIn,
  rollbackScript,
  runLoad,
  runtimeTarget,
  settleAgentSwitch,
  type AgentConfig,
} from '@offline-bundle/agent';
import { readPinsDropIn } from '@offline-bundle/runtime';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
// @ts-expect-error: a JavaScript helper without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { BUNDLE, crioFiles, crioNodeConfig, crioSighup, keygen, run } from './fixtures.js';

const REPO = 'localhost/offline-bundle/bundle-agent';
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

const dir = await tmpdir(t, 'ob-agent-upgrade-');
const keys = await keygen(dir);
const root = join(dir, 'node');
const p = (rel: string) => join(root, rel);
const crio = await startCrioStandin(t, await crioFiles(root));
await writeFile(p('run/crio/pid'), String(crio.pid));
const sighup = crioSighup(p('run/crio/pid'));

// every command the agent runs on the host: arguments end with \x1f, invocations with \x1e
// (the rollback script holds newlines)
const calls = join(dir, 'calls.log');
const recorder = join(dir, 'record.sh');
await writeFile(recorder, `#!/bin/sh\n{ printf '%s\\037' "$@"; printf '\\036'; } >> ${calls}\n`);
await chmod(recorder, 0o755);
const fakeBin = join(dir, 'bin');
await mkdir(fakeBin);
await writeFile(
  join(fakeBin, 'systemctl'),
  `#!/bin/sh\n{ printf '%s\\037' systemctl "$@"; printf '\\036'; } >> ${calls}\n`,
);
await chmod(join(fakeBin, 'systemctl'), 0o755);
const readCalls = async () =>
  (await readFile(calls, 'utf8').catch(() => ''))
    .split('\x1e')
    .filter(Boolean)
    .map((l) => l.split('\x1f').slice(0, -1));
const clearCalls = () => writeFile(calls, '');

const configFile = await crioNodeConfig(root, keys.pub, {
  reload: sighup,
  extra: `selfUpgrade:
  mode: quadlet
  confirmMinutes: 10
  daemonReload: [${recorder}, daemon-reload]
  restart: [${recorder}, restart]
  scheduleRollback: [${recorder}, schedule]
`,
});
const config: AgentConfig = parseConfig(await readFile(configFile, 'utf8'), configFile);
const dropIn = join(root, 'etc/containers/systemd/bundle-agent.container.d/image.conf');

// agent images: the one that runs now (0.5.0, from the install, not from a bundle: never loaded here), and others
const layout = join(dir, 'agents');
const agentImage = (tag: string, version: string) =>
  writeImageLayout(layout, {
    tag,
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ 'usr/local/bin/bundle-agent': `#!/bin/sh\necho ${tag}\n` }],
        config: { Labels: { 'org.opencontainers.image.version': version } },
      },
    ],
  });
const running = await agentImage('running', '0.5.0');
const runningRef = `${REPO}@${running.digest}`;
// as after an earlier switch: the unit runs 0.5.0 through our drop-in
await mkdir(join(dropIn, '..'), { recursive: true });
await writeFile(dropIn, renderImageDropIn(runningRef));

const apps = join(dir, 'apps');
let n = 0;
/** A bundle of release VERSION with one app image and the agent image `tag` of that layout. */
async function bundleWithAgent(version: string, tag: string): Promise<string> {
  await writeImageLayout(apps, {
    tag: `app${++n}`,
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app.txt': `app ${version}` }] }],
  });
  const out = join(dir, `${version}.bundle`);
  const r = await run(BUNDLE, [
    'create',
    '--quiet',
    '--version',
    version,
    '--upgrade-from',
    '1.0.0',
    '--image',
    `oci:${apps}:app${n}=quay.io/acme/app:${version}`,
    '--agent-image',
    `oci:${layout}:${tag}`,
    '--key',
    keys.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    out,
  ]);
  if (r.code !== 0) throw new Error(r.stderr);
  return out;
}

let logText = '';
const log = createLogger(
  new Writable({
    write: (c, _e, cb) => {
      logText += c;
      cb();
    },
  }),
);
const tracker = new StatusTracker(emptyStatus('node-a'));
const agentCondition = () => tracker.current.conditions.find((c) => c.type === 'AgentUpgraded');

async function load(file: string, agentVersion: string) {
  const runtime = runtimeTarget(config, log);
  try {
    return await runLoad(file, { config, log, tracker, runtime, agentVersion });
  } finally {
    await runtime.close();
  }
}
async function settle(agentVersion: string, now?: number) {
  const runtime = runtimeTarget(config, log);
  try {
    return await settleAgentSwitch({ config, log, tracker, runtime, agentVersion }, now);
  } finally {
    await runtime.close();
  }
}
/** The names CRI-O pins: pinned_images of our crio.conf.d file. */
async function pinned(): Promise<Set<string>> {
  return new Set(await readPinsDropIn(p('etc/crio/crio.conf.d/offline-bundle-pins.conf')));
}

t.test('a bundle whose agent is the same version or older: loaded, no switch', async (t) => {
  await agentImage('same', '0.5.0');
  await agentImage('older', '0.4.9');
  for (const [version, tag] of [
    ['1.1.0', 'same'],
    ['1.2.0', 'older'],
  ] as const) {
    await clearCalls();
    const r = await load(await bundleWithAgent(version, tag), '0.5.0');
    t.equal(tracker.current.phase, 'Ready', `${version} is Ready`);
    t.ok(r.agent, 'the bundle carries an agent');
    t.strictSame(await readCalls(), [], 'no command ran');
    t.equal(
      await readFile(dropIn, 'utf8'),
      renderImageDropIn(runningRef),
      'the drop-in still names the running image',
    );
    t.equal(await readAgentSwitch(config.paths.stateDir), undefined, 'no switch recorded');
  }
  t.match(logText, /not newer than this agent \(0\.5\.0\): nothing to switch/);
});

t.test(
  'a newer agent: after Ready, the drop-in names it by digest, rollback scheduled, daemon-reload, restart; the old image stays pinned until the new agent reports',
  async (t) => {
    const next = await agentImage('next', '0.6.0');
    const nextRef = `${REPO}@${next.digest}`;
    await clearCalls();
    const r = await load(await bundleWithAgent('1.3.0', 'next'), '0.5.0');
    t.equal(tracker.current.phase, 'Ready');
    t.equal(r.agent?.digest, next.digest);
    t.equal(
      await readFile(dropIn, 'utf8'),
      renderImageDropIn(nextRef),
      'image.conf: [Container] Image=…@the new digest',
    );
    t.match(
      await readFile(dropIn, 'utf8'),
      new RegExp(`^\\[Container\\]\\nImage=${nextRef.replace(/[.]/g, '\\.')}$`, 'm'),
    );
    const c = await readCalls();
    t.strictSame(
      c.map((a) => a[0]),
      ['schedule', 'daemon-reload', 'restart'],
      'the rollback is scheduled before the restart',
    );
    t.strictSame(
      c[0]!.slice(1, 5),
      [
        `--unit=bundle-agent-rollback-${next.digest.slice(7, 19)}`,
        '--on-active=600s',
        '/bin/sh',
        '-c',
      ],
      'systemd-run gets a timer name, the delay and a shell script',
    );
    t.equal(agentCondition()?.status, 'Unknown');
    t.equal(agentCondition()?.reason, 'Restarting');
    const rec = await readAgentSwitch(config.paths.stateDir);
    t.match(rec, {
      state: 'pending',
      from: { version: '0.5.0', image: runningRef },
      to: { version: '0.6.0', image: nextRef, digest: next.digest },
    });
    t.ok(
      await exists(pendingMarker(config.paths.stateDir)),
      'the marker the rollback script tests for',
    );
    const pins = await pinned();
    t.ok(pins.has(runningRef), 'the running (old) image is pinned, though no release carried it');
    t.ok(pins.has(nextRef), 'the new image is pinned with its release');

    // the old agent starting again before the timeout (e.g. the restart has not happened yet): still under way
    t.equal((await settle('0.5.0'))?.state, 'pending');

    // the new agent starts and reports
    const done = await settle('0.6.0');
    t.equal(done?.state, 'done');
    t.equal(agentCondition()?.status, 'True');
    t.equal(agentCondition()?.reason, 'AgentUpgraded');
    t.notOk(
      await exists(pendingMarker(config.paths.stateDir)),
      'the marker is gone: the scheduled rollback does nothing',
    );
    const after = await pinned();
    t.notOk(after.has(runningRef), 'the old image is unpinned once the new agent reported');
    t.ok(after.has(nextRef), 'the new one stays pinned');
    // the rollback script, run now, finds no marker and changes nothing
    await clearCalls();
    execFileSync('/bin/sh', ['-c', c[0]!.at(-1)!], {
      env: { ...process.env, PATH: `${fakeBin}:${process.env.PATH}` },
    });
    t.strictSame(await readCalls(), [], 'a confirmed switch is not rolled back');
    t.ok(await exists(dropIn));
  },
);

t.test(
  'a newer agent that never reports: the host-side rollback script puts the previous drop-in back and restarts; the old agent then reports the rollback and does not try that image again',
  async (t) => {
    const bad = await agentImage('broken', '0.7.0');
    await clearCalls();
    const file = await bundleWithAgent('1.4.0', 'broken');
    await load(file, '0.6.0');
    const c = await readCalls();
    t.equal(c[0]![0], 'schedule');
    t.match(await readFile(dropIn, 'utf8'), bad.digest);
    const previous = (await readAgentSwitch(config.paths.stateDir))!.from.image!;
    t.match(previous, /^localhost\/offline-bundle\/bundle-agent@sha256:/);
    t.ok(
      (await pinned()).has(previous),
      'the previous image (0.6.0) is pinned while the switch is unconfirmed',
    );
    // the timer fires: the script systemd-run would run, with a stand-in systemctl
    await clearCalls();
    execFileSync('/bin/sh', ['-c', c[0]!.at(-1)!], {
      env: { ...process.env, PATH: `${fakeBin}:${process.env.PATH}` },
    });
    t.strictSame(await readCalls(), [
      ['systemctl', 'daemon-reload'],
      ['systemctl', 'restart', 'bundle-agent'],
    ]);
    t.equal(
      await readFile(dropIn, 'utf8'),
      renderImageDropIn(previous),
      'the drop-in names the previous image again',
    );
    // the old agent (0.6.0) starts again
    const back = await settle('0.6.0');
    t.equal(back?.state, 'rolledBack');
    t.equal(agentCondition()?.status, 'False');
    t.equal(agentCondition()?.reason, 'AgentUpgradeRolledBack');
    t.match(
      agentCondition()?.message,
      /bundle-agent 0\.7\.0 did not start and report within 10 minutes: back to 0\.6\.0/,
    );
    // the same bundle again: no second attempt
    await clearCalls();
    await load(file, '0.6.0').catch(() => undefined);
    t.strictSame(await readCalls(), [], 'no command ran');
    t.match(logText, /was undone before .*not trying it again/);
  },
);

t.test(
  'the old agent finds its drop-in still naming the new image after confirmMinutes: it puts the previous one back itself',
  async (t) => {
    await agentImage('stuck', '0.8.0');
    await writeFile(dropIn, renderImageDropIn(runningRef));
    await load(await bundleWithAgent('1.5.0', 'stuck'), '0.6.0');
    t.equal((await readAgentSwitch(config.paths.stateDir))?.state, 'pending');
    await clearCalls();
    // a clock 11 minutes on, not a wait
    const back = await settle('0.6.0', Date.now() + 11 * 60_000);
    t.equal(back?.state, 'rolledBack');
    t.equal(
      await readFile(dropIn, 'utf8'),
      renderImageDropIn(runningRef),
      'the drop-in names the image that ran before',
    );
    t.strictSame(
      (await readCalls()).map((a) => a[0]),
      ['daemon-reload'],
      'the unit is regenerated without it (no restart: this agent is the one to run)',
    );
  },
);

t.test('selfUpgrade.mode off: a newer agent in a bundle changes nothing', async (t) => {
  const off = parseConfig(
    (await readFile(configFile, 'utf8')).replace('mode: quadlet', 'mode: off'),
    configFile,
  );
  await agentImage('later', '0.9.0');
  const file = await bundleWithAgent('1.6.0', 'later');
  await clearCalls();
  const before = await readFile(dropIn, 'utf8').catch(() => undefined);
  const runtime = runtimeTarget(off, log);
  try {
    await runLoad(file, { config: off, log, tracker, runtime, agentVersion: '0.6.0' });
  } finally {
    await runtime.close();
  }
  t.strictSame(await readCalls(), []);
  t.equal(await readFile(dropIn, 'utf8').catch(() => undefined), before);
  t.match(logText, /selfUpgrade\.mode is off: not switching/);
});

t.test(
  "no drop-in yet (the first switch, from the MachineConfig's image): the image podman names in /run/.containerenv is the one kept pinned",
  async (t) => {
    await rm(dropIn, { force: true });
    await mkdir(join(root, 'run'), { recursive: true });
    await writeFile(
      join(root, 'run/.containerenv'),
      `engine="podman-4.9.4"\nname="bundle-agent"\nid="abc"\nimage="${runningRef}"\nimageid="def"\n`,
    );
    const first = await agentImage('first-switch', '1.0.0');
    await load(await bundleWithAgent('1.7.0', 'first-switch'), '0.6.0');
    const rec = await readAgentSwitch(config.paths.stateDir);
    t.match(rec, {
      state: 'pending',
      from: { version: '0.6.0', image: runningRef },
      to: { version: '1.0.0', digest: first.digest },
    });
    t.ok((await pinned()).has(runningRef), 'pinned while the switch is unconfirmed');
  },
);

t.test(
  "a first switch that never reports: the rollback script removes the drop-in (the unit's own image runs again)",
  async (t) => {
    const rec = (await readAgentSwitch(config.paths.stateDir))!;
    t.equal(rec.state, 'pending', 'the switch of the previous test');
    const script = rollbackScript(config, rec);
    await clearCalls();
    const said = execFileSync('/bin/sh', ['-c', script], {
      env: { ...process.env, PATH: `${fakeBin}:${process.env.PATH}` },
      encoding: 'utf8',
    });
    t.match(
      said,
      new RegExp(
        `^bundle-agent ${rec.to.version.replace(/\./g, '\\.')} did not report within \\d+ min: back to the unit's own image`,
      ),
      'one journal line says why the agent went back',
    );
    t.notOk(await exists(dropIn), 'removed');
    t.strictSame(await readCalls(), [
      ['systemctl', 'daemon-reload'],
      ['systemctl', 'restart', 'bundle-agent'],
    ]);
  },
);

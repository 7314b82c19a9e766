// Values the self-upgrade reads back from the state directory never reach a unit file as they
// are (issue 28 item 4): agent-switch.json's images are held to our repository by digest (or, for
// the unit's own image, a canonical reference) before a rollback writes one into image.conf.
import t from 'tap';
import { Writable } from 'node:stream';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  createLogger,
  parseConfig,
  pendingMarker,
  readAgentSwitch,
  rollbackScript,
  renderImageDropIn,
  settleAgentSwitch,
  isAgentImageByDigest,
  isCanonicalReference,
  type AgentConfig,
  type AgentSwitchRecord,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { tmpdir } from '../helpers/tmp.mjs';
import { nodeRoot } from './fixtures.js';

const REPO = 'localhost/offline-bundle/bundle-agent';
const dg = (c: string) => `sha256:${c.repeat(64)}`;
const ref = (c: string) => `${REPO}@${dg(c)}`;
const INJECTED = `${ref('a')}\n[Service]\nExecStartPre=/bin/sh -c 'touch /tmp/owned'`;

const runtime = {
  pin: async () => undefined,
  unpin: async () => undefined,
  pinnedRefs: async () => new Set<string>(),
} as unknown as RuntimeTarget;

async function node(t: Tap.Test) {
  const dir = await tmpdir(t, 'ob-switch-state-');
  const file = await nodeRoot(
    join(dir, 'node'),
    undefined,
    `runtime: crio\ntrust:\n  digest: sha256:${'0'.repeat(64)}\nselfUpgrade:\n  mode: quadlet\n  confirmMinutes: 10\n  daemonReload: ["true"]\n  restart: ["true"]\n  scheduleRollback: []\n`,
  );
  const config: AgentConfig = parseConfig(await readFile(file, 'utf8'), file);
  let logs = '';
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        logs += c;
        cb();
      },
    }),
  );
  await mkdir(config.paths.stateDir, { recursive: true });
  await mkdir(config.selfUpgrade.dropInDir, { recursive: true });
  const dropIn = join(config.selfUpgrade.dropInDir, 'image.conf');
  return {
    config,
    dropIn,
    logs: () => logs,
    ctx: {
      config,
      log,
      tracker: new StatusTracker(emptyStatus('node-a')),
      runtime,
      agentVersion: '0.5.0',
    },
  };
}

const overdue = (
  from: Record<string, unknown>,
  to: Record<string, unknown> = { version: '0.6.0', image: ref('b'), digest: dg('b') },
) => ({
  state: 'pending',
  written: true,
  from,
  to,
  at: new Date(Date.now() - 60 * 60_000).toISOString(),
});

const hostile: [string, unknown, RegExp][] = [
  [
    'from.image with a newline and [Service] ExecStartPre=',
    overdue({ version: '0.5.0', image: INJECTED, dropIn: true }),
    /from\.image is not localhost\/offline-bundle\/bundle-agent@sha256/,
  ],
  [
    'from.image of another repository (written back as Image=)',
    overdue({ version: '0.5.0', image: 'evil.example.com/backdoor:latest', dropIn: true }),
    /from\.image is not localhost/,
  ],
  [
    'from.image by tag, our repository',
    overdue({ version: '0.5.0', image: `${REPO}:0.5.0`, dropIn: true }),
    /from\.image is not localhost/,
  ],
  [
    "the unit's own image with a space",
    overdue({ version: '0.5.0', image: 'quay.io/a/b:1 x' }),
    /from\.image is not an image reference/,
  ],
  [
    'to.image that is not repository@to.digest',
    overdue(
      { version: '0.5.0', image: ref('a'), dropIn: true },
      { version: '0.6.0', image: ref('c'), digest: dg('b') },
    ),
    /to\.image is not/,
  ],
  [
    'to.version with a newline',
    overdue(
      { version: '0.5.0', image: ref('a'), dropIn: true },
      { version: '0.6.0\nX=1', image: ref('b'), digest: dg('b') },
    ),
    /to\.version is not an agent version/,
  ],
  [
    'from.version with a newline',
    overdue({ version: '0.5.0\n[Service]', image: ref('a'), dropIn: true }),
    /from\.version is not a version/,
  ],
];

for (const [name, rec, why] of hostile) {
  t.test(`agent-switch.json: ${name}: damaged, never written into image.conf`, async (t) => {
    const n = await node(t);
    await writeFile(n.dropIn, renderImageDropIn(ref('b')));
    await writeFile(join(n.config.paths.stateDir, 'agent-switch.json'), JSON.stringify(rec));
    await writeFile(pendingMarker(n.config.paths.stateDir), `${dg('b')}\n600\n-\n`);
    const warnings: string[] = [];
    t.equal(
      await readAgentSwitch(n.config.paths.stateDir, (w) => warnings.push(w)),
      undefined,
      'treated as absent',
    );
    t.match(warnings[0], why);
    await settleAgentSwitch(n.ctx, Date.now());
    const text = await readFile(n.dropIn, 'utf8');
    t.notMatch(
      text,
      /\[Service\]|ExecStartPre|evil|backdoor/,
      'nothing of the record in the unit file',
    );
    t.equal(text.match(/^Image=/gm)?.length, 1, 'one Image= line');
    t.ok(isAgentImageByDigest(/^Image=(.*)$/m.exec(text)![1]), 'our repository by digest');
  });
}

t.test(
  'renderImageDropIn refuses anything but our repository by digest (the sink checks too)',
  async (t) => {
    t.throws(() => renderImageDropIn(INJECTED), /refusing to write/);
    t.throws(() => renderImageDropIn('evil.example.com/backdoor:latest'), /refusing to write/);
    t.throws(() => renderImageDropIn(`${REPO}:1.0.0`), /refusing to write/);
    t.match(renderImageDropIn(ref('a')), `Image=${ref('a')}\n`);
  },
);

t.test('a valid overdue switch is still rolled back to the previous drop-in', async (t) => {
  const n = await node(t);
  await writeFile(n.dropIn, renderImageDropIn(ref('b')));
  const rec = overdue({
    version: '0.5.0',
    image: ref('a'),
    dropIn: true,
  }) as unknown as AgentSwitchRecord;
  await writeFile(join(n.config.paths.stateDir, 'agent-switch.json'), JSON.stringify(rec));
  const back = await settleAgentSwitch(n.ctx, Date.now());
  t.equal(back?.state, 'rolledBack');
  t.match(await readFile(n.dropIn, 'utf8'), `Image=${ref('a')}\n`);
});

t.test("isCanonicalReference: the pins' grammar", async (t) => {
  t.ok(isCanonicalReference('quay.io/a/b:1.0'));
  t.ok(isCanonicalReference(ref('a')));
  for (const bad of ['quay.io/a/b:1.0\n', 'a b', '', 'UPPER/x:1', `x@sha256:${'a'.repeat(63)}`])
    t.notOk(isCanonicalReference(bad), JSON.stringify(bad));
});

t.test(
  'the host-side rollback script never writes through a symlink at its old fixed temporary name',
  async (t) => {
    const n = await node(t);
    const rec = overdue({
      version: '0.5.0',
      image: ref('a'),
      dropIn: true,
    }) as unknown as AgentSwitchRecord;
    await writeFile(n.dropIn, renderImageDropIn(ref('b')));
    await writeFile(pendingMarker(n.config.paths.stateDir), `${dg('b')}\n600\n${ref('a')}\n`);
    const victim = join(n.config.paths.stateDir, '..', 'victim');
    await writeFile(victim, 'precious');
    await symlink(victim, `${n.dropIn}.rollback`);
    const bin = join(n.config.paths.stateDir, '..', 'bin');
    await mkdir(bin, { recursive: true });
    await writeFile(join(bin, 'systemctl'), '#!/bin/sh\nexit 0\n');
    await chmod(join(bin, 'systemctl'), 0o755);
    const r = spawnSync('/bin/sh', ['-c', rollbackScript(n.config, rec)], {
      env: { PATH: `${bin}:/usr/bin:/bin` },
      encoding: 'utf8',
    });
    t.equal(r.status, 0, r.stderr);
    t.equal(
      await readFile(n.dropIn, 'utf8'),
      renderImageDropIn(ref('a')),
      'the previous drop-in is back',
    );
    t.equal(await readFile(victim, 'utf8'), 'precious', "the symlink's target untouched");
  },
);

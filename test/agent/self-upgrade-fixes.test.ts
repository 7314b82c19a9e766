// Defects of the agent's switch to a newer agent found in review, each proved in-process
// against a fake runtime target (it records pins and answers ImageStatus from a set): the
// switch, confirmation, `releases forget/prune` and config. The crio stand-in runs in
// self-upgrade-crio-standin.test.ts; the boot guard script in self-upgrade-boot-guard.test.ts.
import t from 'tap';
import { Writable } from 'node:stream';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import {
  createLogger,
  dropOutdatedDropIn,
  forgetRelease,
  parseConfig,
  pendingMarker,
  pruneReleases,
  readAgentSwitch,
  recordRelease,
  renderImageDropIn,
  rollbackScript,
  settleAgentSwitch,
  switchAgentIfNewer,
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
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

interface Fake extends RuntimeTarget {
  pins: Set<string>;
  present: Set<string>;
  statusAsked: string[];
}
function fakeRuntime(present: string[] = []): Fake {
  const pins = new Set<string>();
  const have = new Set(present);
  const statusAsked: string[] = [];
  return {
    pins,
    present: have,
    statusAsked,
    mirror: async () => async () => undefined,
    preload: async () => undefined,
    pin: async (refs, released) => {
      for (const r of released) pins.delete(r);
      for (const r of refs) pins.add(r);
    },
    unpin: async (released, keep) => {
      for (const r of released) if (!keep.includes(r)) pins.delete(r);
    },
    pinnedRefs: async () => new Set(pins),
    apply: async () => undefined,
    inspector: async () => ({
      imageStatus: async (r: string) => {
        statusAsked.push(r);
        return have.has(r)
          ? ({
              id: 'sha256:x',
              repoTags: [],
              repoDigests: [r],
              size: 1,
              pinned: pins.has(r),
            } as never)
          : null;
      },
      listImages: async () => [],
    }),
    cleanup: async () => undefined,
    close: async () => undefined,
  };
}

async function node(t: Tap.Test, extra = '') {
  const dir = await tmpdir(t, 'ob-switch-fixes-');
  const root = join(dir, 'node');
  const file = await nodeRoot(
    root,
    undefined,
    `runtime: crio
trust:
  digest: sha256:${'0'.repeat(64)}
version:
  current: "1.3.0"
selfUpgrade:
  mode: quadlet
  confirmMinutes: 10
  daemonReload: ["true"]
  restart: ["true"]
  scheduleRollback: []
${extra}`,
  );
  const config: AgentConfig = parseConfig(await readFile(file, 'utf8'), file);
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
  const dropIn = join(config.selfUpgrade.dropInDir, 'image.conf');
  const stateDir = config.paths.stateDir;
  await mkdir(stateDir, { recursive: true });
  return {
    root,
    config,
    log,
    tracker,
    dropIn,
    stateDir,
    file,
    logs: () => logText,
    condition: () => tracker.current.conditions.find((c) => c.type === 'AgentUpgraded'),
    writeSwitch: async (rec: AgentSwitchRecord) => {
      await writeFile(join(stateDir, 'agent-switch.json'), JSON.stringify(rec));
      if (rec.state === 'pending') await writeFile(pendingMarker(stateDir), `${rec.to.digest}\n`);
    },
  };
}
const pending = (over: Partial<AgentSwitchRecord> = {}): AgentSwitchRecord => ({
  state: 'pending',
  from: { version: '0.5.0', image: ref('a'), dropIn: true },
  to: { version: '0.6.0', image: ref('b'), digest: dg('b') },
  at: new Date().toISOString(),
  ...over,
});

t.test(
  '1: releases forget and prune keep the running agent image and, during an unconfirmed switch, the previous one pinned',
  async (t) => {
    const n = await node(t);
    const rt = fakeRuntime();
    // 1.1.0 carried the agent that runs now (a), 1.2.0 the one switched to (b)
    await recordRelease(n.stateDir, {
      version: '1.1.0',
      arch: 'amd64',
      refs: ['quay.io/acme/app:v1', ref('a')],
      loadedAt: new Date().toISOString(),
    });
    await recordRelease(n.stateDir, {
      version: '1.2.0',
      arch: 'amd64',
      refs: ['quay.io/acme/app:v2', ref('b')],
      loadedAt: new Date().toISOString(),
    });
    await recordRelease(n.stateDir, {
      version: '1.3.0',
      arch: 'amd64',
      refs: ['quay.io/acme/app:v3'],
      loadedAt: new Date().toISOString(),
    });
    for (const r of [
      'quay.io/acme/app:v1',
      'quay.io/acme/app:v2',
      'quay.io/acme/app:v3',
      ref('a'),
      ref('b'),
    ])
      rt.pins.add(r);
    await n.writeSwitch(pending());
    const f = await forgetRelease(n.config, rt, '1.1.0');
    t.equal(f[0]!.unpinned, 1, 'only the app image of 1.1.0');
    t.ok(
      rt.pins.has(ref('a')),
      'the previous agent image stays pinned while the switch is unconfirmed',
    );
    t.notOk(rt.pins.has('quay.io/acme/app:v1'));
    await n.writeSwitch({ ...pending(), state: 'done' });
    const p = await pruneReleases(n.config, rt);
    t.strictSame(
      p.forgotten.map((x) => x.version),
      ['1.2.0'],
    );
    t.ok(rt.pins.has(ref('b')), 'the running agent image stays pinned after prune');
    t.notOk(rt.pins.has('quay.io/acme/app:v2'));
  },
);

t.test(
  '7: switchAgentIfNewer never throws (a running version semver cannot compare): no switch, AgentUpgraded=False',
  async (t) => {
    const n = await node(t);
    const rt = fakeRuntime([ref('b')]);
    const r = await switchAgentIfNewer(
      { config: n.config, log: n.log, tracker: n.tracker, runtime: rt, agentVersion: 'dev-build' },
      { version: '0.6.0', repository: REPO, digest: dg('b') },
    );
    t.equal(r, 'none');
    t.equal(n.condition()?.status, 'False');
    t.match(n.condition()?.message, /not switching to bundle-agent 0\.6\.0: .*dev-build/);
    t.notOk(await exists(n.dropIn), 'no drop-in');
  },
);

t.test(
  '3: one agent version check, the same as semver.valid(v) === v; confirmation compares as semver does',
  async (t) => {
    const { isAgentVersion } = await import('@offline-bundle/format');
    const semver = createRequire(new URL('../../agent/package.json', import.meta.url))(
      'semver',
    ) as typeof import('semver');
    for (const v of [
      '0.9.0',
      '1.0.0-rc.1',
      '1.0.0-0.a-b.3',
      '10.20.30',
      'v0.9.0',
      '=1.0.0',
      ' 1.0.0',
      '1.0',
      'latest',
      '01.0.0',
      '1.0.0-01',
      '1.0.0+b1',
      '1.0.0-rc.1+b',
      `${'9'.repeat(17)}.0.0`,
      '1.0.0-',
      '1.0.0-a..b',
      '1.2.3.4',
    ]) {
      t.equal(
        isAgentVersion(v),
        semver.valid(v) === v,
        `${JSON.stringify(v)}: ${semver.valid(v) === v}`,
      );
    }
    const n = await node(t);
    const rt = fakeRuntime();
    await n.writeSwitch(pending({ to: { version: '0.6.0', image: ref('b'), digest: dg('b') } }));
    // an agent built with +build metadata is the version it switched to, as semver says
    const r = await settleAgentSwitch({
      config: n.config,
      log: n.log,
      tracker: n.tracker,
      runtime: rt,
      agentVersion: '0.6.0+build.7',
    });
    t.equal(r?.state, 'done');
  },
);

t.test('3: a bundle agent version that is not canonical is not switched to', async (t) => {
  const n = await node(t);
  const r = await switchAgentIfNewer(
    {
      config: n.config,
      log: n.log,
      tracker: n.tracker,
      runtime: fakeRuntime([ref('b')]),
      agentVersion: '0.5.0',
    },
    { version: 'v0.6.0', repository: REPO, digest: dg('b') },
  );
  t.equal(r, 'none');
  t.equal(n.condition()?.reason, 'BadAgentVersion');
});

t.test('5: no new switch while one is pending, whatever its digest', async (t) => {
  const n = await node(t);
  await mkdir(n.config.selfUpgrade.dropInDir, { recursive: true });
  await writeFile(n.dropIn, renderImageDropIn(ref('b')));
  await n.writeSwitch(pending());
  const rt = fakeRuntime([ref('a'), ref('b'), ref('c')]);
  const r = await switchAgentIfNewer(
    { config: n.config, log: n.log, tracker: n.tracker, runtime: rt, agentVersion: '0.5.0' },
    { version: '0.7.0', repository: REPO, digest: dg('c') },
  );
  t.equal(r, 'none');
  t.equal(
    await readFile(n.dropIn, 'utf8'),
    renderImageDropIn(ref('b')),
    'the drop-in of the pending switch stays',
  );
  t.match(
    await readAgentSwitch(n.stateDir),
    { state: 'pending', to: { digest: dg('b') } },
    'the pending record stays',
  );
  t.equal(n.condition()?.reason, 'SwitchPending');
  t.match(
    n.logs(),
    /a switch to bundle-agent 0\.6\.0 .* is under way, unconfirmed: not starting another to 0\.7\.0/,
  );
});

t.test(
  '4: never a switch to an image the runtime does not hold (preload.method none, or not in its store)',
  async (t) => {
    const agent = { version: '0.6.0', repository: REPO, digest: dg('b') };
    const none = await node(t, 'preload:\n  method: none\n');
    const r1 = await switchAgentIfNewer(
      {
        config: none.config,
        log: none.log,
        tracker: none.tracker,
        runtime: fakeRuntime([ref('b')]),
        agentVersion: '0.5.0',
      },
      agent,
    );
    t.equal(r1, 'none');
    t.equal(none.condition()?.status, 'False');
    t.equal(none.condition()?.reason, 'AgentImageNotInRuntime');
    t.match(none.condition()?.message, /preload\.method is none/);
    t.notOk(await exists(none.dropIn), 'no drop-in');
    t.equal(await readAgentSwitch(none.stateDir), undefined, 'no switch recorded');

    const n = await node(t);
    const rt = fakeRuntime([]);
    const r2 = await switchAgentIfNewer(
      { config: n.config, log: n.log, tracker: n.tracker, runtime: rt, agentVersion: '0.5.0' },
      agent,
    );
    t.equal(r2, 'none');
    t.strictSame(rt.statusAsked, [ref('b')], 'asked ImageStatus for repo@digest');
    t.match(
      n.condition()?.message,
      /the runtime does not hold localhost\/offline-bundle\/bundle-agent@sha256:b{64}/,
    );
    t.notOk(await exists(n.dropIn), 'no drop-in');
    t.equal(await readAgentSwitch(n.stateDir), undefined, 'no switch recorded');
  },
);

t.test(
  '8: a pending record whose drop-in was never written is forgotten, not a rollback: the same digest is switched to next time',
  async (t) => {
    const n = await node(t);
    await mkdir(n.config.selfUpgrade.dropInDir, { recursive: true });
    await writeFile(n.dropIn, renderImageDropIn(ref('a')));
    await n.writeSwitch(pending());
    const rt = fakeRuntime([ref('a'), ref('b')]);
    const ctx = {
      config: n.config,
      log: n.log,
      tracker: n.tracker,
      runtime: rt,
      agentVersion: '0.5.0',
    };
    t.equal(await settleAgentSwitch(ctx, Date.now() + 60 * 60_000), undefined);
    t.equal(n.condition()?.reason, 'AgentSwitchInterrupted');
    t.notMatch(n.logs(), /did not start and report/);
    t.equal(
      await switchAgentIfNewer(ctx, { version: '0.6.0', repository: REPO, digest: dg('b') }),
      'switching',
      'tried again',
    );
    t.match(await readAgentSwitch(n.stateDir), { state: 'pending', written: true });
  },
);

t.test(
  '6: no switch when the running image cannot be told (no drop-in, no /run/.containerenv image=): nothing to roll back to',
  async (t) => {
    const n = await node(t);
    const r = await switchAgentIfNewer(
      {
        config: n.config,
        log: n.log,
        tracker: n.tracker,
        runtime: fakeRuntime([ref('b')]),
        agentVersion: '0.5.0',
      },
      { version: '0.6.0', repository: REPO, digest: dg('b') },
    );
    t.equal(r, 'none');
    t.equal(n.condition()?.reason, 'RunningImageUnknown');
    t.match(n.condition()?.message, /cannot tell which image this agent runs/);
    t.notOk(await exists(n.dropIn));
    t.equal(await readAgentSwitch(n.stateDir), undefined);
  },
);

t.test(
  "6: a drop-in naming an older agent than the unit's own image (a newer agent by MachineConfig) is removed at the start",
  async (t) => {
    const n = await node(t);
    const ctx = {
      config: n.config,
      log: n.log,
      tracker: n.tracker,
      runtime: fakeRuntime(),
      agentVersion: '0.5.0',
    };
    await mkdir(n.config.selfUpgrade.dropInDir, { recursive: true });
    await writeFile(n.dropIn, renderImageDropIn(ref('a')));
    const unitFile = n.config.selfUpgrade.dropInDir.slice(0, -2);
    await writeFile(unitFile, '[Container]\nImage=localhost/offline-bundle/bundle-agent:0.4.0\n');
    t.equal(await dropOutdatedDropIn(ctx), false, "the unit's image is older: the drop-in stays");
    t.ok(await exists(n.dropIn));
    await writeFile(
      unitFile,
      '[Container]\nImage=mirror.example.com/offline-bundle/bundle-agent@sha256:' +
        'c'.repeat(64) +
        '\n',
    );
    t.equal(await dropOutdatedDropIn(ctx), false, 'no version to tell by: the drop-in stays');
    await writeFile(
      unitFile,
      '[Container]\nImage=mirror.example.com/offline-bundle/bundle-agent:0.7.0\n',
    );
    await n.writeSwitch(pending());
    t.equal(await dropOutdatedDropIn(ctx), false, 'not while a switch is pending');
    await n.writeSwitch({ ...pending(), state: 'done' });
    t.equal(await dropOutdatedDropIn(ctx), true);
    t.notOk(await exists(n.dropIn), "removed: the unit's 0.7.0 runs");
    t.equal(n.condition()?.reason, 'UnitImageNewer');
  },
);

t.test('9: selfUpgrade.confirmMinutes 0 is refused with one line', async (t) => {
  const n = await node(t);
  const text = (await readFile(n.file, 'utf8')).replace('confirmMinutes: 10', 'confirmMinutes: 0');
  t.throws(
    () => parseConfig(text, n.file),
    /selfUpgrade\.confirmMinutes: must be a whole number of at least 1$/,
  );
  try {
    parseConfig(text, n.file);
  } catch (err) {
    t.notMatch((err as Error).message, /\n/, 'one line');
  }
});

t.test('9: a switch record of the wrong shape is treated as absent, and said so', async (t) => {
  const n = await node(t);
  const ctx = {
    config: n.config,
    log: n.log,
    tracker: n.tracker,
    runtime: fakeRuntime(),
    agentVersion: '0.6.0',
  };
  const bad: [string, unknown][] = [
    [
      'to.digest',
      { ...pending(), to: { version: '0.6.0', image: ref('b'), digest: 'sha256:../x' } },
    ],
    ['at', { ...pending(), at: 'yesterday' }],
    ['from.version', { ...pending(), from: { version: 5 } }],
    ['state', { ...pending(), state: 'weird' }],
    ['to.version', { ...pending(), to: { version: ['0.6.0'], image: ref('b'), digest: dg('b') } }],
    ['confirmSeconds', { ...pending(), confirmSeconds: -1 }],
  ];
  for (const [what, rec] of bad) {
    await writeFile(join(n.stateDir, 'agent-switch.json'), JSON.stringify(rec));
    const warnings: string[] = [];
    t.equal(
      await readAgentSwitch(n.stateDir, (w) => warnings.push(w)),
      undefined,
      `${what}: absent`,
    );
    t.match(
      warnings[0],
      new RegExp(`agent-switch\\.json is damaged \\(${what.replace('.', '\\.')}`),
      `${what}: said why`,
    );
    t.equal(await settleAgentSwitch(ctx), undefined, `${what}: nothing to settle, no exception`);
  }
  t.match(n.logs(), /agent-switch\.json is damaged/);
});

t.test(
  '9: the rollback script syncs its temporary file (a new one, from mktemp) before the rename',
  async (t) => {
    const n = await node(t);
    const script = rollbackScript(n.config, pending());
    t.match(
      script,
      /tmp=\$\(mktemp '[^']+\/\.image\.conf\.XXXXXX'\) && printf '%s' [\s\S]* > "\$tmp" && sync "\$tmp" && mv -f "\$tmp" /,
    );
  },
);

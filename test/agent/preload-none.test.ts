// preload.method none: the bundle is verified and staged but no image is pulled, and every
// output (console, journal, conditions) says so instead of "Done ... loaded". CRI-O mode with a
// reload command that does nothing: no runtime is asked anything (the pins drop-in is only written).
import t from 'tap';
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { tmpdir } from '../helpers/tmp.mjs';
import { parseConfig, showLoadedBefore } from '@offline-bundle/agent';
import { emptyStatus, StatusTracker } from '@offline-bundle/status';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';

t.test(
  'preload.method none ends Ready with NotPreloaded, and the technician reads that nothing was loaded',
  async (t) => {
    const dir = await tmpdir(t, 'ob-agent-none-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const config = await nodeRoot(
      root,
      keys.pub,
      `runtime: crio
version:
  current: "1.0.0"
space:
  reserveBytes: 0
preload:
  method: none
reload:
  command: ["true"]
`,
    );
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: [{ name: 'quay.io/acme/app:v1', files: { 'a.txt': 'a' } }],
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'u.bundle'),
    });
    const r = await run(AGENT, ['load', file, '--config', config]);
    t.equal(r.code, 0, r.stderr.slice(-500));
    const s = JSON.parse(await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8'));
    const cond = (type: string) => s.conditions.find((c: any) => c.type === type);
    t.equal(s.phase, 'Ready');
    t.equal(
      cond('Ready')?.reason,
      'NotPreloaded',
      'the Ready condition says the images were not loaded',
    );
    t.match(cond('Ready')?.message, /NOT loaded \(preload\.method is none\)/);
    t.equal(cond('Preloaded')?.status, 'False');
    t.equal(
      s.message,
      "Checked: update 1.1.0 is valid, but it was NOT loaded on this node (loading is turned off in the node's settings). You may remove the USB stick.",
    );
    t.notMatch(s.message, /^Done/, 'never "Done ... loaded"');
    t.match(
      await readFile(join(root, 'run/issue.d/bundle-agent.issue'), 'utf8'),
      /^Update: Checked: .*NOT loaded/,
      'the console says the same',
    );
    // the journal and the other conditions agree with the console (issue #40: the journal said "is loaded on this node")
    const ready = r.stderr.split('\n').find((l) => /event=ready/.test(l)) ?? '';
    t.match(
      ready,
      /update 1\.1\.0 verified, but NOT loaded on this node \(preload\.method is none\): no image was pulled into the runtime; the USB stick may be removed/,
      `the journal's last word: ${ready}`,
    );
    t.notMatch(r.stderr, /is loaded on this node/, 'the journal never calls it loaded');
    t.equal(
      cond('Preloaded')?.message,
      'preload.method is none: no image was pulled into the runtime',
    );
    t.match(
      cond('Pinned'),
      { status: 'False', reason: 'PreloadDisabled' },
      'the pin list is written, but nothing of 1.1.0 is in the runtime to keep',
    );
    t.match(
      cond('Pinned')?.message,
      /written to the pin list, but no image of 1\.1\.0 was pulled \(preload\.method is none\)/,
    );
    t.notMatch(
      cond('Pinned')?.message,
      /does not report pins/,
      "not blamed on the runtime's version",
    );
  },
);

t.test(
  'a bundle checked before (preload.method none), seen again after a failure: the line says NOT loaded, not Done',
  async (t) => {
    const config = parseConfig(
      'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\npreload:\n  method: none\n',
    );
    const tracker = new StatusTracker(emptyStatus('node-a'));
    tracker.failed('MediaRemoved', 'the stick went');
    showLoadedBefore(
      { config, tracker },
      {
        file: '/media/usb/u.bundle',
        media: 'USB stick S (/media/usb)',
        version: '1.1.0',
        arch: 'amd64',
      },
    );
    const s = tracker.current;
    t.equal(s.phase, 'Ready');
    t.notOk(
      s.conditions.some((c) => c.type === 'Failed'),
      'the failure is gone',
    );
    t.match(
      s.conditions.find((c) => c.type === 'Ready'),
      { status: 'True', reason: 'NotPreloaded' },
    );
    t.equal(
      s.message,
      "Checked: update 1.1.0 is valid, but it was NOT loaded on this node (loading is turned off in the node's settings). You may remove the USB stick.",
    );
  },
);

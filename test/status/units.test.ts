// One unit system for people across both CLIs: decimal, as disks and sticks are labelled.
import t from 'tap';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { emptyStatus, technicianLine, writeStatusFile } from '@offline-bundle/status';
import { fitToWidth, formatBytes, timeLeft } from '@offline-bundle/cli';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT } from '../agent/fixtures.js';
import { spawnSync } from 'node:child_process';

t.test('decimal units: 1 GB is 10^9 bytes', async (t) => {
  t.equal(formatBytes(0), '0 B');
  t.equal(formatBytes(999), '999 B');
  t.equal(formatBytes(1000), '1.0 KB');
  t.equal(formatBytes(18.4e9), '18.4 GB', "the number on a stick's label");
  t.equal(formatBytes(1024 ** 3), '1.1 GB', 'a GiB is not a GB');
  t.equal(formatBytes(5e15), '5000.0 TB', 'the largest unit keeps counting');
  t.notMatch(formatBytes(3 * 1024 ** 2), /iB/, 'never a binary unit');
});

t.test(
  'time left: one wording, in the unit that fits; seconds are never promised as minutes',
  async (t) => {
    t.equal(timeLeft(5), 'about 5 s left');
    t.equal(timeLeft(0.2), 'about 1 s left');
    t.equal(timeLeft(42), 'about 40 s left', 'to 5 s above 10 s');
    t.equal(timeLeft(75), 'about 1 min left');
    t.equal(timeLeft(213), 'about 4 min left');
    t.equal(timeLeft(3 * 3600 + 20 * 60), 'about 3 h 20 min left');
    t.equal(timeLeft(7200), 'about 2 h left');
  },
);

t.test('the technician\'s sentence for a 10 MB copy says seconds, not "2 min"', async (t) => {
  const s = {
    phase: 'Staging',
    progress: { bytesDone: 4e6, bytesTotal: 10e6, imagesDone: 0, imagesTotal: 1, etaSeconds: 6 },
    conditions: [],
  } as unknown as Parameters<typeof technicianLine>[0];
  t.equal(
    technicianLine(s),
    'Copying 4.0 MB of 10.0 MB, about 6 s left. Do not remove the USB stick.',
  );
});

const LONG =
  'The bundle agent is not running. It stopped while loading the update 4.14.39, which did not finish. Ask the administrator to start it (systemctl start bundle-agent), then plug the USB stick in again.';

t.test(
  'a status sentence fits a narrow terminal: broken between sentences, else words, never inside a word',
  async (t) => {
    for (const text of [
      LONG,
      'Copying 241.2 MB of 1.2 GB, about 2 min left. Do not remove the USB stick.',
    ]) {
      for (let width = 20; width <= 120; width++) {
        const lines = fitToWidth(text, width).split('\n');
        for (const l of lines) if ([...l].length > width) t.fail(`width ${width}: ${l}`);
        t.equal(
          lines.map((l) => l.trim()).join(' '),
          text,
          `width ${width}: every word kept, none split`,
        );
      }
    }
    t.equal(
      fitToWidth('Copying 241.2 MB of 1.2 GB, about 2 min left. Do not remove the USB stick.', 60),
      'Copying 241.2 MB of 1.2 GB, about 2 min left.\n  Do not remove the USB stick.',
    );
    t.equal(fitToWidth(LONG, undefined), LONG, 'not a terminal: one line');
  },
);

t.test('bundle-agent status on a 60-column terminal: no line wider than 60', async (t) => {
  const dir = await tmpdir(t, 'ob-narrow-');
  const config = join(dir, 'config.yaml');
  await writeFile(config, `root: ${dir}\ntrust:\n  keys: [/k.pub]\n`, { mode: 0o600 });
  const s = emptyStatus('node-1');
  await writeStatusFile(join(dir, 'var/lib/bundle-agent/status.json'), {
    ...s,
    phase: 'Staging',
    bundle: { version: '4.14.39' },
    writer: { pid: 4_000_000, heartbeatAt: new Date().toISOString(), heartbeatSeconds: 30 },
  } as unknown as Parameters<typeof writeStatusFile>[1]);
  // script(1) gives the agent a real pty; stty sets its width
  const r = spawnSync(
    'script',
    [
      '-qfec',
      `stty cols 60 rows 24; ${process.execPath} ${AGENT} status --config ${config}`,
      '/dev/null',
    ],
    { input: '', encoding: 'utf8' },
  );
  const lines = r.stdout.replace(/\r/g, '').trimEnd().split('\n');
  t.ok(lines.length > 1, r.stdout);
  for (const l of lines) t.ok([...l].length <= 60, `fits: ${l}`);
  t.match(
    lines.map((l) => l.trim()).join(' '),
    /^The bundle agent is not running\. It stopped while loading the update 4\.14\.39/,
  );
});

t.test('all copied: no time left is promised', async (t) => {
  const s = {
    phase: 'Staging',
    progress: { bytesDone: 10e6, bytesTotal: 10e6, imagesDone: 0, imagesTotal: 1, etaSeconds: 0 },
    conditions: [],
  } as unknown as Parameters<typeof technicianLine>[0];
  t.equal(technicianLine(s), 'Copying 10.0 MB of 10.0 MB. Do not remove the USB stick.');
});

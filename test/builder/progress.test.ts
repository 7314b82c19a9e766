// Progress that fits: the line for a terminal is never wider than the terminal (checked on a
// real pty made by script(1) at 70 columns, and for the formatter at every width from 8 to 160),
// the time left appears only once the rate is measured over a few seconds, a finished phase says
// "finishing" instead of sitting at 100 %, nothing is redrawn when nothing changed, and without a
// terminal the output is plain lines. verify and extract report progress too, also with --json.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { Progress, formatProgressLine } from '@offline-bundle/builder';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { BUNDLE_BIN, bundle, keygen, q, run } from './lib.js';

/** A stream that records what is written, as a terminal of `columns` or a pipe. */
function sink(tty: boolean, columns = 80) {
  const writes: string[] = [];
  const stream = {
    isTTY: tty,
    columns,
    write: (s: string) => {
      writes.push(s);
      return true;
    },
  } as unknown as NodeJS.WriteStream;
  return { stream, writes };
}

t.test('the formatter fits every width, keeping bytes and percentage longest', async (t) => {
  const state = {
    phase: 'writing /var/tmp/factory/builds/openshift-4.14.38-x86_64-with-extras.bundle',
    done: 7_123_456_789,
    total: 18_400_000_000,
    items: '112/190 images',
    rate: 52_300_000,
    eta: 213,
  };
  for (let width = 8; width <= 160; width++) {
    const line = formatProgressLine(state, width);
    if ([...line].length > width) t.fail(`width ${width}: ${line.length} characters: ${line}`);
  }
  t.match(
    formatProgressLine(state, 160),
    /^writing \/var\/tmp.*: 7\.1 GB \/ 18\.4 GB \(38%\), 112\/190 images, 52\.3 MB\/s, about 4 min left$/,
  );
  t.match(
    formatProgressLine(state, 60),
    /7\.1 GB \/ 18\.4 GB \(38%\)/,
    'bytes and percentage survive at 60 columns',
  );
  t.match(
    formatProgressLine(state, 60),
    /, about 4 min left$/,
    'the time left survives at 60 columns: the rate and item count give way first',
  );
  t.match(
    formatProgressLine(state, 80),
    /, 112\/190 images, about 4 min left$/,
    'at 80 the rate alone gives way',
  );
  t.match(
    formatProgressLine({ ...state, eta: 5 }, 60),
    /, about 5 s left$/,
    'seconds are not promised as minutes',
  );
  t.match(
    formatProgressLine({ ...state, finishing: 'finishing: syncing and renaming' }, 200),
    /\(38%\), finishing: syncing and renaming$/,
  );
});

t.test(
  'time left only once the rate is stable; no redraw when nothing changed; finishing',
  async (t) => {
    let now = 0;
    const { stream, writes } = sink(true, 100);
    const p = new Progress({ stream, now: () => now });
    p.start('fetching', 100_000_000);
    const at = (ms: number, done: number) => {
      now = ms;
      p.update(done);
      return writes[writes.length - 1]!;
    };
    t.notMatch(at(500, 1_000_000), /left/, 'after 0.5 s: no time left');
    t.notMatch(at(1500, 9_000_000), /left/, 'after 1.5 s: a rate, still no time left');
    t.match(at(1500, 9_000_000), /MB\/s/);
    t.match(at(3500, 30_000_000), /left/, 'after 3.5 s of steady transfer: time left');
    const count = writes.length;
    at(3600, 30_000_000);
    at(3700, 30_000_000);
    t.equal(writes.length, count, 'the same line is not drawn again');
    at(5000, 100_000_000);
    const done = writes.length;
    at(5200, 100_000_000);
    t.equal(writes.length, done, 'at 100 %, no redraws');
    p.phaseNote('finishing: syncing and renaming');
    t.match(writes[writes.length - 1], /\(100%\), finishing: syncing and renaming$/);
  },
);

t.test('without a terminal: plain lines, no control sequences', async (t) => {
  let now = 0;
  const { stream, writes } = sink(false);
  const p = new Progress({ stream, now: () => now, logEverySeconds: 5 });
  p.start('fetching', 1000);
  for (let i = 1; i <= 20; i++) {
    now = i * 1000;
    p.update(i * 50);
  }
  p.finish('done');
  t.equal(writes.length, 1 + 4 + 1, 'the start line, one line per 5 s, the end');
  t.notMatch(writes.join(''), /\r|\x1b/);
});

t.test(
  'on a real pty of 70 columns, every redraw of create, verify and extract fits',
  async (t) => {
    const reg = await startRegistry();
    t.teardown(() => reg.stop());
    const work = await tmpdir(t, 'ob-progress-');
    const keys = await keygen(work);
    const img = await pushImage(
      {
        tag: 'v1',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [{ 'data/r.bin': randomBytes(16 * 1000 * 1000) }],
          },
        ],
      },
      `${reg.host}/progress/app:v1`,
    );
    // a long output path: the phase text alone is wider than the terminal
    const dir = path.join(
      work,
      'a-directory-name-long-enough-to-push-the-progress-line-past-seventy-columns',
    );
    await mkdir(dir);
    const out = path.join(dir, 'app.bundle');
    const node = `${q(process.execPath)} ${q(BUNDLE_BIN)}`;
    const steps = [
      `${node} create --tls-verify=false --key ${q(keys.key)} --version 1 --image ${img.ref} -o ${q(out)} --cache ${q(path.join(work, 'cache'))}`,
      `${node} verify ${q(out)} --key ${q(keys.pub)}`,
      `${node} extract ${q(out)} ${q(path.join(work, 'x'))} --key ${q(keys.pub)} --json`,
    ];
    for (const step of steps) {
      // script(1) gives the command a pty; stty sets its width as a resized terminal would
      const r = await run('script', ['-qfec', `stty cols 70 rows 24; ${step}`, '/dev/null']);
      t.equal(r.code, 0, r.stdout);
      // a redrawn line is one that is cleared again (ends at \r); permanent log lines end with a newline (\r\n on a pty) and may wrap
      const redraws = r.stdout
        .split('\r\x1b[K')
        .slice(1)
        .filter((s) => s && !/^[^\r\n]*\r?\n/.test(s))
        .map((s) => s.split(/[\r\n]/)[0]!);
      t.ok(redraws.length > 0, `${step.split(' ')[2]}: redrawn progress lines on the pty`);
      const wide = redraws.filter((l) => [...l].length > 69);
      t.same(wide, [], `${step.split(' ')[2]}: no line wider than 69 columns`);
    }
    const verify = await bundle(['verify', out, '--key', keys.pub, '--json']);
    t.match(verify.stderr, /^verifying .*app\.bundle: /m, 'verify --json: progress on stderr');
    t.same(
      Object.keys(JSON.parse(verify.stdout)).includes('valid'),
      true,
      'and only JSON on stdout',
    );
  },
);

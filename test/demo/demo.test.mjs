// The README's first command runs `pnpm demo` (scripts/demo.mjs): the whole product on one
// machine. Run it here so that command cannot break unnoticed (it did once: a CLI's exit code
// changed under it), and hold the README's sample of the technician's lines to this real run:
// the same sequence of lines and the same image counts (it once said 7 images; the demo has 5).
import t from 'tap';
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const TECHNICIAN = /^(Checking the update|Copying |Loading images: |Finishing up|Done: |Failed: )/;

/**
 * A line's shape: sizes and times left (which vary from run to run) as placeholders; image
 * counts kept, but a count between none and all as N (how many are done when the line is
 * printed depends on timing).
 */
export function shape(line) {
  return line
    .replace(/\d+(\.\d+)? (B|KB|MB|GB|TB)\b/g, 'SIZE')
    .replace(/, (about [^,.]* left|less than [^,.]* left)/g, ', TIME LEFT')
    .replace(/(\d+) of (\d+) done/g, (m, n, total) => (n === total ? m : `N of ${total} done`));
}

/**
 * The lines every run prints, in order: progress lines whose number depends on timing (a
 * time left, any count short of the total: the first report may come after some pulls ended)
 * are left out, then repeats are merged.
 */
export function milestones(lines) {
  const shapes = lines
    .filter((l) => TECHNICIAN.test(l))
    .map(shape)
    .filter((s) => !/TIME LEFT|N of \d+ done/.test(s));
  return shapes.filter((s, i) => s !== shapes[i - 1]);
}

const counts = (lines) => [
  ...new Set(
    lines
      .filter((l) => TECHNICIAN.test(l))
      .flatMap((l) => [...l.matchAll(/ of (\d+) done/g)].map((m) => Number(m[1]))),
  ),
];

async function readmeSample() {
  const readme = await readFile(path.join(ROOT, 'README.md'), 'utf8');
  const m =
    /The technician's lines change as it goes[^\n]*\n(?:[^\n`]*\n)?\n```\n([\s\S]*?)```/.exec(
      readme,
    );
  if (!m)
    throw new Error(
      'README.md: the demo\'s sample block after "The technician\'s lines change as it goes:" is gone',
    );
  return m[1].trimEnd().split('\n');
}

t.test("the README's sample is shaped as the demo's real lines are", async (t) => {
  const sample = await readmeSample();
  t.ok(
    sample.every((l) => TECHNICIAN.test(l)),
    'the sample holds technician lines only',
  );
  t.same(
    milestones([
      'Copying 0 B of 50.4 MB. Do not remove the USB stick.',
      'Loading images: 0 of 5 done. You may remove the USB stick.',
      'Copying 1.0 MB of 50.4 MB, about 5 s left. Do not remove the USB stick.',
      'Loading images: 2 of 5 done. You may remove the USB stick.',
      'Loading images: 5 of 5 done. You may remove the USB stick.',
    ]),
    [
      'Copying SIZE of SIZE. Do not remove the USB stick.',
      'Loading images: 5 of 5 done. You may remove the USB stick.',
    ],
    'sizes and timing-dependent lines (a first count of 0 too) set aside, counts kept',
  );
});

t.test(
  'pnpm demo: a bundle from generated images, loaded through the agent into containerd, every image pinned; the README shows its lines',
  { skip: process.getuid?.() !== 0 && 'needs root (loop mount, containerd)' },
  async (t) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'scripts/demo.mjs')], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise((r) => child.on('close', r));
    t.equal(code, 0, `exit 0: ${out.slice(-2000)}`);
    t.match(
      out,
      /Done: update 4\.14\.39 is loaded on this node\. You may remove the USB stick\./,
      "the technician's last line",
    );
    const pinned = out.split('\n').filter((l) => /io\.cri-containerd\.pinned=pinned/.test(l));
    t.equal(pinned.length, 5, 'containerd holds the five images, pinned');
    t.match(out, /== demo complete/);

    const lines = out.split('\n');
    const sample = await readmeSample();
    t.same(
      milestones(sample),
      milestones(lines),
      'README: the same lines in the same order as the real run (sizes, times left and intermediate counts aside)',
    );
    t.same(counts(sample), counts(lines), 'README: the same image counts as the real run');
  },
);

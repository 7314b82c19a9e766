// What a killed `bundle create` leaves beside -o (SIGINT, SIGTERM and SIGHUP: interrupt.test.ts):
// a temp file of a run killed outright (SIGKILL) is
// removed by the next run for the same -o once its process is gone; with --force on a stick
// that holds one bundle, NO_SPACE says the old file is replaced only at the end.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { smallFs } from '../agent/fixtures.js';
import { bundle, errorCode, keygen, listDir } from './lib.js';

const work = await tmpdir(t, 'ob-leftovers-');
const keys = await keygen(work);
const layout = path.join(work, 'src');
await writeImageLayout(layout, {
  tag: 'big',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: randomBytes(64 << 20) }] }],
});
const cache = path.join(work, 'cache');
const args = (out: string, ...more: string[]) => [
  'create',
  '--version',
  '1.0',
  '--image',
  `oci:${layout}:big=quay.io/acme/big:v1`,
  '--key',
  keys.key,
  '--cache',
  cache,
  '-o',
  out,
  ...more,
];

t.test(
  "a killed run's temp files go with the next run for the same -o; a live one's stay",
  async (t) => {
    const dir = path.join(work, 'stale');
    await mkdir(dir);
    const dead = spawnSync('true').pid!;
    const live = process.pid;
    const files = [
      `x.bundle.${dead}.tmp`,
      `x.bundle.sha256.${dead}.tmp`,
      `x.bundle.${live}.tmp`,
      `other.bundle.${dead}.tmp`,
    ];
    for (const f of files) await writeFile(path.join(dir, f), 'x'.repeat(1000));
    const r = await bundle([...args(path.join(dir, 'x.bundle')), '--quiet']);
    t.equal(r.code, 0, r.stderr);
    t.same(
      await listDir(dir),
      [`other.bundle.${dead}.tmp`, `x.bundle`, `x.bundle.${live}.tmp`, 'x.bundle.sha256'].sort(),
    );
  },
);

t.test(
  '--force on a stick that holds one bundle: NO_SPACE says to remove the old file first',
  async (t) => {
    const ref = path.join(work, 'ref.bundle');
    const first = await bundle([...args(ref), '--quiet']);
    t.equal(first.code, 0, first.stderr);
    const size = (await stat(ref)).size;
    const stick = path.join(work, 'stick');
    if (!smallFs(stick, Math.ceil((size * 1.5) / 1024), t))
      return t.skip('cannot mount a tmpfs here');
    const out = path.join(stick, 'x.bundle');
    const once = await bundle([...args(out), '--quiet']);
    t.equal(once.code, 0, once.stderr);
    const again = await bundle([...args(out), '--quiet', '--force']);
    t.equal(again.code, 1);
    t.equal(errorCode(again.stderr), 'NO_SPACE', again.stderr);
    t.match(
      again.stderr,
      new RegExp(
        `the existing ${out} \\([\\d.]+ MB\\) is replaced only at the end, once the new bundle is complete, so remove it first`,
      ),
    );
    t.equal(again.stderr.trimEnd().split('\n').length, 1, 'one line');
  },
);

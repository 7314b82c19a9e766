// The benchmark itself must keep working: its release shape, and a tiny end-to-end run
// (build, size, stage, random rows against their peers). No figure is asserted: speed is
// the benchmark's business, not the suite's.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { SHAPES, releaseShape } from '../../bench/lib/shape.mjs';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');

t.test(
  'the release shape shares base layers the way a payload does and adds up to its size',
  async (t) => {
    for (const [count, shape] of Object.entries(SHAPES)) {
      const s = releaseShape(shape, 1);
      t.equal(s.images.length, Number(count), `${count} images`);
      const usesBase = s.images.filter((im) =>
        im.layers.some((l) => 'shared' in l && l.shared.startsWith('base-')),
      ).length;
      t.equal(usesBase, s.images.length, 'every image starts from a shared base layer');
      const runtime = s.images.filter((im) =>
        im.layers.some((l) => 'shared' in l && l.shared === 'runtime'),
      ).length;
      t.ok(
        runtime > s.images.length / 2 && runtime < s.images.length,
        `most images, not all, share the runtime layer (${runtime})`,
      );
      t.ok(
        Math.abs(s.bytes - shape.bytes) / shape.bytes < 0.01,
        `${s.bytes} bytes of layers, within 1% of ${shape.bytes}`,
      );
      t.ok(
        s.images.every((im) => im.layers.every((l) => !('own' in l) || l.own <= 128 * 2 ** 20)),
        'no layer over 128 MiB',
      );
      t.same(releaseShape(shape, 0.5), releaseShape(shape, 0.5), 'the same shape on every run');
    }
  },
);

t.test(
  'a tiny run measures build, size, stage and random access against their peers',
  { timeout: 60_000 },
  async (t) => {
    const dir = await tmpdir(t, 'ob-bench-smoke-');
    const out = path.join(dir, 'results.json');
    const env = {
      ...process.env,
      BENCH_SHAPE: '8',
      BENCH_SCALE: '0.02',
      BENCH_RUNS: '1',
      BENCH_RSS_X: '0',
      BENCH_ONLY: 'build,stage,random',
      BENCH_OUT: out,
      BENCH_APP: 'dev',
    };
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [path.join(ROOT, 'bench/run.mjs')],
      { env, maxBuffer: 1 << 20 },
    );
    t.match(stdout, /\| step \| ours \| peer \| ratio/, 'prints the table');
    const { meta, rows } = JSON.parse(await readFile(out, 'utf8'));
    t.equal(meta.images, 9, '8 payload images and the release image');
    t.notOk(meta.partial, 'the results are complete');
    t.same(
      rows.map((r) => r.id),
      ['build', 'size', 'stage', 'random'],
    );
    for (const r of rows) {
      t.ok(
        r.ours.median > 0 && r.peer.median > 0 && r.ratios.median > 0,
        `${r.id}: both sides measured`,
      );
    }
    // #45: the build's breakdown, our phases beside the peer's two steps timed apart
    const { breakdown } = rows[0];
    for (const phase of [
      'registry reads: digest check',
      'compression: frames stored (incompressible)',
      'whole-file hash: its thread',
      'signing',
      'start: process start and module loading',
      'total (as the bench measured it)',
    ]) {
      t.ok(
        breakdown.ours[phase]?.wall >= 0 ||
          breakdown.ours[phase]?.cpu >= 0 ||
          breakdown.ours[phase]?.bytes >= 0,
        `build breakdown: ${phase}`,
      );
    }
    t.same(
      Object.keys(breakdown.peer).length,
      2,
      "the peer's skopeo copy and tar | zstd, each timed",
    );
    t.ok(
      Object.values(breakdown.peer).every((p) => p.wall > 0 && p.cpu >= 0),
      'each with its wall and CPU time',
    );
    t.match(stdout, /where the time goes/, 'the breakdown is printed');
    t.match(
      rows[2].peerName,
      /openssl dgst -sha256/,
      'the stage peer hashes with the fastest sha256 here',
    );
  },
);

// `bundle create --base` (#27): a delta carries only the blobs its base lacks, its signed
// bundle.json still listing every one and naming the base by its bundle.json's digest. The base
// may be a bundle, its parts, its bundle.json or an extracted layout; one that is not a bundle,
// or not an earlier release of the same stream, is refused in one line before anything is written.
import t from 'tap';
import { stat } from 'node:fs/promises';
import path from 'node:path';
// @ts-expect-error: a JavaScript helper without type declarations
import { tmpdir } from '../helpers/tmp.mjs';
import { deltaReleases, sha } from './delta-setup.js';
import { blobEntry, bundle, bundleJson, keygen, tarEntry, tarList, type KeyPair } from './lib.js';

let dir: string;
let keys: KeyPair;
let layout: (v: string) => Promise<string>;
let create: ReturnType<typeof deltaReleases>['create'];

t.before(async () => {
  dir = await tmpdir(t, 'ob-builder-delta-');
  keys = await keygen(dir);
  ({ layout, create } = deltaReleases(dir, keys));
  for (const v of ['1.1.0', '1.2.0']) await layout(v);
  for (const [v, out] of [
    ['1.1.0', 'r1.bundle'],
    ['1.2.0', 'r2-full.bundle'],
  ]) {
    const r = await create(v!, out!);
    if (r.code !== 0) throw new Error(r.stderr);
  }
});

t.test(
  "--base BUNDLE: every blob listed, the base's marked and left out, the base named by its bundle.json's digest",
  async (t) => {
    const r = await create('1.2.0', 'r2.bundle', ['--base', path.join(dir, 'r1.bundle'), '--json']);
    t.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    const base = await bundleJson(path.join(dir, 'r1.bundle'));
    const full = await bundleJson(path.join(dir, 'r2-full.bundle'));
    const m = (await bundleJson(path.join(dir, 'r2.bundle'))) as Awaited<
      ReturnType<typeof bundleJson>
    > & { base: any; blobs: { digest: string; fromBase?: boolean }[] };
    const baseJson = tarEntry(path.join(dir, 'r1.bundle'), 'bundle.json');
    t.same(m.base, { bundleJson: sha(await baseJson), name: '1.1.0', version: '1.1.0' });
    t.same(
      m.blobs.map((b) => b.digest).sort(),
      full.blobs.map((b) => b.digest).sort(),
      'the same blobs listed as the full bundle',
    );
    const inBase = new Set(base.blobs.map((b) => b.digest));
    const marked = m.blobs.filter((b) => b.fromBase).map((b) => b.digest);
    t.same(
      marked.sort(),
      full.blobs
        .map((b) => b.digest)
        .filter((d) => inBase.has(d))
        .sort(),
      'marked fromBase: exactly the blobs the base lists',
    );
    t.ok(marked.length >= 4, `a's and b's manifests, configs and layers (${marked.length})`);
    const entries = await tarList(path.join(dir, 'r2.bundle'));
    for (const d of marked)
      t.notOk(entries.includes(blobEntry(d)), `${d.slice(7, 19)} not carried`);
    for (const b of m.blobs.filter((x) => !x.fromBase))
      t.ok(entries.includes(blobEntry(b.digest)), `${b.digest.slice(7, 19)} carried`);
    t.equal(
      m.totals.layoutBytes,
      full.totals.layoutBytes,
      'layoutBytes: what the node stages, filled blobs too',
    );
    const sizes = {
      full: (await stat(path.join(dir, 'r2-full.bundle'))).size,
      delta: (await stat(path.join(dir, 'r2.bundle'))).size,
    };
    t.ok(
      sizes.delta < sizes.full / 2,
      `the delta is the smaller (${sizes.delta} vs ${sizes.full})`,
    );
    t.match(
      out.delta,
      { carriedBlobs: m.blobs.length - marked.length, totalBlobs: m.blobs.length, base: m.base },
      '--json says so',
    );

    const text = (await bundle(['inspect', path.join(dir, 'r2.bundle')])).stdout;
    t.match(
      text,
      new RegExp(
        `\\ndelta: +against 1\\.1\\.0 \\(${m.base.bundleJson}\\), ${m.blobs.length - marked.length} of ${m.blobs.length} blobs carried, [\\d.]+ [KMG]?B \\([\\d.]+ [KMG]?B from the base`,
      ),
      'inspect shows the delta',
    );
    t.match(text, /format: +version 3: needs bundle-agent ≥ 0\.2\.0/, 'and the agent it needs');
    const v = await bundle(['verify', '--key', keys.pub, path.join(dir, 'r2.bundle')]);
    t.equal(v.code, 0, 'it verifies on its own');
    t.match(
      v.stdout,
      new RegExp(
        `a delta: every carried blob checked; it needs ${marked.length} blobs \\(.*\\) of 1\\.1\\.0 \\(sha256:`,
      ),
    );
    const vj = JSON.parse(
      (await bundle(['verify', '--json', '--key', keys.pub, path.join(dir, 'r2.bundle')])).stdout,
    );
    t.same(
      vj.needsFromBase.blobs.map((b: any) => b.digest).sort(),
      marked.sort(),
      'verify --json lists the blobs it needs',
    );
  },
);

t.test('--help says what a base may be and that only its listing is used', async (t) => {
  const help = (await bundle(['create', '--help'])).stdout.replace(/\s+/g, ' ');
  t.match(
    help,
    /--base <bundle> make a delta against an earlier release of the same stream: its NAME\.bundle, its parts, or only its bundle\.json \(signed or not: only its listing is read/,
  );
});

// `bundle create --base` (#27), what the base may be: a bundle, its parts or a bare bundle.json
// give the same delta; one that is not a bundle, or not an earlier release of the same stream,
// is refused in one line before anything is written (delta.test.ts: the delta itself).
import t from 'tap';
import { mkdir, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
// @ts-expect-error: a JavaScript helper without type declarations
import { tmpdir } from '../helpers/tmp.mjs';
import { deltaReleases, sha } from './delta-setup.js';
import { bundle, bundleJson, errorCode, keygen, tarEntry, type KeyPair } from './lib.js';

let dir: string;
let keys: KeyPair;
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );
let layout: (v: string) => Promise<string>;
let create: ReturnType<typeof deltaReleases>['create'];

t.before(async () => {
  dir = await tmpdir(t, 'ob-builder-delta-base-');
  keys = await keygen(dir);
  ({ layout, create } = deltaReleases(dir, keys));
  for (const v of ['1.1.0', '1.2.0']) await layout(v);
  const r = await create('1.1.0', 'r1.bundle');
  if (r.code !== 0) throw new Error(r.stderr);
});

t.test(
  'the base as parts, as a bare bundle.json (unsigned will do) or as an extracted layout: the same listing',
  async (t) => {
    const r1 = await bundleJson(path.join(dir, 'r1.bundle'));
    const baseDigest = sha(await tarEntry(path.join(dir, 'r1.bundle'), 'bundle.json'));
    let want: any;
    const extracted = path.join(dir, 'r1-layout');
    t.equal(
      (
        await bundle([
          'extract',
          '--key',
          keys.pub,
          path.join(dir, 'r1.bundle'),
          extracted,
          '--quiet',
        ])
      ).code,
      0,
    );
    const bare = path.join(dir, 'bare', 'bundle.json');
    await mkdir(path.dirname(bare));
    await writeFile(bare, await readFile(path.join(extracted, 'bundle.json')));
    const partsDir = path.join(dir, 'parts');
    await mkdir(partsDir);
    const split = await bundle([
      'split',
      path.join(dir, 'r1.bundle'),
      '--size',
      '4096',
      '--out',
      partsDir,
    ]);
    t.equal(split.code, 0, split.stderr);
    const first = (await readdir(partsDir)).find((n) => n.includes('part-001'))!;
    for (const [what, base] of [
      ['a bare bundle.json', bare],
      ['parts', path.join(partsDir, first)],
    ] as const) {
      const out = `r2-${what.replace(/\W+/g, '-')}.bundle`;
      const r = await create('1.2.0', out, ['--base', base]);
      t.equal(r.code, 0, `${what}: ${r.stderr}`);
      const m = (await bundleJson(path.join(dir, out))) as any;
      t.same(
        m.base,
        { bundleJson: baseDigest, name: '1.1.0', version: '1.1.0' },
        `${what}: the base named by its bundle.json's digest`,
      );
      t.ok(
        m.blobs.some((b: any) => b.fromBase) &&
          m.blobs.every((b: any) => !b.fromBase || r1.blobs.some((x) => x.digest === b.digest)),
        `${what}: only the base's blobs marked`,
      );
      want ??= m.blobs;
      t.same(m.blobs, want, `${what}: the same blobs marked as from the bundle.json`);
    }
  },
);

t.test(
  'a base that is not an earlier release of the same stream, or not a bundle, is refused in one line; nothing written',
  async (t) => {
    const junk = path.join(dir, 'junk.bin');
    await writeFile(junk, 'not a bundle at all\n');
    const cases: [string, string, string[], RegExp][] = [
      [
        'not a bundle',
        '1.2.0',
        ['--base', junk],
        /--base .*junk\.bin is not a bundle, a bundle's parts or a bundle\.json \(.*\): give the previous release's NAME\.bundle/,
      ],
      [
        'the same version',
        '1.1.0',
        ['--base', path.join(dir, 'r1.bundle')],
        /--base .*r1\.bundle is 1\.1\.0 \(amd64\), not earlier than 1\.1\.0: a delta is made against an earlier release of the same stream/,
      ],
      [
        'another stream',
        '1.2.0',
        ['--base', path.join(dir, 'r1.bundle'), '--name', 'edge'],
        /is 1\.1\.0 \(amd64\), another release stream than edge/,
      ],
      [
        'format version 2',
        '1.2.0',
        ['--base', path.join(dir, 'r1.bundle'), '--format-version', '2'],
        /a delta against a base bundle needs format version 3 or later \(bundle-agent 0\.2\.0 or later\); format version 2 cannot carry it: drop --format-version 2, or build without --base/,
      ],
    ];
    for (const [what, v, extra, message] of cases) {
      const out = `refused-${what.replace(/\W+/g, '-')}.bundle`;
      const r = await create(v, out, extra);
      t.equal(r.code, 1, `${what}: refused`);
      t.equal(errorCode(r.stderr), 'INVALID_CONFIG', what);
      const line = r.stderr.trimEnd().split('\n').pop()!;
      t.match(line, message, what);
      t.notOk(await exists(path.join(dir, out)), `${what}: no bundle written`);
    }
    t.same(
      (await readdir(dir)).filter((n) => n.endsWith('.tmp')),
      [],
      'no temp file left',
    );
  },
);

// Two bundles of one release version each keep their record (#40 item 8: "releases list is
// keyed by version, so a second bundle of the same version replaced the first one's record").
// Records are VERSION-ARCH@sha256-HEX.json by the bundle's digest; a VERSION-ARCH.json an older
// agent wrote still reads, and is moved to its bundle's name at the next write.
import t from 'tap';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, crioFiles, crioNodeConfig, keygen, makeBundle, run } from './fixtures.js';

const { readReleases, recordRelease, forgetReleaseRecord } =
  await import('../../agent/dist/state/release-records.js');
const { releasesTable } = await import('../../agent/dist/releases/releases-text.js');

const A = `sha256:${'a'.repeat(64)}`;
const B = `sha256:${'b'.repeat(64)}`;
const rec = (digest: string | undefined, refs: string[], extra: object = {}) => ({
  version: '4.14.2',
  arch: 'amd64',
  ...(digest ? { digest } : {}),
  refs,
  loadedAt: '2026-01-01T00:00:00.000Z',
  ...extra,
});

t.test(
  'state: one record per bundle; an old VERSION-ARCH.json reads and is renamed at the next write',
  async (t) => {
    const state = await tmpdir(t, 'ob-rel-state-');
    const dir = join(state, 'releases');
    await mkdir(dir);
    // as an older agent wrote it: one file per version, the bundle's digest inside
    await writeFile(
      join(dir, '4.14.2-amd64.json'),
      JSON.stringify(rec(A, ['r/a@sha256:1', 'r/b@sha256:2', 'r/c@sha256:3'])),
    );
    const ignored: string[] = [];
    const old = await readReleases(state, (w: string) => ignored.push(w));
    t.same(ignored, [], 'not ignored as "not what its name says"');
    t.same(
      old.map((r: any) => [r.digest, r.refs.length]),
      [[A, 3]],
      'read as it is',
    );

    await recordRelease(state, rec(B, ['r/d@sha256:4', 'r/e@sha256:5']));
    t.same(
      (await readdir(dir)).sort(),
      [`4.14.2-amd64@sha256-${'a'.repeat(64)}.json`, `4.14.2-amd64@sha256-${'b'.repeat(64)}.json`],
      "the old record moved to its bundle's name, the new one beside it",
    );
    const both = await readReleases(state);
    t.same(
      both.map((r: any) => [r.digest, r.refs.length]).sort(),
      [
        [A, 3],
        [B, 2],
      ],
      "the second bundle no longer replaces the first one's record",
    );
    t.notOk(
      'file' in
        JSON.parse(await readFile(join(dir, `4.14.2-amd64@sha256-${'b'.repeat(64)}.json`), 'utf8')),
      'nothing but the record is written',
    );

    await recordRelease(
      state,
      rec(B, ['r/d@sha256:4', 'r/e@sha256:5'], { layout: '/var/lib/upgrade/4.14.2-amd64' }),
    );
    t.equal(
      (await readReleases(state)).length,
      2,
      'the same bundle again: its own record rewritten, no third',
    );
    const node = await tmpdir(t, 'ob-rel-node-');
    await recordRelease(node, rec(undefined, ['r/x@sha256:9'], { source: 'node' }));
    await recordRelease(node, rec(A, ['r/a@sha256:1']));
    t.same(
      (await readReleases(node)).map((r: any) => r.digest),
      [A],
      "a record with no digest (found on the node) is replaced by a bundle's, as before",
    );
    // an old file of the same bundle: dropped once that bundle's record is written under its name
    const same = await tmpdir(t, 'ob-rel-same-');
    await mkdir(join(same, 'releases'));
    await writeFile(
      join(same, 'releases', '4.14.2-amd64.json'),
      JSON.stringify(rec(A, ['r/a@sha256:1'])),
    );
    await recordRelease(same, rec(A, ['r/a@sha256:1'], { layout: '/x' }));
    t.same(await readdir(join(same, 'releases')), [`4.14.2-amd64@sha256-${'a'.repeat(64)}.json`]);

    for (const r of await readReleases(state)) await forgetReleaseRecord(state, r);
    t.same(await readdir(dir), [], 'each record removed by the record read');
    await writeFile(join(dir, '4.14.2-amd64.json'), JSON.stringify(rec(A, ['r/a@sha256:1'])));
    const [legacy] = await readReleases(state);
    await forgetReleaseRecord(state, legacy!);
    t.same(await readdir(dir), [], 'an old-named record too');
    await writeFile(
      join(dir, `4.14.3-amd64@sha256-${'a'.repeat(64)}.json`),
      JSON.stringify(rec(B, [])),
    );
    const skipped: string[] = [];
    t.same(
      await readReleases(state, (w: string) => skipped.push(w)),
      [],
      "a record under another bundle's name is not taken",
    );
    t.match(skipped[0], /not what its name says/);
  },
);

t.test("the table names each row's bundle when a release has more than one", async (t) => {
  const row = (digest: string, images: number) => ({
    version: '4.14.2',
    arch: 'amd64',
    digest,
    running: false,
    source: 'bundle' as const,
    images,
    imagesPresent: images,
    pinned: 'yes' as const,
    loadedAt: '2026-01-01T00:00:00.000Z',
  });
  const two = releasesTable({ releases: [row(A, 3), row(B, 2)], forgotten: [] });
  t.match(
    two,
    /^VERSION +ARCH +STATE +IMAGES +PINNED +KEPT LAYOUT +LOADED +BUNDLE\n4\.14\.2 +amd64 +- +3\/3 .* sha256:aaaaaaaaaaaa\n4\.14\.2 +amd64 +- +2\/2 .* sha256:bbbbbbbbbbbb\n/,
  );
  t.match(two, /a row per bundle \(BUNDLE: its sha256\)/);
  const one = releasesTable({ releases: [row(A, 3)], forgotten: [] });
  t.match(
    one,
    /^VERSION +ARCH +STATE +IMAGES +PINNED +KEPT LAYOUT +LOADED\n/,
    'one bundle per release: the table as before',
  );
  t.notMatch(one, /BUNDLE/);
});

t.test(
  'two bundles of one version loaded through the agent: both kept, listed, pinned; forget lets go of both (CRI-O stand-in)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-rel-bundles-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const crio = await startCrioStandin(t, await crioFiles(root));
    const config = await crioNodeConfig(root, keys.pub, {
      reload: ['kill', '-HUP', String(crio.pid)],
      current: '1.0.0',
    });
    const img = (name: string) => ({
      name: `origin.offline-bundle.invalid/acme/${name}`,
      files: { 'f.txt': name },
    });
    const first = join(dir, 'first');
    const second = join(dir, 'second');
    await mkdir(first);
    await mkdir(second);
    const files = [
      await makeBundle(first, {
        key: keys.key,
        version: '1.1.0',
        images: [img('a:v1'), img('b:v1'), img('c:v1')],
        upgradeFrom: ['1.0.0'],
        out: join(first, 'release.bundle'),
      }),
      await makeBundle(second, {
        key: keys.key,
        version: '1.1.0',
        images: [img('d:v1'), img('e:v1')],
        upgradeFrom: ['1.0.0'],
        out: join(second, 'extra.bundle'),
      }),
    ];
    for (const f of files) {
      const r = await run(AGENT, ['load', f, '--config', config, '--json'], process.env, 300_000);
      t.equal(r.code, 0, `${f} loads (${r.stderr.slice(-500)})`);
    }
    const list = await run(AGENT, ['releases', 'list', '--config', config, '--json']);
    t.equal(list.code, 0, list.stderr);
    const rows = JSON.parse(list.stdout).releases;
    t.same(
      rows.map((r: any) => [r.version, r.imagesPresent, r.images]),
      [
        ['1.1.0', 3, 3],
        ['1.1.0', 2, 2],
      ],
      "the first bundle's 3/3 is still there beside the second's 2/2",
    );
    t.equal(rows[1].pinned, 'yes', "the second bundle's images pinned");
    // the load's pin set (agent/src/load/load-images.ts) keeps other versions' records pinned, not
    // another bundle's of the same version: the list now shows that truthfully instead of hiding the record
    t.equal(rows[0].pinned, 'yes', "the first bundle's images stay pinned");
    t.not(rows[0].digest, rows[1].digest, 'each row names its bundle');
    const human = await run(AGENT, ['releases', 'list', '--config', config]);
    t.match(
      human.stdout,
      /LOADED +BUNDLE\n1\.1\.0 .*sha256:[0-9a-f]{12}\n1\.1\.0 .*sha256:[0-9a-f]{12}\n/,
    );
    const f = await run(AGENT, ['releases', 'forget', '1.1.0', '--config', config, '--json']);
    t.equal(f.code, 0, f.stderr);
    t.same(
      JSON.parse(f.stdout).forgotten.map((x: any) => [x.version, x.unpinned]),
      [
        ['1.1.0', 3],
        ['1.1.0', 2],
      ],
      'both records let go, each its own images',
    );
    const after = await run(AGENT, ['releases', 'list', '--config', config, '--json']);
    t.same(JSON.parse(after.stdout).releases, []);
  },
);

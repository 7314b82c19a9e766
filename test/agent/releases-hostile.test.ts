// tier: unit
// `releases prune` and hostile release records (issue 28 item 5): a record's version or arch is
// never made into a path unless it passes bundle.json's rule, and a record whose file name is
// not VERSION-ARCH.json is reported as ignored (and stays), never as dropped.
import t from 'tap';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  parseConfig,
  pruneReleases,
  readReleases,
  recordRelease,
  type AgentConfig,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { nodeRoot } from './fixtures.js';

const runtime = {
  unpin: async () => undefined,
  pin: async () => undefined,
  pinnedRefs: async () => new Set<string>(),
} as unknown as RuntimeTarget;
const rec = (version: string, arch = 'amd64') => ({
  version,
  arch,
  refs: [`quay.io/x/y:${version.length}`],
  loadedAt: '2026-11-20T00:00:00.000Z',
});

async function node(t: Tap.Test) {
  const dir = await tmpdir(t, 'ob-releases-hostile-');
  const file = await nodeRoot(
    join(dir, 'node'),
    undefined,
    `runtime: crio\ntrust:\n  digest: sha256:${'0'.repeat(64)}\nversion:\n  current: "4.15.0"\n`,
  );
  const config: AgentConfig = parseConfig(await readFile(file, 'utf8'), file);
  const releases = join(config.paths.stateDir, 'releases');
  await mkdir(releases, { recursive: true });
  return { dir, config, releases };
}

t.test(
  'a record whose version climbs out of the state directory: nothing outside is deleted',
  async (t) => {
    const n = await node(t);
    const victimDir = join(n.dir, 'elsewhere');
    await mkdir(victimDir);
    await writeFile(join(victimDir, 'victim-amd64.json'), 'precious');
    const climb = `../../../../../../../../..${victimDir}/victim`;
    await writeFile(join(n.releases, '1.0.0-amd64.json'), JSON.stringify(rec(climb)));
    const r = await pruneReleases(n.config, runtime);
    t.strictSame(r.forgotten, [], 'nothing claimed forgotten');
    t.equal(
      await readFile(join(victimDir, 'victim-amd64.json'), 'utf8'),
      'precious',
      'the file outside is still there',
    );
    t.match(r.ignored.join('\n'), /1\.0\.0-amd64\.json is not a release record/);
  },
);

t.test(
  'a record under another name than VERSION-ARCH.json: ignored and left, never "dropped"',
  async (t) => {
    const n = await node(t);
    await writeFile(join(n.releases, 'old-copy.json'), JSON.stringify(rec('4.14.0')));
    await writeFile(join(n.releases, '4.13.0-amd64.json'), JSON.stringify(rec('4.13.0')));
    const ignored: string[] = [];
    t.strictSame(
      (await readReleases(n.config.paths.stateDir, (w) => ignored.push(w))).map((x) => x.version),
      ['4.13.0'],
    );
    const r = await pruneReleases(n.config, runtime);
    t.strictSame(
      r.forgotten.map((f) => f.version),
      ['4.13.0'],
      'only the record named for itself is forgotten',
    );
    t.match(
      r.ignored.join('\n'),
      /old-copy\.json records 4\.14\.0 \(amd64\), not what its name says: ignored, left on disk/,
    );
    t.strictSame(
      await readdir(n.releases),
      ['old-copy.json'],
      '4.13.0 dropped for real; the other left, as said',
    );
  },
);

t.test('recordRelease refuses a version that is a path', async (t) => {
  const n = await node(t);
  await t.rejects(
    recordRelease(n.config.paths.stateDir, rec('../x')),
    /not a release version and arch/,
  );
  await t.rejects(
    recordRelease(n.config.paths.stateDir, rec('4.15.0', 'amd64/../../x')),
    /not a release version and arch/,
  );
  t.strictSame(await readdir(n.releases), []);
});

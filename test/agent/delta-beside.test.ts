// A delta (#27) on a node that kept no layout of its base: the base's own bundle beside the
// delta (the same stick) fills it, each blob checked against the delta's signed digests; a
// bundle of the same version but another build (another bundle.json) does not. CRI-O's files
// under the node root and nothing pulled (preload.method none): the fill is what is tested.
import t from 'tap';
import { copyFile, mkdir, readFile, readdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { BundleQueue, MediaWatcher, createLogger, type FoundBundle } from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, BUNDLE, keygen, makeBundle, nodeRoot, run, type AppImage } from './fixtures.js';

/** Two releases as patch releases share them: a and b unchanged, c rebuilt (as in delta-load.test.ts). */
const images = (v: string): AppImage[] => [
  { name: 'quay.io/acme/a:v1', files: { 'a.txt': 'base image a '.repeat(4000) } },
  { name: 'quay.io/acme/b:v1', files: { 'b.txt': 'base image b '.repeat(4000) } },
  { name: `quay.io/acme/c:${v}`, files: { 'c.txt': `app c ${v} `.repeat(2000) } },
];

const quiet = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));

t.test(
  'a node that kept nothing fills a delta from the base bundle beside it on the stick; another build of the base will not do',
  async (t) => {
    const dir = await tmpdir(t, 'ob-agent-delta-beside-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const config = await nodeRoot(
      root,
      keys.pub,
      `runtime: crio\nversion:\n  current: "1.0.0"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\nstaging:\n  keep: true\nstatus:\n  console: false\n`,
    );
    const stick = join(dir, 'stick');
    await mkdir(stick);
    const base = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: images('1.1.0'),
      out: join(dir, '1.1.0.bundle'),
    });
    const delta = await makeBundle(dir, {
      key: keys.key,
      version: '1.2.0',
      images: images('1.2.0'),
      out: join(stick, '1.2.0-delta.bundle'),
      create: (args) => run(BUNDLE, [...args, '--base', base]),
    });
    const status = () =>
      readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8').then(JSON.parse);

    // another build of 1.1.0 (another bundle.json): not the base the delta names
    const other = await makeBundle(join(dir, 'other'), {
      key: keys.key,
      version: '1.1.0',
      images: images('1.1.0'),
      out: join(stick, '1.1.0.bundle'),
      create: (args) => run(BUNDLE, [...args, '--name', '1.1.0', '--upgrade-from', '1.0.0']),
    });
    const refused = await run(AGENT, ['load', delta, '--config', config]);
    t.equal(refused.code, 1, 'refused');
    t.match(
      (await status()).conditions.find((c: any) => c.type === 'Failed'),
      {
        reason: 'BaseMissing',
        message:
          /^This update needs 1\.1\.0 on this node; plug in the full bundle .*its bundle is not beside this one/,
      },
    );
    t.same(
      (await readdir(join(root, 'var/lib/upgrade')).catch(() => [])).filter((n: string) =>
        n.startsWith('1.2.0'),
      ),
      [],
      'nothing staged',
    );

    await copyFile(base, other);
    const ok = await run(AGENT, ['load', delta, '--config', config]);
    t.equal(ok.code, 0, ok.stderr.slice(-800));
    t.equal((await status()).phase, 'Ready');
    t.match(
      ok.stdout + ok.stderr,
      /come from .*stick\/1\.1\.0\.bundle, each checked/,
      'filled from the base bundle on the stick',
    );
    const layout = join(root, 'var/lib/upgrade/1.2.0-amd64');
    const m = JSON.parse(await readFile(join(layout, 'bundle.json'), 'utf8'));
    const have = new Set(await readdir(join(layout, 'blobs/sha256')));
    t.ok(
      m.blobs.every((b: any) => have.has(b.digest.slice(7))),
      'the staged layout is whole',
    );

    // the daemon's watcher on that stick: the delta is offered before its base (which sorts first
    // by name); the daemon drops the base once the delta is loaded (it is older then), and loads
    // it when the delta fails
    const w = new MediaWatcher({
      roots: [],
      watchDirs: [stick],
      pollSeconds: 3600,
      log: quiet,
      quietSeconds: 0,
    });
    const found: FoundBundle[] = [];
    w.on('bundle', (b) => found.push(b));
    await symlink(other, join(stick, 'zz-link.bundle'));
    for (let i = 0; i < 4; i++) await w.scan();
    t.same(
      found.map((f) => f.file),
      [delta, other],
      "the delta first, then its base; the base's second name (a symlink) not offered again",
    );
    t.equal(found[1]!.identity, found[0]!.base, 'the base is the one the delta names');
    const loaded = new BundleQueue(3600);
    for (const b of found) loaded.offer(b);
    const first = await loaded.next(new AbortController().signal);
    t.same(
      loaded.dropBasesOf(first!),
      [other],
      'the delta loaded: its base is dropped from the queue',
    );
    const failed = new BundleQueue(3600);
    for (const b of found) failed.offer(b);
    await failed.next(new AbortController().signal);
    t.equal(
      (await failed.next(new AbortController().signal))?.file,
      other,
      'the delta failed (nothing dropped): its base is loaded next',
    );

    // a chain: 1.3.0 against the 1.2.0 delta beside it, on a node that kept nothing: refused by
    // name (the delta beside it lacks the blobs it takes from 1.1.0), nothing staged
    const chain = await makeBundle(join(dir, 'chain'), {
      key: keys.key,
      version: '1.3.0',
      images: images('1.3.0'),
      out: join(stick, '1.3.0-delta.bundle'),
      create: (args) => run(BUNDLE, [...args, '--base', delta]),
    });
    const root2 = join(dir, 'node2');
    const config2 = await nodeRoot(
      root2,
      keys.pub,
      `runtime: crio\nversion:\n  current: "1.0.0"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\nstatus:\n  console: false\n`,
    );
    const r = await run(AGENT, ['load', chain, '--config', config2]);
    t.equal(r.code, 1, 'refused');
    const st = JSON.parse(await readFile(join(root2, 'var/lib/bundle-agent/status.json'), 'utf8'));
    t.match(
      st.conditions.find((c: any) => c.type === 'Failed'),
      {
        reason: 'BaseMissing',
        message:
          /^This update needs 1\.2\.0 on this node; plug in the full bundle .*1\.2\.0-delta\.bundle beside it is that release, but itself a delta against/,
      },
    );
    t.same(
      (await readdir(join(root2, 'var/lib/upgrade')).catch(() => [])).filter((n: string) =>
        n.startsWith('1.3.0'),
      ),
      [],
      'nothing staged',
    );
  },
);

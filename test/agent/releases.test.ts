// bundle-agent releases list | forget | prune, in CRI-O mode against the CRI-O contract
// stand-in (test/helpers/crio-standin.mjs: reads crio.conf.d only at start and on SIGHUP and
// reports pinned_images in ListImages, as CRI-O 1.28+ does). CRI-O itself cannot run here.
import t from 'tap';
import { spawn } from 'node:child_process';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { CriImageClient } from '@offline-bundle/runtime';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, crioFiles, crioNodeConfig, keygen, makeBundle, run } from './fixtures.js';

const ORIGIN = 'origin.offline-bundle.invalid';
const img = (name: string, text: string) => ({
  name: `${ORIGIN}/acme/${name}`,
  files: { 'f.txt': text },
});
// 1.2.0 and 1.3.0 share one image (same name, same content: same digest)
const RELEASES = {
  '1.1.0': [img('app:v1', 'app v1')],
  '1.2.0': [img('app:v2', 'app v2'), img('base:v1', 'base v1')],
  '1.3.0': [img('app:v3', 'app v3'), img('base:v1', 'base v1')],
} as const;

t.test(
  'releases: list what is loaded, pinned and kept; forget one; prune older ones; never race a load (contract test, CRI-O stand-in)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-releases-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const p = (rel: string) => join(root, rel);
    const crio = await startCrioStandin(t, await crioFiles(root));
    const writeConfig = (current: string) =>
      crioNodeConfig(root, keys.pub, {
        reload: ['kill', '-HUP', String(crio.pid)],
        current,
        extra: 'staging:\n  keep: true\n',
      });
    let config = await writeConfig('1.0.0');
    for (const [version, images] of Object.entries(RELEASES)) {
      const file = await makeBundle(dir, {
        key: keys.key,
        version,
        images: [...images],
        upgradeFrom: ['1.0.0'],
        out: join(dir, `${version}.bundle`),
      });
      const r = await run(
        AGENT,
        ['load', file, '--config', config, '--json'],
        process.env,
        300_000,
      );
      t.equal(r.code, 0, `${version} loads (${r.stderr.slice(-500)})`);
    }
    const cri = new CriImageClient(crio.socket);
    t.teardown(() => cri.close());
    const pinnedByRuntime = async () =>
      new Set((await cri.listImages()).filter((i) => i.pinned).flatMap((i) => i.repoTags));
    const list = async () => {
      const r = await run(AGENT, ['releases', 'list', '--config', config, '--json']);
      t.equal(r.code, 0, r.stderr);
      return JSON.parse(r.stdout);
    };

    const before = await list();
    t.equal(before.running, '1.0.0', 'the running release (version.current)');
    t.same(
      before.releases.map((r: any) => [r.version, r.state, r.pinned, r.imagesPresent, r.images]),
      [
        ['1.1.0', 'loaded', 'yes', 1, 1],
        ['1.2.0', 'loaded', 'yes', 2, 2],
        ['1.3.0', 'loaded', 'yes', 2, 2],
      ],
      'three releases, loaded and pinned as the runtime reports (a fixed version.current never releases them): the pile-up; images counted one per image, as the console counts them, not per name',
    );
    for (const r of before.releases)
      t.ok((await stat(r.layout)).isDirectory(), `${r.version}: layout kept at ${r.layout}`);
    const human = await run(AGENT, ['releases', 'list', '--config', config]);
    t.match(
      human.stdout,
      /^VERSION +ARCH +STATE +IMAGES +PINNED +KEPT LAYOUT +LOADED\n1\.1\.0 +amd64 +loaded +1\/1 +yes /,
      'a table for people',
    );

    // forget: unpinned in the runtime, layout and records gone
    const unknown = await run(AGENT, ['releases', 'forget', '9.9.9', '--config', config]);
    t.equal(unknown.code, 1, 'an unknown version is an error');
    t.match(
      unknown.stderr,
      /NotRecorded: no release 9\.9\.9 is recorded on this node \(recorded: 1\.1\.0, 1\.2\.0, 1\.3\.0\)/,
    );
    const f = await run(AGENT, ['releases', 'forget', '1.1.0', '--config', config, '--json']);
    t.equal(f.code, 0, f.stderr);
    t.same(
      JSON.parse(f.stdout).forgotten.map((x: any) => [x.version, x.unpinned]),
      [['1.1.0', 1]],
      'one image unpinned (by its tag and its digest)',
    );
    const pinned = await pinnedByRuntime();
    t.notOk(pinned.has(`${ORIGIN}/acme/app:v1`), 'the runtime no longer reports 1.1.0 pinned');
    t.ok(
      pinned.has(`${ORIGIN}/acme/app:v2`) && pinned.has(`${ORIGIN}/acme/app:v3`),
      'the other releases stay pinned',
    );
    await t.rejects(
      stat(before.releases[0].layout),
      { code: 'ENOENT' },
      'its kept layout is removed',
    );
    t.same(
      (await list()).releases.map((r: any) => r.version),
      ['1.2.0', '1.3.0'],
      'and its record',
    );
    const bundles = JSON.parse(
      await readFile(p('var/lib/bundle-agent/bundles.json'), 'utf8'),
    ).bundles;
    t.notOk(
      bundles.some((b: any) => b.version === '1.1.0'),
      'the file record too: its stick loads it again',
    );

    // a load running: forget and prune wait for no one, they refuse
    const holder = spawn('sleep', ['60'], { stdio: 'ignore' });
    t.teardown(() => {
      holder.kill('SIGKILL');
    });
    await writeFile(p('var/lib/bundle-agent/load.lock'), `${holder.pid}\n`);
    const busy = await run(AGENT, ['releases', 'prune', '--config', config]);
    t.equal(busy.code, 1);
    t.match(
      busy.stderr,
      /Busy: another bundle-agent \(pid \d+\) is loading a bundle/,
      'under the load lock',
    );
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));

    // the node now runs 1.3.0: 1.2.0 is older; its image shared with 1.3.0 stays pinned
    config = await writeConfig('1.3.0');
    const inUse = await run(AGENT, ['releases', 'forget', '1.3.0', '--config', config]);
    t.equal(inUse.code, 1, 'the running release is not forgotten');
    t.match(inUse.stderr, /InUse: 1\.3\.0 is the release this node runs/);
    const pr = await run(AGENT, ['releases', 'prune', '--config', config, '--json']);
    t.equal(pr.code, 0, pr.stderr);
    t.same(
      JSON.parse(pr.stdout).forgotten.map((x: any) => [x.version, x.unpinned]),
      [['1.2.0', 1]],
      'prune forgets 1.2.0; of its 2 images, 1 is shared with 1.3.0',
    );
    const after = await pinnedByRuntime();
    t.notOk(after.has(`${ORIGIN}/acme/app:v2`), "1.2.0's own image unpinned");
    t.ok(
      after.has(`${ORIGIN}/acme/base:v1`),
      'the image 1.2.0 shared with the running 1.3.0 stays pinned',
    );
    t.same(
      (await list()).releases.map((r: any) => [r.version, r.running]),
      [['1.3.0', true]],
    );
    const again = await run(AGENT, ['releases', 'prune', '--config', config]);
    t.equal(again.stdout, 'nothing older than the running 1.3.0 to forget\n');
  },
);

t.test('releases --help teaches the three verbs', async (t) => {
  const r = await run(AGENT, ['releases', '--help']);
  t.equal(r.code, 0);
  for (const w of [
    'releases list',
    'releases forget 4.14.38',
    'releases prune',
    'Busy',
    'running release',
  ])
    t.match(r.stdout, w);
});

// A delta (#27) loaded into a real containerd: refused before anything is written while the node
// keeps no layout of its base (BaseMissing); after the full base was loaded with staging.keep,
// refused when a kept base blob is damaged (BaseCorrupt), nothing staged or pinned; then loaded
// Ready, the blobs it does not carry filled from the kept layout and checked against its own
// signed digests.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AGENT, BUNDLE, containerdNode, makeBundle, run, type AppImage } from './fixtures.js';

/** Two releases as patch releases share them: a and b unchanged, c rebuilt. */
const images = (v: string): AppImage[] => [
  { name: 'quay.io/acme/a:v1', files: { 'a.txt': 'base image a '.repeat(4000) } },
  { name: 'quay.io/acme/b:v1', files: { 'b.txt': 'base image b '.repeat(4000) } },
  { name: `quay.io/acme/c:${v}`, files: { 'c.txt': `app c ${v} `.repeat(2000) } },
];

t.test(
  'a delta loads Ready filled from the kept layout of its base, and is refused without it or with it damaged',
  async (t) => {
    const { dir, keys, root, ctd, config } = await containerdNode(
      t,
      'ob-agent-delta-',
      'staging:\n  keep: true\n',
    );
    const full = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: images('1.1.0'),
      out: join(dir, '1.1.0.bundle'),
    });
    // on its own stick: the base's bundle beside it would fill it too (delta-beside.test.ts)
    await mkdir(join(dir, 'stick'));
    const delta = await makeBundle(dir, {
      key: keys.key,
      version: '1.2.0',
      images: images('1.2.0'),
      out: join(dir, 'stick', '1.2.0-delta.bundle'),
      create: (args) => run(BUNDLE, [...args, '--base', full]),
    });
    const needs = JSON.parse(
      (await run(BUNDLE, ['verify', '--json', '--key', keys.pub, delta])).stdout,
    ).needsFromBase;
    t.equal(needs.version, '1.1.0', 'the delta names its base');
    t.ok(needs.blobs.length >= 4, `it leaves out what 1.1.0 holds (${needs.blobs.length} blobs)`);

    const upgrade = join(root, 'var/lib/upgrade');
    const status = () =>
      readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8').then(JSON.parse);
    const failed = async () => (await status()).conditions.find((c: any) => c.type === 'Failed');
    const ctrImages = () =>
      execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' });
    const staged = async () =>
      (await readdir(upgrade).catch(() => [] as string[])).filter((n) => n.startsWith('1.2.0'));

    // 1. no base on the node: refused before anything is written
    const missing = await run(AGENT, ['load', delta, '--config', config]);
    t.equal(missing.code, 1, 'refused');
    t.match(await failed(), {
      reason: 'BaseMissing',
      message: /^This update needs 1\.1\.0 on this node; plug in the full bundle/,
    });
    t.notMatch((await failed()).message, /\n/, 'one line');
    t.same(await staged(), [], 'nothing staged');
    t.notMatch(ctrImages(), /acme\/c:1\.2\.0/, 'nothing pulled or pinned');

    // 2. the full base, kept
    const base = await run(AGENT, ['load', full, '--config', config]);
    t.equal(base.code, 0, base.stderr.slice(-500));
    const kept = join(upgrade, '1.1.0-amd64');
    t.ok((await readdir(kept)).includes('bundle.json'), 'staging.keep: the layout of 1.1.0 stays');

    // 3. one kept base blob damaged: refused, nothing staged or pinned
    const victim = join(
      kept,
      'blobs/sha256',
      needs.blobs.sort((a: any, b: any) => b.size - a.size)[0].digest.slice(7),
    );
    const good = await readFile(victim);
    const bad = Buffer.from(good);
    bad[bad.length >> 1] ^= 1;
    await writeFile(victim, bad);
    const corrupt = await run(AGENT, ['load', delta, '--config', config]);
    t.equal(corrupt.code, 1, 'refused');
    t.match(await failed(), {
      reason: 'BaseCorrupt',
      message:
        /^this update needs 1\.1\.0 on this node, and its copy here is damaged \(blobs\/sha256\/[0-9a-f]{64} is \d+ bytes hashing to sha256:/,
    });
    t.same(await staged(), [], 'no staging of 1.2.0 left, partial or whole');
    t.notMatch(ctrImages(), /acme\/c:1\.2\.0/, 'nothing of 1.2.0 pulled or pinned');
    await writeFile(victim, good);

    // 4. with the base kept whole: Ready
    const ok = await run(AGENT, ['load', delta, '--config', config, '--json']);
    t.equal(ok.code, 0, ok.stderr.slice(-800));
    const s = await status();
    t.equal(s.phase, 'Ready');
    t.match(
      s.conditions.find((c: any) => c.type === 'Ready'),
      { status: 'True', reason: 'Loaded' },
    );
    t.match(
      ok.stderr + ok.stdout,
      /a delta against 1\.1\.0: \d+ blobs \(.*\) come from .*1\.1\.0-amd64, each checked against this bundle's signed digest/,
      'the log says where the base blobs came from',
    );
    const layout = join(upgrade, '1.2.0-amd64');
    const m = JSON.parse(await readFile(join(layout, 'bundle.json'), 'utf8'));
    const have = new Set(await readdir(join(layout, 'blobs/sha256')));
    t.ok(
      m.blobs.every((b: any) => have.has(b.digest.slice(7))),
      'the staged layout of 1.2.0 is whole: carried and filled blobs',
    );
    const listed = ctrImages();
    for (const name of ['quay.io/acme/a:v1', 'quay.io/acme/b:v1', 'quay.io/acme/c:1.2.0'])
      t.match(listed, name, `${name} in containerd`);
  },
);

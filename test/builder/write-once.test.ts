// `bundle create` writes the bundle once, straight into a temp file beside -o that is renamed at
// the end: a destination (a real tmpfs) only 10 % larger than the bundle is enough. Before
// anything is fetched it checks that -o is writable, not a directory, and that the bundle fits
// (naming the bytes missing). The blob cache: `bundle cache info|prune`, and a preflight that
// refuses a cache disk too small for the downloads. Against a real docker-registry on 127.0.0.1.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdir, readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { smallFs } from '../agent/fixtures.js';
import { bundle, errorCode, hex, keygen, listDir } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-write-once-');
// Ed25519 and a fixed time: the same inputs give the same bytes, on any destination
const keys = await keygen(work, 'factory', 'ed25519');

// one incompressible layer of 24 MB: the bundle is about as large
const img = await pushImage(
  {
    tag: 'v1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [
          { 'data/random.bin': randomBytes(24 * 1000 * 1000) },
          { 'etc/name': 'write-once' },
        ],
      },
    ],
  },
  `${reg.host}/wo/app:v1`,
);
const bigLayer = img.manifests[0]!.layers[0]!;

const create = (output: string, cache: string, extra: string[] = []) =>
  bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--key',
      keys.key,
      '--version',
      '1.0',
      '--image',
      img.ref,
      '-o',
      output,
      '--cache',
      cache,
      ...extra,
    ],
    { env: { SOURCE_DATE_EPOCH: '1700000000' } },
  );

/** Every file under dir (recursively), for "nothing was fetched" checks. */
async function filesUnder(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir, { recursive: true, withFileTypes: true }))
      .filter((e) => e.isFile())
      .map((e) => path.join(e.parentPath ?? e.path, e.name));
  } catch {
    return [];
  }
}

const cache = path.join(work, 'cache');
const reference = path.join(work, 'reference', 'app.bundle');
await mkdir(path.dirname(reference));
const first = await create(reference, cache);
if (first.code !== 0) throw new Error(`reference build failed: ${first.stderr}`);
const size = (await stat(reference)).size;

t.test('a tmpfs 10 % larger than the bundle is enough (one write, no temp body)', async (t) => {
  const stick = path.join(work, 'stick');
  if (!smallFs(stick, Math.ceil((size * 1.1) / 1024), t))
    return t.skip('cannot mount a tmpfs here');
  const out = path.join(stick, 'app.bundle');
  const r = await create(out, cache);
  t.equal(r.code, 0, r.stderr);
  t.equal((await stat(out)).size, size);
  t.equal(
    (await readFile(`${out}.sha256`, 'utf8')).split(' ')[0],
    (await readFile(`${reference}.sha256`, 'utf8')).split(' ')[0],
    'the same bytes as on a large disk',
  );
  t.same(await listDir(stick), ['app.bundle', 'app.bundle.sha256'], 'no temp file left beside it');
  const v = await bundle(['verify', out, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);
});

t.test(
  'a destination too small: NO_SPACE before any blob is fetched, naming the bytes missing',
  async (t) => {
    const stick = path.join(work, 'small');
    if (!smallFs(stick, Math.ceil(size / 2 / 1024), t)) return t.skip('cannot mount a tmpfs here');
    const fresh = path.join(work, 'cache-small');
    const r = await create(path.join(stick, 'app.bundle'), fresh);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'NO_SPACE', r.stderr);
    t.match(
      r.stderr,
      /it has [\d.]+ (KB|MB) free, [\d.]+ (KB|MB) missing/,
      'how much is missing, in the units the CLI uses',
    );
    t.equal(r.stderr.trimEnd().split('\n').length, 1, 'one line');
    t.notOk(
      (await filesUnder(fresh)).some((f) => f.includes(hex(bigLayer))),
      'the layer was never fetched',
    );
    t.same(await listDir(stick), [], 'nothing written');
  },
);

t.test('a read-only destination: NOT_WRITABLE before anything is fetched', async (t) => {
  const ro = path.join(work, 'ro');
  await mkdir(ro);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', ro], { stdio: 'ignore' });
  } catch {
    return t.skip('cannot mount a tmpfs here');
  }
  t.teardown(() => execFileSync('umount', ['-l', ro]));
  const fresh = path.join(work, 'cache-ro');
  const r = await create(path.join(ro, 'app.bundle'), fresh);
  t.equal(r.code, 1);
  t.equal(errorCode(r.stderr), 'NOT_WRITABLE', r.stderr);
  t.match(r.stderr, new RegExp(`cannot write the bundle into ${ro}`));
  t.same(await filesUnder(fresh), [], 'the cache is empty: not even a manifest was fetched');
});

t.test('-o naming a directory: INVALID_CONFIG before anything is fetched', async (t) => {
  const dir = path.join(work, 'a-dir');
  await mkdir(dir);
  const fresh = path.join(work, 'cache-dir');
  const r = await create(dir, fresh);
  t.equal(errorCode(r.stderr), 'INVALID_CONFIG', r.stderr);
  t.match(r.stderr, /is a directory: give the bundle's file name, e\.g\. -o .*\/NAME\.bundle/);
  t.same(await filesUnder(fresh), [], 'nothing fetched');
  t.same(await listDir(dir), [], 'nothing written into it');
});

t.test(
  'a cache disk too small for the downloads: NO_SPACE naming the cache and the fix',
  async (t) => {
    const small = path.join(work, 'small-cache');
    if (!smallFs(small, 2048, t)) return t.skip('cannot mount a tmpfs here');
    const r = await create(path.join(work, 'x.bundle'), small);
    t.equal(errorCode(r.stderr), 'NO_SPACE', r.stderr);
    t.match(
      r.stderr,
      new RegExp(`blob cache ${small}.*missing; run "bundle cache prune" or pass --cache DIR`),
    );
    t.notOk(
      (await filesUnder(small)).some((f) => f.endsWith('.partial')),
      'no .partial',
    );
  },
);

t.test('bundle cache info and prune', async (t) => {
  const c = path.join(work, 'cache-prune');
  t.equal((await create(path.join(work, 'p.bundle'), c)).code, 0);
  const before = JSON.parse((await bundle(['cache', 'info', '--cache', c, '--json'])).stdout);
  t.equal(before.dir, c);
  t.equal(before.blobs, 4, 'manifest, config and two layers');
  t.ok(before.bytes > 24_000_000);
  const human = await bundle(['cache', 'info', '--cache', c]);
  t.match(
    human.stdout,
    new RegExp(`^${c}: 4 blobs, [\\d.]+ MB; 0 unfinished downloads, 0 B$`, 'm'),
  );
  const kept = JSON.parse(
    (await bundle(['cache', 'prune', '--cache', c, '--older-than', '1', '--json'])).stdout,
  );
  t.equal(kept.removed, 0, 'blobs used today are kept with --older-than 1');
  const pruned = JSON.parse((await bundle(['cache', 'prune', '--cache', c, '--json'])).stdout);
  t.equal(pruned.removed, 4);
  t.equal(pruned.bytes, before.bytes);
  t.equal(JSON.parse((await bundle(['cache', 'info', '--cache', c, '--json'])).stdout).blobs, 0);
});

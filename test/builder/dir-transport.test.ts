// dir: sources (containers/image's directory layout) against skopeo: `skopeo copy … dir:D`,
// bundled, extracted, and copied back with skopeo to dir: again gives the same files. And the
// error for containers-storage:, which is not read directly.
import t from 'tap';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { skopeoCopy } from '../helpers/registry.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode, keygen } from './lib.js';

const work = await tmpdir(t, 'ob-dir-');
const keys = await keygen(work);
const layout = path.join(work, 'layout');
const single = await writeImageLayout(layout, {
  tag: 'single',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: 'one' }, { b: 'two' }] }],
});
const multi = await writeImageLayout(layout, {
  tag: 'multi',
  index: true,
  platforms: [
    { os: 'linux', architecture: 'amd64', layers: [{ a: 'x86' }] },
    { os: 'linux', architecture: 'arm64', layers: [{ a: 'arm' }] },
  ],
});

let n = 0;
async function create(args: string[]) {
  const out = path.join(work, `out-${++n}.bundle`);
  const r = await bundle([
    'create',
    '--quiet',
    '--key',
    keys.key,
    '--version',
    '1.0',
    '--cache',
    path.join(work, `cache-${n}`),
    '-o',
    out,
    ...args,
  ]);
  return { ...r, out };
}

/** Every file of a dir: image, name -> bytes. */
async function files(dir: string): Promise<Record<string, string>> {
  const all: Record<string, string> = {};
  for (const f of (await readdir(dir)).sort())
    all[f] = (await readFile(path.join(dir, f))).toString('base64');
  return all;
}

t.test('skopeo dir: -> bundle -> extract -> skopeo dir: gives the same files', async (t) => {
  const src = path.join(work, 'dir-single');
  await skopeoCopy(`oci:${layout}:single`, `dir:${src}`);
  const r = await create(['--image', `dir:${src}=registry.example.com/acme/app:v1`]);
  t.equal(r.code, 0, r.stderr);
  const image = (await bundleJson(r.out)).images[0]!;
  t.equal(image.digest, single.digest, 'the digest skopeo wrote');
  t.equal(`${image.repository}:${image.tag}`, 'registry.example.com/acme/app:v1');

  const extracted = path.join(work, 'extracted-single');
  const x = await bundle(['extract', r.out, extracted, '--key', keys.pub, '--quiet']);
  t.equal(x.code, 0, x.stderr);
  const back = path.join(work, 'dir-back');
  await skopeoCopy(`oci:${extracted}:registry.example.com/acme/app:v1`, `dir:${back}`, [
    '--preserve-digests',
  ]);
  t.strictSame(
    await files(back),
    await files(src),
    'manifest.json, version and every blob are byte-identical',
  );
});

t.test('a multi-arch dir: (skopeo copy --all): HEX.manifest.json children', async (t) => {
  const src = path.join(work, 'dir-multi');
  await skopeoCopy(`oci:${layout}:multi`, `dir:${src}`, ['--all']);
  t.ok(
    (await readdir(src)).some((f) => f.endsWith('.manifest.json')),
    'skopeo wrote per-platform manifests',
  );
  const r = await create([
    '--all-platforms',
    '--image',
    `dir:${src}=registry.example.com/acme/multi:v1`,
  ]);
  t.equal(r.code, 0, r.stderr);
  const image = (await bundleJson(r.out)).images[0]!;
  t.equal(image.digest, multi.digest);
  t.same(image.platforms.map((p) => p.architecture).sort(), ['amd64', 'arm64']);

  const arm = await create([
    '--arch',
    'arm64',
    '--image',
    `dir:${src}=registry.example.com/acme/multi:v1`,
  ]);
  t.equal(arm.code, 0, arm.stderr);
  t.same(
    (await bundleJson(arm.out)).images[0]!.platforms.map((p) => p.architecture),
    ['arm64'],
  );
});

t.test('dir: errors name the fix', async (t) => {
  const src = path.join(work, 'dir-single');
  const unnamed = await create(['--image', `dir:${src}`]);
  t.equal(errorCode(unnamed.stderr), 'INVALID_REFERENCE');
  t.match(unnamed.stderr, /has no registry name: append =REGISTRY\/REPO:TAG/);

  const notDir = await create(['--image', `dir:${layout}=registry.example.com/a:v1`]);
  t.equal(errorCode(notDir.stderr), 'NOT_FOUND', 'an OCI layout is not a dir: image');
  t.match(notDir.stderr, /is not a dir: image \(no readable "version" file/);

  const storage = await create(['--image', 'containers-storage:quay.io/acme/app:v1']);
  t.equal(storage.code, 1);
  t.equal(errorCode(storage.stderr), 'UNSUPPORTED_TRANSPORT');
  t.match(storage.stderr, 'podman save --format oci-archive -o IMAGE.tar quay.io/acme/app:v1');
  t.match(
    storage.stderr,
    'skopeo copy containers-storage:quay.io/acme/app:v1 oci-archive:IMAGE.tar',
  );
});

t.test(
  '--dry-run counts what a local source holds as read from local files, not as a download',
  async (t) => {
    const src = path.join(work, 'dir-dry');
    await skopeoCopy(`oci:${layout}:single`, `dir:${src}`);
    const args = [
      'create',
      '--dry-run',
      '--version',
      '1.0',
      '--cache',
      path.join(work, 'cache-dry'),
      '--image',
      `dir:${src}=registry.example.com/acme/app:v1`,
      '--image',
      `oci:${layout}:single=registry.example.com/acme/app2:v1`,
    ];
    const j = await bundle([...args, '--json']);
    t.equal(j.code, 0, j.stderr);
    const plan = JSON.parse(j.stdout);
    t.equal(plan.downloadBytes, 0, 'nothing to download');
    t.ok(
      plan.localBytes > 0 && plan.localBytes <= plan.totalBytes,
      `the layers from the local files (${plan.localBytes} of ${plan.totalBytes} bytes; the manifests are in the cache already)`,
    );
    const text = await bundle(args);
    t.match(
      text.stdout,
      /; 0 B to download, \S+ \S+ to read from local files \(the rest is in the cache\)/,
    );
  },
);

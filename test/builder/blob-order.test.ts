// `bundle create --blob-order pull` (#24 item 1): blobs image by image as a runtime pulls them
// (manifest, an index's chosen child, config, layers in manifest order; a shared layer at its
// first use), format version 3 unless told otherwise, refused with --format-version 2; the
// default stays digest order in version 2, which agents before 0.2.0 read.
import t from 'tap';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { blobEntry, bundle, bundleJson, errorCode, keygen, tarList } from './lib.js';

const work = await tmpdir(t, 'ob-blob-order-');
const keys = await keygen(work);
const layout = path.join(work, 'layout');
const base = { 'usr/share/base/os-release': 'ID=test\n' };
// two images over one base layer; the second lists it last, so its first use is the first image's
const app = await writeImageLayout(layout, {
  tag: 'app',
  platforms: [
    {
      os: 'linux',
      architecture: 'amd64',
      layers: [base, { 'app/bin/app': 'app v1' }, { 'app/etc/conf': 'x=1' }],
    },
  ],
});
const tool = await writeImageLayout(layout, {
  tag: 'tool',
  platforms: [
    { os: 'linux', architecture: 'amd64', layers: [{ 'tool/bin/tool': 'tool v1' }, base] },
  ],
});
const multi = await writeImageLayout(layout, {
  tag: 'multi',
  platforms: [
    { os: 'linux', architecture: 'arm64', layers: [{ arch: 'arm64' }] },
    { os: 'linux', architecture: 'amd64', layers: [base, { arch: 'amd64' }] },
  ],
});
// by reference name, as index.json and bundle.json list the images
const images = [
  { name: 'example.com/a/app:v1', src: `oci:${layout}:app`, info: app, platform: 0 },
  { name: 'example.com/b/multi:v1', src: `oci:${layout}:multi`, info: multi, platform: 1 },
  { name: 'example.com/c/tool:v1', src: `oci:${layout}:tool`, info: tool, platform: 0 },
];
const imageArgs = images.flatMap((i) => ['--image', `${i.src}=${i.name}`]);

/** The order a runtime pulls them in, worked out here from the images as written. */
function expectedPullOrder(): string[] {
  const out: string[] = [];
  for (const { info, platform } of images) {
    const m = info.manifests[platform]!;
    const want = info.mediaType.includes('index')
      ? [info.digest, m.digest, m.config, ...m.layers]
      : [info.digest, m.config, ...m.layers];
    for (const d of want) if (!out.includes(d)) out.push(d);
  }
  return out;
}

let n = 0;
async function create(args: string[]) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const output = path.join(dir, 'test.bundle');
  const r = await bundle([
    'create',
    '--quiet',
    '--key',
    keys.key,
    '--cache',
    path.join(work, 'cache'),
    '-o',
    output,
    ...args,
  ]);
  return { ...r, output, dir };
}

t.test(
  '--blob-order pull: every blob once, image by image in pull order, as version 3; bundle verify reads it',
  async (t) => {
    const r = await create(['--version', '1.0', '--blob-order', 'pull', ...imageArgs]);
    t.equal(r.code, 0, r.stderr);
    const m = (await bundleJson(r.output)) as Awaited<ReturnType<typeof bundleJson>> & {
      schemaVersion: number;
    };
    t.equal(m.schemaVersion, 3, 'pull order needs version 3, picked unasked');
    const order = expectedPullOrder();
    t.same(
      m.blobs.map((b) => b.digest),
      order,
      'bundle.json lists them in pull order',
    );
    t.notSame(order, [...order].sort(), 'which is not digest order here');
    t.equal(
      order.filter((d) => d === app.manifests[0]!.layers[0]).length,
      1,
      'the shared base layer once',
    );
    t.equal(
      order.indexOf(app.manifests[0]!.layers[0]!),
      2,
      "at its first use: the first image's first layer, after its manifest and config",
    );
    t.notOk(order.includes(multi.manifests[0]!.digest), 'the platform left out is not carried');
    t.same(
      (await tarList(r.output)).slice(4),
      order.map(blobEntry),
      'the archive holds them in that order',
    );
    const v = await bundle(['verify', '--quiet', '--key', keys.pub, r.output]);
    t.equal(v.code, 0, v.stderr);
  },
);

t.test('unasked: digest order in version 2, which agents before 0.2.0 read', async (t) => {
  const r = await create(['--version', '1.0', ...imageArgs]);
  t.equal(r.code, 0, r.stderr);
  const m = (await bundleJson(r.output)) as Awaited<ReturnType<typeof bundleJson>> & {
    schemaVersion: number;
  };
  t.equal(m.schemaVersion, 2);
  const digests = m.blobs.map((b) => b.digest);
  t.same(digests, [...digests].sort(), 'sorted by digest');
  t.same([...digests].sort(), [...expectedPullOrder()].sort(), 'the same blobs as in pull order');
});

t.test(
  '--format-version 2 --blob-order pull is refused by name before anything is fetched or written',
  async (t) => {
    const r = await create([
      '--version',
      '1.0',
      '--format-version',
      '2',
      '--blob-order',
      'pull',
      ...imageArgs,
    ]);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
    t.match(
      r.stderr,
      /blobs in pull order needs format version 3 or later \(bundle-agent 0\.2\.0 or later\); format version 2 cannot carry it: drop --format-version 2/,
    );
    t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
    t.same(await readdir(r.dir), [], 'no output, no temp file');
    const v3 = await create([
      '--version',
      '1.0',
      '--format-version',
      '3',
      '--blob-order',
      'pull',
      ...imageArgs,
    ]);
    t.equal(v3.code, 0, `version 3 carries it: ${v3.stderr}`);
  },
);

t.test(
  "--blob-order takes digest or pull; the -f file's blobOrder is the same choice",
  async (t) => {
    const bad = await create(['--version', '1.0', '--blob-order', 'size', ...imageArgs]);
    t.equal(bad.code, 2, 'a usage error');
    t.match(bad.stderr, /--blob-order.*must be digest or pull/);
    const file = path.join(work, 'bundle.yaml');
    await writeFile(
      file,
      `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nversion: "1.0"\nblobOrder: pull\nimages:\n${images.map((i) => `  - "${i.src}=${i.name}"\n`).join('')}`,
    );
    const r = await create(['-f', file]);
    t.equal(r.code, 0, r.stderr);
    t.same(
      (await bundleJson(r.output)).blobs.map((b) => b.digest),
      expectedPullOrder(),
      'blobOrder: pull in the file',
    );
    const flag = await create(['-f', file, '--blob-order', 'digest']);
    t.equal(flag.code, 0, flag.stderr);
    const digests = (await bundleJson(flag.output)).blobs.map((b) => b.digest);
    t.same(digests, [...digests].sort(), 'the flag overrides the file');
  },
);

// The content-addressed blob cache behind `bundle create --cache` (packages/image-fetch/src/blob-cache.ts):
// a rerun takes blobs from the cache instead of the registry, an interrupted download
// (`blobs/sha256/<hex>.partial`) resumes from its length, a partial whose bytes are wrong
// fails with DIGEST_MISMATCH and is dropped so the next run recovers, and a corrupt
// complete entry is caught while the bundle is written, leaving nothing behind.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode, hex, keygen, listDir } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-cache-');
const keys = await keygen(work);
const H = reg.host;

/** An image with a large incompressible layer (so "half of it" is many bytes). */
async function image(name: string) {
  const img = await pushImage(
    {
      tag: 'v1',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [{ 'data/blob.bin': randomBytes(256 * 1024) }, { 'etc/name': name }],
        },
      ],
    },
    `${H}/cache/${name}:v1`,
  );
  const big = img.manifests[0]!.layers[0]!;
  const res = await fetch(`${reg.url}/v2/cache/${name}/blobs/${big}`);
  const bytes = Buffer.from(await res.arrayBuffer());
  return { ...img, big, bytes };
}

let n = 0;
async function create(
  ref: string,
  cache: string,
  extra: string[] = [],
  env: Record<string, string> = {},
) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const output = path.join(dir, 'c.bundle');
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--key',
      keys.key,
      '--version',
      '1.0',
      '--image',
      ref,
      '-o',
      output,
      ...(cache ? ['--cache', cache] : []),
      ...extra,
    ],
    { env },
  );
  return { ...r, output, dir };
}

const blobFile = (cache: string, digest: string) =>
  path.join(cache, 'blobs', 'sha256', hex(digest));

t.test('a second create with the same cache fetches no blob from the registry', async (t) => {
  const img = await image('reuse');
  const cache = path.join(work, 'cache-reuse');
  const first = await create(img.ref, cache);
  t.equal(first.code, 0, first.stderr);
  t.ok(
    (await readFile(blobFile(cache, img.big))).equals(img.bytes),
    'the layer is cached under its digest',
  );

  // Remove the layer from the registry: only a run that takes it from the cache can succeed.
  const del = await fetch(`${reg.url}/v2/cache/reuse/blobs/${img.big}`, { method: 'DELETE' });
  t.equal(del.status, 202, 'registry deleted the blob');
  const fresh = await create(img.ref, path.join(work, 'cache-reuse-fresh'));
  t.equal(errorCode(fresh.stderr), 'NOT_FOUND', 'without the cache the blob is really gone');

  const second = await create(img.ref, cache);
  t.equal(second.code, 0, second.stderr);
  const [a, b] = [await bundleJson(first.output), await bundleJson(second.output)];
  t.same(
    [b.images, b.blobs, b.index],
    [a.images, a.blobs, a.index],
    'same images, blobs and index',
  );
  const v = await bundle(['verify', second.output, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);
});

t.test('an interrupted download (.partial with the first half) is resumed', async (t) => {
  const img = await image('resume');
  const cache = path.join(work, 'cache-resume');
  await mkdir(path.join(cache, 'blobs', 'sha256'), { recursive: true });
  const half = Math.floor(img.bytes.length / 2);
  await writeFile(`${blobFile(cache, img.big)}.partial`, img.bytes.subarray(0, half));
  const r = await create(img.ref, cache);
  t.equal(r.code, 0, r.stderr);
  t.ok((await readFile(blobFile(cache, img.big))).equals(img.bytes), 'completed blob is whole');
  t.notOk(
    (await listDir(path.join(cache, 'blobs', 'sha256'))).some((f) => f.endsWith('.partial')),
    'no .partial left',
  );
  const v = await bundle(['verify', r.output, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);
});

t.test(
  'a .partial with wrong bytes: DIGEST_MISMATCH, partial dropped, the next run recovers',
  async (t) => {
    const img = await image('corrupt-partial');
    const cache = path.join(work, 'cache-corrupt-partial');
    await mkdir(path.join(cache, 'blobs', 'sha256'), { recursive: true });
    const partial = `${blobFile(cache, img.big)}.partial`;
    // Same length as a real first half but other bytes: only a ranged resume can go wrong here.
    await writeFile(partial, randomBytes(Math.floor(img.bytes.length / 2)));
    const r = await create(img.ref, cache);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'DIGEST_MISMATCH', 'the resumed blob does not hash to its digest');
    t.same(await listDir(r.dir), [], 'no bundle, no temp file');
    await t.rejects(stat(partial), { code: 'ENOENT' }, 'the bad partial was removed');
    await t.rejects(
      stat(blobFile(cache, img.big)),
      { code: 'ENOENT' },
      'nothing was published under the digest',
    );

    const again = await create(img.ref, cache);
    t.equal(again.code, 0, again.stderr);
    t.ok((await readFile(blobFile(cache, img.big))).equals(img.bytes));
  },
);

t.test('a .partial longer than the blob is discarded and fetched again', async (t) => {
  const img = await image('long-partial');
  const cache = path.join(work, 'cache-long-partial');
  await mkdir(path.join(cache, 'blobs', 'sha256'), { recursive: true });
  await writeFile(
    `${blobFile(cache, img.big)}.partial`,
    Buffer.concat([img.bytes, Buffer.from('extra')]),
  );
  const r = await create(img.ref, cache);
  t.equal(r.code, 0, r.stderr);
  t.ok((await readFile(blobFile(cache, img.big))).equals(img.bytes));
});

t.test(
  'a corrupt complete cache entry fails the write with BLOB_DIGEST_MISMATCH and leaves nothing',
  async (t) => {
    const img = await image('corrupt-entry');
    const cache = path.join(work, 'cache-corrupt-entry');
    const first = await create(img.ref, cache);
    t.equal(first.code, 0, first.stderr);
    const file = blobFile(cache, img.big);
    const bytes = await readFile(file);
    bytes[bytes.length >> 1] = bytes[bytes.length >> 1]! ^ 0xff;
    await writeFile(file, bytes);
    const r = await create(img.ref, cache);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'BLOB_DIGEST_MISMATCH');
    t.same(await listDir(r.dir), [], 'no output, no .tmp files in the output directory');
  },
);

t.test('without --cache the cache lives under $XDG_CACHE_HOME/offline-bundle', async (t) => {
  const img = await image('default-cache');
  const xdg = await tmpdir(t);
  const r = await create(img.ref, '', [], { XDG_CACHE_HOME: xdg });
  t.equal(r.code, 0, r.stderr);
  t.ok((await readFile(blobFile(path.join(xdg, 'offline-bundle'), img.big))).equals(img.bytes));
});

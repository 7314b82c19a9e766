// tier: unit
// The image-store estimate of a layer is what it really unpacks to, whatever its gzip trailer
// says (issue #45 tried reading ISIZE instead: a member before the last, or a size past 4 GiB
// that wraps the 32-bit ISIZE, made it understate, and the saving left once that was bounded was
// some 0.04 CPU-s per 2 GiB, so every layer is decoded as it streams). Sizes measured by that
// rule, kept under sizes/sha256, are never read again.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import {
  BlobCache,
  MAX_UNPACK_RATIO,
  UnpackedCounter,
  pruneCache,
} from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';

const sha = (b: Buffer) => 'sha256:' + createHash('sha256').update(b).digest('hex');
const chunks = (buf: Buffer, size = 16_384) =>
  Array.from({ length: Math.ceil(buf.length / size) }, (_, i) =>
    buf.subarray(i * size, (i + 1) * size),
  );

const random = randomBytes(300_000);
const single = gzipSync(random);
// estargz's shape: many members, the last one small (its footer): its ISIZE says 2,000
const multi = Buffer.concat([gzipSync(randomBytes(400_000)), gzipSync(randomBytes(2_000))]);

async function count(data: Buffer): Promise<number | undefined> {
  const c = new UnpackedCounter(data.length);
  for (const ch of chunks(data)) await c.push(ch);
  return c.finish();
}

t.test(
  'every gzip stream is measured by decoding it: members before the last count, a bomb stops at its bound',
  async (t) => {
    t.equal(await count(single), random.length, 'one member');
    t.equal(
      await count(multi),
      402_000,
      "two members: the whole stream, not the last member's ISIZE",
    );
    const bomb = gzipSync(Buffer.alloc(20_000_000));
    t.equal(await count(bomb), bomb.length * MAX_UNPACK_RATIO, 'a bomb: decoded up to its bound');
    const tiny = gzipSync(Buffer.from('x'));
    t.equal(await count(Buffer.concat(chunks(tiny, 3))), 1, 'chunks shorter than a gzip trailer');
  },
);

t.test(
  'the cache keeps the same figure measured as fetched and measured from its file',
  async (t) => {
    const dir = await tmpdir(t, 'ob-sizes-');
    const cache = new BlobCache(dir);
    for (const [what, data, unpacked] of [
      ['one member', single, random.length],
      ['two members', multi, 402_000],
    ] as const) {
      const digest = sha(data);
      await cache.fetch(digest, data.length, async () => Readable.from(chunks(data)), {
        measure: true,
      });
      t.equal(await cache.unpackedSize(digest), unpacked, `${what}: measured as it was fetched`);
      await rm(path.join(dir, 'sizes'), { recursive: true });
      await cache.fetch(
        digest,
        data.length,
        async () => {
          throw new Error('no download: it is cached');
        },
        { measure: true },
      );
      t.equal(
        await cache.unpackedSize(digest),
        unpacked,
        `${what}: a cache from before sizes were kept, measured from its file`,
      );
      t.equal(
        (await readFile(path.join(dir, 'blobs/sha256', digest.slice(7)))).length,
        data.length,
      );
    }
  },
);

t.test(
  'sizes measured by the trailer rule (sizes/sha256) are not read again, and prune removes them',
  async (t) => {
    const dir = await tmpdir(t, 'ob-sizes-');
    const cache = new BlobCache(dir);
    const digest = sha(single);
    await mkdir(path.join(dir, 'sizes/sha256'), { recursive: true });
    await writeFile(path.join(dir, 'sizes/sha256', digest.slice(7)), '7\n');
    await cache.fetch(digest, single.length, async () => Readable.from(chunks(single)), {
      measure: true,
    });
    t.equal(await cache.unpackedSize(digest), random.length, 'measured again, not the old figure');
    await pruneCache(dir);
    await t.rejects(
      readFile(path.join(dir, 'sizes/sha256', digest.slice(7))),
      'prune removes the old figure too',
    );
  },
);

t.test(
  'a size file a power cut left empty, zeroed or cut short (written unsynced) is no size: the layer is measured again',
  async (t) => {
    const dir = await tmpdir(t, 'ob-sizes-');
    const cache = new BlobCache(dir);
    const digest = sha(single);
    await cache.fetch(digest, single.length, async () => Readable.from(chunks(single)), {
      measure: true,
    });
    const file = path.join(dir, 'sizes/v2/sha256', digest.slice(7));
    t.equal(await readFile(file, 'utf8'), `${random.length}\n`, 'kept as digits and a newline');
    for (const [what, left] of [
      ['empty', ''],
      ['zeroed', '\0'.repeat(7)],
      ['no newline (cut short)', String(random.length).slice(0, 3)],
      ['a sign', `-${random.length}\n`],
      ['spaces', ` ${random.length}\n`],
    ] as const) {
      await writeFile(file, left);
      t.equal(await cache.unpackedSize(digest), undefined, `${what}: no size`);
      await cache.fetch(
        digest,
        single.length,
        async () => {
          throw new Error('no download: it is cached');
        },
        { measure: true },
      );
      t.equal(await cache.unpackedSize(digest), random.length, `${what}: measured again`);
    }
  },
);

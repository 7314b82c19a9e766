// tier: unit
// The image-store estimate of a gzip layer from its trailer (ISIZE, issue #45): read as the layer
// streams into the cache, no decompression, where the trailer can only be the whole stream's;
// otherwise (another member before the last, a size that may have wrapped at 4 GiB, a bomb) the
// cached file is read again and decompressed, and the figure is the same as before.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { BlobCache, MAX_UNPACK_RATIO, UnpackedCounter, gzipTrailerSize } from '@offline-bundle/oci';
import { tmpdir } from '../helpers/tmp.mjs';

const sha = (b: Buffer) => 'sha256:' + createHash('sha256').update(b).digest('hex');
const chunks = (buf: Buffer, size = 16_384) => Array.from({ length: Math.ceil(buf.length / size) }, (_, i) => buf.subarray(i * size, (i + 1) * size));
/** A trailer whose ISIZE is `isize` (CRC left zero: only ISIZE is read). */
const trailer = (isize: number) => { const b = Buffer.alloc(8); b.writeUInt32LE(isize, 4); return b; };
const GZ_HEAD = Buffer.from([0x1f, 0x8b, 0x08]);

const random = randomBytes(300_000);
const single = gzipSync(random);
// estargz's shape: many members, the last one small (its footer)
const multi = Buffer.concat([gzipSync(randomBytes(400_000)), gzipSync(randomBytes(2_000))]);

t.test('gzipTrailerSize trusts a single member\'s ISIZE and refuses what may not be the whole stream\'s', async (t) => {
  t.equal(gzipTrailerSize(single.length, single.subarray(0, 3), single.subarray(-8)), random.length, 'one member: its exact size');
  t.equal(gzipTrailerSize(multi.length, multi.subarray(0, 3), multi.subarray(-8)), undefined, 'a last member smaller than the stream: another member before it');
  t.equal(gzipTrailerSize(600 * 2 ** 20, GZ_HEAD, trailer(700 * 2 ** 20)), undefined, 'a size that may have wrapped at 4 GiB (4.7 GiB would be under 8x)');
  t.equal(gzipTrailerSize(100 * 2 ** 20, GZ_HEAD, trailer(300 * 2 ** 20)), 300 * 2 ** 20, 'the same ratio on a smaller layer: a wrap would mean over 40x');
  t.equal(gzipTrailerSize(2 ** 32, GZ_HEAD, trailer(2 ** 32 - 1)), undefined, 'a stream of 4 GiB or more');
  t.equal(gzipTrailerSize(1000, GZ_HEAD, trailer(1000 * MAX_UNPACK_RATIO + 1)), undefined, 'past MAX_UNPACK_RATIO: decompression bounds it');
  t.equal(gzipTrailerSize(1000, Buffer.from([0x28, 0xb5, 0x2f]), trailer(5000)), undefined, 'not gzip');
  t.equal(gzipTrailerSize(1000, Buffer.from([0x1f, 0x8b, 0x07]), trailer(5000)), undefined, 'not deflate');
});

/** A counter fed `data` in chunks, with a reread that counts its calls. */
async function count(data: Buffer) {
  let rereads = 0;
  const counter = new UnpackedCounter(data.length, { reread: () => { rereads++; return Readable.from(chunks(data)); } });
  for (const c of chunks(data)) await counter.push(c);
  return { size: await counter.finish(), rereads };
}

t.test('the counter takes a single member\'s size from its trailer and decompresses the rest again', async (t) => {
  t.same(await count(single), { size: random.length, rereads: 0 }, 'one member: no second read');
  t.same(await count(multi), { size: 402_000, rereads: 1 }, 'two members: read again and decompressed to the exact size');
  const bomb = gzipSync(Buffer.alloc(20_000_000));
  t.same(await count(bomb), { size: bomb.length * MAX_UNPACK_RATIO, rereads: 1 }, 'a bomb: decompressed up to its bound, as before');
  const tiny = gzipSync(Buffer.from('x'));
  t.same(await count(Buffer.concat(chunks(tiny, 3))), { size: 1, rereads: 0 }, 'chunks shorter than the trailer');
});

t.test('the cache keeps the same figure whether the trailer or the decompression gave it', async (t) => {
  const dir = await tmpdir(t, 'ob-trailer-');
  const cache = new BlobCache(dir);
  for (const [what, data, unpacked] of [['one member', single, random.length], ['two members', multi, 402_000]] as const) {
    const digest = sha(data);
    await cache.fetch(digest, data.length, async () => Readable.from(chunks(data)), { measure: true });
    t.equal(await cache.unpackedSize(digest), unpacked, `${what}: measured as it was fetched`);
    await rm(path.join(dir, 'sizes'), { recursive: true });
    await cache.fetch(digest, data.length, async () => { throw new Error('no download: it is cached'); }, { measure: true });
    t.equal(await cache.unpackedSize(digest), unpacked, `${what}: a cache from before sizes were kept, measured from its file`);
    t.equal((await readFile(path.join(dir, 'blobs/sha256', digest.slice(7)))).length, data.length);
  }
});

// tier: unit
// The writer reads blob files into pooled buffers and gives each back once the frame writer has
// compressed its last byte, and compresses frames into pooled buffers given back once written
// (#45): a buffer given back while its bytes are still needed would be filled again and its new
// bytes packed. Every buffer here is poisoned (overwritten) the moment it is given back, so one
// given back early shows as wrong bytes in the bundle.
import t, { type Test } from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { decompress } from 'zstd-napi';
import { readBuffers } from '@offline-bundle/host';
import { zstdBinding } from '@offline-bundle/oci';
import { FRAME_BYTES, blobPath, verifyBundle, withBundleFile } from '@offline-bundle/format';
import { FrameWriter } from '../../packages/format/dist/frame-writer.js';
import { READ_CHUNK } from '../../packages/format/dist/layout.js';
import { pooledFileStream } from '../../packages/format/dist/pooled-read.js';
import { makeBundle, readEntries, tmpdir } from './craft.js';

const POISON = 0xee;

/** Half random, half zeros: frames of both kinds (stored and compressed at the level). */
function mixed(n: number): Buffer {
  const b = Buffer.alloc(n);
  randomBytes(Math.floor(n / 2)).copy(b);
  return b;
}

t.test(
  'FrameWriter: a chunk straddling frames and cuts is released once, only after its last frame is compressed',
  async (t) => {
    const input = mixed(3 * FRAME_BYTES + 12_345);
    // odd sizes: chunks end mid-frame, begin in one frame and end in the next, span a cut
    const sizes = [700_001, 1_500_000, FRAME_BYTES + 3, 65_536, 2_000_000];
    const cuts = [0, 1_000_000, 2 * FRAME_BYTES + 17];
    const frames: Buffer[] = [];
    const released = new Map<Buffer, number>();
    const framer = new FrameWriter(
      async (f) => {
        frames.push(f);
      },
      cuts,
      3,
      false,
      (chunk) => {
        released.set(chunk, (released.get(chunk) ?? 0) + 1);
        chunk.fill(POISON);
      },
    );
    const chunks: Buffer[] = [];
    for (let at = 0, i = 0; at < input.length; i++) {
      const n = Math.min(sizes[i % sizes.length]!, input.length - at);
      // each chunk a copy in a buffer of its own, as a pooled read gives
      chunks.push(Buffer.from(input.subarray(at, at + n)));
      at += n;
    }
    await new Promise<void>((resolve, reject) => {
      framer.on('error', reject);
      framer.on('finish', resolve);
      for (const c of chunks) framer.write(c);
      framer.end();
    });
    const out = Buffer.concat(frames.map((f) => decompress(f)));
    t.ok(out.equals(input), 'the frames decode to the input, poisoned buffers and all');
    t.ok(
      framer.frames.length > 4,
      `cut into ${framer.frames.length} frames, chunks straddling them`,
    );
    t.same(
      chunks.map((c) => released.get(c)),
      chunks.map(() => 1),
      'every chunk released exactly once',
    );
  },
);

t.test(
  'pooledFileStream: the file in pooled chunks, each given back reused for the next read',
  async (t) => {
    const dir = await tmpdir(t, 'ob-pooled-');
    const file = path.join(dir, 'blob');
    const data = randomBytes(3 * READ_CHUNK + 1000);
    await writeFile(file, data);
    const pool = readBuffers(READ_CHUNK);
    const before = { allocated: pool.allocated, taken: pool.taken, onLoan: pool.onLoan };
    const hash = createHash('sha256');
    for await (const chunk of pooledFileStream(file, pool)) {
      hash.update(chunk as Buffer);
      pool.give(chunk as Buffer);
    }
    t.equal(hash.digest('hex'), createHash('sha256').update(data).digest('hex'), 'its bytes');
    t.equal(pool.onLoan, before.onLoan, 'every buffer back');
    t.ok(pool.taken - before.taken >= 4, 'a buffer per read');
    t.ok(pool.allocated - before.allocated <= 3, 'buffers given back are read into again');
  },
);

t.test('pooledFileStream: a missing file fails the stream with its ENOENT', async (t) => {
  const dir = await tmpdir(t, 'ob-pooled-');
  const s = pooledFileStream(path.join(dir, 'gone'), readBuffers(READ_CHUNK));
  await t.rejects(
    (async () => {
      for await (const _ of s) void _;
    })(),
    { code: 'ENOENT' },
  );
});

/** Every buffer `pool` takes back is overwritten at once; returns how many were, so far. */
function poisonOnGive(t: Test, pool: ReturnType<typeof readBuffers>): () => number {
  const give = pool.give.bind(pool);
  let poisoned = 0;
  pool.give = (chunk: Buffer) => {
    const lent = pool.onLoan;
    give(chunk);
    // only a buffer the pool took back (it is offered others): the whole of it
    if (pool.onLoan === lent) return;
    Buffer.from(chunk.buffer, 0, pool.size).fill(POISON);
    poisoned++;
  };
  t.teardown(() => {
    pool.give = give;
  });
  return () => poisoned;
}

t.test(
  'writeBundle with every pooled read and frame buffer poisoned as it is given back: the bundle verifies and holds the blobs',
  async (t) => {
    const reads = readBuffers(READ_CHUNK);
    const frames = readBuffers(zstdBinding.compressBound(FRAME_BYTES));
    const readsPoisoned = poisonOnGive(t, reads);
    const framesPoisoned = poisonOnGive(t, frames);
    const loaned = [reads.onLoan, frames.onLoan];
    // layers of several chunks each: a frame gathers up to four before it is compressed
    const layers = [mixed(FRAME_BYTES + 3 * READ_CHUNK + 77), randomBytes(2 * FRAME_BYTES + 5)];
    const b = await makeBundle(t, { layers });
    await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }));
    const entries = await readEntries(b.path);
    for (const blob of b.blobs) {
      const e = entries.find((x) => x.header.name === blobPath(blob.digest));
      t.ok(e?.data.equals(blob.data), `${blob.size} bytes packed as they were read`);
    }
    t.ok(readsPoisoned() > 5, `${readsPoisoned()} read buffers poisoned as they were given back`);
    t.ok(
      framesPoisoned() > 3,
      `${framesPoisoned()} frame buffers poisoned as they were given back`,
    );
    t.same([reads.onLoan, frames.onLoan], loaned, 'every pooled buffer given back');
  },
);

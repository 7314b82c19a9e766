// tier: unit
// BlobCache downloads gathered into batches before they are hashed, fed and written (#45): a
// registry's 16-64 KiB chunks were each a thread-pool write and a wake-up of the counting and
// piece threads.
import t, { type Test } from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { open, readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { gzipSync } from 'node:zlib';
import { PieceHashThread } from '@offline-bundle/format';
import { readBuffers } from '@offline-bundle/host';
import { BlobCache } from '@offline-bundle/image-fetch';
import { OciError } from '@offline-bundle/oci';
import { tmpdir } from '../helpers/tmp.mjs';

const sha = (b: Buffer) => 'sha256:' + createHash('sha256').update(b).digest('hex');

/** Two blobs of different bytes, 1 MiB and a bit: several batches and a part. */
const blobOf = (seed: number) =>
  Buffer.from(Array.from({ length: 1_100_000 }, (_, i) => (i * seed + (i >> 11)) & 0xff));

/** `buf` in 16 KiB chunks, every one at hand at once (as a busy build finds a socket's). */
const chunked = (buf: Buffer, size = 16_384) => {
  const parts: Buffer[] = [];
  for (let i = 0; i < buf.length; i += size) parts.push(buf.subarray(i, i + size));
  return Readable.from(parts);
};

/** A tap that keeps a copy of each push as it resolves (what the piece and counting threads do). */
function recordingTap() {
  const pushes: Buffer[] = [];
  return {
    pushes,
    tap: () => ({
      push: async (chunk: Buffer) => {
        pushes.push(Buffer.from(chunk));
      },
      finish: async () => undefined,
      abandon: () => undefined,
    }),
  };
}

t.test('chunks at hand reach the feeds in batches far larger than the chunks', async (t) => {
  const c = new BlobCache(await tmpdir(t));
  const blob = blobOf(31);
  const seen = recordingTap();
  const p = await c.fetch(sha(blob), blob.length, async () => chunked(blob), { tap: seen.tap });
  t.ok((await readFile(p)).equals(blob), 'the file is the blob');
  t.ok(Buffer.concat(seen.pushes).equals(blob), 'the feeds saw every byte, in order');
  // 68 chunks of 16 KiB: chunk by chunk this was 68 pushes (and 68 writes)
  t.ok(seen.pushes.length <= 8, `${seen.pushes.length} pushes for 68 chunks`);
  t.ok(
    seen.pushes.slice(0, -1).every((b) => b.length >= 128 * 1024),
    'each push but the last is a batch, not a chunk',
  );
});

t.test('batches reused across downloads at once keep each blob intact', async (t) => {
  const c = new BlobCache(await tmpdir(t));
  const blobs = [31, 47, 59, 73].map(blobOf);
  const seen = blobs.map(() => recordingTap());
  const paths = await Promise.all(
    blobs.map((b, i) =>
      c.fetch(sha(b), b.length, async () => chunked(b, 65_536), { tap: seen[i]!.tap }),
    ),
  );
  for (const [i, b] of blobs.entries()) {
    t.ok((await readFile(paths[i]!)).equals(b), `blob ${i} stored whole`);
    t.ok(Buffer.concat(seen[i]!.pushes).equals(b), `blob ${i} fed whole`);
  }
  // once more: the batches now come from the pool, written into by the downloads before
  const again = new BlobCache(await tmpdir(t));
  const more = await Promise.all(
    blobs.map((b) => again.fetch(sha(b), b.length, async () => chunked(b, 65_536))),
  );
  for (const [i, b] of blobs.entries())
    t.ok((await readFile(more[i]!)).equals(b), `blob ${i} stored whole from reused batches`);
});

/** `buf` from `from` on, a chunk each turn of the event loop (as a socket's arrive), in sizes that straddle batches. */
function paced(buf: Buffer, from = 0, sizes = [65_536]) {
  let n = 0;
  return new Readable({
    read() {
      setImmediate(() => {
        if (from >= buf.length) return void this.push(null);
        const size = sizes[n++ % sizes.length]!;
        this.push(buf.subarray(from, from + size));
        from += size;
      });
    },
  });
}

/** Every file write of this process waits `ms()` first (a slow disk), until the test ends. */
async function slowWrites(t: Test, ms: () => number): Promise<void> {
  const fh = await open('/dev/null', 'r');
  const proto = Object.getPrototypeOf(fh) as { write: (...a: unknown[]) => Promise<unknown> };
  await fh.close();
  const write = proto.write;
  proto.write = async function (this: unknown, ...a: unknown[]) {
    await sleep(ms());
    return write.apply(this, a);
  };
  t.teardown(() => void (proto.write = write));
}

/** The most batches out on loan at once while `work` runs. */
async function peakLoan(work: () => Promise<unknown>): Promise<number> {
  const pool = readBuffers(256 * 1024);
  const base = pool.onLoan;
  let peak = 0;
  const probe = setInterval(() => (peak = Math.max(peak, pool.onLoan - base)), 2);
  try {
    await work();
  } finally {
    clearInterval(probe);
  }
  return Math.max(peak, pool.onLoan - base);
}

const DOWNLOADS = 8;
/** 2 MiB each: 128 chunks of 16 KiB, 8 batches. */
const blobsOf2MiB = () => Array.from({ length: DOWNLOADS }, (_, i) => randomBytes((2 << 20) + i));

t.test('a slow disk holds the downloads back: at most two batches each in memory', async (t) => {
  await slowWrites(t, () => 20);
  const c = new BlobCache(await tmpdir(t));
  const blobs = blobsOf2MiB();
  const peak = await peakLoan(() =>
    Promise.all(blobs.map((b) => c.fetch(sha(b), b.length, async () => paced(b, 0, [16_384])))),
  );
  // batch by batch as the chunks came, 20 ms a write: some 120 a download were lent at once
  t.ok(peak <= 2 * DOWNLOADS + 2, `${peak} batches lent at once for ${DOWNLOADS} downloads`);
  for (const b of blobs) t.ok((await readFile(c.path(sha(b)))).equals(b), 'stored whole');
});

t.test('a slow feed holds the downloads back too', async (t) => {
  const c = new BlobCache(await tmpdir(t));
  const blobs = blobsOf2MiB();
  const slowTap = () => ({
    push: () => sleep(20),
    finish: async () => undefined,
    abandon: () => undefined,
  });
  const peak = await peakLoan(() =>
    Promise.all(
      blobs.map((b) =>
        c.fetch(sha(b), b.length, async () => paced(b, 0, [16_384]), { tap: slowTap }),
      ),
    ),
  );
  t.ok(peak <= 2 * DOWNLOADS + 2, `${peak} batches lent at once for ${DOWNLOADS} downloads`);
});

/** A gzip layer of 2.5 MiB, part random, part runs: its compressed bytes and its real size. */
function layer(seed: number): { gz: Buffer; raw: number } {
  const raw = Buffer.concat(
    Array.from({ length: 40 }, (_, k) =>
      k % 3 ? randomBytes(64 * 1024) : Buffer.alloc(64 * 1024, seed + k),
    ),
  );
  return { gz: gzipSync(raw, { level: 1 }), raw: raw.length };
}

t.test(
  'piece lists and unpacked sizes match the stored bytes (real piece and counting threads, a slow disk, flaky paced sources)',
  async (t) => {
    // a batch reused while a thread still read it would change its piece hash or its gunzip count
    await slowWrites(t, () => Math.random() * 30);
    const thread = new PieceHashThread();
    t.teardown(() => thread.stop());
    const c = new BlobCache(await tmpdir(t));
    const PIECE = 1 << 20;
    await Promise.all(
      Array.from({ length: DOWNLOADS }, (_, i) => layer(i)).map(async ({ gz, raw }, i) => {
        const digest = sha(gz);
        let list: string | undefined;
        let attempt = 0;
        const open = async (from: number) => {
          const src = paced(gz, from, [1000, 16_384, 65_536, 300_000]);
          // the first attempt of every other download breaks after a few chunks
          if (attempt++ === 0 && i % 2) {
            let n = 0;
            src.on('data', () => {
              if (++n === 5 + i) src.destroy(new OciError('NETWORK_ERROR', 'connection reset'));
            });
          }
          return src;
        };
        const p = await c.fetch(digest, gz.length, open, {
          measure: true,
          tap: () => {
            const s = thread.open(PIECE);
            return {
              push: (b: Buffer) => s.push(b),
              finish: async () => void (list = await s.end()),
              abandon: () => s.abandon(),
            };
          },
        });
        t.equal(list, await thread.hashFile(p, PIECE), `download ${i}: its pieces are its file's`);
        t.equal(await c.unpackedSize(digest), raw, `download ${i}: its unpacked size is gunzip's`);
      }),
    );
  },
);

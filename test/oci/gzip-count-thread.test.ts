// tier: unit
// Issue #45: a gzip layer's unpacked size is counted on a thread of its own. Decoding it on the
// main thread made a fresh output buffer per MiB unpacked, and that churn set off most of a
// build's full garbage collections (72 of 74 in a 355 MB build). Several layers are counted at
// once through the one thread; each keeps its own figure.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import { gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { Readable } from 'node:stream';
import { BlobCache, UnpackedCounter } from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';

const MiB = 1024 * 1024;
const CHUNK = 64 * 1024;
const sha = (b: Buffer) => 'sha256:' + createHash('sha256').update(b).digest('hex');

/** A buffer of its own (not a slice of a larger one): pushed as is, never copied first. */
const own = (b: Buffer) => {
  const out = Buffer.allocUnsafeSlow(b.length);
  b.copy(out);
  return out;
};

/** Full collections on the main thread while `fn` runs. */
async function fullCollections(fn: () => Promise<unknown>): Promise<number> {
  let majors = 0;
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      if (
        (e as unknown as { detail?: { kind?: number } }).detail?.kind ===
        constants.NODE_PERFORMANCE_GC_MAJOR
      )
        majors++;
  });
  obs.observe({ entryTypes: ['gc'] });
  await fn();
  // entries are delivered on a later turn
  await new Promise((resolve) => setTimeout(resolve, 50));
  obs.disconnect();
  return majors;
}

// first: later tests leave freed memory that would hide this one's growth
t.test(
  'six layers of 64 MiB counted at once add under 45 MiB of RSS: the chunks cross through a ring, the thread collects its output every 4 MiB',
  async (t) => {
    // members of 4 MiB, concatenated: one gzip stream of 64 MiB, without holding that much here
    const member = gzipSync(randomBytes(4 * MiB), { level: 0 });
    const layerBytes = 16 * member.length;
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 10);
    const counted = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const c = new UnpackedCounter(layerBytes);
        // one buffer, refilled: nothing allocated here per chunk, and a push must have taken the bytes when it returns
        const buf = Buffer.allocUnsafeSlow(CHUNK);
        for (let at = 0; at < layerBytes; at += CHUNK) {
          const n = Math.min(CHUNK, layerBytes - at);
          for (let i = 0; i < n;)
            i += member.copy(
              buf,
              i,
              (at + i) % member.length,
              Math.min(member.length, ((at + i) % member.length) + n - i),
            );
          await c.push(buf.subarray(0, n));
        }
        return c.finish();
      }),
    );
    clearInterval(sampler);
    t.same(counted, Array(6).fill(64 * MiB), 'each layer measured');
    // chunks cloned into messages and outputs left to V8's own 32 MiB trigger held 55-78 MiB here
    t.ok(
      peak - before < 45 * MiB,
      `RSS grew ${((peak - before) / MiB).toFixed(1)} MiB while counting 384 MiB`,
    );
  },
);

t.test(
  'a chunk larger than the ring and odd-sized ones that wrap it are counted exactly',
  async (t) => {
    const big = gzipSync(randomBytes(3 * MiB), { level: 0 });
    const whole = new UnpackedCounter(big.length);
    await whole.push(own(big));
    t.equal(await whole.finish(), 3 * MiB, 'a 3 MiB chunk, more than the 1 MiB ring holds');
    const odd = new UnpackedCounter(big.length);
    const buf = Buffer.alloc(99_991);
    for (let at = 0; at < big.length; at += buf.length) {
      const n = big.copy(buf, 0, at, at + buf.length);
      await odd.push(buf.subarray(0, n));
    }
    t.equal(await odd.finish(), 3 * MiB, 'pieces of 99,991 bytes from one reused buffer');
  },
);

t.test(
  'fetching four 32 MiB gzip layers into the cache: measuring them adds no full collection on the main thread',
  async (t) => {
    const dir = await tmpdir(t, 'ob-gzip-count-');
    const layers = Array.from({ length: 4 }, () => gzipSync(randomBytes(32 * MiB), { level: 0 }));
    // cut beforehand into 64 KiB chunks of their own, as a socket delivers them: the test allocates nothing while it counts
    const chunked = layers.map((g) =>
      Array.from({ length: Math.ceil(g.length / CHUNK) }, (_, i) =>
        own(g.subarray(i * CHUNK, (i + 1) * CHUNK)),
      ),
    );
    const fetchAll = (cache: BlobCache, measure: boolean) =>
      Promise.all(
        layers.map((g, i) =>
          cache.fetch(sha(g), g.length, async () => Readable.from(chunked[i]!), { measure }),
        ),
      );
    const plain = await fullCollections(() =>
      fetchAll(new BlobCache(path.join(dir, 'plain')), false),
    );
    const measuredCache = new BlobCache(path.join(dir, 'measured'));
    const measured = await fullCollections(() => fetchAll(measuredCache, true));
    t.same(
      await Promise.all(layers.map((g) => measuredCache.unpackedSize(sha(g)))),
      [32 * MiB, 32 * MiB, 32 * MiB, 32 * MiB],
      'each layer measured',
    );
    // decoded on the main thread, its output buffers added 3 or more here (and most of a real build's)
    t.ok(measured <= plain + 1, `full collections: ${measured} measuring, ${plain} without`);
  },
);

t.test(
  'layers counted at once keep their own figures, and one abandoned mid-way leaves the others whole',
  async (t) => {
    const sizes = [300_000, 1_200_000, 70_000];
    const streams = sizes.map((n) => own(gzipSync(randomBytes(n))));
    const counters = streams.map((s) => new UnpackedCounter(s.length));
    const dropped = new UnpackedCounter(streams[1]!.length);
    const step = 16_384;
    for (let at = 0; at < Math.max(...streams.map((s) => s.length)); at += step) {
      await Promise.all(
        streams.map((s, i) =>
          at < s.length ? counters[i]!.push(own(s.subarray(at, at + step))) : undefined,
        ),
      );
      if (at < 5 * step) await dropped.push(own(streams[1]!.subarray(at, at + step)));
      if (at === 5 * step) dropped.abandon();
    }
    t.same(await Promise.all(counters.map((c) => c.finish())), sizes, 'each layer its own size');
    t.equal(await dropped.finish(), undefined, 'the abandoned one: no figure');
    const truncated = new UnpackedCounter(streams[0]!.length);
    await truncated.push(own(streams[0]!.subarray(0, streams[0]!.length - 100)));
    t.equal(
      await truncated.finish(),
      undefined,
      'a stream cut short: no figure (the 3x fallback applies)',
    );
  },
);

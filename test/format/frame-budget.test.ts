// tier: unit
// The budget of decoded frames shared by a random reader's streams (issue #24): it holds with
// many streams in parallel, waiters are served in order, a stream destroyed while waiting or
// while holding a frame gives its share back, one frame larger than the budget still proceeds,
// and the bytes streamed are the entry's bytes.
import t, { type Test } from 'tap';
import { once } from 'node:events';
import type { Readable } from 'node:stream';
import { setImmediate as tick } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';
import {
  BundleRandomReader,
  ByteBudget,
  FRAME_BYTES,
  FRAME_SLICE_BYTES,
  blobPath,
  openBundleFile,
  verifyBundle,
  withBundleFile,
  type BundleManifest,
  type BundleSource,
  type VerifiedFrames,
} from '@offline-bundle/format';
import { makeBundle, sha256, type MadeBundle } from './craft.js';
import { until } from '../helpers/until.js';
import { readBuffers } from '@offline-bundle/host';
// the stream class itself, to drive it with pieces and loads a real bundle cannot produce
import { FrameStream } from '../../packages/format/dist/frame-stream.js';

const BIG = 3 * FRAME_BYTES + 12_345;
const MiB = 1024 * 1024;

let b: MadeBundle;
let manifest: BundleManifest;
let verified: VerifiedFrames;
let big: Buffer;
let bigPath: string;
/** The budget one full frame of the (incompressible) big blob takes: its read bytes plus its decoded bytes. */
let frameWeight: number;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: [BIG, 700] });
  const v = await withBundleFile(b.path, (s) =>
    verifyBundle(s, { trust: b.trust, frameDigests: true }),
  );
  manifest = v.manifest;
  verified = { seekIndex: v.seekIndex, frameDigests: v.frameDigests! };
  big = b.blobs.find((x) => x.size === BIG)!.data;
  bigPath = blobPath(sha256(big));
  const full = v.seekIndex.frames.filter((f) => f.decompressedSize === FRAME_BYTES);
  frameWeight = Math.max(...full.map((f) => f.compressedSize + f.decompressedSize));
});

async function sourceOf(t: Test): Promise<BundleSource> {
  const source = await openBundleFile(b.path);
  t.teardown(() => source.close().catch(() => undefined));
  return source;
}

async function readerWith(
  t: Test,
  budget: ByteBudget,
  source?: BundleSource,
): Promise<BundleRandomReader> {
  return BundleRandomReader.open(source ?? (await sourceOf(t)), manifest, verified, {
    frameBudget: budget,
  });
}

async function collect(s: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** Records how many requests ever waited at once. */
function watched(budget: ByteBudget): { mostWaiting: () => number } {
  let most = 0;
  const acquire = budget.acquire.bind(budget);
  budget.acquire = (bytes, signal) => {
    const p = acquire(bytes, signal);
    most = Math.max(most, budget.waiting);
    return p;
  };
  return { mostWaiting: () => most };
}

/** Lets the event loop run until `ok()` holds; false if it never did within `rounds` turns. */
async function withinTurns(ok: () => boolean, rounds = 2000): Promise<boolean> {
  for (let i = 0; i < rounds && !ok(); i++) await tick();
  return ok();
}

t.test(
  'the budget alone: first come first served, a request larger than the whole budget waits only for an empty one',
  async (t) => {
    const budget = new ByteBudget(100);
    const order: string[] = [];
    await budget.acquire(60);
    const big = budget.acquire(80).then(() => order.push('80'));
    const small = budget.acquire(10).then(() => order.push('10'));
    await tick();
    t.same(
      order,
      [],
      'a small request that would fit does not pass the large one waiting before it',
    );
    t.equal(budget.waiting, 2);
    budget.release(60);
    await big;
    await small;
    t.same(order, ['80', '10'], 'granted in the order asked');
    t.equal(budget.inUse, 90);
    budget.release(90);

    const huge = budget.acquire(1000);
    await huge;
    t.equal(budget.inUse, 1000, 'a request over the capacity is granted when nothing else is held');
    let next = false;
    const after = budget.acquire(1).then(() => {
      next = true;
    });
    await tick();
    t.notOk(next, 'and nothing else meanwhile');
    budget.release(1000);
    await after;
    budget.release(1);
    t.equal(budget.inUse, 0);
    t.throws(
      () => budget.release(1),
      RangeError,
      'releasing more than is held is a bug, not a silent overdraft',
    );
  },
);

t.test(
  'the budget alone: a waiter aborted leaves the queue owing nothing, and the ones behind it move up',
  async (t) => {
    const budget = new ByteBudget(100);
    await budget.acquire(100);
    const stop = new AbortController();
    const first = budget.acquire(50, stop.signal);
    let second = false;
    const behind = budget.acquire(50).then(() => {
      second = true;
    });
    stop.abort(new Error('client gone'));
    await t.rejects(first, { message: 'client gone' });
    t.equal(budget.waiting, 1);
    budget.release(100);
    await behind;
    t.ok(second);
    t.equal(budget.inUse, 50, 'the aborted request never took its 50 bytes');
    await t.rejects(budget.acquire(10, AbortSignal.abort(new Error('already gone'))), {
      message: 'already gone',
    });
    t.equal(budget.waiting, 0);
  },
);

t.test(
  '16 streams in parallel: the bytes held never exceed the budget, every stream is the signed bytes',
  async (t) => {
    const budget = new ByteBudget(2 * frameWeight + MiB); // two full frames at a time
    const seen = watched(budget);
    const r = await readerWith(t, budget);
    const F = FRAME_BYTES;
    const ranges: [number, number][] = [
      [0, BIG],
      [F - 7, 3 * F + 9],
      [1, BIG - 1],
      [2 * F, BIG],
      [F + 100, F + 200],
      [0, F],
    ];
    const jobs = Array.from({ length: 16 }, (_, i) => ranges[i % ranges.length]!).map(
      async ([start, end]) => {
        const got = await collect(await r.streamChecked(bigPath, start, end));
        return got.equals(big.subarray(start, end));
      },
    );
    const results = await Promise.all(jobs);
    t.same(
      results,
      results.map(() => true),
      "every stream the entry's bytes of its range",
    );
    t.ok(
      seen.mostWaiting() > 0,
      `streams waited for the budget (at most ${seen.mostWaiting()} at once)`,
    );
    t.ok(budget.peak <= budget.capacity, `at most ${budget.peak} bytes held of ${budget.capacity}`);
    t.ok(budget.peak >= frameWeight, 'and frames were held through it');
    t.equal(budget.inUse, 0, 'all returned once the streams ended');
  },
);

t.test(
  'chunks handed on are copies of at most FRAME_SLICE_BYTES, not views of the frame',
  async (t) => {
    const r = await readerWith(t, new ByteBudget(64 * MiB));
    let largest = 0;
    let views = 0;
    // as pushed ('data'): an async iterator would join the chunks buffered into one
    const s = await r.streamChecked(bigPath);
    s.on('data', (chunk: Buffer) => {
      largest = Math.max(largest, chunk.length);
      // a view into a decoded frame shares its 4 MiB backing store
      if (chunk.buffer.byteLength >= FRAME_BYTES) views++;
    });
    await once(s, 'end');
    t.ok(largest <= FRAME_SLICE_BYTES, `largest chunk ${largest} bytes`);
    t.equal(views, 0, 'no chunk keeps a whole frame alive');
  },
);

t.test(
  'streams destroyed while waiting or while holding a frame give their share back',
  async (t) => {
    const budget = new ByteBudget(frameWeight); // one frame at a time
    const r = await readerWith(t, budget);
    const streams = await Promise.all(Array.from({ length: 6 }, () => r.streamChecked(bigPath)));
    for (const s of streams) s.read(0); // each asks for its first frame, nobody reads on
    t.ok(
      await withinTurns(() => budget.inUse > 0 && budget.waiting === 5),
      'one stream holds a frame, five wait',
    );

    const gone = async (s: Readable) => {
      if (s.closed) return;
      const closed = once(s, 'close');
      s.destroy();
      await closed;
    };
    await gone(streams[2]!);
    await gone(streams[4]!);
    t.equal(budget.waiting, 3, 'the destroyed waiters left the queue');
    const holding = budget.inUse;
    await gone(streams[0]!);
    t.ok(
      await withinTurns(() => budget.waiting === 2 && budget.inUse > 0),
      'the holder destroyed: the next waiter got the frame budget',
    );
    t.ok(budget.inUse <= holding);
    await Promise.all(streams.map(gone));
    t.equal(budget.inUse, 0, 'every share back');
    t.equal(budget.waiting, 0, 'nobody left waiting');

    const fresh = await collect(await r.streamChecked(bigPath));
    t.ok(fresh.equals(big), 'a later stream reads in full: nothing leaked');
    t.equal(budget.inUse, 0);
  },
);

t.test(
  'a stream destroyed while its frame is being read closes once that read is over, its share back',
  async (t) => {
    const budget = new ByteBudget(64 * MiB);
    const real = await sourceOf(t);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    let reads = 0;
    let held = false;
    // the real file, its reads held once the reader is open until the test lets them go
    const gated: BundleSource = {
      identity: real.identity,
      size: real.size,
      read: async (offset, length) => {
        reads++;
        if (held) await gate;
        return real.read(offset, length);
      },
      stream: (start, end, opts) => real.stream(start, end, opts),
      currentSize: () => real.currentSize(),
      close: () => real.close(),
    };
    const r = await readerWith(t, budget, gated);
    held = true;
    const s = await r.streamChecked(bigPath);
    s.read(0);
    const before = reads;
    t.ok(
      await withinTurns(() => budget.inUse > 0 && reads > before),
      "the frame's budget taken, its read under way",
    );
    let closed = false;
    s.once('close', () => {
      closed = true;
    });
    s.destroy();
    await tick();
    t.notOk(closed, 'not closed while its read still runs');
    t.ok(budget.inUse > 0, 'and the frame still counted');
    open();
    await once(s, 'close');
    t.equal(budget.inUse, 0, 'released once the read is over');
  },
);

t.test('one frame larger than the whole budget proceeds alone', async (t) => {
  const budget = new ByteBudget(MiB);
  const r = await readerWith(t, budget);
  const [one, two] = await Promise.all([
    collect(await r.streamChecked(bigPath)),
    collect(await r.streamChecked(bigPath, FRAME_BYTES)),
  ]);
  t.ok(
    one.equals(big) && two.equals(big.subarray(FRAME_BYTES)),
    'both streams complete with the signed bytes',
  );
  t.ok(budget.peak <= frameWeight, `never more than one frame at a time (${budget.peak} bytes)`);
  t.equal(budget.inUse, 0);
});

t.test('verify and readVerified go through the same budget and leave nothing held', async (t) => {
  const budget = new ByteBudget(frameWeight);
  const r = await BundleRandomReader.open(await sourceOf(t), manifest, undefined, {
    frameBudget: budget,
  });
  await Promise.all([r.verify(bigPath), r.verify(bigPath)]);
  t.ok((await r.readVerified(bigPath)).equals(big));
  t.ok(budget.peak > 0 && budget.peak <= frameWeight);
  t.equal(budget.inUse, 0);
});

t.test(
  'a stream dropped half-read without being destroyed gives its share back once collected',
  async (t) => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const budget = new ByteBudget(64 * MiB);
    const r = await readerWith(t, budget);
    await (async () => {
      const s = await r.streamChecked(bigPath);
      s.read(0);
      await withinTurns(() => s.readableLength > 0);
    })();
    t.ok(budget.inUse > 0, 'the dropped stream held a frame');
    t.ok(
      await withinTurns(() => {
        gc();
        return budget.inUse === 0;
      }, 200),
      'returned once the stream was collected',
    );
  },
);

t.test(
  'while a frame is handed on the next one is read, with half the budget to spare; destroyed then, every share back',
  async (t) => {
    const budget = new ByteBudget(64 * MiB);
    const r = await readerWith(t, budget);
    const s = await r.streamChecked(bigPath);
    s.read(0); // the first frame, and no more taken by the consumer
    t.ok(
      await until('a second frame held', () => budget.inUse > frameWeight),
      `two frames held: the one handed on and the next (${budget.inUse} bytes)`,
    );
    for (let i = 0; i < 20; i++) await tick();
    t.ok(budget.inUse < 3 * frameWeight, 'no further than one frame ahead');
    const closed = once(s, 'close');
    s.destroy();
    await closed;
    t.equal(budget.inUse, 0, "destroyed: the frame ahead's share back too");

    // room for three frames: a second one ahead would pass half of it
    const tight = new ByteBudget(3 * frameWeight);
    const alone = await readerWith(t, tight);
    t.ok(
      (await collect(await alone.streamChecked(bigPath))).equals(big),
      'the signed bytes, read with no room to read a full frame ahead',
    );
    t.ok(
      tight.peak <= tight.capacity / 2,
      `never ahead past half the budget (${tight.peak} of ${tight.capacity} bytes)`,
    );

    const roomy = new ByteBudget(64 * MiB);
    const ahead = await collect(await (await readerWith(t, roomy)).streamChecked(bigPath));
    t.ok(ahead.equals(big), 'the signed bytes, read ahead');
    t.ok(roomy.peak > frameWeight, `and read ahead (${roomy.peak} bytes held at most)`);
    t.equal(roomy.inUse, 0);
  },
);

t.test(
  'destroyed while the next frame is read ahead: that load is told, the stream closes once it is over, its pooled buffer and share back',
  async (t) => {
    const pool = readBuffers(FRAME_BYTES + 1);
    for (const honours of [false, true]) {
      const budget = new ByteBudget(64 * MiB);
      const pieces = [0, 1, 2].map((frame) => ({
        frame,
        from: 0,
        to: FRAME_BYTES,
        size: FRAME_BYTES,
        weight: 10,
      }));
      let open!: () => void;
      const gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      const signals: AbortSignal[] = [];
      // frame 0 at once; the frame read ahead held until the test lets it go, then decoded or (honours) given up
      const load = async (frame: number, into: Buffer | undefined, signal: AbortSignal) => {
        signals[frame] = signal;
        if (frame > 0) await gate;
        if (honours) signal.throwIfAborted();
        return into!.fill(frame, 0, FRAME_BYTES).subarray(0, FRAME_BYTES);
      };
      const loaned = pool.onLoan;
      const s = new FrameStream(pieces[Symbol.iterator](), { budget, load, copy: true });
      s.read(0);
      await until('the next frame read ahead', () => signals[1]);
      t.equal(
        pool.onLoan,
        loaned + 2,
        'two pooled frame buffers out: the one handed on and the one ahead',
      );
      let closed = false;
      s.once('close', () => {
        closed = true;
      });
      s.destroy();
      t.ok(signals[1]!.aborted, 'the load ahead is told the stream is gone');
      for (let i = 0; i < 20; i++) await tick();
      t.notOk(closed, 'not closed while the read ahead still runs');
      t.equal(budget.inUse, 20, 'both frames still counted');
      open();
      await once(s, 'close');
      t.equal(
        budget.inUse,
        0,
        `closed: every share back (load ${honours ? 'gave up' : 'finished'})`,
      );
      t.equal(pool.onLoan, loaned, 'and both frame buffers back in the pool');
    }
  },
);

t.test(
  'an iterator that fails while the stream looks ahead fails the stream, not ends it short',
  async (t) => {
    const budget = new ByteBudget(64 * MiB);
    function* pieces() {
      yield { frame: 0, from: 0, to: 1000, size: 1000, weight: 1 };
      yield { frame: 1, from: 0, to: 1000, size: 1000, weight: 1 };
      throw new Error('the seek index ends here');
    }
    const s = new FrameStream(pieces(), {
      budget,
      load: async () => Buffer.alloc(1000, 7),
      copy: false,
    });
    await t.rejects(
      collect(s),
      /the seek index ends here/,
      "the iterator's error, not a clean end after 2000 bytes",
    );
    t.equal(budget.inUse, 0);
  },
);

t.test('ByteBudget.tryAcquire: only at once, never past a waiter or the bound given', async (t) => {
  const budget = new ByteBudget(100);
  t.ok(budget.tryAcquire(40, 50), 'room: taken');
  t.notOk(budget.tryAcquire(20, 50), 'past the bound: not taken');
  const waiting = budget.acquire(70);
  t.notOk(budget.tryAcquire(10), 'a request waits: not overtaken');
  budget.release(40);
  await waiting;
  t.equal(budget.inUse, 70);
  budget.release(70);
});

// The read buffers (packages/host/src/read-buffers.ts, issue #24): a layout blob's units, and a
// bundle file's decoded frames and the slices copied out of them, are read into buffers taken
// back once they are done with (the client's socket has the bytes, the frame is copied out), so
// serving allocates a handful of buffers, not one per unit; and a buffer is never read into again
// while a slow client's socket may still hold it (every client gets the signed bytes).
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { open, stat, truncate, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ReadBuffers, readBuffers } from '@offline-bundle/host';
import {
  FRAME_BYTES,
  FRAME_SLICE_BYTES,
  openBundleFile,
  processFrameBudget,
  verifyBundle,
} from '@offline-bundle/format';
import { mirrorPath } from '@offline-bundle/oci';
import {
  BundleFileStore,
  catalogOf,
  layoutRange,
  startRegistry,
  type BlobStore,
  type Catalog,
} from '@offline-bundle/registry';
import { makeBundle } from '../format/craft.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';

const MiB = 1024 * 1024;
const data = randomBytes(32 * MiB + 4321);
const digest = 'sha256:' + createHash('sha256').update(data).digest('hex');
const chunkDigests = Array.from({ length: Math.ceil(data.length / MiB) }, (_, i) =>
  createHash('sha256')
    .update(data.subarray(i * MiB, (i + 1) * MiB))
    .digest(),
);

t.test(
  'ReadBuffers: a buffer comes back once, through any part of it, and only one it lent',
  async (t) => {
    const pool = new ReadBuffers(1024, 2);
    const a = pool.take();
    t.equal(a.length, 1024);
    pool.give(a.subarray(10, 20));
    pool.give(a);
    const b = pool.take();
    t.equal(b.buffer, a.buffer, 'taken again after it was given back');
    t.not(pool.take().buffer, a.buffer, 'given twice, lent once: the next take is a new buffer');
    pool.give(Buffer.alloc(1024));
    t.equal(pool.allocated, 2, 'a buffer it never lent is not taken in');
    const many = [pool.take(), pool.take(), pool.take(), pool.take()];
    for (const m of many) pool.give(m);
    const after = pool.allocated;
    pool.take();
    pool.take();
    pool.take();
    t.equal(pool.allocated, after + 1, 'keeps at most `keep` idle buffers');
  },
);

t.test('ReadBuffers: idle buffers are dropped once no take came for its idle time', async (t) => {
  const pool = new ReadBuffers(1024, 4, 50);
  const lent = [pool.take(), pool.take()];
  for (const b of lent) pool.give(b);
  t.equal(pool.idle, 2, 'given back, kept for the next take');
  await until('dropped after the idle time', () => pool.idle === 0, { timeoutMs: 3000 });
  pool.take();
  t.equal(pool.allocated, 3, 'the next take allocates anew');
  const busy = new ReadBuffers(1024, 4, 200);
  busy.give(busy.take());
  await sleep(120);
  busy.give(busy.take());
  await sleep(120);
  t.equal(busy.idle, 1, 'a take within the idle time keeps the pool');
  t.equal(busy.allocated, 1, 'the same buffer, not one allocated again');
});

/** The catalog of a registry holding `data` as the one blob of example.com/app. */
function catalogOf1(): Catalog {
  return {
    repositories: new Map([['example.com/app', new Map()]]),
    sources: new Map([['example.com/app', 'example.com/app']]),
    shortNames: new Map(),
    ambiguous: new Map(),
    manifests: new Map(),
    blobs: new Map([[digest, data.length]]),
  };
}

/** A registry serving `data` as one blob of example.com/app through layoutRange, as LayoutStore and StagingStore do. */
async function serving(t: Tap.Test, file: string, checked: boolean) {
  const store: BlobStore = {
    size: (d) => (d === digest ? data.length : undefined),
    open: async (_d, start, end) =>
      layoutRange(
        await open(file),
        data.length,
        start,
        end,
        'blob',
        checked ? chunkDigests : undefined,
      ),
    close: async () => undefined,
  };
  const reg = await startRegistry({ store, catalog: catalogOf1() });
  t.teardown(() => reg.close());
  return `http://${reg.address}/v2/example.com/app/blobs/${digest}`;
}

/** The sha256 of the blob as a client gets it; `slow`: it stops reading now and then, so its socket holds bytes while others are read. */
function get(url: string, slow: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      const hash = createHash('sha256');
      let n = 0;
      res.on('data', (c: Buffer) => {
        hash.update(c);
        if (slow && ++n % 8 === 0) {
          res.pause();
          void sleep(5).then(() => res.resume());
        }
      });
      res.on('end', () =>
        res.statusCode === 200 && res.complete
          ? resolve('sha256:' + hash.digest('hex'))
          : reject(new Error(`status ${res.statusCode}`)),
      );
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

let file: string;
t.before(async () => {
  file = join(await tmpdir(t), 'blob');
  await writeFile(file, data);
});

for (const checked of [false, true]) {
  t.test(
    `${checked ? 'checked' : 'unchecked'} layout blob, 8 clients (half of them slow): the file's bytes to each, from a few reused buffers`,
    async (t) => {
      const url = await serving(t, file, checked);
      const pool = readBuffers(checked ? MiB : 256 * 1024);
      const before = pool.allocated;
      const units = Math.floor(data.length / pool.size);
      const got = await Promise.all(Array.from({ length: 8 }, (_, i) => get(url, i % 2 === 1)));
      t.same(
        got,
        got.map(() => digest),
        "every client got the file's bytes",
      );
      // each stream holds a few units at a time (reading, queued, in the socket); without reuse every read is a new buffer
      const fresh = pool.allocated - before;
      t.ok(fresh < (8 * units) / 4, `${fresh} buffers allocated for ${8 * units} whole units read`);
    },
  );
}

t.test(
  'a client gone while the store was opening the blob: the stream is closed, its file with it',
  async (t) => {
    let opened!: (fh: FileHandle) => void;
    const fhReady = new Promise<FileHandle>((resolve) => {
      opened = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const store: BlobStore = {
      size: (d) => (d === digest ? data.length : undefined),
      open: async (_d, start, end) => {
        const fh = await open(file);
        opened(fh);
        await gate;
        return layoutRange(fh, data.length, start, end, 'blob');
      },
      close: async () => undefined,
    };
    const reg = await startRegistry({ store, catalog: catalogOf1() });
    t.teardown(() => reg.close());
    const req = request(`http://${reg.address}/v2/example.com/app/blobs/${digest}`);
    req.on('error', () => undefined);
    req.end();
    const fh = await fhReady;
    req.destroy();
    await until('the client is gone', () => reg.connections === 0);
    release();
    await until("the blob's file is closed", () => fh.fd === -1);
  },
);

const BIG = 6 * FRAME_BYTES + 777;

/** A registry serving a verified bundle file (media mode) whose big blob spans six full frames; the blob's URL. */
async function servingBundleFile(t: Tap.Test) {
  const b = await makeBundle(t, { layerSizes: [BIG, 900] });
  const blob = b.blobs.find((x) => x.size === BIG)!;
  const source = await openBundleFile(b.path);
  t.teardown(() => source.close());
  const v = await verifyBundle(source, { trust: b.trust, frameDigests: true });
  const store = await BundleFileStore.open(source, v.manifest, catalogOf(v.manifest), {
    seekIndex: v.seekIndex,
    frameDigests: v.frameDigests!,
  });
  const reg = await startRegistry({ store, catalog: catalogOf(v.manifest) });
  t.teardown(() => reg.close());
  return {
    file: b.path,
    blob,
    url: `http://${reg.address}/v2/${mirrorPath('example.com/test/app')}/blobs/${blob.digest}`,
  };
}

t.test(
  'from a bundle file (media mode), 8 clients (half of them slow): the signed bytes to each, frames and slices from reused buffers',
  async (t) => {
    const { blob, url } = await servingBundleFile(t);
    const frames = readBuffers(FRAME_BYTES + 1);
    const slices = readBuffers(FRAME_SLICE_BYTES);
    const before = { frames: frames.allocated, slices: slices.allocated };
    const got = await Promise.all(Array.from({ length: 8 }, (_, i) => get(url, i % 2 === 1)));
    t.same(
      got,
      got.map(() => blob.digest),
      "every client got the blob's bytes",
    );
    const framesRead = 8 * Math.ceil(BIG / FRAME_BYTES);
    const slicesSent = 8 * Math.floor(BIG / FRAME_SLICE_BYTES);
    t.ok(frames.allocated > 0, 'full frames are decoded into pooled buffers');
    t.ok(
      frames.allocated - before.frames < framesRead / 4,
      `${frames.allocated - before.frames} frame buffers for ${framesRead} frames decoded`,
    );
    t.ok(
      slices.allocated - before.slices < slicesSent / 4,
      `${slices.allocated - before.slices} slice buffers for ${slicesSent} slices sent`,
    );
    await until("every frame's budget back", () => processFrameBudget.inUse === 0);
  },
);

t.test(
  'from a bundle file cut short after it was verified (media pulled): every request fails, and the frame buffers come back',
  async (t) => {
    const { file: cut, url } = await servingBundleFile(t);
    await truncate(cut, Math.floor((await stat(cut)).size / 2));
    const frames = readBuffers(FRAME_BYTES + 1);
    const before = frames.allocated;
    const takenBefore = frames.taken;
    const TRIES = 12;
    let failed = 0;
    for (let i = 0; i < TRIES; i++)
      await get(url, false).then(
        () => undefined,
        () => failed++,
      );
    t.equal(failed, TRIES, 'no client gets the blob from the cut file');
    t.ok(
      frames.taken - takenBefore >= TRIES,
      `each request decoded into pooled buffers (${frames.taken - takenBefore} taken)`,
    );
    // a request holds two at most: the frame handed on and the one read ahead
    t.ok(
      frames.allocated - before <= 2,
      `${frames.allocated - before} frame buffers allocated for ${TRIES} failed frame loads`,
    );
    await until("every frame's budget back", () => processFrameBudget.inUse === 0);
  },
);

// tier: unit
// The BundleSource seam: the readers above it report a failing source exactly as they report the
// same fault in a file. Each fault is injected by the in-memory double (test/helpers/memory-source.ts),
// whose identity is the file's path, and compared with the file itself given the same fault: cut
// while read, a byte rewritten between two reads. (A read error (EIO) cannot be made in a file on
// this machine, no device-mapper: it is compared with what the readers promise for one.)
import t, { type Test } from 'tap';
import { copyFile, open, readFile, readdir, truncate, unlink } from 'node:fs/promises';
import path from 'node:path';
import {
  BundleRandomReader,
  FRAME_BYTES,
  FormatError,
  blobPath,
  extractBundle,
  openBundleFile,
  readHeader,
  verifyBundle,
  type BundleManifest,
  type BundleSource,
} from '@offline-bundle/format';
import { MemorySource, type MemoryFaults } from '../helpers/memory-source.js';
import { makeBundle, readFrames, type MadeBundle, type RawFrame } from './craft.js';

const BIG = 12 * 1024 * 1024;

let b: MadeBundle;
let bytes: Buffer;
let manifest: BundleManifest;
/** A full-size data frame in the middle of the big layer, and that layer's path in the layout. */
let frame: RawFrame;
let bigPath: string;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: [BIG, 6 * 1024 * 1024] });
  bytes = await readFile(b.path);
  manifest = b.written.manifest;
  const frames = await readFrames(b.path);
  frame = frames.filter((f) => f.decompressedSize === FRAME_BYTES)[1]!;
  bigPath = blobPath(b.blobs.find((x) => x.size === BIG)!.digest);
});

let n = 0;
/** A fresh copy of the bundle, for a fault done to the file itself. */
async function copy(): Promise<string> {
  const f = path.join(b.dir, `fault-${++n}.bundle`);
  await copyFile(b.path, f);
  return f;
}

const memory = (file: string, faults: MemoryFaults) => new MemorySource(bytes, file, faults);

/** What `p` rejected with: a coded error of one line. */
async function failure(t: Test, p: Promise<unknown>): Promise<{ code: string; message: string }> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e as FormatError,
  );
  t.ok(err, 'rejected');
  t.notMatch(err?.message ?? '', /\n/, 'one line');
  return { code: err?.code ?? 'none', message: err?.message ?? '' };
}

/** `use` over the bundle file, opened as the callers open it and closed after. */
async function throughFile<T>(file: string, use: (s: BundleSource) => Promise<T>): Promise<T> {
  const source = await openBundleFile(file);
  try {
    return await use(source);
  } finally {
    await source.close();
  }
}

/** Flips one byte of `file` in place (its stick rewritten), as another writer would. */
async function flipInFile(file: string, at: number): Promise<void> {
  const fh = await open(file, 'r+');
  const one = Buffer.alloc(1);
  await fh.read(one, 0, 1, at);
  one[0] = one[0]! ^ 0x01;
  await fh.write(one, 0, 1, at);
  await fh.close();
}

t.test('the double without faults reads as the file does', async (t) => {
  const s = memory(b.path, {});
  const v = await verifyBundle(s, { trust: b.trust, frameDigests: true });
  const fromFile = await throughFile(b.path, (f) => verifyBundle(f, { trust: b.trust }));
  t.equal(v.fileDigest, fromFile.fileDigest, 'the same file digest');
  t.same((await readHeader(s)).manifestBytes, fromFile.manifestBytes, 'the same head');
  const r = await BundleRandomReader.open(s, manifest, {
    seekIndex: v.seekIndex,
    frameDigests: v.frameDigests!,
  });
  t.ok(
    (await r.readVerified(bigPath)).equals(b.blobs.find((x) => x.size === BIG)!.data),
    'random reads give the blob',
  );
  t.notOk(s.closed, 'no reader closes a source it was given');
});

t.test('a short read', async (t) => {
  const cut = Math.floor(bytes.length / 3);
  t.test('verify: TRUNCATED, as a file cut while it is read', async (t) => {
    const f = await copy();
    const fromFile = await failure(
      t,
      throughFile(f, (s) =>
        verifyBundle(s, { trust: b.trust, onManifest: () => truncate(f, cut) }),
      ),
    );
    t.equal(fromFile.code, 'TRUNCATED');
    t.match(fromFile.message, `${f} shrank from ${bytes.length} to ${cut} bytes`);
    // the source comes short without saying it shrank, or says so: either is the same cut
    for (const faults of [{ shortAt: cut }, { shrinkTo: cut }]) {
      const fromMemory = await failure(t, verifyBundle(memory(f, faults), { trust: b.trust }));
      t.same(fromMemory, fromFile, `${JSON.stringify(faults)}: the same code and message`);
    }
  });

  t.test('extract: TRUNCATED and nothing left, as a file cut while it is extracted', async (t) => {
    const f = await copy();
    const fromFile = await failure(
      t,
      throughFile(f, (s) =>
        extractBundle(s, path.join(b.dir, 'x-file'), {
          trust: b.trust,
          fsync: false,
          onManifest: () => truncate(f, cut),
        }),
      ),
    );
    const fromMemory = await failure(
      t,
      extractBundle(memory(f, { shortAt: cut }), path.join(b.dir, 'x-mem'), {
        trust: b.trust,
        fsync: false,
      }),
    );
    t.same(fromMemory, fromFile, 'the same code and message');
    t.notOk(
      (await readdir(b.dir)).some((x) => x.startsWith('x-')),
      'no target or partial directory from either',
    );
  });

  t.test('random reads: TRUNCATED, as a file cut after it was opened', async (t) => {
    const at = frame.compressedOffset + 10;
    const f = await copy();
    const fromFile = await failure(
      t,
      throughFile(f, async (s) => {
        const r = await BundleRandomReader.open(s, manifest);
        await truncate(f, at);
        return r.readVerified(bigPath);
      }),
    );
    t.equal(fromFile.code, 'TRUNCATED');
    const s = memory(f, {});
    const r = await BundleRandomReader.open(s, manifest);
    s.faults = { shortAt: at };
    t.same(await failure(t, r.readVerified(bigPath)), fromFile, 'the same code and message');
  });
});

t.test('an error mid-range (EIO)', async (t) => {
  const at = frame.compressedOffset + 100;
  t.test(
    "verify and extract: IO_ERROR naming the bundle and the system's reason, nothing left",
    async (t) => {
      const f = await copy();
      const v = await failure(t, verifyBundle(memory(f, { errorAt: at }), { trust: b.trust }));
      t.same(
        v,
        { code: 'IO_ERROR', message: `cannot read ${f}: EIO: i/o error, read` },
        'a read failure, not a verdict on the bytes',
      );
      const x = await failure(
        t,
        extractBundle(memory(f, { errorAt: at }), path.join(b.dir, 'eio'), {
          trust: b.trust,
          fsync: false,
        }),
      );
      t.same(x, v, 'extract says the same');
      t.notOk(
        (await readdir(b.dir)).some((x) => x.startsWith('eio')),
        'no target or partial directory',
      );
    },
  );

  t.test("random reads: the system error itself, as from the file's descriptor", async (t) => {
    const r = await BundleRandomReader.open(memory(b.path, { errorAt: at }), manifest);
    const err = await r.readVerified(bigPath).then(
      () => undefined,
      (e: unknown) => e as NodeJS.ErrnoException,
    );
    t.equal(err?.code, 'EIO');
    t.equal(err?.syscall, 'read');
  });

  t.test('the head: IO_ERROR', async (t) => {
    t.same(await failure(t, readHeader(memory(b.path, { errorAt: 10 }))), {
      code: 'IO_ERROR',
      message: `cannot read ${b.path}: EIO: i/o error, read`,
    });
  });
});

t.test('a byte flipped between two reads of the same range', async (t) => {
  const at = frame.compressedOffset + Math.floor(frame.bytes.length / 2);
  t.test(
    'verify, then random reads held to its frame digests: BLOB_DIGEST_MISMATCH, as a file rewritten in place',
    async (t) => {
      const f = await copy();
      const fromFile = await failure(
        t,
        throughFile(f, async (s) => {
          const v = await verifyBundle(s, { trust: b.trust, frameDigests: true });
          await flipInFile(f, at);
          return (
            await BundleRandomReader.open(s, manifest, {
              seekIndex: v.seekIndex,
              frameDigests: v.frameDigests!,
            })
          ).readVerified(bigPath);
        }),
      );
      t.equal(fromFile.code, 'BLOB_DIGEST_MISMATCH');
      t.match(fromFile.message, /not what was verified/);
      const s = memory(f, { flip: { at, fromRead: 2 } });
      const v = await verifyBundle(s, { trust: b.trust, frameDigests: true });
      t.same(
        await failure(
          t,
          (
            await BundleRandomReader.open(s, manifest, {
              seekIndex: v.seekIndex,
              frameDigests: v.frameDigests!,
            })
          ).readVerified(bigPath),
        ),
        fromFile,
        'the same code and message',
      );
    },
  );

  t.test('random reads alone: the second read is held to the first', async (t) => {
    const f = await copy();
    const fromFile = await failure(
      t,
      throughFile(f, async (s) => {
        const r = await BundleRandomReader.open(s, manifest);
        await r.readVerified(bigPath);
        await flipInFile(f, at);
        return r.readVerified(bigPath);
      }),
    );
    t.equal(fromFile.code, 'BLOB_DIGEST_MISMATCH');
    const r = await BundleRandomReader.open(memory(f, { flip: { at, fromRead: 2 } }), manifest);
    await r.readVerified(bigPath);
    t.same(await failure(t, r.readVerified(bigPath)), fromFile, 'the same code and message');
  });

  t.test('the pass itself reading a flipped byte: refused as the damaged file is', async (t) => {
    const f = await copy();
    await flipInFile(f, at);
    const fromFile = await failure(
      t,
      throughFile(f, (s) => verifyBundle(s, { trust: b.trust })),
    );
    t.same(
      await failure(t, verifyBundle(memory(f, { flip: { at, fromRead: 1 } }), { trust: b.trust })),
      fromFile,
      'the same code and message',
    );
  });
});

t.test(
  'a bundle gone after the pass read it (deleted while open): IO_ERROR, as a deleted file',
  async (t) => {
    const f = await copy();
    const fromFile = await failure(
      t,
      throughFile(f, (s) => verifyBundle(s, { trust: b.trust, onManifest: () => unlink(f) })),
    );
    t.equal(fromFile.code, 'IO_ERROR');
    t.same(
      await failure(t, verifyBundle(memory(f, { gone: true }), { trust: b.trust })),
      fromFile,
      'the same code and message',
    );
  },
);

t.test(
  'a file replaced or grown after it was opened: named, not verified as the file now at the path',
  async (t) => {
    const trust = b.trust;
    const replaced = await copy();
    const other = await copy();
    const r = await failure(
      t,
      throughFile(replaced, async (s) => {
        // another file renamed over the path after the open: the bytes read are of the first one
        await import('node:fs/promises').then((fs) => fs.rename(other, replaced));
        return verifyBundle(s, { trust });
      }),
    );
    t.equal(r.code, 'CORRUPT');
    t.match(r.message, `${replaced} was replaced by another file while being read`);

    const grown = await copy();
    const g = await failure(
      t,
      throughFile(grown, async (s) => {
        const fh = await open(grown, 'a');
        await fh.write(Buffer.from('appended while the pass read'));
        await fh.close();
        return verifyBundle(s, { trust });
      }),
    );
    t.equal(g.code, 'TRAILING_DATA');
    t.match(
      g.message,
      `${grown} grew from ${bytes.length} to ${bytes.length + 28} bytes while being read`,
    );
  },
);

t.test(
  'inspect reads the head alone: bytes appended after a whole archive do not decide it, however they are chunked',
  async (t) => {
    // a small bundle: the bytes after its archive come within the head's read limit
    const small = await makeBundle(t, { layerSizes: [1000] });
    const appended = Buffer.concat([await readFile(small.path), Buffer.from('trailing bytes')]);
    const name = small.written.manifest.release.name;
    for (const chunk of [64, 4096, appended.length]) {
      const head = await readHeader(new MemorySource(appended, `appended-${chunk}`, { chunk }));
      t.equal(head.manifest.release.name, name, `chunks of ${chunk} bytes`);
    }
    // the whole file pushed with its end at once: decoding fails past the archive before tar has
    // handed on the signature entry (a race the verdict once depended on)
    const { Readable } = await import('node:stream');
    const oneGo: BundleSource = {
      identity: 'appended-one-go',
      size: appended.length,
      currentSize: async () => appended.length,
      close: async () => undefined,
      read: async (o, l) => appended.subarray(o, o + l),
      stream: () =>
        new Readable({
          read() {
            this.push(appended);
            this.push(null);
          },
        }),
    };
    t.equal((await readHeader(oneGo)).manifest.release.name, name, 'pushed with its end');
  },
);

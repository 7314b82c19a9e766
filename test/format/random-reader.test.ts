// tier: unit
// BundleRandomReader: reads entries through the (untrusted) seek index, checking each against
// the trusted bundle.json; byte ranges across frame boundaries; media changed after verification.
import t, { type Test } from 'tap';
import { copyFile, open, readFile, truncate } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import {
  BundleRandomReader,
  FRAME_BYTES,
  openBundleFile,
  INDEX_JSON,
  OCI_LAYOUT,
  blobPath,
  verifyBundle,
  type BundleManifest,
  withBundleFile,
} from '@offline-bundle/format';
import {
  craft,
  entryNamed,
  fileEntry,
  flipByte,
  makeBundle,
  readEntries,
  readFrames,
  rejectsWith,
  sha256,
  specialEntry,
  withData,
  type Entry,
  type MadeBundle,
} from './craft.js';

const BIG = 9 * 1024 * 1024 + 777;

let b: MadeBundle;
let manifest: BundleManifest;
let entries: Entry[];
let big: Buffer;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: [BIG, 700, 5000] });
  manifest = (await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }))).manifest;
  entries = await readEntries(b.path);
  big = b.blobs.find((x) => x.size === BIG)!.data;
});

async function collect(s: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

let n = 0;
const out = (): string => path.join(b.dir, `rr-${++n}.bundle`);

async function opened(t: Test, file = b.path): Promise<BundleRandomReader> {
  const source = await openBundleFile(file);
  t.teardown(() => source.close().catch(() => undefined));
  return BundleRandomReader.open(source, manifest);
}

t.test('reads every blob and index.json equal to the original', async (t) => {
  const r = await opened(t);
  for (const blob of b.blobs) {
    t.ok(r.has(blobPath(blob.digest)));
    const data = await r.readVerified(blobPath(blob.digest));
    t.ok(data.equals(blob.data), `${blob.size}-byte blob read back`);
  }
  t.ok((await r.readVerified(INDEX_JSON)).equals(b.index), 'index.json');
  t.ok(r.has(OCI_LAYOUT));
  t.notOk(r.has('blobs/sha256/' + '0'.repeat(64)));
  t.equal(r.index.frames.length, b.written.frames);
  await rejectsWith(
    t,
    r.readVerified('blobs/sha256/' + '0'.repeat(64)),
    'UNEXPECTED_ENTRY',
    'readVerified of an unlisted path',
  );
  t.throws(() => r.stream('nope'), { code: 'MISSING_ENTRY' });
});

t.test(
  'stream(path, start, end) returns exactly the byte range, across frame boundaries',
  async (t) => {
    const r = await opened(t);
    const p = blobPath(sha256(big));
    const F = FRAME_BYTES;
    const ranges: [number, number | undefined][] = [
      [0, undefined],
      [0, BIG],
      [0, 1],
      [0, F],
      [0, F + 1],
      [F - 1, F + 1],
      [F - 10, F + 10],
      [F, 2 * F],
      [F, F + 1],
      [2 * F - 1, 2 * F + 1],
      [F - 5, 2 * F + 5],
      [1, BIG - 1],
      [2 * F, BIG],
      [BIG - 1, BIG],
      [BIG - 100, undefined],
      [12_345, 12_346],
      [7, 7],
      [F, F],
      [BIG, BIG],
      [0, BIG + 1000],
    ];
    for (const [start, end] of ranges) {
      const got = await collect(r.stream(p, start, end));
      const want = big.subarray(start, Math.min(end ?? BIG, BIG));
      t.ok(got.equals(want), `[${start}, ${end ?? 'end'}): ${want.length} bytes`, {
        got: got.length,
        want: want.length,
      });
    }
    const small = b.blobs.find((x) => x.size === 700)!;
    t.ok(
      (await collect(r.stream(blobPath(small.digest), 100, 600))).equals(
        small.data.subarray(100, 600),
      ),
      'a range inside a small blob',
    );
    t.ok(
      (await collect(r.stream(INDEX_JSON, 2))).equals(b.index.subarray(2)),
      'index.json from an offset',
    );
  },
);

t.test(
  "a byte flipped inside a blob's frame after verification: readVerified rejects",
  async (t) => {
    const f = out();
    await copyFile(b.path, f);
    await withBundleFile(f, (s) => verifyBundle(s, { trust: b.trust }));
    const frames = await readFrames(f);
    // the big blob's middle data frame: find the frame at the blob's data offset + FRAME_BYTES
    await opened(t, f);
    const bigFrame = frames.find(
      (fr) => fr.decompressedSize === FRAME_BYTES && fr.decompressedOffset > 0,
    )!;
    const fh = await open(f, 'r+');
    const at = bigFrame.compressedOffset + Math.floor(bigFrame.bytes.length / 2);
    const one = Buffer.alloc(1);
    await fh.read(one, 0, 1, at);
    one[0] = one[0]! ^ 0x10;
    await fh.write(one, 0, 1, at);
    await fh.close();
    const r = await opened(t, f);
    await rejectsWith(
      t,
      r.readVerified(blobPath(sha256(big))),
      ['BLOB_DIGEST_MISMATCH', 'CORRUPT'],
      'readVerified',
    );
    // the other blobs sit in other frames and still read
    const small = b.blobs.find((x) => x.size === 700)!;
    t.ok((await r.readVerified(blobPath(small.digest))).equals(small.data));
  },
);

t.test(
  'blob bytes that decompress fine but differ from the signed digest: BLOB_DIGEST_MISMATCH',
  async (t) => {
    // the media was swapped for one whose frames are valid zstd: only the digest check catches it
    const l = entryNamed(entries, blobPath(b.blobs.find((x) => x.size === 5000)!.digest));
    const f = out();
    await craft(
      f,
      entries.map((e) => (e === l ? withData(l, flipByte(l.data, 4000)) : e)),
    );
    const r = await opened(t, f);
    await rejectsWith(t, r.readVerified(l.header.name), 'BLOB_DIGEST_MISMATCH', 'readVerified');
    const other = await collect(r.stream(l.header.name, 0, 10));
    t.ok(other.equals(l.data.subarray(0, 10)), 'stream() itself is unverified, as documented');
  },
);

t.test('the file cut short after it was opened: TRUNCATED', async (t) => {
  const f = out();
  await copyFile(b.path, f);
  const r = await opened(t, f);
  await truncate(f, Math.floor((await readFile(f)).length / 3));
  await rejectsWith(
    t,
    r.readVerified(blobPath(sha256(big))),
    ['TRUNCATED', 'CORRUPT'],
    'readVerified',
  );
});

t.test('seek tables that point entries at the wrong offsets: BAD_SEEK_TABLE', async (t) => {
  const cases: [
    string,
    (fr: { compressedSize: number; decompressedSize: number }[]) => typeof fr,
  ][] = [
    [
      'a header frame listed 512 bytes longer, the trailer 512 shorter',
      (fr) =>
        fr.map((x, i) =>
          i === 4
            ? { ...x, decompressedSize: x.decompressedSize + 512 }
            : i === fr.length - 1
              ? { ...x, decompressedSize: x.decompressedSize - 512 }
              : x,
        ),
    ],
    [
      'a header frame and its data frame listed as one',
      (fr) => [
        ...fr.slice(0, 6),
        {
          compressedSize: fr[6]!.compressedSize + fr[7]!.compressedSize,
          decompressedSize: fr[6]!.decompressedSize + fr[7]!.decompressedSize,
        },
        ...fr.slice(8),
      ],
    ],
    [
      'a data frame listed as two',
      (fr) => {
        // one of the big blob's full frames (a small blob's 512-byte frame split into 512 + 0
        // would be harmless: the empty frame is never read)
        const i = fr.findIndex((x) => x.decompressedSize === FRAME_BYTES);
        const x = fr[i]!;
        return [
          ...fr.slice(0, i),
          { compressedSize: x.compressedSize, decompressedSize: 512 },
          { compressedSize: 0, decompressedSize: x.decompressedSize - 512 },
          ...fr.slice(i + 1),
        ];
      },
    ],
  ];
  for (const [what, rewrite] of cases) {
    t.test(what, async (t) => {
      const f = out();
      await craft(f, entries, { seekTable: rewrite });
      await rejectsWith(
        t,
        withBundleFile(f, async (s) => {
          const r = await BundleRandomReader.open(s, manifest);
          for (const blob of manifest.blobs) await r.readVerified(blobPath(blob.digest));
        }),
        'BAD_SEEK_TABLE',
        'open and read',
      );
      await rejectsWith(
        t,
        withBundleFile(f, (s) => verifyBundle(s, { trust: b.trust })),
        'BAD_SEEK_TABLE',
        'verify (the index must list the frames the file has)',
      );
    });
  }

  t.test(
    'compressed sizes moved between frames (the totals still right): BAD_SEEK_TABLE or CORRUPT',
    async (t) => {
      // the totals are right, so only a frame-by-frame comparison with the walked frames catches
      // it in verify; reading through it without a verify must not return wrong bytes either
      const f = out();
      await craft(f, entries, {
        seekTable: (fr) =>
          fr.map((x, i) =>
            i === 6
              ? { ...x, compressedSize: x.compressedSize + 3 }
              : i === 7
                ? { ...x, compressedSize: x.compressedSize - 3 }
                : x,
          ),
      });
      await rejectsWith(
        t,
        withBundleFile(f, (s) => verifyBundle(s, { trust: b.trust })),
        'BAD_SEEK_TABLE',
        'verify',
      );
      await rejectsWith(
        t,
        withBundleFile(f, (s) => BundleRandomReader.open(s, manifest)),
        ['BAD_SEEK_TABLE', 'CORRUPT'],
        'open',
      );
    },
  );

  t.test('the entries of two frames swapped in the table: BAD_SEEK_TABLE or CORRUPT', async (t) => {
    const f = out();
    // a header frame and a full data frame: their sizes surely differ, so the swap moves offsets
    await craft(f, entries, {
      seekTable: (fr) => {
        const big = fr.findIndex((x) => x.decompressedSize === FRAME_BYTES);
        return fr.map((x, i) => (i === 4 ? fr[big]! : i === big ? fr[4]! : x));
      },
    });
    await rejectsWith(
      t,
      withBundleFile(f, (s) => BundleRandomReader.open(s, manifest)),
      ['BAD_SEEK_TABLE', 'CORRUPT'],
      'open',
    );
  });

  t.test('no seek table: BAD_SEEK_TABLE', async (t) => {
    const f = out();
    await craft(f, entries, { seekTable: null });
    await rejectsWith(
      t,
      withBundleFile(f, (s) => BundleRandomReader.open(s, manifest)),
      'BAD_SEEK_TABLE',
      'open',
    );
  });
});

t.test('entries the index walk finds are checked against the trusted bundle.json', async (t) => {
  const l = entryNamed(entries, blobPath(b.blobs.find((x) => x.size === 700)!.digest));
  const at = entries.indexOf(l);
  const cases: [string, Entry[], string][] = [
    [
      'an unlisted blob',
      [...entries.slice(0, at), fileEntry(blobPath(sha256('x')), 'x'), ...entries.slice(at)],
      'UNEXPECTED_ENTRY',
    ],
    [
      'a blob shorter than listed',
      entries.map((e) => (e === l ? withData(l, l.data.subarray(1)) : e)),
      'SIZE_MISMATCH',
    ],
    [
      'a blob longer than listed',
      entries.map((e) => (e === l ? withData(l, Buffer.concat([l.data, l.data])) : e)),
      'OVERSIZED_ENTRY',
    ],
    [
      'a symlink in place of a blob',
      entries.map((e) =>
        e === l ? specialEntry(l.header.name, 'symlink', { linkname: '/etc/passwd' }) : e,
      ),
      'NOT_A_FILE',
    ],
    [
      'a duplicate blob',
      [...entries.slice(0, at + 1), l, ...entries.slice(at + 1)],
      'DUPLICATE_ENTRY',
    ],
    ['a missing blob', entries.filter((e) => e !== l), 'MISSING_ENTRY'],
  ];
  for (const [what, list, code] of cases) {
    t.test(`${what}: ${code}`, async (t) => {
      const f = out();
      await craft(f, list);
      await rejectsWith(
        t,
        withBundleFile(f, (s) => BundleRandomReader.open(s, manifest)),
        code as 'MISSING_ENTRY',
        'open',
      );
    });
  }
});

t.test(
  'a seek index claiming frames over the 4 MiB limit is refused (BAD_SEEK_TABLE)',
  async (t) => {
    const {
      makeBundle: make,
      readEntries: entriesOf,
      craft: craftFile,
    } = await import('./craft.js');
    const {
      verifyBundle: verify,
      readSeekIndex: seekIndex,
      FormatError: FE,
      withBundleFile: withFile,
    } = await import('@offline-bundle/format');
    const b = await make(t, { layerSizes: [9 * 1024 * 1024] });
    const entries = await entriesOf(b.path);
    // merge the layer's data frames into one claimed frame: byte offsets stay consistent
    const merged = `${b.dir}/merged.bundle`;
    await craftFile(merged, entries, {
      seekTable: (frames) => {
        const i = frames.findIndex((f) => f.decompressedSize === 4 * 1024 * 1024);
        const j = i + 1;
        const one = {
          compressedSize: frames[i]!.compressedSize + frames[j]!.compressedSize,
          decompressedSize: frames[i]!.decompressedSize + frames[j]!.decompressedSize,
        };
        return [...frames.slice(0, i), one, ...frames.slice(j + 1)];
      },
    });
    const e1 = await withFile(merged, seekIndex).catch((e: unknown) => e);
    t.ok(
      e1 instanceof FE && e1.code === 'BAD_SEEK_TABLE',
      `readSeekIndex: ${(e1 as Error).message}`,
    );
    const e2 = await withFile(merged, (s) => verify(s, { trust: b.trust })).catch(
      (e: unknown) => e,
    );
    t.ok(e2 instanceof FE && e2.code === 'BAD_SEEK_TABLE', 'verifyBundle refuses it too');
  },
);

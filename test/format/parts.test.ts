// tier: unit
// A bundle split into NAME.bundle.part-001-of-NNN files reads, through PartsSource, exactly as
// the one file: the same verdict and whole-file digest, the same head, the same extracted
// layout, random reads of frames that straddle two parts. A part set that is not the bundle
// (a part missing, twice, from another split, cut short, too long, from another bundle) is one
// coded line naming the part and the fix.
import t, { type Test } from 'tap';
import {
  appendFile,
  copyFile,
  mkdir,
  readFile,
  readdir,
  rename,
  rm,
  truncate,
  writeFile,
} from 'node:fs/promises';
import path from 'node:path';
import {
  BundleRandomReader,
  FormatError,
  MAX_PARTS,
  blobPath,
  extractBundle,
  openBundle,
  partName,
  readHeader,
  verifyBundle,
  withBundle,
  type BundleSource,
} from '@offline-bundle/format';
import { makeBundle, makeKey, sha256, type MadeBundle } from './craft.js';

const BIG = 3 * 1024 * 1024;
/** Odd, so part boundaries fall inside frames, never on one. */
const PART = 1_000_003;

let b: MadeBundle;
let bytes: Buffer;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: [BIG, 700_000] });
  bytes = await readFile(b.path);
});

let n = 0;
/** `bundle` cut into files of `size` bytes in a fresh directory; returns their paths in order. */
async function split(
  whole: Buffer,
  size = PART,
  name = 'rel.bundle',
): Promise<{ dir: string; parts: string[] }> {
  const dir = path.join(b.dir, `split-${++n}`);
  await mkdir(dir);
  const count = Math.ceil(whole.length / size);
  const parts: string[] = [];
  for (let i = 0; i < count; i++) {
    const p = path.join(dir, partName(name, i + 1, count));
    await writeFile(p, whole.subarray(i * size, (i + 1) * size));
    parts.push(p);
  }
  return { dir, parts };
}

/** What opening (and verifying) rejected with: one coded line. */
async function refusal(t: Test, p: Promise<unknown>): Promise<{ code: string; message: string }> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e as FormatError,
  );
  t.ok(err, 'refused');
  t.notMatch(err?.message ?? '', /\n/, 'one line');
  return { code: err?.code ?? 'none', message: err?.message ?? '' };
}
const verifyAt = (file: string) => withBundle(file, (s) => verifyBundle(s, { trust: b.trust }));

t.test('the parts read as the file: bytes, verdict, digest, head, extracted layout', async (t) => {
  const { dir, parts } = await split(bytes);
  t.ok(parts.length >= 4, `${parts.length} parts`);
  t.equal(
    sha256(Buffer.concat(await Promise.all(parts.map((p) => readFile(p))))),
    b.written.fileDigest,
    'the concatenation is the bundle',
  );
  const s = await openBundle(parts[2]!);
  try {
    t.equal(
      s.identity,
      `${path.join(dir, 'rel.bundle')} (${parts.length} parts)`,
      'named as the bundle, with its part count',
    );
    t.equal(s.size, bytes.length);
    t.ok(
      (await s.read(PART - 10, 20)).equals(bytes.subarray(PART - 10, PART + 10)),
      'a read across a part boundary',
    );
    t.ok((await s.read(0, bytes.length)).equals(bytes), 'a read of every part');
    t.ok(
      (await s.read(bytes.length - 5, 100)).equals(bytes.subarray(bytes.length - 5)),
      'past the end: short, as a file',
    );
    const streamed: Buffer[] = [];
    for await (const c of s.stream(PART - 7, 2 * PART + 7)) streamed.push(c as Buffer);
    t.ok(
      Buffer.concat(streamed).equals(bytes.subarray(PART - 7, 2 * PART + 7)),
      'a stream across two boundaries',
    );
    t.equal(await s.currentSize(), bytes.length);
  } finally {
    await s.close();
  }
  const whole = await withBundle(b.path, (f) => verifyBundle(f, { trust: b.trust }));
  for (const from of [parts[0]!, parts.at(-1)!, path.join(dir, 'rel.bundle')]) {
    const v = await verifyAt(from);
    t.equal(
      v.fileDigest,
      whole.fileDigest,
      `verified from ${path.basename(from)}, the same whole-file digest`,
    );
    t.same(v.manifest, whole.manifest);
  }
  const byDigest = await withBundle(parts[1]!, (s) =>
    verifyBundle(s, { trust: { digest: b.written.fileDigest } }),
  );
  t.equal(
    byDigest.fileDigest,
    b.written.fileDigest,
    'the pinned whole-file digest holds over the parts',
  );
  t.same(
    (await withBundle(parts[0]!, readHeader)).manifestBytes,
    (await withBundle(b.path, readHeader)).manifestBytes,
    'the same head',
  );
  const [outParts, outFile] = [path.join(dir, 'x-parts'), path.join(dir, 'x-file')];
  await withBundle(parts[0]!, (s) => extractBundle(s, outParts, { trust: b.trust }));
  await withBundle(b.path, (s) => extractBundle(s, outFile, { trust: b.trust }));
  const blobs = (await readdir(path.join(outFile, 'blobs/sha256'))).sort();
  t.same(
    (await readdir(path.join(outParts, 'blobs/sha256'))).sort(),
    blobs,
    'the same blobs extracted',
  );
  for (const x of blobs)
    t.ok(
      (await readFile(path.join(outParts, 'blobs/sha256', x))).equals(
        await readFile(path.join(outFile, 'blobs/sha256', x)),
      ),
      `blob ${x.slice(0, 12)} the same`,
    );
});

t.test('random reads (serve) of a blob whose frames straddle part boundaries', async (t) => {
  const { parts } = await split(bytes);
  const s = await openBundle(parts[0]!);
  try {
    const v = await verifyBundle(s, { trust: b.trust, frameDigests: true });
    const r = await BundleRandomReader.open(s, v.manifest, {
      seekIndex: v.seekIndex,
      frameDigests: v.frameDigests!,
    });
    const crossing = v.seekIndex.frames.filter(
      (f) =>
        Math.floor(f.compressedOffset / PART) !==
        Math.floor((f.compressedOffset + f.compressedSize - 1) / PART),
    );
    t.ok(crossing.length > 0, `${crossing.length} frames straddle a boundary`);
    const big = b.blobs.find((x) => x.size === BIG)!;
    t.ok(
      (await r.readVerified(blobPath(big.digest))).equals(big.data),
      'the big blob reads back whole and verified',
    );
  } finally {
    await s.close();
  }
});

t.test(
  'a part set that is not the bundle: one coded line naming the part and the fix',
  async (t) => {
    const cases: Array<[string, (parts: string[], dir: string) => Promise<void>, RegExp]> = [
      [
        'a part missing',
        (p) => rm(p[2]!),
        /part 3 of \d+ \(rel\.bundle\.part-003-of-0\d\d\) is missing from .*: copy every part/,
      ],
      ['the last part missing', (p) => rm(p.at(-1)!), /part (\d+) of \1 .* is missing/],
      [
        'a part twice',
        (p, d) => copyFile(p[1]!, path.join(d, 'rel.bundle.part-2-of-' + String(p.length))),
        /part 2 of \d+ of rel\.bundle is in .* twice/,
      ],
      [
        'a part renamed (another count)',
        (p) => rename(p[1]!, p[1]!.replace(/of-\d+$/, 'of-009')),
        /rel\.bundle\.part-002-of-009 says the bundle has 9 parts, the others \d+/,
      ],
      [
        'a part numbered past the count',
        (p) => rename(p.at(-1)!, p.at(-1)!.replace(/part-\d+/, 'part-042')),
        /part-042-of-\d+ is numbered outside 1 to \d+/,
      ],
      [
        'a part cut short',
        (p) => truncate(p[1]!, 1000),
        /part 2 of \d+ \(rel\.bundle\.part-002-of-\d+\) is 1000 bytes, the other parts 1000003: it was cut short; copy it again/,
      ],
      [
        'a part longer than the others',
        (p) => appendFile(p[2]!, 'x'),
        /part 3 of \d+ .* is 1000004 bytes, longer than the 1000003 of the other parts/,
      ],
      [
        'the last part longer than the others',
        (p) => appendFile(p.at(-1)!, Buffer.alloc(PART)),
        /part (\d+) of \1 .* longer than the 1000003/,
      ],
      [
        'the last part empty',
        (p) => truncate(p.at(-1)!, 0),
        /part (\d+) of \1 .* is 0 bytes, empty: it was cut short/,
      ],
    ];
    for (const [name, damage, message] of cases) {
      t.test(name, async (t) => {
        const { dir, parts } = await split(bytes);
        await damage(parts, dir);
        const r = await refusal(t, verifyAt(parts[0]!.replace(/\.part-.*/, '')));
        t.equal(r.code, 'BAD_PARTS');
        t.match(r.message, message);
        // and the same from any part that is still there
        const still = (await readdir(dir)).find((x) => x.includes('part-00'))!;
        t.equal(
          (await refusal(t, verifyAt(path.join(dir, still)))).code,
          'BAD_PARTS',
          'from a part too',
        );
      });
    }
  },
);

t.test(`more parts than ${MAX_PARTS} are refused before any is opened`, async (t) => {
  const dir = path.join(b.dir, 'many');
  await mkdir(dir);
  await writeFile(path.join(dir, partName('m.bundle', 1, MAX_PARTS + 1)), bytes.subarray(0, 10));
  const r = await refusal(t, openBundle(path.join(dir, 'm.bundle')));
  t.equal(r.code, 'BAD_PARTS');
  t.match(r.message, /says the bundle has 1000 parts, more than the 999/);
});

t.test(
  'parts of two bundles mixed (same name, same split size): refused by verification, one coded line',
  async (t) => {
    const other = await makeBundle(t, { key: makeKey(), layerSizes: [BIG, 700_000] });
    const otherBytes = await readFile(other.path);
    const { parts } = await split(bytes);
    const { parts: theirs } = await split(otherBytes);
    t.equal(theirs.length, parts.length, 'the same number of parts');
    await copyFile(theirs[1]!, parts[1]!);
    const r = await refusal(t, verifyAt(parts[0]!));
    t.not(r.code, 'none');
    t.match(
      r.code,
      /^(BLOB_DIGEST_MISMATCH|CORRUPT|BAD_SEEK_TABLE|SIZE_MISMATCH|UNEXPECTED_ENTRY|BAD_PARTS)$/,
      `refused: ${r.code}: ${r.message}`,
    );
    const pinned = await refusal(
      t,
      withBundle(parts[0]!, (s) => verifyBundle(s, { trust: { digest: b.written.fileDigest } })),
    );
    t.not(pinned.code, 'none', `with the pinned digest: ${pinned.code}`);
  },
);

t.test('a part gone or cut while the bundle is read: named', async (t) => {
  const { parts } = await split(bytes);
  const s: BundleSource = await openBundle(parts[0]!);
  try {
    await truncate(parts[2]!, 10);
    t.equal(
      await s.currentSize(),
      bytes.length - (PART - 10),
      'the bundle shrank by what the part lost',
    );
    const cut = await refusal(t, verifyBundle(s, { trust: b.trust }));
    t.equal(cut.code, 'TRUNCATED', cut.message);
    await rm(parts[3]!);
    const gone = await refusal(t, s.currentSize());
    t.equal(gone.code, 'IO_ERROR');
    t.match(gone.message, /cannot read .*rel\.bundle\.part-004-of-\d+: ENOENT/, 'names the part');
  } finally {
    await s.close();
  }
});

t.test(
  'a file wins over parts of the same name; no file and no part is IO_ERROR naming both',
  async (t) => {
    const { dir, parts } = await split(bytes);
    await copyFile(b.path, path.join(dir, 'rel.bundle'));
    const s = await openBundle(path.join(dir, 'rel.bundle'));
    t.equal(s.identity, path.join(dir, 'rel.bundle'), 'the file itself');
    await s.close();
    t.ok(parts.length > 1);
    const r = await refusal(t, openBundle(path.join(dir, 'nothing.bundle')));
    t.equal(r.code, 'IO_ERROR');
  },
);

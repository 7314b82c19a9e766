// tier: unit
// bundle.json's `pieces` (issue #42): a sha256 per piece of every carried blob longer than one
// piece, signed with the head, so a node fetching from peers checks each piece on arrival. The
// validator holds the field to the blobs it describes, all or nothing; the writer's lists are
// the pieces' true digests, and a changed digest breaks the signature like any other byte.
import t, { type Test } from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  BUNDLE_JSON,
  FormatError,
  MAX_PIECE_BYTES,
  MIN_PIECE_BYTES,
  PieceDigests,
  PieceHasher,
  PieceHashThread,
  hasPieces,
  pieceCount,
  pieceRange,
  pieceThreadsRunning,
  validateManifest,
  validatePieces,
  verifyBundle,
  withBundleFile,
  writeBundle,
  type BundleManifest,
  type BundlePieces,
  type WriteBundleInput,
} from '@offline-bundle/format';
import {
  craft,
  entryNamed,
  makeBundle,
  readEntries,
  resign,
  tmpdir,
  type MadeBundle,
} from './craft.js';

const MiB = 1 << 20;
const digestOf = (n: number) => 'sha256:' + n.toString(16).padStart(64, '0');
/** The list PieceHasher gives, computed here without it: one sha256 per slice. */
function listOf(data: Buffer, size: number): string {
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; at += size)
    out.push(
      createHash('sha256')
        .update(data.subarray(at, at + size))
        .digest(),
    );
  return Buffer.concat(out).toString('base64');
}
/** A list of the right length for a blob of `bytes` (zeros). */
const zeros = (bytes: number, size = MIN_PIECE_BYTES) =>
  Buffer.alloc(pieceCount(bytes, size) * 32).toString('base64');

/** Expects validatePieces to refuse with INVALID_MANIFEST, one line matching `pattern`. */
function refuses(
  t: Test,
  pieces: unknown,
  blobs: { digest: string; size: number; fromBase?: true }[],
  pattern: RegExp,
  what: string,
): void {
  try {
    validatePieces(pieces, blobs);
    t.fail(`${what}: taken`);
  } catch (err) {
    t.ok(
      err instanceof FormatError && err.code === 'INVALID_MANIFEST' && !err.message.includes('\n'),
      `${what}: INVALID_MANIFEST, one line`,
    );
    t.match((err as Error).message, pattern, what);
  }
}

t.test('validatePieces: the size a power of two within bounds', async (t) => {
  const blobs = [{ digest: digestOf(1), size: 3 * MIN_PIECE_BYTES }];
  for (const size of [
    0,
    MIN_PIECE_BYTES / 2,
    MAX_PIECE_BYTES * 2,
    3 * MiB,
    MIN_PIECE_BYTES + 1,
    -MIN_PIECE_BYTES,
    1.5 * MiB,
    '1048576',
    null,
  ]) {
    refuses(
      t,
      { size, blobs: {} },
      blobs,
      /pieces\.size must be a power of two from 1048576 to 67108864/,
      `size ${String(size)} refused`,
    );
  }
  for (const size of [MIN_PIECE_BYTES, 4 * MiB, MAX_PIECE_BYTES]) {
    const listed = hasPieces(blobs[0]!, size) ? { [digestOf(1)]: zeros(blobs[0]!.size, size) } : {};
    t.doesNotThrow(() => validatePieces({ size, blobs: listed }, blobs), `size ${size} taken`);
  }
  refuses(t, [], blobs, /pieces must be an object/, 'an array refused');
  refuses(
    t,
    { size: MIN_PIECE_BYTES, blobs: [] },
    blobs,
    /pieces\.blobs must be an object/,
    'blobs as an array refused',
  );
});

t.test('validatePieces: every carried blob longer than a piece listed, no other', async (t) => {
  const S = MIN_PIECE_BYTES;
  const blobs = [
    { digest: digestOf(1), size: S + 1 },
    { digest: digestOf(2), size: S },
    { digest: digestOf(3), size: 0 },
    { digest: digestOf(4), size: 5 * S, fromBase: true as const },
    { digest: digestOf(5), size: 2 * S },
  ];
  const good = { [digestOf(1)]: zeros(S + 1), [digestOf(5)]: zeros(2 * S) };
  t.doesNotThrow(
    () => validatePieces({ size: S, blobs: good }, blobs),
    'one piece + 1 byte and two whole pieces listed',
  );
  t.equal(pieceCount(S + 1, S), 2, 'one piece + 1 byte is two pieces');
  t.same(pieceRange(S + 1, S, 1), { start: S, end: S + 1 }, 'the second of them one byte long');
  t.equal(pieceCount(0, S), 0, 'an empty blob has no piece');
  t.notOk(hasPieces(blobs[1]!, S), 'a blob exactly one piece long is not listed');
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(2)]: zeros(S) } },
    blobs,
    /names sha256:0+2, which is not a carried blob longer than one piece/,
    'a blob of exactly one piece refused',
  );
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(3)]: '' } },
    blobs,
    /names sha256:0+3,/,
    'the empty blob refused',
  );
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(4)]: zeros(5 * S) } },
    blobs,
    /names sha256:0+4,/,
    'a fromBase blob refused',
  );
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(9)]: zeros(2 * S) } },
    blobs,
    /names sha256:0+9,/,
    'a blob not in the bundle refused',
  );
  refuses(
    t,
    { size: S, blobs: { [digestOf(1)]: good[digestOf(1)] } },
    blobs,
    /pieces\.blobs lacks sha256:0+5 \(every carried blob longer than one piece is listed\)/,
    'a missing blob refused',
  );
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(5)]: zeros(3 * S) } },
    blobs,
    /pieces\.blobs\[sha256:0+5\] must be 2 sha256 digests in base64 \(88 characters\)/,
    'a list one digest too long refused',
  );
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(5)]: zeros(S) } },
    blobs,
    /must be 2 sha256 digests/,
    'a list one digest short refused',
  );
  const badChars = good[digestOf(5)]!.slice(0, 10) + '-_' + good[digestOf(5)]!.slice(12);
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(5)]: badChars } },
    blobs,
    /must be 2 sha256 digests in base64/,
    'base64url characters refused',
  );
  refuses(
    t,
    { size: S, blobs: { ...good, [digestOf(5)]: 7 } },
    blobs,
    /must be 2 sha256 digests in base64/,
    'a number refused',
  );
  // as bundle.json: validateManifest holds the field to the manifest's own blobs
  const made = await makeBundle(t, { layerSizes: [S + 1, 100] });
  const m = made.written.manifest;
  const big = m.blobs.find((b) => b.size === S + 1)!;
  t.ok(
    validateManifest({ ...m, pieces: { size: S, blobs: { [big.digest]: zeros(S + 1) } } }).pieces,
    'validateManifest takes a right field',
  );
  t.throws(
    () => validateManifest({ ...m, pieces: { size: S, blobs: {} } }),
    /lacks/,
    'and refuses a wrong one',
  );
});

t.test(
  'PieceHasher: any chunking gives one sha256 per piece; PieceDigests checks each',
  async (t) => {
    const S = MIN_PIECE_BYTES;
    const data = randomBytes(3 * S + 12345);
    const want = listOf(data, S);
    for (const chunk of [1000, 65536, S, S + 7, data.length]) {
      const h = new PieceHasher(S);
      for (let at = 0; at < data.length; at += chunk) h.update(data.subarray(at, at + chunk));
      t.equal(h.end(), want, `fed in chunks of ${chunk}`);
    }
    const exact = new PieceHasher(S);
    exact.update(data.subarray(0, 2 * S));
    t.equal(
      exact.end(),
      listOf(data.subarray(0, 2 * S), S),
      'a blob of whole pieces ends with no empty piece',
    );
    t.equal(new PieceHasher(S).end(), '', 'an empty blob: an empty list');
    const d = new PieceDigests({ size: S, blobs: { [digestOf(1)]: want } });
    t.ok(
      d.covers(digestOf(1)) && !d.covers(digestOf(2)) && !d.covers('__proto__'),
      'covers only listed blobs',
    );
    for (let i = 0; i < 4; i++) {
      const { start, end } = pieceRange(data.length, S, i);
      t.ok(d.matches(digestOf(1), i, data.subarray(start, end)), `piece ${i} matches`);
    }
    const { start, end } = pieceRange(data.length, S, 1);
    t.ok(
      d.matches(digestOf(1), 1, [data.subarray(start, start + 10), data.subarray(start + 10, end)]),
      'a piece given in parts matches',
    );
    const bad = Buffer.from(data.subarray(start, end));
    bad[100]! ^= 1;
    t.notOk(d.matches(digestOf(1), 1, bad), 'a changed byte does not');
    t.notOk(
      d.matches(digestOf(1), 0, data.subarray(start, end)),
      'nor another piece at this index',
    );
    t.throws(() => d.digest(digestOf(1), 4), RangeError, 'an index past the end throws');
    t.notOk(
      d.matches(digestOf(1), 4, data.subarray(0, 10)),
      'matches: an index past the end is no match, not a throw',
    );
    t.notOk(
      d.matches(digestOf(1), -1, data.subarray(0, 10)) ||
        d.matches(digestOf(1), 0.5, data.subarray(0, 10)),
      'nor a negative or fractional one',
    );
    t.notOk(
      d.matches(digestOf(2), 0, data.subarray(start, end)),
      'nor a blob the head does not list',
    );
    t.throws(() => d.digest(digestOf(1), -1), RangeError, 'a negative index throws');
    t.throws(() => d.digest(digestOf(2), 0), /no piece digests/, 'an unlisted blob throws');
  },
);

t.test(
  'validatePieces: a list of the right length that decodes short or is not canonical base64 is refused (review r1: padding)',
  async (t) => {
    const S = MIN_PIECE_BYTES;
    const d = digestOf(1);
    for (const count of [2, 3, 4]) {
      const blobs = [{ digest: d, size: count * S }];
      const good = Buffer.alloc(count * 32, 7).toString('base64');
      t.doesNotThrow(
        () => validatePieces({ size: S, blobs: { [d]: good } }, blobs),
        `${count} digests, canonical: taken`,
      );
      // the same length with the padding moved: Node decodes each to fewer than count * 32 bytes, or encodes it back otherwise
      const variants = new Set([
        good.replace(/=*$/, (m) => (m.length === 2 ? 'A=' : '==')),
        good.replace(/.{2}$/, '=='),
        good.replace(/.$/, '='),
      ]);
      for (const v of variants) {
        if (v === good || v.length !== good.length) continue;
        refuses(
          t,
          { size: S, blobs: { [d]: v } },
          blobs,
          /must be \d sha256 digests in base64 .*padded/,
          `${count} digests ending ${JSON.stringify(v.slice(-4))} refused`,
        );
        // an agent given such a list unvalidated still refuses the piece rather than throwing
        const pd = new PieceDigests({ size: S, blobs: { [d]: v } });
        t.doesNotThrow(
          () => pd.matches(d, count - 1, Buffer.alloc(S)),
          `${JSON.stringify(v.slice(-4))}: matches(last) does not throw`,
        );
      }
    }
    // a canonical list with a character that is not base64 in the middle
    const list = Buffer.alloc(64, 1).toString('base64');
    refuses(
      t,
      { size: S, blobs: { [d]: list.slice(0, 20) + '.' + list.slice(21) } },
      [{ digest: d, size: 2 * S }],
      /must be 2 sha256 digests/,
      'a stray character refused',
    );
  },
);

t.test(
  "PieceHashThread: over 16 MiB in odd chunks, the caller's buffer overwritten after each push, several blobs interleaved, and files",
  async (t) => {
    const S = MIN_PIECE_BYTES;
    const thread = new PieceHashThread();
    t.teardown(() => thread.stop());
    const pool = randomBytes(24 * S);
    let seed = 12345;
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n;
    const sizes = [0, 1, S, S + 1, 2 * S - 1, 3 * S + 12345, 17 * S + 3, 9 * S + 5];
    const streams = sizes.map((size) => {
      const from = rnd(1000);
      return { size, data: pool.subarray(from, from + size), pos: 0, s: thread.open(S) };
    });
    let total = 0;
    // round robin: chunks of several blobs alternate in the one ring, as downloads at once do
    for (let left = true; left;) {
      left = false;
      for (const st of streams.filter((x) => x.pos < x.data.length)) {
        left = true;
        const n = Math.min(st.data.length - st.pos, [1, 7, 65536, S, 3 * S + 1, 9 * S][rnd(6)]!);
        const chunk = Buffer.from(st.data.subarray(st.pos, st.pos + n));
        await st.s.push(chunk);
        // the caller reuses its buffer as soon as push resolves
        chunk.fill(0xaa);
        st.pos += n;
        total += n;
      }
    }
    t.ok(total > 16 * S, `${total} bytes pushed: the 8 MiB ring wrapped`);
    for (const st of streams)
      t.equal(await st.s.end(), listOf(st.data, S), `a blob of ${st.size} bytes: its list`);
    const dir = await tmpdir(t, 'ob-piece-thread-');
    const file = path.join(dir, 'blob');
    await writeFile(file, pool.subarray(0, 5 * S + 3));
    t.equal(
      await thread.hashFile(file, S),
      listOf(pool.subarray(0, 5 * S + 3), S),
      'a file hashed on the thread',
    );
    await t.rejects(
      thread.hashFile(path.join(dir, 'none'), S),
      /ENOENT/,
      'a missing file: an error, not a hang',
    );
    const abandoned = thread.open(S);
    await abandoned.push(pool.subarray(0, 3 * S));
    abandoned.abandon();
    const after = thread.open(S);
    await after.push(pool.subarray(0, S + 1));
    t.equal(
      await after.end(),
      listOf(pool.subarray(0, S + 1), S),
      'a stream abandoned midway does not disturb the next',
    );
  },
);

/** writeBundle again over makeBundle's blobs, with pieces of `pieceSize`. */
function withPieces(
  made: MadeBundle,
  name: string,
  pieceSize: number | undefined,
  change: Partial<WriteBundleInput> = {},
): WriteBundleInput {
  const m = made.written.manifest;
  return {
    release: m.release,
    images: made.images,
    index: made.index,
    blobs: made.blobs.map(({ digest, size, mediaType, path }) => ({
      digest,
      size,
      mediaType,
      path,
    })),
    imageStoreBytes: m.totals.imageStoreBytes,
    key: made.key.privateKey,
    output: path.join(made.dir, name),
    createdAt: m.creator.createdAt,
    tool: { name: m.creator.tool, version: m.creator.version },
    ...(pieceSize === undefined ? {} : { pieceSize }),
    ...change,
  };
}

t.test(
  "writeBundle: the lists are the pieces' digests, after base and before signer; a changed digest breaks the signature",
  async (t) => {
    const S = MIN_PIECE_BYTES;
    const made = await makeBundle(t, { layerSizes: [S + 1, 3 * S + 5, S, 2 * S, 500] });
    const w = await writeBundle(withPieces(made, 'pieces.bundle', S));
    const pieces = w.manifest.pieces as BundlePieces;
    t.equal(pieces.size, S);
    const long = made.blobs.filter((b) => b.size > S);
    t.same(
      Object.keys(pieces.blobs).sort(),
      long.map((b) => b.digest).sort(),
      'every blob longer than a piece listed, no other',
    );
    for (const b of long)
      t.equal(pieces.blobs[b.digest], listOf(b.data, S), `${b.size} bytes: its pieces' sha256`);
    const entries = await readEntries(path.join(made.dir, 'pieces.bundle'));
    const json = entryNamed(entries, BUNDLE_JSON).data;
    const onDisk = JSON.parse(json.toString('utf8'));
    const keys = Object.keys(onDisk);
    t.ok(
      keys.indexOf('pieces') === keys.indexOf('signer') - 1,
      `pieces just before signer (${keys.join(',')})`,
    );
    const v = await withBundleFile(path.join(made.dir, 'pieces.bundle'), (s) =>
      verifyBundle(s, { trust: made.trust }),
    );
    t.same(v.manifest.pieces, pieces, 'verifyBundle reads it');

    const none = await writeBundle(withPieces(made, 'none.bundle', undefined));
    t.notOk('pieces' in none.manifest, 'no pieceSize: no pieces field');

    const list = pieces.blobs[long[0]!.digest]!;
    const at = json.indexOf(list);
    t.ok(at > 0, 'the list is in bundle.json');
    const tampered = Buffer.from(json);
    tampered[at + 3] = tampered[at + 3] === 0x41 ? 0x42 : 0x41;
    const forged = entries.map((e) =>
      e.header.name === BUNDLE_JSON ? { ...e, data: tampered } : e,
    );
    const file = path.join(made.dir, 'tampered.bundle');
    await craft(file, forged);
    await t.rejects(
      withBundleFile(file, (s) => verifyBundle(s, { trust: made.trust })),
      { code: 'BAD_SIGNATURE' },
      'a changed digest: the signature no longer matches',
    );
    // re-signed by the factory's own key, a list of the wrong length is still refused
    const resigned = resign(entries, made.key.privateKey, {
      json: (d: BundleManifest & { pieces: BundlePieces }) => ({
        ...d,
        pieces: { ...d.pieces, blobs: { ...d.pieces.blobs, [long[0]!.digest]: zeros(S) } },
      }),
    });
    await craft(file, resigned);
    await t.rejects(
      withBundleFile(file, (s) => verifyBundle(s, { trust: made.trust })),
      { code: 'INVALID_MANIFEST' },
      'a list of the wrong length: refused though signed',
    );
  },
);

t.test('writeBundle: a delta lists only the blobs it carries', async (t) => {
  const S = MIN_PIECE_BYTES;
  const made = await makeBundle(t, { layerSizes: [2 * S, 3 * S] });
  const [inBase, carried] = made.blobs.filter((b) => b.size > S);
  const base = {
    ref: { bundleJson: digestOf(7), name: '1.2.2', version: '1.2.2' },
    digests: new Set([inBase!.digest]),
  };
  const w = await writeBundle(withPieces(made, 'delta.bundle', S, { base }));
  t.same(Object.keys(w.manifest.pieces!.blobs), [carried!.digest], "the base's blob is not listed");
  const keys = Object.keys(w.manifest);
  t.same(
    keys.slice(keys.indexOf('base'), keys.indexOf('base') + 3),
    ['base', 'pieces', 'signer'],
    'pieces after base, before signer',
  );
});

t.test(
  'writeBundle: a blob that fails its digest while its file is hashed for pieces leaves nothing, and its piece thread has exited',
  async (t) => {
    const S = MIN_PIECE_BYTES;
    const made = await makeBundle(t, { layerSizes: [3 * S] });
    const big = made.blobs.find((b) => b.size === 3 * S)!;
    const bad = Buffer.from(big.data);
    bad[2 * S + 7]! ^= 1;
    await writeFile(big.path, bad);
    const started = Date.now();
    await t.rejects(
      writeBundle(withPieces(made, 'bad.bundle', S)),
      { code: 'BLOB_DIGEST_MISMATCH' },
      'the digest check still fails the write',
    );
    t.same(
      (await readdir(made.dir)).filter((n) => n.startsWith('bad.bundle')),
      [],
      'no bundle, temp file or sidecar left',
    );
    t.ok(Date.now() - started < 10_000, 'and at once');
    t.equal(
      pieceThreadsRunning(),
      0,
      "the piece thread has exited (it is unref'd: only this can tell a leaked one)",
    );
    await writeFile(big.path, big.data);
    await writeBundle(withPieces(made, 'good.bundle', S));
    t.equal(pieceThreadsRunning(), 0, 'nor does a write that succeeds leave one running');
  },
);

t.test(
  'writeBundle: the lists a ReadyBlob gives are taken as they are, no file hashed; otherwise the file is',
  async (t) => {
    const S = MIN_PIECE_BYTES;
    const made = await makeBundle(t, { layerSizes: [3 * S, 2 * S + 1] });
    const [given, hashed] = made.blobs.filter((b) => b.size > S);
    const mark = Buffer.alloc(pieceCount(given!.size, S) * 32, 9).toString('base64');
    const input = withPieces(made, 'given.bundle', S);
    let asked = 0;
    input.blobs = made.blobs.map(({ digest, size, mediaType, path: p }) => ({
      digest,
      size,
      mediaType,
      ready: async () => ({
        path: p,
        verified: false,
        ...(digest === given!.digest
          ? {
              pieces: async () => {
                asked++;
                return mark;
              },
            }
          : { pieces: async () => undefined }),
      }),
    }));
    const w = await writeBundle(input);
    t.equal(
      w.manifest.pieces!.blobs[given!.digest],
      mark,
      'the given list is the one signed (the caller vouches for it)',
    );
    t.equal(asked, 1, 'asked once');
    t.equal(
      w.manifest.pieces!.blobs[hashed!.digest],
      listOf(hashed!.data, S),
      'a blob given none: its file hashed',
    );
    t.equal(pieceThreadsRunning(), 0, 'the thread that hashed it has exited');
    const bad = withPieces(made, 'bad-list.bundle', S);
    bad.blobs = made.blobs.map(({ digest, size, mediaType, path: p }) => ({
      digest,
      size,
      mediaType,
      ready: async () => ({
        path: p,
        verified: false,
        pieces: async () => mark.slice(0, -4) + 'AAA=',
      }),
    }));
    await t.rejects(
      writeBundle(bad),
      { code: 'INVALID_MANIFEST' },
      'a given list that is not canonical is refused before it is signed',
    );
  },
);

t.test(
  'writeBundle: a head past MAX_BUNDLE_JSON_BYTES is refused before any work, naming its size and --pieces none',
  async (t) => {
    const made = await makeBundle(t, { layerSizes: [100] });
    const huge = {
      digest: digestOf(0xbeef),
      size: 2 ** 40,
      mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
      path: path.join(made.dir, 'never-read'),
    };
    const input = (name: string, pieceSize: number | undefined) => {
      const i = withPieces(made, name, pieceSize);
      return { ...i, blobs: [...i.blobs, huge] };
    };
    const started = Date.now();
    const e = await writeBundle(input('huge.bundle', MIN_PIECE_BYTES)).then(
      () => undefined,
      (x: unknown) => x as FormatError,
    );
    t.equal(e?.code, 'OVERSIZED_ENTRY', 'refused');
    t.match(
      e!.message,
      /^bundle\.json would be 42\.7 MiB, past the 16\.0 MiB every reader accepts: build with --pieces none \(its per-piece digests take 42\.7 MiB/,
      'one line naming the size and the fix',
    );
    t.notOk(e!.message.includes('\n'), 'one line');
    t.ok(Date.now() - started < 5000, 'at once: the lists are counted, never made');
    t.same(
      (await readdir(made.dir)).filter((n) => n.startsWith('huge.bundle')),
      [],
      'no file was started',
    );
    // without pieces the same plan passes (and fails later, reading the blob that is not there)
    await t.rejects(
      writeBundle(input('huge-none.bundle', undefined)),
      { code: 'IO_ERROR' },
      'without pieces the head fits',
    );
  },
);

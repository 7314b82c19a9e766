// What FORMAT.md fixes beyond the entries' names, sizes and digests: the end-of-archive
// blocks, every header field the writer writes, the entries' order, the zstd frames' flags,
// and bundle.json's own consistency. Each bundle here extracts to the same content as a valid
// one (or differs only where standard tools stop), so only these rules tell them apart; the
// streaming pass and the random reader refuse each with a stable code.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readFile, stat } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import path from 'node:path';
import {
  BUNDLE_JSON,
  BundleRandomReader,
  FrameInspector,
  INDEX_JSON,
  OCI_LAYOUT,
  blobPath,
  verifyBundle,
  type FormatErrorCode,
  type Trust,
  withBundleFile,
} from '@offline-bundle/format';
import {
  assertRejected,
  craft,
  craftTar,
  entryNamed,
  fileEntry,
  makeBundle,
  makeKey,
  packTar,
  patchHeader,
  readEntries,
  rejectsWith,
  resign,
  sha256,
  skippableFrame,
  trailerOffset,
  zstdFrameWith,
  type Entry,
  type MadeBundle,
} from './craft.js';
import { zstdTarExtract } from './interop.js';

let base: MadeBundle;
let entries: Entry[];
let tarBytes: Buffer;
let n = 0;
const out = (): string => path.join(base.dir, `strict-${++n}.bundle`);

t.before(async () => {
  base = await makeBundle(t, { layerSizes: [3000, 70_000, 10] });
  entries = await readEntries(base.path);
  tarBytes = await packTar(entries);
});

/** The name of the largest layer. */
const layerName = (): string =>
  blobPath(base.blobs.reduce((a, b) => (b.size > a.size ? b : a)).digest);
const layoutStart = (): number => entries.findIndex((e) => e.header.name === OCI_LAYOUT);

/** Opens the file through the seek index and reads every listed entry back, as serving from the media does. */
async function readRandomly(file: string): Promise<void> {
  await withBundleFile(file, async (s) => {
    const r = await BundleRandomReader.open(s, base.written.manifest);
    for (const name of [INDEX_JSON, ...base.written.manifest.blobs.map((b) => blobPath(b.digest))])
      await r.verify(name);
  });
}

/** Refused by verifyBundle and extractBundle with `code`, and by the random reader with `rrCode` when given. */
async function refused(
  t: Test,
  file: string,
  code: FormatErrorCode,
  rrCode?: FormatErrorCode | FormatErrorCode[],
  trust: Trust = base.trust,
): Promise<void> {
  await assertRejected(t, file, trust, code);
  if (rrCode) await rejectsWith(t, readRandomly(file), rrCode, 'BundleRandomReader');
}

t.test('end-of-archive blocks', async (t) => {
  const end = () => trailerOffset(tarBytes);
  const cases: [string, (tar: Buffer) => void][] = [
    // tar-stream takes a block whose only non-zero bytes are the checksum field for a zero block
    [
      'checksum-field bytes in the first zero block',
      (b) => b.write('0000400', end() + 148, 'ascii'),
    ],
    ['a byte in the first zero block', (b) => (b[end() + 10] = 0x41)],
    ['a byte in the second zero block', (b) => (b[end() + 512 + 10] = 0x41)],
    ['the last byte of the archive', (b) => (b[b.length - 1] = 0x01)],
  ];
  for (const [what, edit] of cases) {
    t.test(`${what}: TRAILING_DATA`, async (t) => {
      const bytes = Buffer.from(tarBytes);
      edit(bytes);
      const f = out();
      await craftTar(f, bytes);
      await refused(t, f, 'TRAILING_DATA', 'TRAILING_DATA');
    });
  }
});

t.test('entry header fields', async (t) => {
  const layer = () => entryNamed(entries, layerName());
  const withHeader = (name: string, header: Partial<Entry['header']>): Entry[] =>
    entries.map((e) => (e.header.name === name ? { ...e, header: { ...e.header, ...header } } : e));
  // Fields tar-stream's packer writes from header options
  const packed: [string, string, Partial<Entry['header']>][] = [
    ['mode 0755', layerName(), { mode: 0o755 }],
    ['mode 0600 on bundle.json', BUNDLE_JSON, { mode: 0o600 }],
    ['uid 1000', layerName(), { uid: 1000 }],
    ['gid 1000', INDEX_JSON, { gid: 1000 }],
    ['user name root', layerName(), { uname: 'root' }],
    ['group name wheel', OCI_LAYOUT, { gname: 'wheel' }],
    ['an mtime in 2020', layerName(), { mtime: new Date('2020-01-01T00:00:00Z') }],
    ['a link name on a regular file', layerName(), { linkname: 'other' }],
    ['device numbers on a regular file', layerName(), { devmajor: 1, devminor: 3 }],
  ];
  for (const [what, name, header] of packed) {
    t.test(`${what}: UNEXPECTED_ENTRY`, async (t) => {
      const f = out();
      await craft(f, withHeader(name, header));
      await refused(
        t,
        f,
        'UNEXPECTED_ENTRY',
        name === BUNDLE_JSON ? undefined : 'UNEXPECTED_ENTRY',
      );
    });
  }

  // Fields only byte edits reach: every one still parses to the same name, size and type
  const raw: [string, (b: Buffer) => void][] = [
    ['typeflag NUL (old-style regular file)', (b) => (b[156] = 0)],
    ['GNU magic and version', (b) => b.write('ustar  \0', 257, 'latin1')],
    ['ustar version "  "', (b) => b.write('  ', 263, 'latin1')],
    ['an unknown magic', (b) => b.write('xxxxx\0', 257, 'latin1')],
    ['the mode written as 0000644', (b) => b.write('0000644\0', 100, 'latin1')],
    [
      'the size written with leading spaces',
      (b) => b.write(`   ${b.toString('latin1', 127, 136)}`, 124, 'latin1'),
    ],
    ["bytes after the name's NUL", (b) => b.write('hidden', 90, 'latin1')],
    ["bytes in the header's padding (500-511)", (b) => b.write('pad', 505, 'latin1')],
    [
      'the path split into prefix and name',
      (b) => {
        const name = b.toString('latin1', 0, 100).replace(/\0.*$/s, '');
        const cut = name.lastIndexOf('/');
        b.fill(0, 0, 100);
        b.write(name.slice(cut + 1), 0, 'latin1');
        b.write(name.slice(0, cut), 345, 'latin1');
      },
    ],
  ];
  for (const [what, patch] of raw) {
    t.test(`${what}: UNEXPECTED_ENTRY`, async (t) => {
      const f = out();
      await craftTar(f, patchHeader(tarBytes, layerName(), patch));
      await refused(t, f, 'UNEXPECTED_ENTRY', 'UNEXPECTED_ENTRY');
    });
  }

  t.test('typeflag 7 (contiguous file): NOT_A_FILE', async (t) => {
    const f = out();
    await craftTar(
      f,
      patchHeader(tarBytes, layerName(), (b) => (b[156] = 0x37)),
    );
    await refused(t, f, 'NOT_A_FILE', 'NOT_A_FILE');
  });

  t.test('a GNU long-name header naming a listed blob: UNEXPECTED_ENTRY', async (t) => {
    // tar-stream and GNU tar both take the name from the extension header, so the entry
    // extracts where the listed blob belongs; the format has no extension headers at all
    const l = layer();
    const i = entries.indexOf(l);
    const longName = fileEntry('././@LongLink', Buffer.from(`${l.header.name}\0`));
    const list = [
      ...entries.slice(0, i),
      longName,
      { ...l, header: { ...l.header, name: 'short' } },
      ...entries.slice(i + 1),
    ];
    const f = out();
    await craftTar(
      f,
      patchHeader(await packTar(list), '././@LongLink', (b) => (b[156] = 0x4c)),
    );
    t.same(
      (await readEntries(f)).map((e) => e.header.name),
      entries.map((e) => e.header.name),
      'same names as the valid bundle',
    );
    await refused(t, f, 'UNEXPECTED_ENTRY');
  });
});

t.test('entry order', async (t) => {
  const at = layoutStart();
  const layout = entries.slice(at);
  const swap = (list: Entry[], i: number, j: number): Entry[] => {
    const copy = [...list];
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
    return copy;
  };
  const orders: [string, Entry[]][] = [
    ['index.json before oci-layout', swap(layout, 0, 1)],
    ['a blob before index.json', swap(layout, 1, 2)],
    ['two blobs swapped', swap(layout, 2, 3)],
    ['the blobs reversed', [...layout.slice(0, 2), ...layout.slice(2).reverse()]],
    ['oci-layout last', [...layout.slice(1), layout[0]!]],
  ];
  for (const [what, list] of orders) {
    t.test(`${what}: BAD_ORDER`, async (t) => {
      const f = out();
      await craft(f, [...entries.slice(0, at), ...list]);
      await refused(t, f, 'BAD_ORDER', 'BAD_ORDER');
    });
  }

  t.test(
    'version 2: bundle.json listing the blobs unsorted, the archive in that order: INVALID_MANIFEST',
    async (t) => {
      // version 3 allows any listed order (test/format/format-versions.test.ts)
      const v2 = (m: any) => ({
        ...m,
        schemaVersion: 2,
        mediaType: 'application/vnd.offline-bundle.v2+json',
        blobs: [...m.blobs].reverse(),
      });
      const signed = resign(entries, base.key.privateKey, { json: v2 });
      const f = out();
      await craft(f, [...signed.slice(0, at + 2), ...signed.slice(at + 2).reverse()]);
      await refused(t, f, 'INVALID_MANIFEST');
    },
  );

  t.test('a missing blob is still MISSING_ENTRY, not BAD_ORDER', async (t) => {
    const f = out();
    await craft(
      f,
      entries.filter((e) => e.header.name !== entries[at + 2]!.header.name),
    );
    await refused(t, f, 'MISSING_ENTRY', 'MISSING_ENTRY');
  });
});

t.test('zstd frames', async (t) => {
  const noChecksum = (d: Buffer) => zstdFrameWith(d, { checksum: false, contentSize: true });
  const noSize = (d: Buffer) => zstdFrameWith(d, { checksum: true, contentSize: false });
  const cases: [string, (d: Buffer, i: number) => Buffer][] = [
    ['no frame carries a content checksum', noChecksum],
    [
      'one layer data frame without a content checksum',
      (d, i) => (i === 9 ? noChecksum(d) : zstdFrameWith(d, { checksum: true, contentSize: true })),
    ],
    [
      'the trailer frame without a content checksum',
      (d) =>
        d.length === 1024 && d.every((x) => x === 0)
          ? noChecksum(d)
          : zstdFrameWith(d, { checksum: true, contentSize: true }),
    ],
    ['no frame records its content size', noSize],
  ];
  for (const [what, frame] of cases) {
    t.test(`${what}: CORRUPT`, async (t) => {
      const f = out();
      await craftTar(f, tarBytes, { frame });
      await refused(t, f, 'CORRUPT', 'CORRUPT');
    });
  }

  const skips: [string, (i: number) => Buffer | undefined][] = [
    [
      'a skippable frame between two data frames',
      (i) => (i === 6 ? skippableFrame(Buffer.from('hidden')) : undefined),
    ],
    [
      'a skippable frame after the first frame',
      (i) => (i === 0 ? skippableFrame(Buffer.alloc(0), 7) : undefined),
    ],
    [
      'a second seek-table frame inside the archive',
      (i) => (i === 3 ? skippableFrame(Buffer.alloc(17), 0xe) : undefined),
    ],
  ];
  for (const [what, between] of skips) {
    t.test(`${what}, counted in the seek table: BAD_SEEK_TABLE`, async (t) => {
      const f = out();
      await craftTar(f, tarBytes, { between });
      await refused(t, f, 'BAD_SEEK_TABLE');
    });
  }

  t.test('a skippable frame right before the seek table: BAD_SEEK_TABLE', async (t) => {
    const f = out();
    const last = (await craftTar(out(), tarBytes)).frames.length - 1;
    await craftTar(f, tarBytes, {
      between: (i) => (i === last ? skippableFrame(Buffer.from('x')) : undefined),
    });
    await refused(t, f, 'BAD_SEEK_TABLE');
  });
});

t.test('the frame walk keeps in step with multi-block frames of every block type', async (t) => {
  // random data makes raw blocks, zeros RLE blocks, text compressed ones; 4 MiB frames hold many
  const text = Buffer.from('offline bundle frame walk '.repeat(250_000));
  const b = await makeBundle(t, {
    layers: [randomBytes(5 * 1024 * 1024), Buffer.alloc(5 * 1024 * 1024), text],
  });
  const inspector = new FrameInspector((await stat(b.path)).size);
  await pipeline(
    createReadStream(b.path, { highWaterMark: 7777 }),
    inspector,
    new Writable({ write: (_c, _e, cb) => cb() }),
  );
  t.equal(inspector.problem, undefined, 'no problem in a bundle writeBundle made');
  t.ok(inspector.sawSeekTable, 'walked every frame to the seek table');

  const all = await readEntries(b.path);
  const tarAll = await packTar(all);
  const frames = (await craftTar(path.join(b.dir, 'same.bundle'), tarAll)).frames.length;
  const f = path.join(b.dir, 'last-data-frame.bundle');
  // the frame before the trailer: found only by walking every block of every frame before it
  await craftTar(f, tarAll, {
    frame: (d, i) => zstdFrameWith(d, { checksum: i !== frames - 2, contentSize: true }),
  });
  await assertRejected(t, f, b.trust, 'CORRUPT');
});

t.test('bundle.json consistency', async (t) => {
  t.test('an image digest that is not a listed blob: INVALID_MANIFEST', async (t) => {
    const f = out();
    await craft(
      f,
      resign(entries, base.key.privateKey, {
        json: (m) => ({ ...m, images: [{ ...m.images[0], digest: sha256('not a blob') }] }),
      }),
    );
    await refused(t, f, 'INVALID_MANIFEST');
  });

  t.test(
    'signer.fingerprint naming an untrusted key, signed by the trusted one: BAD_SIGNATURE',
    async (t) => {
      const other = makeKey();
      const f = out();
      await craft(
        f,
        resign(entries, base.key.privateKey, {
          json: (m) => ({ ...m, signer: { ...m.signer, fingerprint: other.trusted.fingerprint } }),
        }),
      );
      await refused(t, f, 'BAD_SIGNATURE');
    },
  );

  t.test(
    'signer.fingerprint naming another trusted key than the one that verified: BAD_SIGNATURE',
    async (t) => {
      const other = makeKey();
      const f = out();
      await craft(
        f,
        resign(entries, base.key.privateKey, {
          json: (m) => ({ ...m, signer: { ...m.signer, fingerprint: other.trusted.fingerprint } }),
        }),
      );
      await refused(t, f, 'BAD_SIGNATURE', undefined, { keys: [other.trusted, base.key.trusted] });
    },
  );

  t.test("signer.algorithm other than the verifying key's: BAD_SIGNATURE", async (t) => {
    const f = out();
    await craft(
      f,
      resign(entries, base.key.privateKey, {
        json: (m) => ({ ...m, signer: { ...m.signer, algorithm: 'ed25519' } }),
      }),
    );
    await refused(t, f, 'BAD_SIGNATURE');
  });

  t.test(
    'under digest-only trust no key verified, so signer is not checked against one',
    async (t) => {
      const other = makeKey();
      const f = out();
      await craft(
        f,
        resign(entries, base.key.privateKey, {
          json: (m) => ({ ...m, signer: { ...m.signer, fingerprint: other.trusted.fingerprint } }),
        }),
      );
      const digest = sha256(await readFile(f));
      const v = await withBundleFile(f, (s) => verifyBundle(s, { trust: { digest } }));
      t.equal(v.manifest.signer.fingerprint, other.trusted.fingerprint);
    },
  );
});

t.test('the random reader reads the base bundle whole', () => readRandomly(base.path));

t.test(
  'every bundle writeBundle makes verifies, opens randomly and extracts with zstd -dc | tar -x',
  async (t) => {
    const variants: [string, Parameters<typeof makeBundle>[1]][] = [
      ['ECDSA, small layers', { layerSizes: [1, 511, 512, 513] }],
      ['Ed25519, an empty layer', { key: makeKey('ed25519'), layerSizes: [0, 100] }],
      ['a layer over two frames', { layerSizes: [5 * 1024 * 1024 + 3] }],
    ];
    for (const [what, opts] of variants) {
      t.test(what, async (t) => {
        const b = await makeBundle(t, opts);
        const v = await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }));
        await withBundleFile(b.path, async (s) => {
          const r = await BundleRandomReader.open(s, v.manifest);
          for (const blob of v.manifest.blobs) await r.verify(blobPath(blob.digest));
        });
        const dir = path.join(b.dir, 'tar-x');
        await mkdir(dir);
        await zstdTarExtract(b.path, dir);
        for (const blob of v.manifest.blobs) {
          t.equal(sha256(await readFile(path.join(dir, blobPath(blob.digest)))), blob.digest);
        }
      });
    }
  },
);

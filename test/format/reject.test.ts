// Every rejection verifyBundle promises, one bad file each: the error code, a one-line
// message, and extractBundle leaving nothing behind.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readFile, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  BUNDLE_JSON,
  INDEX_JSON,
  OCI_LAYOUT,
  SCHEMA_VERSION,
  SIGNATURE,
  blobPath,
  encodeSeekTable,
  readHeader,
  verifyBundle,
  type Trust,
  withBundleFile,
} from '@offline-bundle/format';
import {
  assertRejected,
  craft,
  craftTar,
  entryNamed,
  fileEntry,
  flipByte,
  makeBundle,
  makeKey,
  packTar,
  readEntries,
  readFrames,
  rejectsWith,
  resign,
  sha256,
  specialEntry,
  withData,
  zstdFrame,
  type Entry,
  type MadeBundle,
} from './craft.js';

/** The valid bundle a suite's tests start from (they only read it and write siblings). */
let base: MadeBundle;
let entries: Entry[];

let n = 0;
const out = (): string => path.join(base.dir, `bad-${++n}.bundle`);
/** The name of the bundle's largest layer (a random blob of 70000 bytes). */
const layer = (): Entry =>
  entryNamed(entries, blobPath(base.blobs.reduce((a, b) => (b.size > a.size ? b : a)).digest));
/** entries with `e` inserted after index.json (a place only layout entries belong). */
const withExtra = (...extra: Entry[]): Entry[] => {
  const i = entries.findIndex((e) => e.header.name === INDEX_JSON) + 1;
  return [...entries.slice(0, i), ...extra, ...entries.slice(i)];
};
const replace = (name: string, by: Entry | null): Entry[] =>
  entries.flatMap((e) => (e.header.name === name ? (by ? [by] : []) : [e]));

/** Every rejection, against whichever bundle `base` holds. */
function rejections(t: Test): void {
  t.test('the base bundle verifies', async (t) => {
    const v = await withBundleFile(base.path, (s) => verifyBundle(s, { trust: base.trust }));
    t.equal(v.manifest.blobs.length, base.blobs.length);
  });

  t.test('trust', async (t) => {
    t.test('tampered bundle.json: BAD_SIGNATURE', async (t) => {
      const tampered = entries.map((e) => {
        if (e.header.name !== BUNDLE_JSON) return e;
        const m = JSON.parse(e.data.toString());
        m.release.version = '9.9.9';
        return withData(e, Buffer.from(JSON.stringify(m, null, 2) + '\n'));
      });
      const f = out();
      await craft(f, tampered);
      await assertRejected(t, f, base.trust, 'BAD_SIGNATURE');
    });

    t.test('one flipped byte in bundle.json, same size: BAD_SIGNATURE', async (t) => {
      const mj = entryNamed(entries, BUNDLE_JSON);
      const at = mj.data.indexOf('1.2.3');
      const f = out();
      await craft(f, replace(BUNDLE_JSON, withData(mj, flipByte(mj.data, at + 4))));
      await assertRejected(t, f, base.trust, 'BAD_SIGNATURE');
    });

    t.test('signed by another key: UNTRUSTED_KEY', async (t) => {
      const other = makeKey();
      const f = out();
      await craft(
        f,
        resign(entries, other.privateKey, {
          json: (m) => ({ ...m, signer: { ...m.signer, fingerprint: other.trusted.fingerprint } }),
        }),
      );
      await assertRejected(t, f, base.trust, 'UNTRUSTED_KEY');
      // and the bundle itself is fine for whoever trusts that key
      await withBundleFile(f, (s) => verifyBundle(s, { trust: { keys: [other.trusted] } }));
    });

    t.test(
      "signed by another key that claims the trusted key's fingerprint: BAD_SIGNATURE",
      async (t) => {
        const f = out();
        await craft(f, resign(entries, makeKey().privateKey));
        await assertRejected(t, f, base.trust, 'BAD_SIGNATURE');
      },
    );

    t.test('an Ed25519 key is not confused with the ECDSA one: UNTRUSTED_KEY', async (t) => {
      const b = await makeBundle(t, { key: makeKey('ed25519') });
      await assertRejected(t, b.path, base.trust, 'UNTRUSTED_KEY');
      await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }));
    });

    t.test('no trust given: NO_TRUST', async (t) => {
      await assertRejected(t, base.path, {}, 'NO_TRUST');
      await assertRejected(t, base.path, { keys: [] }, 'NO_TRUST');
    });

    t.test('whole-file digest mismatch: FILE_DIGEST_MISMATCH', async (t) => {
      const wrong = sha256('not this bundle');
      await assertRejected(t, base.path, { digest: wrong }, 'FILE_DIGEST_MISMATCH');
      await assertRejected(
        t,
        base.path,
        { keys: base.trust.keys, digest: wrong },
        'FILE_DIGEST_MISMATCH',
      );
    });

    t.test('digest-only trust works without keys', async (t) => {
      const digest = base.written.fileDigest;
      t.equal(digest, sha256(await readFile(base.path)), 'writeBundle reports the file sha256');
      t.equal(
        await readFile(`${base.path}.sha256`, 'utf8'),
        `${digest.slice(7)}  ${path.basename(base.path)}\n`,
        'NAME.sha256 in sha256sum format',
      );
      const v = await withBundleFile(base.path, (s) => verifyBundle(s, { trust: { digest } }));
      t.equal(v.fileDigest, digest);
      t.equal(v.signer, undefined, 'no key verified anything');
    });

    t.test('digest-only trust still refuses a bad layout', async (t) => {
      // a re-signed bundle with a bad blob has its own digest: a trusted digest of it must not
      // make the reader skip the per-blob checks
      const l = layer();
      const f = out();
      await craft(f, replace(l.header.name, withData(l, flipByte(l.data, 10))));
      const digest = sha256(await readFile(f));
      await assertRejected(t, f, { digest }, 'BLOB_DIGEST_MISMATCH');
    });

    t.test('keys and digest are both checked', async (t) => {
      const trust: Trust = { keys: base.trust.keys!, digest: base.written.fileDigest };
      const v = await withBundleFile(base.path, (s) => verifyBundle(s, { trust }));
      t.equal(v.signer?.fingerprint, base.key.trusted.fingerprint);
      await assertRejected(
        t,
        base.path,
        { keys: [makeKey().trusted], digest: base.written.fileDigest },
        'UNTRUSTED_KEY',
      );
      await assertRejected(
        t,
        base.path,
        { keys: base.trust.keys!, digest: sha256('x') },
        'FILE_DIGEST_MISMATCH',
      );
    });

    t.test('any of several trusted keys', async (t) => {
      const v = await withBundleFile(base.path, (s) =>
        verifyBundle(s, { trust: { keys: [makeKey().trusted, base.key.trusted] } }),
      );
      t.equal(v.signer?.fingerprint, base.key.trusted.fingerprint);
    });
  });

  t.test('entries', async (t) => {
    t.test('a blob whose bytes do not match its digest: BLOB_DIGEST_MISMATCH', async (t) => {
      const l = layer();
      const f = out();
      await craft(f, replace(l.header.name, withData(l, flipByte(l.data, l.data.length - 1))));
      await assertRejected(t, f, base.trust, 'BLOB_DIGEST_MISMATCH');
    });

    t.test('index.json altered: BLOB_DIGEST_MISMATCH', async (t) => {
      const ix = entryNamed(entries, INDEX_JSON);
      const f = out();
      await craft(
        f,
        replace(
          INDEX_JSON,
          withData(ix, Buffer.from(ix.data.toString().replace('amd64', 'arm64'))),
        ),
      );
      await assertRejected(t, f, base.trust, 'BLOB_DIGEST_MISMATCH');
    });

    t.test('oci-layout altered: BLOB_DIGEST_MISMATCH', async (t) => {
      const ol = entryNamed(entries, OCI_LAYOUT);
      const f = out();
      await craft(
        f,
        replace(
          OCI_LAYOUT,
          withData(ol, Buffer.from(ol.data.toString().replace('1.0.0', '9.0.0'))),
        ),
      );
      await assertRejected(t, f, base.trust, 'BLOB_DIGEST_MISMATCH');
    });

    t.test('a blob shorter than listed: SIZE_MISMATCH', async (t) => {
      const l = layer();
      const f = out();
      await craft(f, replace(l.header.name, withData(l, l.data.subarray(0, l.data.length - 1))));
      await assertRejected(t, f, base.trust, 'SIZE_MISMATCH');
    });

    t.test('a blob longer than listed: OVERSIZED_ENTRY', async (t) => {
      const l = layer();
      const f = out();
      await craft(
        f,
        replace(l.header.name, withData(l, Buffer.concat([l.data, Buffer.from('more')]))),
      );
      await assertRejected(t, f, base.trust, 'OVERSIZED_ENTRY');
    });

    t.test('a blob bundle.json does not list: UNEXPECTED_ENTRY', async (t) => {
      const data = Buffer.from('not listed');
      const f = out();
      await craft(f, withExtra(fileEntry(blobPath(sha256(data)), data)));
      await assertRejected(t, f, base.trust, 'UNEXPECTED_ENTRY');
    });

    t.test('an unlisted file in the layout root: UNEXPECTED_ENTRY', async (t) => {
      const f = out();
      await craft(f, withExtra(fileEntry('README', 'hello')));
      await assertRejected(t, f, base.trust, 'UNEXPECTED_ENTRY');
    });

    for (const name of [
      '../evil',
      '/etc/x',
      'blobs/../x',
      'blobs/sha256/../../../x',
      './oci-layout',
      'blobs//sha256/x',
    ]) {
      t.test(`a path outside the layout (${name}): UNEXPECTED_ENTRY`, async (t) => {
        const f = out();
        await craft(f, withExtra(fileEntry(name, 'evil')));
        await assertRejected(t, f, base.trust, 'UNEXPECTED_ENTRY');
      });
    }

    t.test(
      "a path outside the layout carrying a listed blob's bytes: UNEXPECTED_ENTRY",
      async (t) => {
        // the listed blob then comes as well, so only the path is wrong
        const l = layer();
        const f = out();
        await craft(f, withExtra(fileEntry(`blobs/sha256/../../${l.header.name}`, l.data)));
        await assertRejected(t, f, base.trust, 'UNEXPECTED_ENTRY');
      },
    );

    t.test('pax extended headers: UNEXPECTED_ENTRY', async (t) => {
      const f = out();
      await craft(f, withExtra(fileEntry('README', 'x', { pax: { path: `../../etc/passwd` } })));
      await assertRejected(t, f, base.trust, 'UNEXPECTED_ENTRY');
    });

    const listed = () => layer().header.name;
    const specials: [string, () => Entry][] = [
      ['a symlink', () => specialEntry(listed(), 'symlink', { linkname: '/etc/passwd' })],
      ['a hard link', () => specialEntry(listed(), 'link', { linkname: OCI_LAYOUT })],
      [
        'a character device',
        () => specialEntry(listed(), 'character-device', { devmajor: 1, devminor: 3 }),
      ],
      [
        'a block device',
        () => specialEntry(listed(), 'block-device', { devmajor: 8, devminor: 0 }),
      ],
      ['a fifo', () => specialEntry(listed(), 'fifo')],
      ['a directory entry', () => specialEntry('blobs/', 'directory', { mode: 0o755 })],
      ['a directory named like a blob', () => specialEntry(listed(), 'directory', { mode: 0o755 })],
    ];
    for (const [what, make] of specials) {
      t.test(`${what} in place of a listed blob: NOT_A_FILE`, async (t) => {
        const f = out();
        await craft(f, replace(listed(), make()));
        await assertRejected(t, f, base.trust, 'NOT_A_FILE');
      });
      t.test(`${what} as an extra entry: NOT_A_FILE`, async (t) => {
        const f = out();
        await craft(f, withExtra(make()));
        await assertRejected(t, f, base.trust, 'NOT_A_FILE');
      });
    }

    t.test('a duplicate blob entry: DUPLICATE_ENTRY', async (t) => {
      const f = out();
      await craft(f, [...entries, layer()]);
      await assertRejected(t, f, base.trust, 'DUPLICATE_ENTRY');
    });

    t.test('a duplicate blob entry right after the first: DUPLICATE_ENTRY', async (t) => {
      const l = layer();
      const i = entries.indexOf(l);
      const f = out();
      await craft(f, [...entries.slice(0, i + 1), l, ...entries.slice(i + 1)]);
      await assertRejected(t, f, base.trust, 'DUPLICATE_ENTRY');
    });

    t.test('a duplicate index.json: DUPLICATE_ENTRY', async (t) => {
      const f = out();
      await craft(f, withExtra(entryNamed(entries, INDEX_JSON)));
      await assertRejected(t, f, base.trust, 'DUPLICATE_ENTRY');
    });

    t.test('a second bundle.json later in the archive: DUPLICATE_ENTRY', async (t) => {
      const f = out();
      await craft(f, withExtra(entryNamed(entries, BUNDLE_JSON)));
      await assertRejected(t, f, base.trust, 'DUPLICATE_ENTRY');
    });

    t.test('a second signature later in the archive: DUPLICATE_ENTRY', async (t) => {
      const f = out();
      await craft(f, withExtra(entryNamed(entries, SIGNATURE)));
      await assertRejected(t, f, base.trust, 'DUPLICATE_ENTRY');
    });

    t.test('a listed blob missing: MISSING_ENTRY', async (t) => {
      const f = out();
      await craft(f, replace(layer().header.name, null));
      await assertRejected(t, f, base.trust, 'MISSING_ENTRY');
    });

    t.test('index.json missing: MISSING_ENTRY', async (t) => {
      const f = out();
      await craft(f, replace(INDEX_JSON, null));
      await assertRejected(t, f, base.trust, 'MISSING_ENTRY');
    });

    t.test(
      'a blob listed in the signed bundle.json that the archive lacks: MISSING_ENTRY',
      async (t) => {
        const data = Buffer.from('listed, never packed');
        const f = out();
        await craft(
          f,
          resign(entries, base.key.privateKey, {
            json: (m) => ({
              ...m,
              blobs: [
                ...m.blobs,
                { digest: sha256(data), size: data.length, mediaType: 'application/octet-stream' },
              ].sort((a, b) => (a.digest < b.digest ? -1 : 1)),
            }),
          }),
        );
        await assertRejected(t, f, base.trust, 'MISSING_ENTRY');
      },
    );
  });

  t.test('order', async (t) => {
    const [mj, sig, ...rest] = entries as [Entry, Entry, ...Entry[]];
    const orders: [string, Entry[]][] = [
      ['signature first', [sig, mj, ...rest]],
      ['a layout entry first', [rest[0]!, mj, sig, ...rest.slice(1)]],
      [
        'a layout entry between bundle.json and its signature',
        [mj, rest[0]!, sig, ...rest.slice(1)],
      ],
      ['bundle.json last', [sig, ...rest, mj]],
      ['no signature', [mj, ...rest]],
      ['no bundle.json', [sig, ...rest]],
    ];
    for (const [what, list] of orders) {
      t.test(`${what}: BAD_ORDER`, async (t) => {
        const f = out();
        await craft(f, list);
        await assertRejected(t, f, base.trust, 'BAD_ORDER');
      });
    }
  });

  t.test('end of file', async (t) => {
    t.test('garbage bytes after the seek table: TRAILING_DATA', async (t) => {
      for (const junk of [
        Buffer.from('x'),
        Buffer.from('garbage after the table\n'),
        randomBytes(100_000),
      ]) {
        const f = out();
        await writeFile(f, Buffer.concat([await readFile(base.path), junk]));
        await assertRejected(t, f, base.trust, 'TRAILING_DATA');
      }
    });

    t.test('a valid zstd frame of tar data after the seek table: TRAILING_DATA', async (t) => {
      const extra = await packTar([fileEntry('extra', 'appended')]);
      const f = out();
      await writeFile(f, Buffer.concat([await readFile(base.path), zstdFrame(extra)]));
      await assertRejected(t, f, base.trust, 'TRAILING_DATA');
    });

    t.test('a frame of zero blocks after the seek table: TRAILING_DATA', async (t) => {
      const f = out();
      await writeFile(f, Buffer.concat([await readFile(base.path), zstdFrame(Buffer.alloc(1024))]));
      await assertRejected(t, f, base.trust, 'TRAILING_DATA');
    });

    t.test('an extra frame of tar data listed in the seek table: TRAILING_DATA', async (t) => {
      const f = out();
      await craft(f, entries, { extraTar: await packTar([fileEntry('extra', 'appended')]) });
      await assertRejected(t, f, base.trust, 'TRAILING_DATA');
    });

    t.test('an extra entry after the tar trailer: TRAILING_DATA', async (t) => {
      const f = out();
      await craftTar(
        f,
        Buffer.concat([
          await packTar(entries),
          await packTar([fileEntry('extra', 'after the end')]),
        ]),
      );
      await assertRejected(t, f, base.trust, 'TRAILING_DATA');
    });

    t.test('a zero block between entries (standard tar stops there): TRAILING_DATA', async (t) => {
      const i = entries.findIndex((e) => e.header.name === INDEX_JSON);
      const f = out();
      await craftTar(
        f,
        Buffer.concat([
          await packTar(entries.slice(0, i), false),
          Buffer.alloc(512),
          await packTar(entries.slice(i)),
        ]),
      );
      await assertRejected(t, f, base.trust, 'TRAILING_DATA');
    });

    t.test(
      'zero blocks before bundle.json (standard tar sees an empty archive): BAD_ORDER',
      async (t) => {
        const f = out();
        await craftTar(f, Buffer.concat([Buffer.alloc(1024), await packTar(entries)]));
        await assertRejected(t, f, base.trust, 'BAD_ORDER');
      },
    );

    t.test('a skippable frame after the seek table: BAD_SEEK_TABLE', async (t) => {
      // zstd skips it, so the pass sees nothing after the archive; the file then does not end
      // with the seek table
      const skip = Buffer.alloc(8 + 16);
      skip.writeUInt32LE(0x184d2a50, 0);
      skip.writeUInt32LE(16, 4);
      const f = out();
      await writeFile(f, Buffer.concat([await readFile(base.path), skip]));
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test('a second seek table after the first: BAD_SEEK_TABLE', async (t) => {
      const f = out();
      await writeFile(f, Buffer.concat([await readFile(base.path), encodeSeekTable([])]));
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test('truncated in the middle of a frame: TRUNCATED', async (t) => {
      const frames = await readFrames(base.path);
      // in the header's frame, in bundle.json's, in a layer's, and in the trailer's
      for (const i of [0, 1, Math.floor(frames.length / 2), frames.length - 2, frames.length - 1]) {
        const fr = frames[i]!;
        const f = out();
        await copyFile(base.path, f);
        await truncate(f, fr.compressedOffset + Math.floor(fr.bytes.length / 2));
        await assertRejected(t, f, base.trust, 'TRUNCATED');
      }
    });

    t.test('truncated exactly at a frame boundary: TRUNCATED', async (t) => {
      const frames = await readFrames(base.path);
      for (const i of [1, 2, 4, 5, Math.floor(frames.length / 2), frames.length - 1]) {
        const f = out();
        await copyFile(base.path, f);
        await truncate(f, frames[i]!.compressedOffset);
        await assertRejected(t, f, base.trust, 'TRUNCATED');
      }
    });

    t.test('truncated inside the seek table: TRUNCATED', async (t) => {
      const frames = await readFrames(base.path);
      const last = frames[frames.length - 1]!;
      const tableStart = last.compressedOffset + last.bytes.length;
      const size = (await readFile(base.path)).length;
      // in the skippable frame's header, in the entries, in the footer, one byte short
      for (const at of [tableStart + 3, tableStart + 20, size - 5, size - 1]) {
        const f = out();
        await copyFile(base.path, f);
        await truncate(f, at);
        await assertRejected(t, f, base.trust, 'TRUNCATED');
      }
    });

    t.test('no tar end-of-archive blocks, seek table intact: TRUNCATED', async (t) => {
      const f = out();
      await craft(f, entries, { trailer: false });
      await assertRejected(t, f, base.trust, 'TRUNCATED');
    });

    t.test('an empty file: TRUNCATED', async (t) => {
      const f = out();
      await writeFile(f, '');
      await assertRejected(t, f, base.trust, 'TRUNCATED');
    });
  });

  t.test('not a bundle', async (t) => {
    t.test('random bytes: CORRUPT', async (t) => {
      const f = out();
      await writeFile(f, randomBytes(200_000));
      await assertRejected(t, f, base.trust, 'CORRUPT');
    });

    t.test('a text file: CORRUPT', async (t) => {
      const f = out();
      await writeFile(f, 'this is not a bundle\n'.repeat(100));
      await assertRejected(t, f, base.trust, 'CORRUPT');
    });

    t.test('a zstd-compressed tar of something else: BAD_ORDER', async (t) => {
      const f = out();
      await craft(f, [fileEntry('etc/hosts', '127.0.0.1 localhost\n'), fileEntry('README', 'hi')]);
      await assertRejected(t, f, base.trust, 'BAD_ORDER');
    });

    t.test("a plain (uncompressed) tar of the bundle's entries: CORRUPT", async (t) => {
      const f = out();
      await writeFile(f, await packTar(entries));
      await assertRejected(t, f, base.trust, 'CORRUPT');
    });

    t.test('a zstd frame whose bytes were damaged: CORRUPT', async (t) => {
      const frames = await readFrames(base.path);
      const fr = frames[Math.floor(frames.length / 2)]!;
      const buf = await readFile(base.path);
      const f = out();
      await writeFile(f, flipByte(buf, fr.compressedOffset + Math.floor(fr.bytes.length / 2)));
      await assertRejected(t, f, base.trust, ['CORRUPT', 'BLOB_DIGEST_MISMATCH']);
    });
  });

  t.test('bundle.json contents', async (t) => {
    t.test('a schemaVersion newer than this reader: UNSUPPORTED_VERSION', async (t) => {
      const f = out();
      await craft(
        f,
        resign(entries, base.key.privateKey, {
          json: (m) => ({ ...m, schemaVersion: SCHEMA_VERSION + 1 }),
        }),
      );
      await assertRejected(t, f, base.trust, 'UNSUPPORTED_VERSION');
    });

    t.test('a version 1 bundle (its media type, totals.archiveBytes) still verifies', async (t) => {
      const f = out();
      const v1 = (m: any) => ({
        ...m,
        schemaVersion: 1,
        mediaType: 'application/vnd.offline-bundle.v1+json',
        totals: { ...m.totals, archiveBytes: 1234 },
      });
      await craft(f, resign(entries, base.key.privateKey, { json: v1 }));
      const v = await withBundleFile(f, (s) => verifyBundle(s, { trust: base.trust }));
      t.equal(v.manifest.schemaVersion, 1);
      t.equal(v.manifest.totals.archiveBytes, 1234);
    });

    const malformed: [string, (m: any) => unknown][] = [
      ['schemaVersion 0', (m) => ({ ...m, schemaVersion: 0 })],
      ['schemaVersion "1"', (m) => ({ ...m, schemaVersion: '1' })],
      ['another mediaType', (m) => ({ ...m, mediaType: 'application/json' })],
      [
        'the current version with the version 1 media type',
        (m) => ({ ...m, mediaType: 'application/vnd.offline-bundle.v1+json' }),
      ],
      [
        'the current version with totals.archiveBytes (a version 1 field)',
        (m) => ({ ...m, totals: { ...m.totals, archiveBytes: 10 } }),
      ],
      [
        'version 1 without totals.archiveBytes',
        (m) => ({ ...m, schemaVersion: 1, mediaType: 'application/vnd.offline-bundle.v1+json' }),
      ],
      [
        'a blob digest that is not sha256',
        (m) => ({
          ...m,
          blobs: m.blobs.map((b: any, i: number) => (i === 0 ? { ...b, digest: 'md5:abc' } : b)),
        }),
      ],
      [
        'a blob digest that escapes blobs/',
        (m) => ({
          ...m,
          blobs: m.blobs.map((b: any, i: number) =>
            i === 0 ? { ...b, digest: 'sha256:../../../../etc/passwd' } : b,
          ),
        }),
      ],
      [
        'a negative blob size',
        (m) => ({
          ...m,
          blobs: m.blobs.map((b: any, i: number) => (i === 0 ? { ...b, size: -1 } : b)),
        }),
      ],
      [
        'a fractional blob size',
        (m) => ({
          ...m,
          blobs: m.blobs.map((b: any, i: number) => (i === 0 ? { ...b, size: 1.5 } : b)),
        }),
      ],
      [
        'a blob size as a string',
        (m) => ({
          ...m,
          blobs: m.blobs.map((b: any, i: number) => (i === 0 ? { ...b, size: String(b.size) } : b)),
        }),
      ],
      ['a blob listed twice', (m) => ({ ...m, blobs: [m.blobs[0], ...m.blobs] })],
      ['no release', (m) => ({ ...m, release: undefined })],
      ['an empty release.version', (m) => ({ ...m, release: { ...m.release, version: '' } })],
      [
        'a release.version that is a path',
        (m) => ({ ...m, release: { ...m.release, version: '../../../../tmp/victim' } }),
      ],
      [
        'a release.arch with a slash',
        (m) => ({ ...m, release: { ...m.release, arch: 'amd64/../x' } }),
      ],
      ['images not a list', (m) => ({ ...m, images: {} })],
      [
        'an image digest missing',
        (m) => ({ ...m, images: [{ ...m.images[0], digest: undefined }] }),
      ],
      ['no index', (m) => ({ ...m, index: null })],
      ['totals missing', (m) => ({ ...m, totals: undefined })],
      ['an unknown signer algorithm', (m) => ({ ...m, signer: { ...m.signer, algorithm: 'rsa' } })],
      ['an array instead of an object', (m) => [m]],
    ];
    for (const [what, edit] of malformed) {
      t.test(`${what}: INVALID_MANIFEST`, async (t) => {
        const f = out();
        await craft(f, resign(entries, base.key.privateKey, { json: edit }));
        await assertRejected(t, f, base.trust, 'INVALID_MANIFEST');
      });
    }

    t.test('signed bytes that are not JSON: INVALID_MANIFEST', async (t) => {
      const f = out();
      // cut inside the JSON, not in the spaces the writer pads it with
      await craft(
        f,
        resign(entries, base.key.privateKey, {
          raw: (b) => b.subarray(0, Buffer.byteLength(b.toString('utf8').trimEnd()) - 3),
        }),
      );
      await assertRejected(t, f, base.trust, 'INVALID_MANIFEST');
    });

    t.test('signed bytes that are not UTF-8 JSON: INVALID_MANIFEST', async (t) => {
      const f = out();
      await craft(
        f,
        resign(entries, base.key.privateKey, { raw: () => Buffer.from([0xff, 0xfe, 0x00, 0x7b]) }),
      );
      await assertRejected(t, f, base.trust, 'INVALID_MANIFEST');
    });

    t.test('index.json listed over the size limit: OVERSIZED_ENTRY', async (t) => {
      const f = out();
      await craft(
        f,
        resign(entries, base.key.privateKey, {
          json: (m) => ({ ...m, index: { ...m.index, size: 64 * 1024 * 1024 } }),
        }),
      );
      await assertRejected(t, f, base.trust, 'OVERSIZED_ENTRY');
    });

    t.test('a tampered manifest under digest-only trust: FILE_DIGEST_MISMATCH', async (t) => {
      const tampered = resign(entries, makeKey().privateKey, {
        json: (m) => ({ ...m, release: { ...m.release, version: '9.9.9' } }),
      });
      const f = out();
      await craft(f, tampered);
      await assertRejected(t, f, { digest: base.written.fileDigest }, 'FILE_DIGEST_MISMATCH');
    });
  });

  t.test('seek table', async (t) => {
    t.test('no seek table (the file ends with the last frame): BAD_SEEK_TABLE', async (t) => {
      const f = out();
      await craft(f, entries, { seekTable: null });
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test("a frame's decompressed size off by one block: BAD_SEEK_TABLE", async (t) => {
      const f = out();
      await craft(f, entries, {
        seekTable: (fr) =>
          fr.map((x, i) => (i === 5 ? { ...x, decompressedSize: x.decompressedSize + 512 } : x)),
      });
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test('compressed sizes that do not add up to the file: BAD_SEEK_TABLE', async (t) => {
      const f = out();
      await craft(f, entries, {
        seekTable: (fr) =>
          fr.map((x, i) => (i === 5 ? { ...x, compressedSize: x.compressedSize + 7 } : x)),
      });
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test('a frame left out of the table: BAD_SEEK_TABLE', async (t) => {
      const f = out();
      await craft(f, entries, { seekTable: (fr) => fr.slice(0, -1) });
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test('an empty table: BAD_SEEK_TABLE', async (t) => {
      const f = out();
      await craft(f, entries, { seekTable: () => [] });
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    t.test('a footer with a bad descriptor: BAD_SEEK_TABLE', async (t) => {
      const buf = Buffer.from(await readFile(base.path));
      buf[buf.length - 5] = 0x7c;
      const f = out();
      await writeFile(f, buf);
      await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
    });

    for (const delta of [8, -8]) {
      t.test(
        `a table whose skippable header disagrees with its footer (${delta}): BAD_SEEK_TABLE`,
        async (t) => {
          const buf = Buffer.from(await readFile(base.path));
          const frames = await readFrames(base.path);
          const tableStart =
            frames[frames.length - 1]!.compressedOffset + frames[frames.length - 1]!.bytes.length;
          buf.writeUInt32LE(buf.readUInt32LE(tableStart + 4) + delta, tableStart + 4);
          const f = out();
          await writeFile(f, buf);
          await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
        },
      );
    }

    t.test(
      'sizes moved between frames but totals right: BAD_SEEK_TABLE (the index must list the frames walked)',
      async (t) => {
        // random reads map entries through the index, so one that merely sums right could point
        // them into the middle of a frame
        const f = out();
        await craft(f, entries, {
          seekTable: (fr) =>
            fr.map((x, i) =>
              i === 4
                ? { ...x, compressedSize: x.compressedSize + 3 }
                : i === 5
                  ? { ...x, compressedSize: x.compressedSize - 3 }
                  : x,
            ),
        });
        await assertRejected(t, f, base.trust, 'BAD_SEEK_TABLE');
      },
    );
  });

  t.test('I/O', async (t) => {
    t.test('a missing file: IO_ERROR', async (t) => {
      await rejectsWith(
        t,
        withBundleFile(path.join(base.dir, 'nope.bundle'), (s) =>
          verifyBundle(s, { trust: base.trust }),
        ),
        'IO_ERROR',
        'verifyBundle',
      );
    });

    t.test('a file that cannot be read: IO_ERROR, not CORRUPT', async (t) => {
      const d = path.join(base.dir, 'a-directory.bundle');
      await mkdir(d);
      await rejectsWith(
        t,
        withBundleFile(d, (s) => verifyBundle(s, { trust: base.trust })),
        'IO_ERROR',
        'verifyBundle',
      );
    });

    t.test("onEntry's own I/O failure (a full disk) passes through unchanged", async (t) => {
      const enospc = Object.assign(new Error('ENOSPC: no space left on device, write'), {
        code: 'ENOSPC',
        errno: -28,
        syscall: 'write',
      });
      const err = await withBundleFile(base.path, (s) =>
        verifyBundle(s, {
          trust: base.trust,
          onEntry: async () => {
            throw enospc;
          },
        }),
      ).catch((e: unknown) => e);
      t.equal(err, enospc, "the consumer's error, not a verdict on the bundle");
    });
  });
}

// The reader must not depend on how the decompressed stream is chunked: a small bundle's
// archive arrives in one chunk, before bundle.json has said how long it should be; a larger
// one in many.
for (const [kind, layerSizes] of [
  ['small bundle (many chunks)', [3000, 70_000]],
  ['tiny bundle (one chunk)', [10]],
] as const) {
  t.test(kind, async (t) => {
    base = await makeBundle(t, { layerSizes: [...layerSizes] });
    entries = await readEntries(base.path);
    rejections(t);
  });
}

t.test('with a multi-frame blob, bad entries at the end of a long stream', async (t) => {
  // the decompressed stream then arrives in many chunks, and the one holding a bad entry also
  // crosses the archive's expected end: the entry's own error must still win
  const big = await makeBundle(t, { layerSizes: [6 * 1024 * 1024, 100, 3000] });
  const all = await readEntries(big.path);
  const last = all[all.length - 1]!;
  let k = 0;
  const file = () => path.join(big.dir, `big-bad-${++k}.bundle`);
  const cases: [string, Entry[], string][] = [
    ['an unlisted blob', [...all, fileEntry(blobPath(sha256('u')), 'u')], 'UNEXPECTED_ENTRY'],
    ['a path outside the layout', [...all, fileEntry('../evil', 'e')], 'UNEXPECTED_ENTRY'],
    ['a symlink', [...all, specialEntry('x', 'symlink', { linkname: '/' })], 'NOT_A_FILE'],
    ['a duplicate of the last blob', [...all, last], 'DUPLICATE_ENTRY'],
    [
      'the last blob longer',
      [...all.slice(0, -1), withData(last, Buffer.concat([last.data, Buffer.alloc(1)]))],
      'OVERSIZED_ENTRY',
    ],
    [
      'the last blob shorter',
      [...all.slice(0, -1), withData(last, last.data.subarray(1))],
      'SIZE_MISMATCH',
    ],
    ['the last blob missing', all.slice(0, -1), 'MISSING_ENTRY'],
  ];
  for (const [what, list, code] of cases) {
    const f = file();
    await craft(f, list);
    t.test(`${what}: ${code}`, (t) => assertRejected(t, f, big.trust, code as 'MISSING_ENTRY'));
  }
  const f = file();
  await craftTar(
    f,
    Buffer.concat([await packTar(all), await packTar([fileEntry('extra', 'after the end')])]),
  );
  t.test('an entry after the trailer: TRAILING_DATA', (t) =>
    assertRejected(t, f, big.trust, 'TRAILING_DATA'),
  );
  const g = file();
  await writeFile(
    g,
    Buffer.concat([await readFile(big.path), zstdFrame(await packTar([fileEntry('extra', 'x')]))]),
  );
  t.test('a frame after the seek table: TRAILING_DATA', (t) =>
    assertRejected(t, g, big.trust, 'TRAILING_DATA'),
  );

  /** How far verifyBundle read before it gave up. */
  const readUpTo = async (f: string): Promise<number> => {
    let done = 0;
    await withBundleFile(f, (s) =>
      verifyBundle(s, { trust: big.trust, onProgress: (d) => (done = d) }),
    ).then(
      () => t.fail('verified'),
      () => undefined,
    );
    return done;
  };

  t.test('damage near the start stops the pass early', async (t) => {
    const frames = await readFrames(big.path);
    const buf = await readFile(big.path);
    const f = file();
    await writeFile(f, flipByte(buf, frames[5]!.compressedOffset + 2)); // oci-layout's data frame
    await assertRejected(t, f, big.trust, 'CORRUPT');
    t.ok((await readUpTo(f)) < buf.length / 2, 'did not read on to the end');
  });

  t.test('megabytes of zstd data appended: TRAILING_DATA without reading them all', async (t) => {
    const extra = randomBytes(8 * 1024 * 1024);
    const f = file();
    const size = (await readFile(big.path)).length;
    await writeFile(
      f,
      Buffer.concat([
        await readFile(big.path),
        zstdFrame(extra.subarray(0, 4 * 1024 * 1024)),
        zstdFrame(extra.subarray(4 * 1024 * 1024)),
      ]),
    );
    await assertRejected(t, f, big.trust, 'TRAILING_DATA');
    t.ok((await readUpTo(f)) < size + 4 * 1024 * 1024, 'stopped soon after the archive ended');
  });
});

t.test('readHeader (inspect, no trust): its own refusals', async (t) => {
  const b = await makeBundle(t, { layerSizes: [100] });
  const all = await readEntries(b.path);
  const f = (name: string) => path.join(b.dir, name);
  await rejectsWith(
    t,
    withBundleFile(f('missing.bundle'), readHeader),
    'IO_ERROR',
    'a missing file',
  );
  await mkdir(f('dir.bundle'));
  await rejectsWith(t, withBundleFile(f('dir.bundle'), readHeader), 'IO_ERROR', 'a directory');
  await writeFile(f('random.bundle'), randomBytes(10_000));
  await rejectsWith(t, withBundleFile(f('random.bundle'), readHeader), 'CORRUPT', 'random bytes');
  await writeFile(f('empty.bundle'), '');
  await rejectsWith(t, withBundleFile(f('empty.bundle'), readHeader), 'TRUNCATED', 'an empty file');
  await craft(f('order.bundle'), [all[1]!, all[0]!, ...all.slice(2)]);
  await rejectsWith(
    t,
    withBundleFile(f('order.bundle'), readHeader),
    'BAD_ORDER',
    'signature first',
  );
  await craft(f('nosig.bundle'), [all[0]!, ...all.slice(2)]);
  await rejectsWith(t, withBundleFile(f('nosig.bundle'), readHeader), 'BAD_ORDER', 'no signature');
  await craft(
    f('newer.bundle'),
    resign(all, b.key.privateKey, { json: (m) => ({ ...m, schemaVersion: SCHEMA_VERSION + 1 }) }),
  );
  await rejectsWith(
    t,
    withBundleFile(f('newer.bundle'), readHeader),
    'UNSUPPORTED_VERSION',
    'a newer schemaVersion',
  );
  // no trust needed, none implied: a bundle signed by anyone reads
  await craft(f('other.bundle'), resign(all, makeKey().privateKey));
  t.ok((await withBundleFile(f('other.bundle'), readHeader)).manifest);
});

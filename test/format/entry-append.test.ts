// tier: unit
// The staged-layout writer's piecewise entry (EntryFiles.appender): what a fetch from peers writes
// through, as extractBundle writes a stick's entries. Pieces append after what landed, hashed as
// they pass; a cut piece is recounted from the file; the entry gets its name only whole and
// matching, and bytes that are not the signed ones are refused with the very code and words a
// stick's damaged blob gets, leaving no temp file.
import t from 'tap';
import { mkdir, readFile, readdir, truncate } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import {
  EntryFiles,
  FormatError,
  WRITING_SUFFIX,
  blobPath,
  extractBundle,
  withBundleFile,
  type LayoutEntry,
} from '@offline-bundle/format';
import {
  craft,
  entryNamed,
  flipByte,
  makeBundle,
  readEntries,
  sha256,
  tmpdir,
  withData,
} from './craft.js';

const entryOf = (data: Buffer): LayoutEntry => ({
  path: blobPath(sha256(data)),
  digest: sha256(data),
  size: data.length,
});

async function staging(): Promise<string> {
  const dir = await tmpdir(t, 'ob-append-');
  await mkdir(path.join(dir, 'blobs', 'sha256'), { recursive: true });
  return dir;
}

/** Every name under `dir`'s blob directory. */
const blobNames = (dir: string) => readdir(path.join(dir, 'blobs', 'sha256'));

t.test(
  'pieces appended in turn: placed under its name once whole, announced, no temp file left',
  async (t) => {
    const dir = await staging();
    const data = Buffer.from('a blob that arrives from two peers, half from each');
    const e = entryOf(data);
    const placed: string[] = [];
    const w = new EntryFiles(dir, false, (x) => placed.push(x.path)).appender(e);
    let counted = 0;
    await w.append(Readable.from([data.subarray(0, 20)]), {
      onBytes: (n) => {
        counted += n;
      },
    });
    t.equal(w.got, 20);
    await w.append(Readable.from([data.subarray(20)]), {
      onBytes: (n) => {
        counted += n;
      },
    });
    t.equal(counted, data.length, 'every byte told as it passed');
    await w.commit();
    t.same(await readFile(path.join(dir, e.path)), data);
    t.same(placed, [e.path], 'the writer announced it, as a stick entry is');
    t.same(await blobNames(dir), [path.basename(e.path)], 'no temp file');
  },
);

t.test(
  'a piece cut short: recount holds what landed, hashed again, and the next piece continues it',
  async (t) => {
    const dir = await staging();
    const data = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz');
    const e = entryOf(data);
    const w = new EntryFiles(dir, false).appender(e);
    await w.append(Readable.from([data.subarray(0, 30)]));
    // what a crash mid-write leaves: fewer bytes on disk than passed
    await truncate(path.join(dir, e.path + WRITING_SUFFIX), 12);
    t.equal(await w.recount(), 18, 'the bytes that did not land');
    t.equal(w.got, 12);
    await w.append(Readable.from([data.subarray(12)]));
    await w.commit();
    t.same(await readFile(path.join(dir, e.path)), data);
  },
);

t.test(
  "a byte past the signed size: refused (OVERSIZED_ENTRY, or the caller's own error), nothing placed",
  async (t) => {
    const dir = await staging();
    const data = Buffer.from('twelve bytes');
    const e = entryOf(data);
    const w = new EntryFiles(dir, false).appender(e);
    const err = await w.append(Readable.from([data, Buffer.from('!')])).catch((x: unknown) => x);
    t.ok(err instanceof FormatError && err.code === 'OVERSIZED_ENTRY', 'OVERSIZED_ENTRY', { err });
    const own = await new EntryFiles(dir, false)
      .appender(e)
      .append(Readable.from([Buffer.concat([data, data])]), {
        overflow: () => new Error('peer X sent too much'),
      })
      .catch((x: unknown) => x);
    t.equal((own as Error).message, 'peer X sent too much');
    await w.discard();
    t.same(await blobNames(dir), [], 'discard leaves nothing');
  },
);

t.test(
  "one door: wrong bytes are refused as a stick's damaged blob is, same code and words, no temp file in either",
  async (t) => {
    const b = await makeBundle(t, { layerSizes: [70_000] });
    const entries = await readEntries(b.path);
    const layer = b.blobs.find((x) => x.size === 70_000)!;
    const name = blobPath(layer.digest);
    const altered = flipByte(layer.data, 100);
    // a stick: the bundle with that blob's bytes altered
    const bad = path.join(b.dir, 'altered.bundle');
    await craft(
      bad,
      entries.map((x) =>
        x.header.name === name ? withData(entryNamed(entries, name), altered) : x,
      ),
    );
    const target = path.join(b.dir, 'stick-layout');
    const stick = (await withBundleFile(bad, (s) =>
      extractBundle(s, target, { trust: b.trust, fsync: false }),
    ).catch((x: unknown) => x)) as FormatError;
    await t.rejects(
      readdir(`${target}.partial`),
      { code: 'ENOENT' },
      "the stick's staging leaves nothing",
    );
    // a peer: the same altered bytes for the same entry, through the writer
    const dir = await staging();
    const w = new EntryFiles(dir, false).appender({
      path: name,
      digest: layer.digest,
      size: layer.size,
    });
    await w.append(Readable.from([altered]));
    const peer = (await w.commit().catch((x: unknown) => x)) as FormatError;
    t.ok(peer instanceof FormatError, 'a FormatError from the writer');
    t.equal(peer.code, stick.code, `the same code (${stick.code})`);
    t.equal(peer.code, 'BLOB_DIGEST_MISMATCH');
    t.equal(peer.message, stick.message, 'the same words');
    t.same(await blobNames(dir), [], "no temp file, nothing under the entry's name");
  },
);

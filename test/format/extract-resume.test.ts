// tier: unit
// Resuming an extraction cut short (a stick pulled, EIO, a stop): the entries verified before the
// cut stay in the partial directory under a marker naming the bundle (the digest of its signed
// bundle.json); the same bundle extracted again re-hashes them, reads only the frames of what is
// missing (counted by the in-memory source double), and ends with the same layout as a fresh
// extraction. A corrupted kept blob is found and read again; another bundle starts over.
import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import { mkdir, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  FormatError,
  MAX_RESUME_MARKER_BYTES,
  RESUME_MARKER,
  blobPath,
  bundleIdentity,
  extractBundle,
  partialBundle,
  readHeader,
  type ExtractedBundle,
} from '@offline-bundle/format';
import { MemorySource, type MemoryFaults } from '../helpers/memory-source.js';
import { makeBundle, type MadeBundle } from './craft.js';

const MiB = 1024 * 1024;
// incompressible layers of one size, in digest (random) order: a cut at 60% of the file loses the
// blob it falls in and what the pass held in flight, so more than 30% of the layout is whole before it
const LAYERS = new Array<number>(12).fill(2 * MiB);

let b: MadeBundle;
let bytes: Buffer;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: LAYERS });
  bytes = await readFile(b.path);
});

let n = 0;
const dirs = () => {
  const target = path.join(b.dir, `out-${++n}`);
  return { target, partial: `${target}.partial` };
};
const source = (faults: MemoryFaults = {}, data = bytes) => new MemorySource(data, b.path, faults);

/** Every file under `dir`, by relative path, with its sha256. */
async function tree(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (rel: string) => {
    for (const e of await readdir(path.join(dir, rel), { withFileTypes: true })) {
      const r = path.join(rel, e.name);
      if (e.isDirectory()) await walk(r);
      else
        out[r] = createHash('sha256')
          .update(await readFile(path.join(dir, r)))
          .digest('hex');
    }
  };
  await walk('');
  return out;
}

/** An extraction cut by EIO at `fraction` of the file, with resume: it fails, the partial directory stays. */
async function cut(
  t: Test,
  fraction: number,
  partial: string,
  target: string,
): Promise<FormatError> {
  const err = await extractBundle(
    source({ errorAt: Math.floor(bytes.length * fraction) }),
    target,
    { trust: b.trust, partialDir: partial, resume: true, fsync: false },
  ).then(
    () => undefined,
    (e: unknown) => e as FormatError,
  );
  t.equal(err?.code, 'IO_ERROR', `cut: ${err?.message}`);
  return err!;
}

let fresh: Record<string, string>;
t.before(async () => {
  const { target } = dirs();
  await extractBundle(source(), target, { trust: b.trust, fsync: false });
  fresh = await tree(target);
});

t.test(
  'cut at 60%, then the same bundle again: resumed, only the rest read, the same layout',
  async (t) => {
    const { target, partial } = dirs();
    await cut(t, 0.6, partial, target);
    t.equal(
      await partialBundle(partial),
      bundleIdentity((await readHeader(source())).manifestBytes),
      'the marker names the bundle by its bundle.json digest',
    );
    await t.rejects(stat(target), 'nothing at the target');
    const kept = (await readdir(path.join(partial, 'blobs/sha256'))).filter(
      (x) => !x.endsWith('.writing'),
    );
    t.ok(kept.length >= 2, `verified blobs kept: ${kept.length}`);

    const again = source();
    let resumed: ExtractedBundle['resumed'];
    const v = await extractBundle(again, target, {
      trust: b.trust,
      partialDir: partial,
      resume: true,
      fsync: false,
      onResume: (i) => {
        resumed = i;
      },
    });
    t.ok(
      resumed && resumed.keptBytes > 0 && resumed.keptBytes < resumed.totalBytes,
      `kept ${resumed?.keptBytes} of ${resumed?.totalBytes} layout bytes`,
    );
    t.same(v.resumed, resumed, 'returned as told');
    t.equal(resumed!.dropped, 0, 'nothing kept was bad');
    t.equal(v.fileDigest, '', 'no whole-file digest: the file was not read whole');
    // what is read: the frames of the missing entries, one small frame per header, the seek
    // table, and bundle.json again (whose stream hands over a 1 MiB chunk or two)
    t.ok(
      again.bytesRead < bytes.length - resumed!.keptBytes + 3 * MiB,
      `read ${again.bytesRead} of ${bytes.length} bytes on resume (kept ${resumed!.keptBytes})`,
    );
    // what the pipeline held in flight at the cut (decoded, not yet written: a few MiB) is read again
    t.ok(resumed!.keptBytes > 0.3 * resumed!.totalBytes, 'more than 30% kept');
    t.ok(again.bytesRead < 0.8 * bytes.length, 'so well under the whole file read');
    t.same(
      await tree(target),
      fresh,
      'the same files as a fresh extraction, no marker, no temp file',
    );
    await t.rejects(stat(partial), 'the partial directory was renamed into place');
  },
);

t.test(
  'a kept blob corrupted on disk between the two: found by the re-hash, read again, never kept',
  async (t) => {
    const { target, partial } = dirs();
    await cut(t, 0.6, partial, target);
    const blobs = path.join(partial, 'blobs/sha256');
    const victim = (await readdir(blobs))
      .filter((x) => !x.endsWith('.writing'))
      .sort((x, y) => x.localeCompare(y))[0]!;
    const file = path.join(blobs, victim);
    const data = await readFile(file);
    data[Math.floor(data.length / 2)]! ^= 0x01; // same size: a size check would pass it
    await writeFile(file, data);
    const v = await extractBundle(source(), target, {
      trust: b.trust,
      partialDir: partial,
      resume: true,
      fsync: false,
    });
    t.equal(v.resumed?.dropped, 1, 'one kept file no longer matched');
    t.same(await tree(target), fresh, 'the layout is whole and right');
  },
);

t.test('a leftover temp file is removed; a cut during the resume resumes again', async (t) => {
  const { target, partial } = dirs();
  await cut(t, 0.3, partial, target);
  await writeFile(path.join(partial, blobPath(b.blobs[0]!.digest) + '.writing'), 'junk');
  await cut(t, 0.7, partial, target);
  const v = await extractBundle(source(), target, {
    trust: b.trust,
    partialDir: partial,
    resume: true,
    fsync: false,
  });
  t.ok(v.resumed, 'resumed');
  t.same(await tree(target), fresh, 'the same layout');
});

t.test(
  'another bundle into the same partial directory: the pieces of the first go, a full pass',
  async (t) => {
    const { target, partial } = dirs();
    await cut(t, 0.6, partial, target);
    const other = await makeBundle(t, { key: b.key, layerSizes: [MiB, 2 * MiB] });
    const otherBytes = await readFile(other.path);
    const src = source({}, otherBytes);
    const v = await extractBundle(src, target, {
      trust: b.trust,
      partialDir: partial,
      resume: true,
      fsync: false,
    });
    t.notOk(v.resumed, 'not resumed');
    t.match(v.fileDigest, /^sha256:/, 'a whole-file digest: read whole');
    const names = Object.keys(await tree(target));
    t.notOk(
      names.some((x) => Object.keys(fresh).includes(x) && x.startsWith('blobs/')),
      "none of the first bundle's blobs",
    );
  },
);

t.test(
  'digest-only trust: nothing kept (a whole-file digest vouches for nothing before the end)',
  async (t) => {
    const { target, partial } = dirs();
    const digest = 'sha256:' + createHash('sha256').update(bytes).digest('hex');
    const err = await extractBundle(source({ errorAt: Math.floor(bytes.length * 0.6) }), target, {
      trust: { digest },
      partialDir: partial,
      resume: true,
      fsync: false,
    }).then(
      () => undefined,
      (e: unknown) => e as FormatError,
    );
    t.equal(err?.code, 'IO_ERROR');
    await t.rejects(stat(partial), 'the partial directory is gone, as without resume');
  },
);

t.test('a marker that is not one this code writes: no resume, a fresh start', async (t) => {
  const { target, partial } = dirs();
  await cut(t, 0.6, partial, target);
  await writeFile(path.join(partial, RESUME_MARKER), 'x'.repeat(MAX_RESUME_MARKER_BYTES + 1));
  t.equal(await partialBundle(partial), undefined, 'oversized: not read');
  await writeFile(path.join(partial, RESUME_MARKER), '{"bundleJson":"../../etc"}');
  t.equal(await partialBundle(partial), undefined, 'not a digest: not used');
  const v = await extractBundle(source(), target, {
    trust: b.trust,
    partialDir: partial,
    resume: true,
    fsync: false,
  });
  t.notOk(v.resumed, 'started over');
  t.same(await tree(target), fresh);
});

t.test(
  'a verdict on the bytes (a byte flipped in a blob): nothing kept, as for any bad input',
  async (t) => {
    const { target, partial } = dirs();
    const err = await extractBundle(
      source({ flip: { at: Math.floor(bytes.length * 0.6), fromRead: 1 } }),
      target,
      { trust: b.trust, partialDir: partial, resume: true, fsync: false },
    ).then(
      () => undefined,
      (e: unknown) => e as FormatError,
    );
    t.ok(
      err && err.code !== 'IO_ERROR' && err.code !== 'TRUNCATED',
      `refused: ${err?.code} ${err?.message}`,
    );
    await t.rejects(stat(partial), 'the partial directory is gone');
  },
);

t.test('without resume: a failure leaves no partial directory (as before)', async (t) => {
  const { target, partial } = dirs();
  await mkdir(partial, { recursive: true });
  const err = await extractBundle(source({ errorAt: Math.floor(bytes.length * 0.6) }), target, {
    trust: b.trust,
    partialDir: partial,
    fsync: false,
  }).then(
    () => undefined,
    (e: unknown) => e as FormatError,
  );
  t.equal(err?.code, 'IO_ERROR');
  await t.rejects(stat(partial), 'removed');
});

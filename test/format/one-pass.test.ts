// The one-pass writer: blobs may still be arriving while the layout is packed, and
// imageStoreBytes is asked for only once every blob went in. bundle.json and its signature
// sit in a head reserved in advance (raw zstd blocks, bundle.json padded with spaces), so
// the head's bytes, and every offset after it, do not depend on that figure; and the result
// is a bundle the existing readers accept (verify, random reads, extraction, plain zstd).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, readdir, mkdir } from 'node:fs/promises';
import path from 'node:path';
import {
  BundleRandomReader,
  extractBundle,
  readHeader,
  verifyBundle,
  writeBundle,
  type ReadyBlob,
  type WriteBundleInput,
  withBundleFile,
} from '@offline-bundle/format';
import { makeBundle, readFrames } from './craft.js';

const b = await makeBundle(t);

function input(name: string, over: Partial<WriteBundleInput>): WriteBundleInput {
  return {
    release: b.written.manifest.release,
    images: b.images,
    index: b.index,
    blobs: b.blobs,
    imageStoreBytes: 0,
    key: b.key.privateKey,
    output: path.join(b.dir, name),
    createdAt: '2026-01-01T00:00:00Z',
    tool: { name: 't', version: '0' },
    ...over,
  };
}

t.test(
  'blobs that arrive late: packed in order, the figure asked for last, a bundle every reader takes',
  async (t) => {
    const arrived: string[] = [];
    const releases: (() => void)[] = [];
    let askedAfter = -1;
    const blobs = b.blobs.map((x) => {
      const arrival = new Promise<ReadyBlob>((resolve) =>
        releases.push(() => {
          arrived.push(x.digest);
          resolve({ path: x.path, verified: false });
        }),
      );
      return { digest: x.digest, size: x.size, mediaType: x.mediaType, ready: () => arrival };
    });
    const writing = writeBundle(
      input('late.bundle', {
        blobs,
        imageStoreBytes: async () => {
          askedAfter = arrived.length;
          return 123_456_789;
        },
      }),
    );
    // release the blobs one at a time, later than the writer asks for them
    while (arrived.length < blobs.length) {
      await new Promise((r) => setTimeout(r, 20));
      releases.shift()?.();
    }
    const written = await writing;
    t.equal(askedAfter, blobs.length, 'imageStoreBytes asked for once every blob had arrived');
    const out = path.join(b.dir, 'late.bundle');
    const v = await withBundleFile(out, (s) =>
      verifyBundle(s, { trust: b.trust, frameDigests: true }),
    );
    t.equal(v.manifest.totals.imageStoreBytes, 123_456_789);
    t.equal(v.fileDigest, written.fileDigest, "the digest read back is the file's");
    t.equal(
      createHash('sha256')
        .update(await readFile(out))
        .digest('hex'),
      written.fileDigest.slice(7),
    );
    t.equal(
      (await readFile(`${out}.sha256`, 'utf8')).split(' ')[0],
      written.fileDigest.slice(7),
      'sidecar',
    );
    const rr = await withBundleFile(out, (s) => BundleRandomReader.open(s, v.manifest, v));
    t.ok(rr, 'random reader walks it');
    const dest = path.join(b.dir, 'late-x');
    await withBundleFile(out, (s) => extractBundle(s, dest, { trust: b.trust }));
    const plain = path.join(b.dir, 'late-plain');
    await mkdir(plain);
    execFileSync('sh', ['-c', `zstd -dc "${out}" | tar -x -C "${plain}"`]);
    for (const x of b.blobs)
      t.ok(
        (await readFile(path.join(plain, 'blobs', 'sha256', x.digest.slice(7)))).equals(x.data),
        `zstd | tar gives ${x.digest.slice(7, 19)}`,
      );
    JSON.parse(await readFile(path.join(plain, 'bundle.json'), 'utf8'));
  },
);

t.test(
  'the head is the same length whatever imageStoreBytes is: raw blocks, bundle.json padded',
  async (t) => {
    await writeBundle(input('small.bundle', { imageStoreBytes: 0 }));
    await writeBundle(input('wide.bundle', { imageStoreBytes: Number.MAX_SAFE_INTEGER }));
    const small = await readFrames(path.join(b.dir, 'small.bundle'));
    const wide = await readFrames(path.join(b.dir, 'wide.bundle'));
    t.same(
      small.map((f) => [f.compressedOffset, f.bytes.length]),
      wide.map((f) => [f.compressedOffset, f.bytes.length]),
      'every frame at the same offset',
    );
    for (const i of [0, 1, 2, 3]) {
      const f = small[i]!.bytes;
      // single segment, content size, checksum; the first block raw (type 0)
      t.equal(f[4]! & 0x24, 0x24, `frame ${i}: single segment with checksum`);
      const fcs = [1, 2, 4, 8][f[4]! >> 6]!;
      t.equal((f[5 + fcs]! >> 1) & 3, 0, `frame ${i}: raw block`);
    }
    const h = await withBundleFile(path.join(b.dir, 'small.bundle'), readHeader);
    const w = await withBundleFile(path.join(b.dir, 'wide.bundle'), readHeader);
    t.equal(h.manifestBytes.length, w.manifestBytes.length, 'bundle.json the same length');
    t.match(
      h.manifestBytes.toString('utf8'),
      / +\n$/,
      'padded with spaces before its final newline',
    );
    t.equal(h.manifest.totals.imageStoreBytes, 0);
    t.equal(w.manifest.totals.imageStoreBytes, Number.MAX_SAFE_INTEGER);
    await withBundleFile(path.join(b.dir, 'wide.bundle'), (s) =>
      verifyBundle(s, { trust: b.trust }),
    );
  },
);

t.test(
  'a blob that never arrives: the write fails with its error and leaves nothing',
  async (t) => {
    const blobs = b.blobs.map((x, i) =>
      i === 1
        ? {
            digest: x.digest,
            size: x.size,
            mediaType: x.mediaType,
            ready: () => Promise.reject(new Error('registry went away')),
          }
        : x,
    );
    await t.rejects(writeBundle(input('gone.bundle', { blobs })), /registry went away/);
    const { readdir } = await import('node:fs/promises');
    t.same(
      (await readdir(b.dir)).filter((f) => f.startsWith('gone.bundle')),
      [],
    );
  },
);

// Ctrl-C while finishing (the file hash catching up, a slow stick's sync) was ignored: the
// bundle was renamed into place and the CLI exited 0. Every step of the finish gives way.
t.test('stopped while finishing: rejects with the reason and leaves nothing', async (t) => {
  const ac = new AbortController();
  const reason = Object.assign(new Error('interrupted'), { code: 'INTERRUPTED' });
  const name = 'finish-stopped.bundle';
  await t.rejects(
    writeBundle(input(name, { signal: ac.signal, onFinishing: () => ac.abort(reason) })),
    reason,
  );
  const left = (await readdir(b.dir)).filter((f) => f.startsWith(name));
  t.same(left, [], 'no bundle, no sidecar, no temp file');
});

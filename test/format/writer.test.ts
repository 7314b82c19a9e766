// tier: unit
// writeBundle's own refusals: a blob file that is not what its digest says, missing files;
// and that a failed write leaves neither the output nor its temp files behind.
import t, { type Test } from 'tap';
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeBundle, type WriteBundleInput } from '@offline-bundle/format';
import { makeBundle, rejectsWith, type MadeBundle } from './craft.js';

let b: MadeBundle;
t.before(async () => {
  b = await makeBundle(t);
});

function input(over: Partial<WriteBundleInput>): WriteBundleInput {
  return {
    release: b.written.manifest.release,
    images: b.images,
    index: b.index,
    blobs: b.blobs,
    imageStoreBytes: 0,
    key: b.key.privateKey,
    output: path.join(b.dir, 'out.bundle'),
    createdAt: '2026-01-01T00:00:00Z',
    tool: { name: 't', version: '0' },
    ...over,
  };
}

async function nothingLeft(t: Test, dir: string, name: string): Promise<void> {
  const left = (await readdir(dir)).filter((f) => f.startsWith(name));
  t.same(left, [], `no ${name}* files left behind`);
}

const layer = () => b.blobs[b.blobs.length - 1]!;
const withPath = (p: string) => b.blobs.map((x) => (x === layer() ? { ...x, path: p } : x));

for (const [what, bytes] of [
  ['other bytes of the same size', () => Buffer.alloc(layer().size)],
  ['one byte short', () => layer().data.subarray(1)],
  ['one byte more', () => Buffer.concat([layer().data, Buffer.from('x')])],
] as const) {
  t.test(`a blob file with ${what}: BLOB_DIGEST_MISMATCH`, async (t) => {
    const p = path.join(b.dir, `bad-${what.replace(/\W+/g, '-')}`);
    await writeFile(p, bytes());
    const name = `bad-${what.length}.bundle`;
    await rejectsWith(
      t,
      writeBundle(input({ blobs: withPath(p), output: path.join(b.dir, name) })),
      'BLOB_DIGEST_MISMATCH',
      'writeBundle',
    );
    await nothingLeft(t, b.dir, name);
  });
}

t.test(
  'an image whose manifest is not among the blobs: INVALID_MANIFEST, before packing anything',
  async (t) => {
    const images = [{ ...b.images[0]!, digest: 'sha256:' + 'a'.repeat(64) }];
    await rejectsWith(
      t,
      writeBundle(input({ images, output: path.join(b.dir, 'orphan.bundle') })),
      'INVALID_MANIFEST',
      'writeBundle',
    );
    await nothingLeft(t, b.dir, 'orphan.bundle');
  },
);

t.test(
  'a release bundle.json readers would refuse is never signed: INVALID_MANIFEST',
  async (t) => {
    const release = { ...b.written.manifest.release, version: '../escape' };
    await rejectsWith(
      t,
      writeBundle(input({ release, output: path.join(b.dir, 'unsafe.bundle') })),
      'INVALID_MANIFEST',
      'writeBundle',
    );
    await nothingLeft(t, b.dir, 'unsafe.bundle');
  },
);

t.test('a missing blob file: IO_ERROR', async (t) => {
  await rejectsWith(
    t,
    writeBundle(
      input({
        blobs: withPath(path.join(b.dir, 'nope')),
        output: path.join(b.dir, 'missing.bundle'),
      }),
    ),
    'IO_ERROR',
    'writeBundle',
  );
  await nothingLeft(t, b.dir, 'missing.bundle');
});

t.test('an output directory that does not exist: IO_ERROR', async (t) => {
  await rejectsWith(
    t,
    writeBundle(input({ output: path.join(b.dir, 'no', 'such', 'dir.bundle') })),
    'IO_ERROR',
    'writeBundle',
  );
});

t.test('a failed write keeps an existing bundle of the same name intact', async (t) => {
  const dir = path.join(b.dir, 'keep');
  await mkdir(dir);
  const output = path.join(dir, 'x.bundle');
  const good = await writeBundle(input({ output }));
  const before = await stat(output);
  await rejectsWith(
    t,
    writeBundle(input({ output, blobs: withPath(path.join(b.dir, 'nope')) })),
    'IO_ERROR',
    'writeBundle',
  );
  const after = await stat(output);
  t.equal(after.size, before.size);
  t.equal(after.ino, before.ino, 'the old file was not replaced');
  t.same(
    (await readdir(dir)).sort(),
    ['x.bundle', 'x.bundle.sha256'],
    'only the earlier bundle and its digest',
  );
  t.equal(good.fileSize, before.size);
});

t.test('onProgress grows to the layout bytes and never past them', async (t) => {
  const seen: [number, number][] = [];
  const w = await writeBundle(
    input({ output: path.join(b.dir, 'progress.bundle'), onProgress: (d, n) => seen.push([d, n]) }),
  );
  t.ok(seen.length > 0);
  t.ok(
    seen.every(([, n]) => n === w.manifest.totals.layoutBytes),
    'total is totals.layoutBytes',
  );
  t.ok(
    seen.every(([d, n], i) => d <= n && (i === 0 || d >= seen[i - 1]![0])),
    'grows, within the total',
  );
  t.equal(seen[seen.length - 1]![0], w.manifest.totals.layoutBytes, 'ends at 100 %');
});

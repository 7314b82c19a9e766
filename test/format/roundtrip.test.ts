// writeBundle → verifyBundle → extractBundle, and the file's shape as standard tools and the
// zstd seekable format see it: bundle.json first, one frame per tar header, data frames of at
// most FRAME_BYTES, a seek table that zstd -l counts as one skippable frame.
import t from 'tap';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { decompress } from 'zstd-napi';
import {
  BUNDLE_JSON,
  FRAME_BYTES,
  INDEX_JSON,
  OCI_LAYOUT,
  OCI_LAYOUT_CONTENT,
  SIGNATURE,
  defaultVersionFor,
  blobPath,
  extractBundle,
  readHeader,
  readSeekIndex,
  tarStreamBytes,
  verifyBundle,
  type BundleManifest,
  withBundleFile,
} from '@offline-bundle/format';
import { makeBundle, parseTar, readFrames, rejectsWith, sha256, type MadeBundle } from './craft.js';

const BIG = 9 * 1024 * 1024 + 12_345;

/** Runs a command (optionally piping another's stdout into it); resolves with its stdout. */
function run(
  cmd: string,
  args: string[],
  opts: { stdin?: NodeJS.ReadableStream } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
    p.stderr!.setEncoding('utf8').on('data', (c: string) => (err += c));
    if (opts.stdin) opts.stdin.pipe(p.stdin!);
    p.on('error', reject);
    p.on('close', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${err}`)),
    );
  });
}

/** `zstd -dc FILE | CMD ARGS`, failing when either fails. */
async function zstdPipe(file: string, cmd: string, args: string[]): Promise<string> {
  const z = spawn('zstd', ['-q', '-dc', file], { stdio: ['ignore', 'pipe', 'inherit'] });
  const zDone = new Promise<void>((resolve, reject) =>
    z.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`zstd exited ${code}`)))),
  );
  const [out] = await Promise.all([run(cmd, args, { stdin: z.stdout }), zDone]);
  return out;
}

let b: MadeBundle;
t.before(async () => {
  // a layer spanning three frames, one exactly a frame long, and small ones
  b = await makeBundle(t, { layerSizes: [BIG, FRAME_BYTES, 1, 511, 512, 3000] });
});

t.test('verifyBundle accepts what writeBundle wrote and reports the same manifest', async (t) => {
  let manifestSeen: BundleManifest | undefined;
  const seen: string[] = [];
  let progress = 0;
  let progressOk = true;
  const v = await withBundleFile(b.path, (s) =>
    verifyBundle(s, {
      trust: b.trust,
      onManifest: (m) => {
        t.equal(seen.length, 0, 'onManifest comes before any entry');
        manifestSeen = m;
      },
      onEntry: async (e, data) => {
        seen.push(e.path);
        let n = 0;
        for await (const c of data) n += (c as Buffer).length;
        t.equal(n, e.size, `${e.path}: onEntry gets its listed size`);
      },
      onProgress: (done, total) => {
        progressOk &&= done >= progress && done <= total;
        progress = done;
      },
    }),
  );
  t.same(v.manifest, b.written.manifest);
  t.same(manifestSeen, b.written.manifest);
  t.equal(v.fileDigest, b.written.fileDigest);
  t.equal(v.fileSize, b.written.fileSize);
  t.equal(v.fileSize, (await stat(b.path)).size);
  t.ok(progressOk, 'progress only grows, within the file size');
  t.equal(progress, v.fileSize, 'progress ends at the file size');
  t.equal(v.signer?.fingerprint, b.key.trusted.fingerprint);
  t.equal(v.manifest.signer.fingerprint, b.key.trusted.fingerprint);
  t.equal(v.manifest.signer.algorithm, 'ecdsa-p256-sha256');
  t.same(
    seen,
    [OCI_LAYOUT, INDEX_JSON, ...b.blobs.map((x) => blobPath(x.digest)).sort()],
    'layout entries in order, blobs sorted by digest',
  );
  t.same(
    v.manifest.blobs.map((x) => x.digest),
    b.blobs.map((x) => x.digest).sort(),
  );
  t.equal(v.seekIndex.frames.length, b.written.frames);
});

t.test('readHeader gives bundle.json and its signature without trust', async (t) => {
  const h = await withBundleFile(b.path, readHeader);
  t.same(h.manifest, b.written.manifest);
  const v = await withBundleFile(b.path, (s) => verifyBundle(s, { trust: b.trust }));
  t.ok(h.manifestBytes.equals(v.manifestBytes));
  t.ok(h.signature.equals(v.signature));
});

t.test('extractBundle yields files whose sha256 match every listed blob', async (t) => {
  const dir = path.join(b.dir, 'layout');
  const v = await withBundleFile(b.path, (s) => extractBundle(s, dir, { trust: b.trust }));
  t.equal(v.fileDigest, b.written.fileDigest);
  for (const blob of v.manifest.blobs) {
    const data = await readFile(path.join(dir, blobPath(blob.digest)));
    t.equal(sha256(data), blob.digest, `${blob.digest.slice(0, 19)}… hashes to its digest`);
    t.equal(data.length, blob.size);
  }
  const index = await readFile(path.join(dir, INDEX_JSON));
  t.equal(sha256(index), v.manifest.index.digest);
  t.ok(index.equals(b.index));
  t.equal(await readFile(path.join(dir, OCI_LAYOUT), 'utf8'), OCI_LAYOUT_CONTENT);
  t.ok(
    (await readFile(path.join(dir, BUNDLE_JSON))).equals(v.manifestBytes),
    'bundle.json kept beside the layout',
  );
  t.ok((await readFile(path.join(dir, SIGNATURE))).equals(v.signature));
  t.same(
    (await readdir(path.join(dir, 'blobs', 'sha256'))).sort(),
    v.manifest.blobs.map((x) => x.digest.slice(7)).sort(),
    'exactly the listed blobs',
  );
  t.same(
    (await readdir(dir)).sort(),
    [BUNDLE_JSON, SIGNATURE, 'blobs', INDEX_JSON, OCI_LAYOUT].sort(),
  );
  t.notOk(await stat(`${dir}.partial`).catch(() => undefined), 'no .partial left');

  const out = await run('skopeo', ['inspect', '--raw', `oci:${dir}:example.com/test/app:v1`]).catch(
    (e: Error) => e,
  );
  if (out instanceof Error) t.fail(out.message);
  else t.equal(sha256(out), b.images[0]!.digest, 'skopeo reads the extracted layout');
});

t.test(
  'extractBundle into an existing empty directory works; into a non-empty one: IO_ERROR',
  async (t) => {
    const empty = path.join(b.dir, 'empty');
    await mkdir(empty);
    await withBundleFile(b.path, (s) => extractBundle(s, empty, { trust: b.trust, fsync: false }));
    t.ok(await stat(path.join(empty, INDEX_JSON)));
    const full = path.join(b.dir, 'full');
    await mkdir(full);
    await writeFile(path.join(full, 'keep-me'), 'x');
    await rejectsWith(
      t,
      withBundleFile(b.path, (s) => extractBundle(s, full, { trust: b.trust })),
      'IO_ERROR',
      'extractBundle',
    );
    t.same(await readdir(full), ['keep-me'], 'the non-empty directory is untouched');
  },
);

t.test(
  'zstd -dc | tar -t lists bundle.json first, then the signature and the layout',
  async (t) => {
    const names = (await zstdPipe(b.path, 'tar', ['-t'])).trim().split('\n');
    t.equal(names[0], BUNDLE_JSON);
    t.equal(names[1], SIGNATURE);
    t.same(names.slice(2), [
      OCI_LAYOUT,
      INDEX_JSON,
      ...b.written.manifest.blobs.map((x) => blobPath(x.digest)),
    ]);
  },
);

t.test('zstd -dc | tar -x yields the same layout', async (t) => {
  const dir = path.join(b.dir, 'tar-x');
  await mkdir(dir);
  await zstdPipe(b.path, 'tar', ['-x', '-C', dir]);
  for (const blob of b.written.manifest.blobs) {
    t.equal(sha256(await readFile(path.join(dir, blobPath(blob.digest)))), blob.digest);
  }
  t.ok((await readFile(path.join(dir, INDEX_JSON))).equals(b.index));
});

t.test('zstd -t accepts the file (every frame checks, the seek table is skipped)', async (t) => {
  await run('zstd', ['-q', '-t', b.path]);
  t.pass('zstd -t');
});

t.test('the seek table parses and zstd -l counts the same frames plus one skippable', async (t) => {
  const index = await withBundleFile(b.path, readSeekIndex);
  const listing = (await run('zstd', ['-l', b.path])).trim().split('\n');
  t.match(listing[0], /^\s*Frames\s+Skips\b/, 'zstd -l header');
  const [frames, skips] = listing[1]!.trim().split(/\s+/).map(Number) as [number, number];
  t.equal(skips, 1, 'one skippable frame: the seek table');
  t.equal(
    index.frames.length,
    frames - skips,
    'seek table frames = zstd frames minus the skippable one',
  );
  t.equal(index.frames.length, b.written.frames);
  const size = (await stat(b.path)).size;
  t.equal(index.compressedBytes + index.tableBytes, size, 'frames plus table make the file');
  t.equal(
    index.tableBytes,
    8 + index.frames.length * 8 + 9,
    'table: skippable header, 8 bytes per frame, footer',
  );
  const tail = (await readFile(b.path)).subarray(size - index.tableBytes);
  t.equal(tail.readUInt32LE(0), 0x184d2a5e, 'skippable frame magic of the seekable format');
  t.equal(tail.readUInt32LE(tail.length - 4), 0x8f92eab1, 'seekable magic');
  t.equal(tail[tail.length - 5], 0, 'descriptor: no per-frame checksums in the table');
});

t.test(
  'frames: each tar header its own 512-byte frame, data frames of at most FRAME_BYTES',
  async (t) => {
    const frames = await readFrames(b.path);
    const parts: Buffer[] = [];
    const starts = new Map<number, number>();
    for (const [i, f] of frames.entries()) {
      // Frame_Header_Descriptor: content checksum flag (bit 2), frame content size present (bits 6-7 or single segment)
      const fhd = f.bytes[4]!;
      if (!(fhd & 0x04)) t.fail(`frame ${i} has no content checksum`);
      if (fhd >> 6 === 0 && !(fhd & 0x20)) t.fail(`frame ${i} does not record its content size`);
      const data = decompress(f.bytes); // independently: frames do not depend on each other
      if (data.length !== f.decompressedSize)
        t.fail(`frame ${i}: ${data.length} bytes, the table says ${f.decompressedSize}`);
      if (data.length > FRAME_BYTES || data.length === 0)
        t.fail(`frame ${i}: ${data.length} bytes`);
      starts.set(f.decompressedOffset, i);
      parts.push(data);
    }
    const tarBytes = Buffer.concat(parts);
    const m = b.written.manifest;
    const manifestBytes = (await withBundleFile(b.path, readHeader)).manifestBytes;
    const sigLen = (await withBundleFile(b.path, readHeader)).signature.length;
    t.equal(
      tarBytes.length,
      tarStreamBytes([
        manifestBytes.length,
        sigLen,
        OCI_LAYOUT_CONTENT.length,
        m.index.size,
        ...m.blobs.map((x) => x.size),
      ]),
      'the tar has exactly the listed entries and a trailer',
    );
    t.same(
      (await parseTar(tarBytes)).map((e) => e.header.name),
      [BUNDLE_JSON, SIGNATURE, OCI_LAYOUT, INDEX_JSON, ...m.blobs.map((x) => blobPath(x.digest))],
    );

    // walk the archive by headers, as a random reader does
    let pos = 0;
    let entries = 0;
    let maxDataFrames = 0;
    while (pos < tarBytes.length) {
      const i = starts.get(pos);
      t.ok(i !== undefined, `a frame starts at header offset ${pos}`);
      if (i === undefined) break;
      const block = tarBytes.subarray(pos, pos + 512);
      if (block.every((x) => x === 0)) {
        t.equal(frames[i]!.decompressedSize, 1024, 'the trailer is one frame of two zero blocks');
        t.equal(i, frames.length - 1, 'and the last one');
        pos += 1024;
        break;
      }
      t.equal(frames[i]!.decompressedSize, 512, `header ${entries} is one 512-byte frame`);
      const size = parseInt(block.toString('ascii', 124, 136).replace(/\0.*$/s, '').trim(), 8);
      const padded = Math.ceil(size / 512) * 512;
      let dataFrames = 0;
      for (let d = pos + 512; d < pos + 512 + padded;) {
        const j = starts.get(d);
        if (j === undefined) {
          t.fail(`entry ${entries}: no frame starts at data offset ${d}`);
          break;
        }
        d += frames[j]!.decompressedSize;
        dataFrames++;
        if (d > pos + 512 + padded)
          t.fail(`entry ${entries}: a data frame runs into the next header`);
      }
      t.equal(
        dataFrames,
        Math.ceil(padded / FRAME_BYTES),
        `entry ${entries}: ${size} bytes in ${dataFrames} frame(s)`,
      );
      maxDataFrames = Math.max(maxDataFrames, dataFrames);
      pos += 512 + padded;
      entries++;
    }
    t.equal(pos, tarBytes.length);
    t.equal(entries, 4 + m.blobs.length);
    t.equal(maxDataFrames, 3, 'the 9 MiB blob spans three frames');
    t.equal(
      frames.length,
      entries + entries + 2 + 1,
      'a frame per header, one data frame per entry (three for the 9 MiB blob), the trailer',
    );
  },
);

t.test('totals account for the file', async (t) => {
  const m = b.written.manifest;
  const index = await withBundleFile(b.path, readSeekIndex);
  const frames = index.frames.reduce((s, f) => s + f.compressedSize, 0);
  t.equal(
    frames + index.tableBytes,
    (await stat(b.path)).size,
    'the frames the seek table lists + the table = file size',
  );
  t.equal(m.schemaVersion, defaultVersionFor([]), 'unasked, the oldest version that carries it');
  t.notOk(
    'archiveBytes' in m.totals,
    'versions from 2 on leave the compressed size to the seek table',
  );
  t.equal(
    m.totals.layoutBytes,
    OCI_LAYOUT_CONTENT.length + m.index.size + m.blobs.reduce((s, x) => s + x.size, 0),
  );
  t.equal(m.index.digest, sha256(b.index));
  t.equal(m.creator.createdAt, '2026-01-02T03:04:05Z');
});

t.test('NAME.sha256 checks with sha256sum -c', async (t) => {
  const out = await new Promise<string>((resolve, reject) => {
    const p = spawn('sha256sum', ['-c', `${path.basename(b.path)}.sha256`], { cwd: b.dir });
    let o = '';
    p.stdout.on('data', (c) => (o += c));
    p.on('close', (code) =>
      code === 0 ? resolve(o) : reject(new Error(`sha256sum exited ${code}`)),
    );
  });
  t.match(out, /: OK/);
  t.equal(
    'sha256:' +
      createHash('sha256')
        .update(await readFile(b.path))
        .digest('hex'),
    b.written.fileDigest,
  );
});

// Decompression bombs: small files whose zstd frames expand to gigabytes. Each is read in a
// child process whose peak RSS is measured, so a reader that decodes without an output
// bound fails here (the unbounded decoder reached 2.1 GiB on the first case).
import t from 'tap';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { BoundedDecompress, FRAME_BYTES, encodeSeekTable } from '@offline-bundle/format';
import { makeBundle, readFrames, writeKeyFiles, zstdFrame } from './craft.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** Peak RSS a bounded reader stays under (node itself takes about 60 MB). */
const RSS_LIMIT = 256 * 1024 * 1024;
const GiB = 1024 * 1024 * 1024;

/**
 * A zstd frame of `bytes` zeros written as RLE blocks of 128 KiB, 4 bytes each, with no
 * content size in its header: 2 GiB of output from 64 KiB of input.
 */
function zeroBomb(bytes: number, contentSize?: number): Buffer {
  const BLOCK = 128 * 1024;
  const blocks = Math.ceil(bytes / BLOCK);
  const parts: Buffer[] = [];
  const head = Buffer.alloc(contentSize === undefined ? 6 : 13);
  head.writeUInt32LE(0xfd2fb528, 0);
  if (contentSize === undefined) {
    head[4] = 0x00; // no content size, no checksum, window descriptor follows
    head[5] = (17 - 10) << 3; // 128 KiB window
  } else {
    head[4] = 0xe0; // 8-byte content size, single segment
    head.writeBigUInt64LE(BigInt(contentSize), 5);
    return Buffer.concat([head.subarray(0, 13), ...rleBlocks(bytes, BLOCK, blocks)]);
  }
  parts.push(head);
  parts.push(...rleBlocks(bytes, BLOCK, blocks));
  return Buffer.concat(parts);
}

function rleBlocks(bytes: number, block: number, blocks: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < blocks; i++) {
    const size = Math.min(block, bytes - i * block);
    const last = i === blocks - 1 ? 1 : 0;
    const b = Buffer.alloc(4);
    b.writeUIntLE((size << 3) | (1 << 1) | last, 0, 3); // block type 1: RLE
    b[3] = 0;
    out.push(b);
  }
  return out;
}

interface ChildResult {
  code?: string;
  message?: string;
  ok?: boolean;
  maxRssBytes: number;
}

/** Runs one reader call in a fresh node process and reports its error code and peak RSS. */
function inChild(call: string, file: string, pub?: string): Promise<ChildResult> {
  const script = `
    import * as f from '@offline-bundle/format';
    const [file, pub] = process.argv.slice(1);
    const trust = pub ? await f.loadTrust([pub]) : { digest: 'sha256:' + '0'.repeat(64) };
    let out;
    try { await (${call}); out = { ok: true }; }
    catch (e) { out = { code: e.code, message: e.message }; }
    out.maxRssBytes = process.resourceUsage().maxRSS * 1024;
    console.log(JSON.stringify(out));`;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--input-type=module', '-e', script, file, ...(pub ? [pub] : [])],
      { cwd: root, timeout: 60_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`child failed: ${err.message}\n${stderr}`));
        resolve(JSON.parse(stdout.trim().split('\n').pop()!) as ChildResult);
      },
    );
  });
}

t.test('one frame of 2 GiB of zeros at the start of the file', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'bomb.bundle');
  const frame = zeroBomb(2 * GiB);
  t.ok(frame.length < 100 * 1024, `the bomb is ${frame.length} bytes`);
  await writeFile(
    file,
    Buffer.concat([
      frame,
      encodeSeekTable([{ compressedSize: frame.length, decompressedSize: 0 }]),
    ]),
  );
  for (const call of [
    'f.withBundleFile(file, (s) => f.verifyBundle(s, { trust }))',
    'f.withBundleFile(file, f.readHeader)',
  ]) {
    const r = await inChild(call, file);
    t.equal(r.code, 'CORRUPT', `${call}: refused as CORRUPT`, r);
    t.match(r.message, /frame limit/, `${call}: the message names the frame limit`);
    t.ok(
      r.maxRssBytes < RSS_LIMIT,
      `${call}: peak RSS ${(r.maxRssBytes / 1048576).toFixed(0)} MiB is under ${RSS_LIMIT / 1048576} MiB`,
    );
  }
});

t.test('a frame header claiming 2 GiB of content', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'claims.bundle');
  const frame = zeroBomb(2 * GiB, 2 * GiB);
  await writeFile(
    file,
    Buffer.concat([
      frame,
      encodeSeekTable([{ compressedSize: frame.length, decompressedSize: 0 }]),
    ]),
  );
  const r = await inChild('f.withBundleFile(file, (s) => f.verifyBundle(s, { trust }))', file);
  t.ok(r.code === 'CORRUPT', 'refused as CORRUPT', r);
  t.ok(r.maxRssBytes < RSS_LIMIT, `peak RSS ${(r.maxRssBytes / 1048576).toFixed(0)} MiB`);
});

t.test('hundreds of legal 4 MiB frames of zeros before any entry', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'zeros.bundle');
  const frame = zeroBomb(FRAME_BYTES);
  const count = 700; // 2.8 GB of zero blocks, which tar skips as end-of-archive markers
  await writeFile(
    file,
    Buffer.concat([
      ...Array<Buffer>(count).fill(frame),
      encodeSeekTable(
        Array(count).fill({ compressedSize: frame.length, decompressedSize: FRAME_BYTES }),
      ),
    ]),
  );
  t.ok(count * frame.length < 200 * 1024, `the file is ${count * frame.length} bytes`);
  for (const call of [
    'f.withBundleFile(file, (s) => f.verifyBundle(s, { trust }))',
    'f.withBundleFile(file, f.readHeader)',
  ]) {
    const started = Date.now();
    const r = await inChild(call, file);
    t.ok(r.code === 'CORRUPT' || r.code === 'BAD_ORDER', `${call}: refused (${r.code})`, r);
    t.ok(
      r.maxRssBytes < RSS_LIMIT,
      `${call}: peak RSS ${(r.maxRssBytes / 1048576).toFixed(0)} MiB`,
    );
    t.comment(`${call}: ${Date.now() - started} ms`);
  }
});

t.test('a signed bundle followed by 2.8 GB of frames past the archive end', async (t) => {
  const b = await makeBundle(t);
  const { pubPath } = await writeKeyFiles(b.dir, b.key);
  const frames = await readFrames(b.path);
  const frame = zeroBomb(FRAME_BYTES);
  const file = path.join(b.dir, 'tail.bundle');
  const tail = Array<Buffer>(700).fill(frame);
  await writeFile(
    file,
    Buffer.concat([
      ...frames.map((f) => f.bytes),
      ...tail,
      encodeSeekTable([
        ...frames.map((f) => ({
          compressedSize: f.bytes.length,
          decompressedSize: f.decompressedSize,
        })),
        ...tail.map(() => ({ compressedSize: frame.length, decompressedSize: FRAME_BYTES })),
      ]),
    ]),
  );
  const r = await inChild(
    'f.withBundleFile(file, (s) => f.verifyBundle(s, { trust }))',
    file,
    pubPath,
  );
  t.equal(r.code, 'TRAILING_DATA', 'refused as TRAILING_DATA', r);
  t.ok(r.maxRssBytes < RSS_LIMIT, `peak RSS ${(r.maxRssBytes / 1048576).toFixed(0)} MiB`);
});

t.test('media mode: a frame whose seek-index entry understates it', async (t) => {
  const b = await makeBundle(t, { layerSizes: [3000, 70_000] });
  const { pubPath } = await writeKeyFiles(b.dir, b.key);
  // The random reader trusts no size from the index or a frame header: swap the last layer
  // data frame for a 2 GiB one and keep the index entry's claimed size.
  const frames = await readFrames(b.path);
  const tableFrames = frames.map((f) => ({
    compressedSize: f.bytes.length,
    decompressedSize: f.decompressedSize,
  }));
  const padded = Math.ceil(70_000 / 512) * 512; // the frame holds the data and its tar padding
  const victim = frames.findIndex((f) => f.decompressedSize === padded);
  t.ok(victim > 0, 'found the 70 kB layer frame');
  const bomb = zeroBomb(2 * GiB, padded);
  const file = path.join(b.dir, 'media.bundle');
  await writeFile(
    file,
    Buffer.concat([
      ...frames.map((f, i) => (i === victim ? bomb : f.bytes)),
      encodeSeekTable(
        tableFrames.map((f, i) => (i === victim ? { ...f, compressedSize: bomb.length } : f)),
      ),
    ]),
  );
  const r = await inChild(
    `(async () => {
      await f.withBundleFile(file, async (s) => {
        const { manifest } = await f.readHeader(s);
        const reader = await f.BundleRandomReader.open(s, manifest);
        for (const b of manifest.blobs) await reader.verify('blobs/sha256/' + b.digest.slice(7));
      });
    })()`,
    file,
    pubPath,
  );
  t.ok(r.code === 'BAD_SEEK_TABLE' || r.code === 'CORRUPT', `refused (${r.code})`, r);
  t.ok(r.maxRssBytes < RSS_LIMIT, `peak RSS ${(r.maxRssBytes / 1048576).toFixed(0)} MiB`);
});

t.test('BoundedDecompress', async (t) => {
  t.test('makes output only as fast as it is read', async (t) => {
    const d = new BoundedDecompress();
    d.write(zeroBomb(FRAME_BYTES));
    await new Promise((r) => setImmediate(r));
    t.ok(d.bytesOut < 1024 * 1024, `${d.bytesOut} bytes decoded before anyone read`);
    let n = 0;
    d.end();
    for await (const c of d) n += (c as Buffer).length;
    t.equal(n, FRAME_BYTES, 'all of it once read');
  });

  t.test('stopAfter ends the output and flags it', async (t) => {
    const d = new BoundedDecompress();
    d.stopAfter(1000);
    const src = new PassThrough();
    src.pipe(d);
    src.end(
      Buffer.concat([
        zstdFrame(Buffer.alloc(600)),
        zstdFrame(Buffer.alloc(600)),
        zstdFrame(Buffer.alloc(600)),
      ]),
    );
    let n = 0;
    for await (const c of d) n += (c as Buffer).length;
    t.equal(n, 1200, 'stops after the frame that crossed the limit');
    t.ok(d.overLimit, 'overLimit is set');
  });

  t.test('fails a frame over the limit; tolerant mode keeps the error and ends', async (t) => {
    const strict = new BoundedDecompress({ frameLimit: 1000 });
    strict.end(zstdFrame(Buffer.alloc(1001)));
    await t.rejects(
      (async () => {
        for await (const _ of strict) {
          /* drain */
        }
      })(),
      { code: 'CORRUPT' },
    );
    const tolerant = new BoundedDecompress({ frameLimit: 1000, tolerant: true });
    tolerant.end(Buffer.concat([zstdFrame(Buffer.alloc(900)), zstdFrame(Buffer.alloc(1001))]));
    let n = 0;
    for await (const c of tolerant) n += (c as Buffer).length;
    t.ok(n >= 900, 'what came before the bad frame is kept');
    t.equal((tolerant.failed as { code?: string })?.code, 'CORRUPT');
  });
});

t.test(
  'BoundedDecompress: a frame cut at the end of a chunk that decodes to a lot does not hang (fuzz seed 2 case 2100)',
  async (t) => {
    const frame = zstdFrame(Buffer.alloc(FRAME_BYTES, 'abcd'));
    for (const cut of [frame.length - 1, frame.length - 5, Math.floor(frame.length / 2)]) {
      const d = new BoundedDecompress({ tolerant: true });
      d.end(frame.subarray(0, cut));
      let n = 0;
      const drained = (async () => {
        for await (const c of d) {
          n += (c as Buffer).length;
          await new Promise((r) => setImmediate(r)); // a slow consumer: backpressure
        }
      })();
      const settled = await Promise.race([
        drained.then(() => true),
        new Promise((r) => setTimeout(() => r(false), 10_000)),
      ]);
      t.ok(settled, `cut at ${cut} of ${frame.length}: the stream ends (${n} bytes out)`);
      t.match(
        String(d.failed?.message),
        /middle of compressed data frame/,
        'and says the frame was cut',
      );
    }
  },
);

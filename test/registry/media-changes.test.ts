// The registry's bytes when the file under it changes after it was checked (issue #7 item 2):
// a frame of the bundle rewritten in place on the media with its mtime restored, and a blob of
// a `serve DIR` layout edited in place. Neither a Range answer nor a full GET may pass on a
// byte that was not verified; what was not changed keeps being served.
import t, { type Test } from 'tap';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { open, stat } from 'node:fs/promises';
import { request } from 'node:http';
import path from 'node:path';
import {
  BundleRandomReader,
  FRAME_BYTES,
  blobPath,
  extractBundle,
  openBundleFile,
  readHeader,
  readSeekIndex,
  verifyBundle,
  withBundleFile,
} from '@offline-bundle/format';
import {
  BundleFileStore,
  LayoutStore,
  catalogOf,
  startRegistry,
  type BlobStore,
} from '@offline-bundle/registry';
import { mirrorPath } from '@offline-bundle/oci';
import {
  makeBundle,
  readFrames,
  rejectsWith,
  sha256,
  tmpdir,
  zstdFrame,
  type MadeBundle,
} from '../format/craft.js';

const BIG = 3 * FRAME_BYTES + 12_345;

interface Got {
  status: number;
  body: Buffer;
  complete: boolean;
}
/** A GET that reports a body cut off mid-way instead of failing: what a client saw matters. */
function get(url: string, headers: Record<string, string> = {}): Promise<Got> {
  return new Promise((resolve) => {
    const req = request(url, { headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: Buffer.concat(parts), complete: res.complete }),
      );
      res.on('error', () =>
        resolve({ status: res.statusCode!, body: Buffer.concat(parts), complete: false }),
      );
      res.on('aborted', () =>
        resolve({ status: res.statusCode!, body: Buffer.concat(parts), complete: false }),
      );
    });
    req.on('error', () => resolve({ status: 0, body: Buffer.alloc(0), complete: false }));
    req.end();
  });
}

let b: MadeBundle;
let big: Buffer;
t.before(async () => {
  b = await makeBundle(t, { layerSizes: [BIG, 700] });
  big = b.blobs.find((x) => x.size === BIG)!.data;
});

/** The bundle's data frames holding the big blob, with where each starts within the blob. */
async function bigFrames(
  file: string,
): Promise<{ compressedOffset: number; bytes: Buffer; inBlob: number; size: number }[]> {
  const frames = await readFrames(file);
  const index = await withBundleFile(file, readSeekIndex);
  // the blob's data starts after its header frame: the first full-size frame and those after it
  const first = frames.findIndex((f) => f.decompressedSize === FRAME_BYTES);
  const start = index.frames[first]!.decompressedOffset;
  return frames.slice(first, first + 4).map((f) => ({
    compressedOffset: f.compressedOffset,
    bytes: f.bytes,
    inBlob: f.decompressedOffset - start,
    size: f.decompressedSize,
  }));
}

/** Rewrites `len` bytes at `at` in place and puts the old mtime back, as a hostile writer would. */
async function rewriteInPlace(file: string, at: number, bytes: Buffer): Promise<void> {
  const before = await stat(file, { bigint: true });
  const stamp = `${file}.stamp`;
  execFileSync('touch', ['-r', file, stamp]);
  const fh = await open(file, 'r+');
  await fh.write(bytes, 0, bytes.length, at);
  await fh.close();
  execFileSync('touch', ['-r', stamp, file]);
  const after = await stat(file, { bigint: true });
  if (after.mtimeNs !== before.mtimeNs || after.size !== before.size || after.ino !== before.ino)
    throw new Error("the rewrite changed the file's stamp");
}

async function served(t: Test, store: BlobStore): Promise<string> {
  const reg = await startRegistry({
    store,
    catalog: catalogOf(b.written.manifest),
    host: '127.0.0.1',
    port: 0,
  });
  t.teardown(async () => {
    await reg.close();
    await store.close();
  });
  return `http://${reg.address}/v2/${mirrorPath('example.com/test/app')}/blobs/${sha256(big)}`;
}

/** A frame of other random bytes of the same size: the same compressed length (stored blocks). */
function lookAlikeFrame(size: number, length: number): Buffer {
  const f = zstdFrame(randomBytes(size));
  if (f.length !== length) throw new Error(`replacement frame is ${f.length} bytes, not ${length}`);
  return f;
}

for (const withPass of [true, false]) {
  t.test(
    `media mode (${withPass ? 'frame digests from the verify pass' : 'each blob hashed at its first request'}): a frame rewritten in place is never served`,
    async (t) => {
      const dir = await tmpdir(t, 'ob-media-');
      const file = path.join(dir, 'b.bundle');
      execFileSync('cp', [b.path, file]);
      const source = await openBundleFile(file);
      t.teardown(() => source.close());
      const v = await verifyBundle(source, { trust: b.trust, frameDigests: withPass });
      if (withPass)
        t.equal(
          v.frameDigests?.length,
          v.seekIndex.frames.length,
          'one digest per frame of the index',
        );
      const url = await served(
        t,
        await BundleFileStore.open(
          source,
          v.manifest,
          catalogOf(v.manifest),
          withPass ? { seekIndex: v.seekIndex, frameDigests: v.frameDigests! } : undefined,
        ),
      );

      const frames = await bigFrames(file);
      const target = frames[1]!;
      const range = { from: target.inBlob + 100, to: target.inBlob + 5000 };
      const before = await get(url, { range: `bytes=${range.from}-${range.to}` });
      t.equal(before.status, 206);
      t.ok(
        before.body.equals(big.subarray(range.from, range.to + 1)),
        'the range as signed, before the change',
      );

      await rewriteInPlace(
        file,
        target.compressedOffset,
        lookAlikeFrame(target.size, target.bytes.length),
      );
      const after = await get(url, { range: `bytes=${range.from}-${range.to}` });
      t.notOk(
        after.status === 206 && after.complete,
        `a Range in the rewritten frame is not answered in full (status ${after.status})`,
      );
      if (after.status === 206)
        t.ok(
          after.body.equals(big.subarray(range.from, range.from + after.body.length)),
          'not one altered byte in what it sent',
        );
      else
        t.match(
          after.body.toString(),
          /not what was verified|changed/,
          `an error instead (${after.status}) naming the change`,
        );

      const whole = await get(url);
      t.notOk(whole.complete && whole.status === 200, 'a full GET is cut off');
      t.ok(
        whole.body.length <= target.inBlob,
        `it stops before the rewritten frame (${whole.body.length} of ${target.inBlob} bytes before it)`,
      );
      t.ok(
        whole.body.equals(big.subarray(0, whole.body.length)),
        'and what it sent was the signed bytes',
      );

      const other = frames[2]!;
      const still = await get(url, { range: `bytes=${other.inBlob}-${other.inBlob + 999}` });
      t.equal(still.status, 206, 'a Range in a frame that did not change is still served');
      t.ok(still.body.equals(big.subarray(other.inBlob, other.inBlob + 1000)));

      // the original frame put back: served again (nothing was cached as bad)
      await rewriteInPlace(file, target.compressedOffset, target.bytes);
      const back = await get(url, { range: `bytes=${range.from}-${range.to}` });
      t.ok(
        back.status === 206 && back.body.equals(big.subarray(range.from, range.to + 1)),
        'served again once the frame is back',
      );
    },
  );
}

t.test(
  'serve DIR: a blob of the layout edited in place after the start-up check is not served',
  async (t) => {
    const dir = await tmpdir(t, 'ob-layout-');
    const layout = path.join(dir, 'layout');
    const v = await withBundleFile(b.path, (s) => extractBundle(s, layout, { trust: b.trust }));
    const url = await served(t, await LayoutStore.open(layout, catalogOf(v.manifest)));
    const blob = path.join(layout, blobPath(sha256(big)));
    const at = 2 * 1024 * 1024 + 10;
    const fh = await open(blob, 'r+');
    await fh.write(Buffer.from('altered!'), 0, 8, at);
    await fh.close();

    const hit = await get(url, { range: `bytes=${at - 100}-${at + 100}` });
    t.notOk(
      hit.status === 206 && hit.complete,
      `a Range over the edit is not answered in full (status ${hit.status})`,
    );
    t.notOk(hit.body.includes(Buffer.from('altered!')), 'the edited bytes are not sent');
    const whole = await get(url);
    t.notOk(whole.complete && whole.status === 200, 'a full GET is cut off');
    t.ok(
      whole.body.equals(big.subarray(0, whole.body.length)),
      'and what it sent was the signed bytes',
    );
    const far = await get(url, { range: 'bytes=100-999' });
    t.ok(
      far.status === 206 && far.body.equals(big.subarray(100, 1000)),
      'a Range in an unchanged chunk is served',
    );
    const tail = await get(url, { range: `bytes=${BIG - 50}-` });
    t.ok(
      tail.status === 206 && tail.body.equals(big.subarray(BIG - 50)),
      'the last, short chunk too',
    );
  },
);

t.test(
  'a FIFO as the bundle: every reader refuses it at once (IO_ERROR) instead of waiting on it',
  async (t) => {
    const dir = await tmpdir(t, 'ob-fifo-');
    const fifo = path.join(dir, 'b.bundle');
    execFileSync('mkfifo', [fifo]);
    await rejectsWith(
      t,
      withBundleFile(fifo, (s) => verifyBundle(s, { trust: b.trust })),
      'IO_ERROR',
      'verifyBundle',
    );
    await rejectsWith(t, withBundleFile(fifo, readHeader), 'IO_ERROR', 'readHeader');
    await rejectsWith(t, withBundleFile(fifo, readSeekIndex), 'IO_ERROR', 'readSeekIndex');
    await rejectsWith(
      t,
      withBundleFile(fifo, (s) => BundleRandomReader.open(s, b.written.manifest)),
      'IO_ERROR',
      'BundleRandomReader.open',
    );
    await rejectsWith(
      t,
      withBundleFile(path.join(dir, 'missing.bundle'), readSeekIndex),
      'IO_ERROR',
      'readSeekIndex of a missing file',
    );
  },
);

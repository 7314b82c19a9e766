// tier: unit
// bundle create works out each blob's piece list (bundle.json `pieces`) as the blob arrives, on
// the piece thread beside the download's digest check, and keeps it in the cache beside the blob
// (builder/src/piece-facts.ts through BlobCache's tap and facts): a resumed download's list still
// covers every byte, a download that fails its digest keeps nothing, a damaged fact is no list,
// and the facts go with their blob when it is dropped or pruned.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { BlobCache, pruneCache } from '@offline-bundle/image-fetch';
import { MIN_PIECE_BYTES, pieceThreadsRunning } from '@offline-bundle/format';
// @ts-expect-error: a JavaScript helper without type declarations
import { tmpdir } from '../helpers/tmp.mjs';

const { PieceFacts } = await import('../../builder/dist/piece-facts.js');

const S = MIN_PIECE_BYTES;
const sha = (b: Uint8Array) => 'sha256:' + createHash('sha256').update(b).digest('hex');
function listOf(data: Buffer): string {
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; at += S)
    out.push(
      createHash('sha256')
        .update(data.subarray(at, at + S))
        .digest(),
    );
  return Buffer.concat(out).toString('base64');
}
/** A source that serves `data` from `offset` in 100 KiB chunks, cut off after `cut` bytes when given. */
const source = (data: Buffer, cut?: number) => async (offset: number) =>
  Readable.from(
    (function* () {
      for (let at = offset; at < data.length; at += 100 * 1024) {
        if (cut !== undefined && at >= cut)
          throw Object.assign(new Error('connection reset'), { code: 'ECONNRESET' });
        yield data.subarray(at, Math.min(data.length, at + 100 * 1024));
      }
    })(),
  );

t.test(
  "a download's list is hashed as it arrives, kept, and read back by the next run",
  async (t) => {
    const dir = await tmpdir(t, 'ob-piece-facts-');
    const cache = new BlobCache(dir);
    const facts = new PieceFacts(cache, S);
    t.teardown(() => facts.stop());
    const data = randomBytes(5 * S + 77);
    const blob = { digest: sha(data), size: data.length };
    const path1 = await cache.fetch(blob.digest, blob.size, source(data), { tap: facts.tap(blob) });
    t.equal(await facts.listOf(blob, path1), listOf(data), 'its list');
    const kept = path.join(dir, 'facts', `pieces-${S}`, 'sha256', blob.digest.slice(7));
    t.equal((await readFile(kept, 'latin1')).split('\n')[0], listOf(data), 'kept beside the blob');
    // the next run: a fresh PieceFacts reads it; the blob's file is not read (it is changed here to prove it)
    const later = new PieceFacts(cache, S);
    t.teardown(() => later.stop());
    await writeFile(path1, Buffer.alloc(data.length));
    t.equal(
      await later.listOf(blob, path1),
      listOf(data),
      'read from the cache, not from the file',
    );
    await writeFile(path1, data);
    t.equal(facts.tap({ digest: blob.digest, size: S }), undefined, 'a blob of one piece: no tap');
    t.equal(await facts.listOf({ digest: blob.digest, size: S }, path1), undefined, 'nor a list');
    // damaged: a digest changed (still canonical base64), the check line no longer matches
    const text = await readFile(kept, 'latin1');
    await writeFile(kept, (text[0] === 'A' ? 'B' : 'A') + text.slice(1));
    const third = new PieceFacts(cache, S);
    t.teardown(() => third.stop());
    t.equal(
      await third.listOf(blob, path1),
      listOf(data),
      'a damaged fact is refused: the file hashed instead',
    );
    t.equal(await readFile(kept, 'latin1'), text, 'and the fact kept again');
    await writeFile(kept, text + 'more\n');
    const fourth = new PieceFacts(cache, S);
    t.teardown(() => fourth.stop());
    t.equal(await fourth.listOf(blob, path1), listOf(data), 'a fact with more in it: refused too');
    await cache.drop(blob.digest);
    await t.rejects(readFile(kept), { code: 'ENOENT' }, 'dropped with its blob');
  },
);

t.test(
  'a resumed download still lists every piece; one that fails its digest keeps nothing',
  async (t) => {
    const dir = await tmpdir(t, 'ob-piece-facts-');
    const cache = new BlobCache(dir);
    const facts = new PieceFacts(cache, S);
    t.teardown(() => facts.stop());
    const data = randomBytes(3 * S + 5);
    const blob = { digest: sha(data), size: data.length };
    let opened = 0;
    const p = await cache.fetch(
      blob.digest,
      blob.size,
      (offset) => source(data, opened++ === 0 ? 2 * S + 3 : undefined)(offset),
      { tap: facts.tap(blob), attempts: 3 },
    );
    t.equal(opened, 2, 'cut off once, resumed');
    t.equal(
      await facts.listOf(blob, p),
      listOf(data),
      "the list covers the .partial's bytes and the rest",
    );
    const other = randomBytes(2 * S + 1);
    const wrong = { digest: sha(randomBytes(10)), size: other.length };
    await t.rejects(
      cache.fetch(wrong.digest, wrong.size, source(other), { tap: facts.tap(wrong) }),
      { code: 'DIGEST_MISMATCH' },
    );
    const kinds = path.join(dir, 'facts', `pieces-${S}`, 'sha256');
    t.same(
      (await readdir(kinds)).sort(),
      [blob.digest.slice(7)],
      'no fact for the blob that failed',
    );
    await mkdir(path.join(dir, 'facts', 'other-kind', 'sha256'), { recursive: true });
    await cache.keepFact('other-kind', blob.digest, 'x\n');
    await pruneCache(dir);
    t.same(await readdir(kinds), [], 'pruned with its blob');
    t.same(
      await readdir(path.join(dir, 'facts', 'other-kind', 'sha256')),
      [],
      'every kind of fact',
    );
  },
);

t.test('stop ends the thread', async (t) => {
  const before = pieceThreadsRunning();
  const facts = new PieceFacts(new BlobCache(await tmpdir(t, 'ob-piece-facts-')), S);
  t.equal(pieceThreadsRunning(), before + 1, 'one thread while it lives');
  await facts.stop();
  t.equal(pieceThreadsRunning(), before, 'none once stopped');
});

t.test(
  'a list worked out from a blob merely found in the cache is used, and kept only once the build packed the blob (its digest checked)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-piece-facts-');
    const data = randomBytes(3 * S + 9);
    const blob = { digest: sha(data), size: data.length };
    const first = new BlobCache(dir);
    const file = await first.fetch(blob.digest, blob.size, source(data));
    // what a power cut can leave of an unsynced rename: the right length, zeros
    await writeFile(file, Buffer.alloc(data.length));
    const later = new BlobCache(dir);
    const facts = new PieceFacts(later, S);
    t.teardown(() => facts.stop());
    t.equal(later.verified(blob.digest), false, 'found by its size only');
    t.equal(
      await facts.listOf(blob, file),
      listOf(Buffer.alloc(data.length)),
      "the file's list, for this run (its packing refuses the blob)",
    );
    await t.rejects(
      readdir(path.join(dir, 'facts', `pieces-${S}`, 'sha256')),
      { code: 'ENOENT' },
      'nothing kept before the packing checked the file',
    );
    // the intact file, packed and checked by a build that then says so: its list is kept
    await writeFile(file, data);
    const next = new PieceFacts(new BlobCache(dir), S);
    t.teardown(() => next.stop());
    t.equal(await next.listOf(blob, file), listOf(data));
    await next.keepChecked();
    t.equal(
      (
        await readFile(
          path.join(dir, 'facts', `pieces-${S}`, 'sha256', blob.digest.slice(7)),
          'latin1',
        )
      ).split('\n')[0],
      listOf(data),
      'kept once the build packed it',
    );
  },
);

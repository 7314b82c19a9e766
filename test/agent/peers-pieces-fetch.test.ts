// tier: unit
// A fetch of a bundle with `pieces` (agent/src/peers/peer-blobs.ts, piece-transfer.ts) driven
// through a stand-in peer client (no socket: each answer is made here, the bytes go to a real
// staging on disk through format's writer): 503s on the piece path are forgiven after an answer,
// a resumed fetch keeps a partial peer's pieces of the blobs it still needs, a partial peer is
// always asked with a Range and asked again once it lists a blob whole, and a verified piece is
// announced only once its bytes are in the temp file.
import t from 'tap';
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { mkdir, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { EntryFiles, MIN_PIECE_BYTES, PieceHasher, type LayoutEntry } from '@offline-bundle/format';
import {
  PeerCounters,
  PeerFault,
  prefixBitmap,
  type PeerClient,
  type PeerEndpoint,
} from '@offline-bundle/agent';
import { BlobFetch, type BlobFetchOptions } from '../../agent/dist/peers/peer-blobs.js';

const PS = MIN_PIECE_BYTES;

interface Blob {
  entry: LayoutEntry;
  bytes: Buffer;
}

function makeBlobs(
  n: number,
  size: number,
): { blobs: Map<string, Blob>; lists: Record<string, string> } {
  const blobs = new Map<string, Blob>();
  const lists: Record<string, string> = {};
  for (let k = 0; k < n; k++) {
    const bytes = Buffer.alloc(size);
    for (let i = 0; i < size; i += 512) bytes[i] = (i / 512 + k) & 0xff;
    const digest = 'sha256:' + createHash('sha256').update(bytes).digest('hex');
    blobs.set(digest, { entry: { path: `blobs/sha256/${digest.slice(7)}`, digest, size }, bytes });
    const h = new PieceHasher(PS);
    h.update(bytes);
    lists[digest] = h.end();
  }
  return { blobs, lists };
}

/** A stand-in answer: `bytes` from the Range's start (206), or whole (200). */
function answer(bytes: Buffer, headers: Record<string, string>): Readable {
  const m = /^bytes=(\d+)-(\d*)$/.exec(headers.range ?? '');
  const start = m ? Number(m[1]) : 0;
  const end = m && m[2] ? Number(m[2]) + 1 : bytes.length;
  const res = Readable.from([bytes.subarray(start, end)]) as Readable & {
    statusCode: number;
    headers: Record<string, string>;
  };
  res.statusCode = m ? 206 : 200;
  res.headers = m ? { 'content-range': `bytes ${start}-${end - 1}/${bytes.length}` } : {};
  return res;
}

const digestOf = (url: string): string => url.split('/blobs/')[1]!;

async function staging(): Promise<{ dir: string; files: EntryFiles }> {
  const dir = await mkdtemp(join(tmpdir(), 'pieces-fetch-'));
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  t.teardown(() =>
    import('node:fs/promises').then((fs) => fs.rm(dir, { recursive: true, force: true })),
  );
  return { dir, files: new EntryFiles(dir, false) };
}

async function run(
  client: object,
  peers: PeerEndpoint[],
  entries: LayoutEntry[],
  lists: Record<string, string>,
  extra: Partial<BlobFetchOptions> = {},
) {
  const { files } = await staging();
  const placed: string[] = [];
  const f = new BlobFetch(
    {
      files,
      manifestDigest: 'sha256:' + '0'.repeat(64),
      client: client as unknown as PeerClient,
      counters: new PeerCounters(),
      signal: AbortSignal.timeout(60_000),
      streams: 1,
      stallMs: 3000,
      refreshPeers: async () => peers,
      refreshMs: 100,
      random: () => 0,
      onPlaced: (e) => placed.push(e.digest),
      onBytes: () => undefined,
      pieces: { size: PS, blobs: lists },
      ...extra,
    },
    peers,
    entries,
  );
  const err = await f.run().then(
    () => undefined,
    (e: Error & { reason?: string }) => e,
  );
  return { placed, err };
}

const stick: PeerEndpoint = {
  node: 'stick',
  url: 'https://stand-in',
  complete: true,
  verifiedBlobs: 0,
};
const partialPeer: PeerEndpoint = {
  node: 'partial',
  url: 'https://stand-in',
  complete: false,
  verifiedBlobs: 0,
};

t.test(
  'a stick node (stand-in client) that answers every other piece request busy: its 503s are forgiven after each answer, every blob fetched',
  async (t) => {
    const { blobs, lists } = makeBlobs(6, PS + 1000);
    let calls = 0;
    const client = {
      get: async (url: string, _s: AbortSignal, headers: Record<string, string> = {}) => {
        if (++calls % 2 === 1) throw new PeerFault('busy', 'every downloader slot is taken', 1);
        return answer(blobs.get(digestOf(url))!.bytes, headers);
      },
      small: async () => {
        throw new PeerFault('missing', 'no listing');
      },
    };
    const r = await run(
      client,
      [stick],
      [...blobs.values()].map((b) => b.entry),
      lists,
      { freeBusyAnswers: 2 },
    );
    t.equal(r.err, undefined, r.err?.message ?? 'no error');
    t.equal(
      r.placed.length,
      6,
      'all six blobs placed, six 503s answered in all (more than the 2 free in a row)',
    );
  },
);

t.test(
  "a resumed fetch (one covered blob held already) keeps a partial peer's (stand-in) pieces of the blob it still needs",
  async (t) => {
    const { blobs, lists } = makeBlobs(2, 3 * PS + 5);
    const [kept, needed] = [...blobs.values()];
    const asked: string[] = [];
    const client = {
      small: async () =>
        Buffer.from(
          JSON.stringify({
            complete: false,
            digests: [],
            pieces: {
              [kept!.entry.digest]: prefixBitmap(kept!.entry.size, PS, PS),
              [needed!.entry.digest]: prefixBitmap(needed!.entry.size, PS, needed!.entry.size),
            },
          }),
        ),
      get: async (url: string, _s: AbortSignal, headers: Record<string, string> = {}) => {
        asked.push(headers.range ?? 'whole');
        return answer(blobs.get(digestOf(url))!.bytes, headers);
      },
    };
    const r = await run(client, [partialPeer], [needed!.entry], lists);
    t.equal(r.err, undefined, r.err?.message ?? 'no error');
    t.same(
      r.placed,
      [needed!.entry.digest],
      "the needed blob fetched from the partial peer's pieces",
    );
    t.same(
      asked,
      ['bytes=0-'],
      'asked with a Range for every piece it holds (a partial peer serves ranges of its verified pieces only)',
    );
  },
);

t.test(
  'a partial peer (stand-in) whose piece asks missed while it renamed the blob is asked again once it lists the blob whole',
  async (t) => {
    const { blobs, lists } = makeBlobs(1, 2 * PS + 9);
    const [blob] = [...blobs.values()];
    let misses = 0;
    let whole = false;
    const client = {
      small: async () =>
        Buffer.from(
          JSON.stringify(
            whole
              ? { complete: false, digests: [blob!.entry.digest] }
              : {
                  complete: false,
                  digests: [],
                  pieces: {
                    [blob!.entry.digest]: prefixBitmap(blob!.entry.size, PS, blob!.entry.size),
                  },
                },
          ),
        ),
      get: async (_url: string, _s: AbortSignal, headers: Record<string, string> = {}) => {
        if (!whole) {
          // the three misses that shut it out of the blob; then its listing says it holds it whole
          if (++misses >= 3) whole = true;
          throw new PeerFault('missing', 'only some bytes are held verified here');
        }
        return answer(blob!.bytes, headers);
      },
    };
    const r = await run(client, [partialPeer], [blob!.entry], lists);
    t.equal(r.err, undefined, r.err?.message ?? 'no error');
    t.equal(misses, 3);
    t.same(r.placed, [blob!.entry.digest], 'fetched from it once it listed the blob whole');
  },
);

t.test(
  "a verified piece is announced only once its bytes are in the temp file; of a lying peer's (stand-in) answer, only the pieces before its wrong one",
  async (t) => {
    const { blobs, lists } = makeBlobs(1, 6 * PS + 77);
    const [blob] = [...blobs.values()];
    const liar: PeerEndpoint = {
      node: 'liar',
      url: 'https://liar',
      complete: true,
      verifiedBlobs: 1,
    };
    const honest: PeerEndpoint = {
      node: 'honest',
      url: 'https://honest',
      complete: true,
      verifiedBlobs: 1,
    };
    const client = {
      small: async () => {
        throw new PeerFault('missing', 'no listing');
      },
      get: async (url: string, _s: AbortSignal, headers: Record<string, string> = {}) => {
        if (!url.startsWith(liar.url)) return answer(blob!.bytes, headers);
        // pieces 0-3 right, piece 4 wrong, in one chunk: the check runs ahead of the writer
        const bad = Buffer.from(blob!.bytes.subarray(0, 5 * PS));
        bad[4 * PS + 3] = bad[4 * PS + 3]! ^ 1;
        return answer(bad, {});
      },
    };
    const told: { bytes: number; onDisk: number }[] = [];
    const { files } = await staging();
    const f = new BlobFetch(
      {
        files,
        manifestDigest: 'sha256:' + '0'.repeat(64),
        client: client as unknown as PeerClient,
        counters: new PeerCounters(),
        signal: AbortSignal.timeout(60_000),
        streams: 1,
        stallMs: 3000,
        refreshPeers: async () => [liar, honest],
        refreshMs: 100,
        random: () => 0,
        onPlaced: () => undefined,
        onBytes: () => undefined,
        pieces: { size: PS, blobs: lists },
        onPieces: (e, bytes) =>
          told.push({
            bytes,
            onDisk: statSync(files.tempOf(e.path), { throwIfNoEntry: false })?.size ?? 0,
          }),
      },
      [liar, honest],
      [blob!.entry],
    );
    const err = await f.run().then(
      () => undefined,
      (e: Error) => e,
    );
    t.equal(err, undefined, err?.message ?? 'no error');
    t.ok(told.length > 1, `pieces were announced (${told.length} times)`);
    t.same(
      told.filter((x) => x.bytes > x.onDisk),
      [],
      'never more than the temp file held when announced',
    );
    const size = blob!.entry.size;
    const afterLie = told.find((x) => x.bytes < size);
    t.ok(
      afterLie && afterLie.bytes === afterLie.onDisk && afterLie.bytes <= 4 * PS,
      `after the wrong piece: what the file holds (${afterLie?.bytes} bytes; the writes the failed response dropped are not served)`,
    );
    t.equal(told.at(-1)?.bytes, size, 'then the whole blob from the honest peer');
  },
);

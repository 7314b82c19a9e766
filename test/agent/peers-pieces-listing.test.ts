// tier: unit
// The pieces a peer says it holds of blobs it is still fetching (agent/src/peers/piece-listing.ts)
// and the check of each piece as it arrives (piece-check.ts): a listing is held to the signed
// head (its blobs, each bitmap's exact length, no stray bit, at most MAX_HAVE_PARTIAL_BLOBS) or
// ignored whole; a piece passes on only when it matches its signed digest.
import t from 'tap';
import { createHash } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  MAX_HAVE_PARTIAL_BLOBS,
  PieceCheck,
  parsePieceListing,
  prefixBitmap,
  runEnd,
  pieceSet,
  piecesSet,
} from '@offline-bundle/agent';
import { MIN_PIECE_BYTES, PieceDigests, PieceHasher } from '@offline-bundle/format';

const PS = MIN_PIECE_BYTES;
const digestOf = (i: number) => 'sha256:' + createHash('sha256').update(String(i)).digest('hex');
const blob = Buffer.alloc(5 * PS + 1000);
for (let i = 0; i < blob.length; i += 4096) blob[i] = (i / 4096) & 0xff;
const BLOB = 'sha256:' + createHash('sha256').update(blob).digest('hex');
const hasher = new PieceHasher(PS);
hasher.update(blob);
const digests = new PieceDigests({ size: PS, blobs: { [BLOB]: hasher.end() } });
const needed = (d: string) => d === BLOB;

t.test(
  'a prefix bitmap round-trips through the listing: the run from a piece is what a peer is asked for',
  async (t) => {
    const bitmap = prefixBitmap(blob.length, PS, 3 * PS + 17);
    const parsed = parsePieceListing({ [BLOB]: bitmap }, digests, needed);
    t.same(
      [0, 1, 2, 3].map((i) => pieceSet(parsed.get(BLOB)!, i)),
      [true, true, true, false],
      'whole pieces only',
    );
    t.equal(piecesSet(parsed), 3);
    t.equal(runEnd(parsed.get(BLOB), PS, blob.length, PS), 3 * PS, 'from piece 1: pieces 1 and 2');
    t.equal(
      runEnd(parsed.get(BLOB), 3 * PS, blob.length, PS),
      3 * PS,
      'piece 3 is not held: nothing',
    );
    t.equal(
      runEnd(parseBitmapAll(), 4 * PS, blob.length, PS),
      blob.length,
      "the last piece ends at the blob's end",
    );
  },
);

function parseBitmapAll(): Buffer {
  return parsePieceListing(
    { [BLOB]: prefixBitmap(blob.length, PS, blob.length) },
    digests,
    needed,
  ).get(BLOB)!;
}

t.test(
  'a listing not held to the signed head is ignored whole (the peer is asked for whole blobs only)',
  async (t) => {
    const good = prefixBitmap(blob.length, PS, PS);
    const cases: [string, unknown][] = [
      ['a blob the head does not split', { [BLOB]: good, [digestOf(1)]: good }],
      [
        'a bitmap two bytes long for six pieces (one is right): too long',
        { [BLOB]: Buffer.alloc(2).toString('base64') },
      ],
      ['a bitmap of no byte for six pieces: too short', { [BLOB]: '' }],
      ['a stray bit past the last piece', { [BLOB]: Buffer.from([0xff]).toString('base64') }],
      ['not base64', { [BLOB]: '!!!!' }],
      ['not a string', { [BLOB]: 7 }],
      ['an array', [good]],
    ];
    for (const [what, v] of cases) t.equal(parsePieceListing(v, digests, needed).size, 0, what);
    t.equal(
      parsePieceListing({ [BLOB]: good }, undefined, needed).size,
      0,
      'a head without pieces reads no piece listing',
    );
  },
);

t.test(
  'a blob the head splits that this fetch does not need (a resumed fetch holds it) is left out, the others kept',
  async (t) => {
    const other = Buffer.alloc(3 * PS, 9);
    const OTHER = 'sha256:' + createHash('sha256').update(other).digest('hex');
    const h = new PieceHasher(PS);
    h.update(other);
    const two = new PieceDigests({
      size: PS,
      blobs: { [BLOB]: digests.pieces.blobs[BLOB]!, [OTHER]: h.end() },
    });
    const listing = {
      [OTHER]: prefixBitmap(other.length, PS, PS),
      [BLOB]: prefixBitmap(blob.length, PS, 2 * PS),
    };
    const parsed = parsePieceListing(listing, two, needed);
    t.same([...parsed.keys()], [BLOB], 'only the needed blob');
    t.equal(runEnd(parsed.get(BLOB), 0, blob.length, PS), 2 * PS, 'its pieces as listed');
    t.equal(
      parsePieceListing({ ...listing, [OTHER]: Buffer.alloc(2).toString('base64') }, two, needed)
        .size,
      0,
      'a blob not needed is still held to the head: a wrong bitmap voids the listing',
    );
  },
);

t.test(
  `more than MAX_HAVE_PARTIAL_BLOBS (${MAX_HAVE_PARTIAL_BLOBS}) partial blobs: ignored whole before any is looked at`,
  async (t) => {
    const many: Record<string, string> = {};
    for (let i = 0; i <= MAX_HAVE_PARTIAL_BLOBS; i++) many[digestOf(i)] = 'AA==';
    let asked = 0;
    t.equal(
      parsePieceListing(many, digests, () => {
        asked++;
        return true;
      }).size,
      0,
    );
    t.equal(asked, 0, 'no entry read');
  },
);

/** Runs `bytes` (in `chunk`-sized parts) through a PieceCheck from `from`; what passed, what was announced, the error. */
async function check(bytes: Buffer, from: number, keepFrom: number, chunk = 100_000) {
  const out: Buffer[] = [];
  const verified: number[] = [];
  const parts: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += chunk) parts.push(bytes.subarray(i, i + chunk));
  const err = await pipeline(
    Readable.from(parts),
    new PieceCheck({
      digests,
      blob: BLOB,
      size: blob.length,
      from,
      keepFrom,
      mismatch: (i) => new Error(`piece ${i} wrong`),
      overflow: () => new Error('too long'),
      onVerified: (end) => verified.push(end),
    }),
    new Writable({
      write(c: Buffer, _e, cb) {
        out.push(c);
        cb();
      },
    }),
  ).then(
    () => undefined,
    (e: Error) => e,
  );
  return { out: Buffer.concat(out), verified, err };
}

t.test(
  'a piece check passes on only pieces that match, and stops at the first that does not',
  async (t) => {
    const whole = await check(blob, 0, 0);
    t.equal(whole.err, undefined);
    t.ok(whole.out.equals(blob), 'every byte passed');
    t.same(whole.verified, [1, 2, 3, 4, 5].map((i) => i * PS).concat(blob.length));
    const bad = Buffer.from(blob);
    bad[2 * PS + 5] = bad[2 * PS + 5]! ^ 1;
    const lied = await check(bad, 0, 0);
    t.equal(lied.err?.message, 'piece 2 wrong');
    t.equal(lied.out.length, 2 * PS, 'the two pieces before it passed, not a byte of piece 2');
    const resumed = await check(blob.subarray(PS), PS, PS + 300);
    t.ok(
      resumed.out.equals(blob.subarray(PS + 300)),
      'from a piece start: the bytes held already are checked, not passed on again',
    );
    const cut = await check(blob.subarray(0, PS + 10), 0, 0);
    t.equal(cut.out.length, PS, 'a cut mid-piece: its bytes dropped');
    const long = await check(Buffer.concat([blob, Buffer.alloc(1)]), 0, 0);
    t.equal(long.err?.message, 'too long');
  },
);

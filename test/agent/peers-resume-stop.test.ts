// What a fetch from peers resumed after a cut keeps when it is stopped or meets a bad temp file
// while it checks what the cut left (issue #42): a stop (SIGTERM, the deadline, a yield to a
// stick) during that check keeps the partial, and the hashing of a temp file stops between its
// pieces with the file left as it was; a temp file that cannot be read goes, and only it; a file
// linked elsewhere under a temp name is never cut; an approval check still in flight when the
// attempt ended stops nothing. Real mutual-TLS peer servers on 127.0.0.x.
import t, { type Test } from 'tap';
import { link, mkdir, symlink, readFile, readdir, rename, stat, writeFile } from 'node:fs/promises';
import { renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { Readable } from 'node:stream';
import { dirname, join } from 'node:path';
import { PeerSource, type PeerApproval, type PeerDirectory } from '@offline-bundle/agent';
import {
  EntryFiles,
  MIN_PIECE_BYTES,
  PieceDigests,
  WRITING_SUFFIX,
  layoutEntries,
  parseManifestBytes,
  writeResumeMarker,
} from '@offline-bundle/format';
import { leaveForResume, preparePartial } from '../../agent/dist/load/partial-fill.js';
import { FixedDirectory, MiB, endpoint, peerWorld } from './peers-setup.js';
import { piecesSeed } from './peers-pieces-seed.js';

const PS = MIN_PIECE_BYTES;
const w = await peerWorld(t, [6 * MiB + 4321, 2 * MiB + 7, 256 * 1024]);
const p = await piecesSeed(w);
const head = parseManifestBytes(p.served.manifestBytes);
const digests = new PieceDigests(head.pieces!);
const big = layoutEntries(head).find((e) => e.size > 6 * MiB)!;
const mid = layoutEntries(head).find((e) => e.size > 2 * MiB && e.size < 3 * MiB)!;
const bigBytes = await readFile(join(p.dir, big.path));
const pieceOk = (i: number, piece: Buffer) => digests.matches(big.digest, i, piece);
const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  );

/** A partial of the pieces bundle holding `temps` (entry path to bytes) under their temp names. */
async function partialWith(name: string, temps: Record<string, Buffer> = {}) {
  const partial = join(w.b.dir, name, 'upgrade', '1.2.3-amd64.partial');
  await mkdir(dirname(join(partial, big.path)), { recursive: true });
  await writeResumeMarker(partial, p.served.manifestBytes);
  for (const [path, bytes] of Object.entries(temps))
    await writeFile(join(partial, path + WRITING_SUFFIX), bytes);
  return partial;
}

const prepare = (partial: string) =>
  preparePartial(
    new EntryFiles(partial, false),
    partial,
    { manifest: head, manifestBytes: p.served.manifestBytes, signature: p.served.signature },
    new AbortController().signal,
    () => undefined,
  );

for (const [label, served, approval] of [
  ['without pieces', w.served, w.approval],
  ['with pieces', p.served, p.approval],
] as const) {
  t.test(`a stop while a resume checks what was kept keeps the partial (${label})`, async (t) => {
    const seed = await w.server({ offer: served });
    const upgradeDir = join(w.b.dir, `stop-${label.replace(' ', '-')}`, 'upgrade');
    const partial = join(upgradeDir, '1.2.3-amd64.partial');
    const dir = new FixedDirectory([approval], [endpoint('seed', seed.url)]);
    await w.fetch(upgradeDir, dir, { approval }, { leaveStaged: true }).result;
    const before = (await readdir(join(partial, 'blobs/sha256'))).sort();
    // a cut mid-blob left the first pieces of one (a bundle without pieces never trusts them)
    const temp = join(partial, big.path + WRITING_SUFFIX);
    await rename(join(partial, big.path), temp);
    await writeFile(temp, bigBytes.subarray(0, 3 * PS + 99));
    const stop = new AbortController();
    const second = w.fetch(upgradeDir, dir, {
      approval,
      signal: stop.signal,
      onStaging: () => stop.abort(),
    });
    await t.rejects(second.result, { reason: 'Interrupted' }, 'stopped: Interrupted');
    const name = big.digest.slice('sha256:'.length);
    const whole = before.filter((n) => n !== name);
    t.same(
      (await readdir(join(partial, 'blobs/sha256'))).sort(),
      label === 'with pieces' ? [...whole, name + WRITING_SUFFIX].sort() : whole,
      `the partial is kept: its ${whole.length} whole blobs${label === 'with pieces' ? ', and the temp file whose pieces the next try checks' : ''}`,
    );
    if (label === 'with pieces')
      t.equal((await stat(temp)).size, 3 * PS + 99, 'the temp file not hashed to its end nor cut');
  });
}

t.test('a stop between pieces ends the hashing and leaves the temp file as it was', async (t) => {
  const partial = await partialWith('between', { [big.path]: bigBytes.subarray(0, 4 * PS + 5) });
  const files = new EntryFiles(partial, false);
  let hashed = 0;
  const got = await files.appender(big).keepVerifiedPieces(
    PS,
    (i, piece) => (hashed++, pieceOk(i, piece)),
    () => hashed >= 2,
  );
  t.equal(hashed, 2, 'two pieces hashed, then the stop seen');
  t.equal(got, 2 * PS);
  t.equal(
    (await stat(join(partial, big.path + WRITING_SUFFIX))).size,
    4 * PS + 5,
    'not cut: the next resume checks it whole',
  );
});

t.test('a temp file that cannot be read goes, and only it', async (t) => {
  const partial = await partialWith('unreadable', { [big.path]: bigBytes.subarray(0, 2 * PS) });
  // a socket under the temp name: its open fails (ENXIO) as a damaged file's read fails (EIO)
  const sock = join(partial, mid.path + WRITING_SUFFIX);
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(sock, resolve));
  t.teardown(() => server.close());
  const r = await prepare(partial);
  t.notOk(await exists(sock), 'the unreadable temp name removed');
  t.ok(
    r.missing.some((e) => e.digest === mid.digest),
    'its blob is fetched again',
  );
  t.equal(r.begun.get(big.path)?.got, 2 * PS, "another blob's verified pieces are kept");
});

t.test('a file linked at a temp name elsewhere too is unlinked, never cut', async (t) => {
  const partial = await partialWith('hardlink');
  const victim = join(w.b.dir, 'hardlink', 'victim.db');
  await writeFile(victim, Buffer.concat([bigBytes.subarray(0, PS), Buffer.alloc(2 * MiB, 1)]));
  const temp = join(partial, big.path + WRITING_SUFFIX);
  await link(victim, temp);
  const r = await prepare(partial);
  t.equal((await stat(victim)).size, 3 * MiB, 'the linked file keeps its bytes');
  t.notOk(await exists(temp), 'the temp name is removed');
  t.notOk(r.begun.has(big.path), 'nothing of it trusted');
});

t.test('an append never writes through a symlink put under the temp name', async (t) => {
  const partial = await partialWith('symlink');
  const victim = join(w.b.dir, 'symlink', 'victim.db');
  await writeFile(victim, 'precious');
  await symlink(victim, join(partial, big.path + WRITING_SUFFIX));
  const files = new EntryFiles(partial, false);
  await t.rejects(files.appender(big).append(Readable.from([bigBytes.subarray(0, PS)])), {
    code: 'ELOOP',
  });
  t.equal(await readFile(victim, 'utf8'), 'precious', 'the file it points to is untouched');
});

t.test('the cut reaches only the file checked; nothing kept: the temp file goes', async (t) => {
  const partial = await partialWith('swap', { [big.path]: bigBytes.subarray(0, 3 * PS) });
  const temp = join(partial, big.path + WRITING_SUFFIX);
  const other = join(w.b.dir, 'swap', 'other');
  writeFileSync(other, Buffer.alloc(5 * PS, 2));
  const files = new EntryFiles(partial, false);
  const got = await files.appender(big).keepVerifiedPieces(PS, (i, piece) => {
    // another file put under the temp name while it is hashed
    if (i === 1) renameSync(other, temp);
    return i < 2 && pieceOk(i, piece);
  });
  t.equal(got, 0, 'the verified pieces were in the file swapped out: none kept');
  t.notOk(await exists(temp), 'the file swapped in is removed, not cut');

  const wrong = await partialWith('wrong', { [big.path]: Buffer.alloc(2 * PS, 3) });
  t.equal(await new EntryFiles(wrong, false).appender(big).keepVerifiedPieces(PS, pieceOk), 0);
  t.notOk(await exists(join(wrong, big.path + WRITING_SUFFIX)), 'no piece verified: removed');
});

/** A PeerSource watching a directory stand-in whose looks answer only when told (`answers`). */
function watched(t: Test) {
  const answers: ((a: PeerApproval[]) => void)[] = [];
  let told: (() => void) | undefined;
  const directory: PeerDirectory = {
    approved: () => new Promise((resolve) => answers.push(resolve)),
    peersFor: async () => [],
    onApprovalsChanged: (listener) => {
      told = listener;
      return () => (told = undefined);
    },
  };
  const source = new PeerSource({
    approval: w.approval,
    directory,
    credentials: w.credentials,
    trust: w.b.trust,
    upgradeDir: join(w.b.dir, 'watch'),
    approvalCheckMs: 60_000,
  });
  t.teardown(() => source.close());
  const stops: string[] = [];
  const unwatch = source.watch((reason) => stops.push(reason.reason));
  return { answers, change: () => told!(), unwatch, stops, source };
}

const settled = () => new Promise((resolve) => setTimeout(resolve, 50));

t.test('approval looks still in flight when the attempt ended (directory stand-in)', async (t) => {
  const late = watched(t);
  late.change();
  late.unwatch();
  late.answers.shift()!([]); // the look finds the approval gone, after the end
  await settled();
  t.same(late.stops, [], 'a look in flight tells no stop after the attempt ended');
  t.notOk(late.source.signal().aborted, "nor stops the fetch's own signal");

  const queued = watched(t);
  queued.change();
  queued.change(); // told while the first look runs: one more is queued
  queued.unwatch();
  queued.answers.shift()!([w.approval]);
  await settled();
  t.equal(queued.answers.length, 0, 'the queued look is not run');
  t.same(queued.stops, []);
});

t.test(
  'a temp file whose every piece matches but whose blob does not is fetched anew',
  async (t) => {
    // a head whose piece list vouches for bytes its blob digest refuses (a builder's bug, signed)
    const hex = big.digest.slice('sha256:'.length);
    // its last digit changed: the blob list keeps its order
    const fake = hex.slice(0, -1) + (hex.endsWith('0') ? '1' : '0');
    const bytes = Buffer.from(p.served.manifestBytes.toString('utf8').replaceAll(hex, fake));
    const lying = parseManifestBytes(bytes);
    const entry = layoutEntries(lying).find((e) => e.digest === `sha256:${fake}`)!;
    const partial = join(w.b.dir, 'lying', 'upgrade', '1.2.3-amd64.partial');
    await mkdir(dirname(join(partial, entry.path)), { recursive: true });
    await writeResumeMarker(partial, bytes);
    const temp = join(partial, entry.path + WRITING_SUFFIX);
    await writeFile(temp, bigBytes);
    const r = await preparePartial(
      new EntryFiles(partial, false),
      partial,
      { manifest: lying, manifestBytes: bytes, signature: p.served.signature },
      new AbortController().signal,
      () => undefined,
    );
    t.ok(
      r.missing.some((e) => e.path === entry.path),
      'the blob is among those to fetch',
    );
    t.notOk(r.begun.has(entry.path), 'not continued from a writer that was discarded');
    t.notOk(await exists(temp), 'its temp file is gone');
  },
);

t.test(
  'a temp file no entry of the bundle names goes at a resume and when one is cut',
  async (t) => {
    const stray = `blobs/sha256/${'e'.repeat(64)}`;
    const partial = await partialWith('stray', {
      [big.path]: bigBytes.subarray(0, 2 * PS),
      [stray]: Buffer.alloc(1000, 7),
    });
    const r = await prepare(partial);
    t.notOk(await exists(join(partial, stray + WRITING_SUFFIX)), 'removed at the resume');
    t.equal(r.begun.get(big.path)?.got, 2 * PS, "a listed blob's verified pieces are kept");
    await writeFile(join(partial, stray + WRITING_SUFFIX), Buffer.alloc(10));
    await leaveForResume(partial, {
      manifest: head,
      manifestBytes: p.served.manifestBytes,
      signature: p.served.signature,
    });
    t.notOk(await exists(join(partial, stray + WRITING_SUFFIX)), 'and when a staging is cut');
    t.ok(await exists(join(partial, big.path + WRITING_SUFFIX)), 'the pieced temp file stays');
  },
);

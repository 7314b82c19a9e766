// A fetch from peers cut mid-blob keeps that blob's verified pieces (issue #42): the next fetch
// hashes the temp file's whole pieces against the signed list, keeps the matching prefix (cut
// after it), announces those pieces to be served, and asks the rest with a Range. A temp file
// with a wrong piece is cut at that piece, one longer than its blob back to the blob, and
// without `pieces` (an older bundle) the temp file goes as before. Real mutual-TLS peer servers
// on 127.0.0.x; the first fetch runs in a child process killed with SIGKILL mid-blob.
import t from 'tap';
import { spawn } from 'node:child_process';
import { lstat, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import type { PeerOffer } from '@offline-bundle/agent';
import {
  EntryFiles,
  MIN_PIECE_BYTES,
  WRITING_SUFFIX,
  layoutEntries,
  parseManifestBytes,
  writeResumeMarker,
  type LayoutEntry,
} from '@offline-bundle/format';
import { preparePartial } from '../../agent/dist/load/partial-fill.js';
import { until } from '../helpers/until.js';
import { FixedDirectory, MiB, endpoint, peerWorld, treeOf } from './peers-setup.js';
import { piecesSeed } from './peers-pieces-seed.js';

const PS = MIN_PIECE_BYTES;
const w = await peerWorld(t, [6 * MiB + 4321, 2 * MiB + 7, 256 * 1024]);
const p = await piecesSeed(w);
const head = parseManifestBytes(p.served.manifestBytes);
const entries = layoutEntries(head).filter((e) => e.path !== 'oci-layout');
const big = entries.find((e) => e.size > 6 * MiB)!;
const bigBytes = await readFile(join(p.dir, big.path));
const repo = resolve(import.meta.dirname, '../..');

/** `base` with the bytes of every range it opens counted by blob. */
function counted(base: PeerOffer, served: Map<string, { start: number; bytes: number }[]>) {
  return {
    manifestDigest: base.manifestDigest,
    manifestBytes: base.manifestBytes,
    signature: base.signature,
    complete: base.complete,
    verifiedDigests: (n: number) => base.verifiedDigests(n),
    size: (d: string) => base.size(d),
    open: (d: string, start: number, end: number) => {
      served.set(d, [...(served.get(d) ?? []), { start, bytes: end - start }]);
      return base.open(d, start, end);
    },
  } satisfies PeerOffer;
}

/** The entries in place in `partial` (renamed after their hash matched). */
async function inPlace(partial: string, among = entries): Promise<LayoutEntry[]> {
  const out: LayoutEntry[] = [];
  for (const e of among)
    if (
      await lstat(join(partial, e.path)).then(
        () => true,
        () => false,
      )
    )
      out.push(e);
  return out;
}

/** The child: a fetch of the pieces bundle from one slow peer, one blob at a time (the parent kills it mid-blob). */
const CHILD = `
const a = JSON.parse(process.env.KILL_ARGS);
const agent = await import(a.repo + '/agent/dist/index.js');
const format = await import(a.repo + '/packages/format/dist/index.js');
const credentials = await agent.loadPeerCredentials(a.ca);
const trust = await format.loadTrust([a.pub]);
const directory = { approved: async () => [a.approval], peersFor: async () => [a.endpoint] };
const planSpace = async () => ({ mode: 'staged', message: 'fits (a stand-in)', figures: {} });
await agent.fetchFromPeers({ approval: a.approval, directory, credentials, trust, upgradeDir: a.upgradeDir,
  fsync: false, connectTimeoutMs: 1000, streams: 1, planSpace });
process.stdout.write('done\\n');
`;

t.test(
  'SIGKILL mid-blob, then the next fetch: the verified pieces of the cut blob are kept, announced, and only the rest is served',
  async (t) => {
    const slow = await w.server({ offer: p.served, uploadBytesPerSecond: 1 * MiB });
    const upgradeDir = join(w.b.dir, 'killed', 'upgrade');
    const partial = join(upgradeDir, '1.2.3-amd64.partial');
    const temp = join(partial, big.path + WRITING_SUFFIX);
    const pub = join(w.b.dir, 'factory.pub');
    await writeFile(pub, w.b.key.publicPem);
    const script = join(w.b.dir, 'kill-pieces-child.mjs');
    await writeFile(script, CHILD);
    const child = spawn(process.execPath, [script], {
      env: {
        ...process.env,
        KILL_ARGS: JSON.stringify({
          repo,
          ca: w.ca,
          pub,
          approval: p.approval,
          endpoint: endpoint('slow', slow.url),
          upgradeDir,
        }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += String(c)));
    child.stderr.on('data', (c: Buffer) => (out += String(c)));
    const exited = new Promise<NodeJS.Signals | null>((res) =>
      child.on('exit', (_c, signal) => res(signal)),
    );
    // three and a half pieces of the big blob on disk: the rest still arriving at 1 MiB/s
    await until(
      'the big blob half fetched',
      () =>
        stat(temp).then(
          (s) => (s.size >= 3.5 * PS ? true : undefined),
          () => undefined,
        ),
      { timeoutMs: 60_000, stepMs: 20, detail: () => out },
    );
    child.kill('SIGKILL');
    t.equal(await exited, 'SIGKILL', 'killed mid-blob');
    t.notMatch(out, /done/);
    const left = (await stat(temp)).size;
    const keep = Math.floor(left / PS) * PS;
    const whole = await inPlace(partial);
    // oci-layout in place too counts as kept (its bytes are fixed: never served)
    const ociKept = await inPlace(
      partial,
      layoutEntries(head).filter((e) => e.path === 'oci-layout'),
    );
    t.notOk(
      whole.some((e) => e.digest === big.digest),
      `the big blob was cut (${left} bytes of it in its temp file)`,
    );

    const served = new Map<string, { start: number; bytes: number }[]>();
    const seed = await w.server({ offer: counted(p.served, served) });
    const announced: number[] = [];
    const { result } = w.fetch(
      upgradeDir,
      new FixedDirectory([p.approval], [endpoint('seed', seed.url)]),
      {
        approval: p.approval,
        onPieces: (e, bytes) => {
          if (e.digest === big.digest) announced.push(bytes);
        },
      },
    );
    const r = await result;
    t.equal(r.already, false);
    const missing = entries.filter((e) => !whole.some((x) => x.digest === e.digest));
    const expected = missing.reduce((n, e) => n + e.size, 0) - keep;
    t.same(
      served.get(big.digest),
      [{ start: keep, bytes: big.size - keep }],
      `the big blob asked from its kept prefix (${keep} bytes), once`,
    );
    t.equal(
      seed.counters.bytesServed,
      expected,
      `served ${seed.counters.bytesServed} bytes: the missing files less the ${keep} bytes kept (the whole layout: ${w.layoutBytes})`,
    );
    t.equal(
      announced[0],
      keep,
      'the kept pieces are announced (served to others) before any byte came',
    );
    t.equal(
      r.keptBytes,
      [...whole, ...ociKept].reduce((n, e) => n + e.size, 0) + keep,
      'counted as kept',
    );
    const target = join(upgradeDir, '1.2.3-amd64');
    const got = await treeOf(target);
    const want = await treeOf(p.dir);
    for (const e of entries) t.equal(got[e.path], want[e.path], `${e.path} as the seed's`);
  },
);

t.test(
  "stopped mid-blob (a SIGTERM's path: Interrupted): the cut blob's temp file is left with its verified pieces, and the next fetch asks only the rest",
  async (t) => {
    const slow = await w.server({ offer: p.served, uploadBytesPerSecond: 1 * MiB });
    const upgradeDir = join(w.b.dir, 'stopped', 'upgrade');
    const temp = join(upgradeDir, '1.2.3-amd64.partial', big.path + WRITING_SUFFIX);
    const stop = new AbortController();
    const first = w.fetch(
      upgradeDir,
      new FixedDirectory([p.approval], [endpoint('slow', slow.url)]),
      {
        approval: p.approval,
        streams: 1,
        signal: stop.signal,
      },
    );
    await until(
      'two and a half pieces of the big blob',
      () =>
        stat(temp).then(
          (s) => (s.size >= 2.5 * PS ? true : undefined),
          () => undefined,
        ),
      { timeoutMs: 60_000, stepMs: 20 },
    );
    stop.abort();
    await t.rejects(first.result, { reason: 'Interrupted' }, 'cut short: kept for the next try');
    const left = (await stat(temp)).size;
    const keep = Math.floor(left / PS) * PS;
    t.ok(keep >= 2 * PS, `the temp file is left (${left} bytes)`);

    const served = new Map<string, { start: number; bytes: number }[]>();
    const seed = await w.server({ offer: counted(p.served, served) });
    await w.fetch(upgradeDir, new FixedDirectory([p.approval], [endpoint('seed', seed.url)]), {
      approval: p.approval,
    }).result;
    t.same(
      served.get(big.digest),
      [{ start: keep, bytes: big.size - keep }],
      'asked from the kept prefix on',
    );
  },
);

/** A partial of the pieces bundle under its resume marker, with `bytes` as the big blob's temp file. */
async function partialWith(name: string, bytes: Buffer, manifestBytes = p.served.manifestBytes) {
  const partial = join(w.b.dir, name, 'upgrade', '1.2.3-amd64.partial');
  await mkdir(dirname(join(partial, big.path)), { recursive: true });
  await writeResumeMarker(partial, manifestBytes);
  await writeFile(join(partial, big.path + WRITING_SUFFIX), bytes);
  return partial;
}

/** preparePartial over `partial` for `h` (default: the pieces bundle's head). */
async function prepare(partial: string, h = p.served) {
  const placed: string[] = [];
  const files = new EntryFiles(partial, false);
  const r = await preparePartial(
    files,
    partial,
    {
      manifest: parseManifestBytes(h.manifestBytes),
      manifestBytes: h.manifestBytes,
      signature: h.signature,
    },
    new AbortController().signal,
    (e) => placed.push(e.path),
  );
  const temp = join(partial, big.path + WRITING_SUFFIX);
  const onDisk = await stat(temp).then(
    (s) => s.size,
    () => undefined,
  );
  return { ...r, placed, onDisk };
}

t.test(
  'a temp file with a corrupted piece is cut at that piece; the fetch asks from there and completes',
  async (t) => {
    const bad = Buffer.from(bigBytes.subarray(0, 4 * PS));
    bad[2 * PS + 100] ^= 0xff;
    const partial = await partialWith('corrupt', bad);
    const r = await prepare(partial);
    t.equal(r.onDisk, 2 * PS, 'cut after the two pieces before the wrong one');
    t.equal(r.begun.get(big.path)?.got, 2 * PS, 'the writer goes on after them');
    t.ok(
      r.missing.some((e) => e.digest === big.digest),
      'the blob is still to fetch',
    );

    const served = new Map<string, { start: number; bytes: number }[]>();
    const seed = await w.server({ offer: counted(p.served, served) });
    // the same damage again: the fetch's own preparePartial finds it
    await writeFile(join(partial, big.path + WRITING_SUFFIX), bad);
    const { result } = w.fetch(
      dirname(partial),
      new FixedDirectory([p.approval], [endpoint('seed', seed.url)]),
      { approval: p.approval },
    );
    await result;
    t.same(
      served.get(big.digest),
      [{ start: 2 * PS, bytes: big.size - 2 * PS }],
      'asked from the wrong piece on',
    );
    const got = await treeOf(join(dirname(partial), '1.2.3-amd64'));
    t.equal(got[big.path], (await treeOf(p.dir))[big.path], "and whole, as the seed's");
  },
);

t.test(
  'a temp file longer than its blob, and one ending in a torn piece: cut back to the verified pieces',
  async (t) => {
    const longer = await prepare(
      await partialWith('longer', Buffer.concat([bigBytes, Buffer.alloc(5000, 7)])),
    );
    t.ok(
      longer.placed.includes(big.path),
      'every piece there: the blob is placed whole, not fetched',
    );
    t.notOk(longer.missing.some((e) => e.digest === big.digest));
    t.equal(longer.onDisk, undefined, 'its temp file renamed');
    t.equal(longer.keptBytes, big.size, 'counted as kept');

    const torn = await prepare(await partialWith('torn', bigBytes.subarray(0, 3 * PS + 5000)));
    t.equal(torn.onDisk, 3 * PS, 'the torn piece cut off');
    t.equal(torn.begun.get(big.path)?.got, 3 * PS);
    t.equal(torn.keptBytes, 3 * PS);
  },
);

t.test('a bundle without pieces: the temp file is not trusted and goes, as before', async (t) => {
  const partial = await partialWith(
    'no-pieces',
    bigBytes.subarray(0, 4 * PS),
    w.served.manifestBytes,
  );
  const r = await prepare(partial, w.served);
  t.equal(r.onDisk, undefined, 'removed');
  t.equal(r.begun.size, 0, 'nothing begun');
  t.ok(
    r.missing.some((e) => e.digest === big.digest),
    'fetched whole',
  );
});

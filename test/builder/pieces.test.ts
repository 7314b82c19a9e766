// `bundle create` signs a sha256 per 4 MiB piece of every blob longer than that (issue #42), so a
// node fetching from peers checks each piece on arrival. Proven here on real builds: the lists
// match the extracted blobs piece by piece, `--pieces none` leaves them out, a delta lists only
// what it carries, `bundle inspect` says so, and the frozen 0.1.0 reader still reads such a bundle.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  PIECE_BYTES,
  PieceDigests,
  pieceCount,
  pieceRange,
  type BundlePieces,
} from '@offline-bundle/format';
// @ts-expect-error: a JavaScript helper without type declarations
import { tmpdir } from '../helpers/tmp.mjs';
// @ts-expect-error: a JavaScript helper without type declarations
import { writeImageLayout } from '../helpers/images.mjs';
import { ROOT, bundle, bundleJson, hex, keygen, run, type KeyPair } from './lib.js';

type Head = Awaited<ReturnType<typeof bundleJson>> & { pieces?: BundlePieces; base?: unknown };

let dir: string;
let keys: KeyPair;
// random bytes gzip does not shrink: 9 MiB is a three-piece layer, shared by both releases
const SHARED = randomBytes(9 << 20);

/** Release `v`'s layout: image a (the shared large layer), b (a large layer of its own) and c (small). */
async function layout(v: string, ownBytes: number): Promise<string> {
  const l = path.join(dir, `layout-${v}`);
  const image = (tag: string, files: Record<string, string | Buffer>) =>
    writeImageLayout(l, {
      tag,
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [files] }],
    });
  await image('a', { 'shared.bin': SHARED });
  await image('b', { 'own.bin': randomBytes(ownBytes) });
  await image('c', { 'c.txt': `small ${v}` });
  return l;
}

function create(v: string, out: string, extra: string[] = [], env: Record<string, string> = {}) {
  const l = path.join(dir, `layout-${v}`);
  return bundle(
    [
      'create',
      '--quiet',
      '--version',
      v,
      '--key',
      keys.key,
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      path.join(dir, out),
      '--image',
      `oci:${l}:a=quay.io/acme/a:v1`,
      '--image',
      `oci:${l}:b=quay.io/acme/b:${v}`,
      '--image',
      `oci:${l}:c=quay.io/acme/c:${v}`,
      ...extra,
    ],
    { env },
  );
}

t.before(async () => {
  dir = await tmpdir(t, 'ob-builder-pieces-');
  keys = await keygen(dir);
  await layout('1.1.0', 5 << 20);
  await layout('1.2.0', 6 << 20);
  const r = await create('1.1.0', 'r1.bundle');
  if (r.code !== 0) throw new Error(r.stderr);
});

t.test(
  'by default: 4 MiB pieces of every blob longer than one, their digests those of the extracted bytes',
  async (t) => {
    const m = (await bundleJson(path.join(dir, 'r1.bundle'))) as Head;
    t.ok(m.pieces, 'bundle.json carries pieces');
    t.equal(m.pieces!.size, PIECE_BYTES, 'of 4 MiB');
    const long = m.blobs.filter((b) => b.size > PIECE_BYTES);
    t.equal(long.length, 2, "two layers are longer than a piece (the shared one and b's)");
    t.same(
      Object.keys(m.pieces!.blobs).sort(),
      long.map((b) => b.digest).sort(),
      'exactly those are listed',
    );
    const keysInOrder = Object.keys(m);
    t.equal(keysInOrder[keysInOrder.indexOf('signer') - 1], 'pieces', 'pieces just before signer');

    const out = path.join(dir, 'r1-layout');
    const x = await bundle([
      'extract',
      path.join(dir, 'r1.bundle'),
      out,
      '--key',
      keys.pub,
      '--quiet',
    ]);
    t.equal(x.code, 0, x.stderr);
    const digests = new PieceDigests(m.pieces!);
    for (const b of long) {
      const bytes = await readFile(path.join(out, 'blobs', 'sha256', hex(b.digest)));
      const n = pieceCount(bytes.length, digests.size);
      t.equal(
        Buffer.from(m.pieces!.blobs[b.digest]!, 'base64').length,
        n * 32,
        `${b.digest.slice(7, 19)}: ${n} digests`,
      );
      let good = 0;
      for (let i = 0; i < n; i++) {
        const { start, end } = pieceRange(bytes.length, digests.size, i);
        if (digests.matches(b.digest, i, bytes.subarray(start, end))) good++;
      }
      t.equal(good, n, `${b.digest.slice(7, 19)}: every piece matches its signed digest`);
    }

    const text = (await bundle(['inspect', path.join(dir, 'r1.bundle')])).stdout;
    t.match(text, /\npieces: +4 MiB each, digests of 2 blobs/, 'inspect says so');
    const json = JSON.parse(
      (await bundle(['inspect', '--json', path.join(dir, 'r1.bundle')])).stdout,
    );
    t.same(json.pieces, { pieceBytes: PIECE_BYTES, blobs: 2 }, 'and inspect --json');
  },
);

t.test(
  'the lists are worked out as blobs arrive and kept in the cache; a later build reads them, a damaged or missing one is made again',
  async (t) => {
    const m = (await bundleJson(path.join(dir, 'r1.bundle'))) as Head;
    const factOf = (d: string) =>
      path.join(dir, 'cache', 'facts', `pieces-${PIECE_BYTES}`, 'sha256', hex(d));
    const long = Object.keys(m.pieces!.blobs).sort();
    for (const d of long) {
      const [list, check, end] = (await readFile(factOf(d), 'latin1')).split('\n');
      t.equal(
        list,
        m.pieces!.blobs[d],
        `${d.slice(7, 19)}: the cold build kept the list it signed`,
      );
      t.match(check, /^[0-9a-f]{64}$/, 'with its check line');
      t.equal(end, '', 'and nothing else');
    }
    const times = path.join(dir, 'warm-times.json');
    const warm = await create('1.1.0', 'r1-warm.bundle', [], { BUNDLE_PHASE_TIMES: times });
    t.equal(warm.code, 0, warm.stderr);
    t.same(
      ((await bundleJson(path.join(dir, 'r1-warm.bundle'))) as Head).pieces,
      m.pieces,
      'a warm build signs the same lists',
    );
    t.notOk(
      JSON.parse(await readFile(times, 'utf8')).phases['piece digests: its thread'],
      'read from the cache: no blob hashed for them',
    );
    // one fact damaged (a digest changed, still canonical base64), another gone
    const damaged = await readFile(factOf(long[0]!), 'latin1');
    await writeFile(factOf(long[0]!), (damaged[0] === 'A' ? 'B' : 'A') + damaged.slice(1));
    await rm(factOf(long[1]!));
    const again = await create('1.1.0', 'r1-again.bundle', [], { BUNDLE_PHASE_TIMES: times });
    t.equal(again.code, 0, again.stderr);
    t.same(
      ((await bundleJson(path.join(dir, 'r1-again.bundle'))) as Head).pieces,
      m.pieces,
      'the damaged one refused, both hashed from the cached files: the true lists signed',
    );
    t.equal(
      JSON.parse(await readFile(times, 'utf8')).phases['piece digests: its thread']?.count,
      2,
      'two files hashed on the thread',
    );
    for (const d of long)
      t.equal(
        (await readFile(factOf(d), 'latin1')).split('\n')[0],
        m.pieces!.blobs[d],
        `${d.slice(7, 19)}: kept again`,
      );
  },
);

t.test(
  '--pieces none: no pieces in bundle.json, inspect says none; another word is refused',
  async (t) => {
    const r = await create('1.1.0', 'r1-none.bundle', ['--pieces', 'none']);
    t.equal(r.code, 0, r.stderr);
    const m = (await bundleJson(path.join(dir, 'r1-none.bundle'))) as Head;
    t.notOk('pieces' in m, 'no pieces field');
    t.match(
      (await bundle(['inspect', path.join(dir, 'r1-none.bundle')])).stdout,
      /\npieces: +none/,
    );
    t.equal(
      JSON.parse((await bundle(['inspect', '--json', path.join(dir, 'r1-none.bundle')])).stdout)
        .pieces,
      null,
    );
    const bad = await create('1.1.0', 'r1-bad.bundle', ['--pieces', 'off']);
    t.equal(bad.code, 2, 'a usage error');
    t.match(bad.stderr, /--pieces.*must be on or none/);
    // the -f file's `pieces` is the same choice
    const l = path.join(dir, 'layout-1.1.0');
    const file = path.join(dir, 'bundle.yaml');
    await writeFile(
      file,
      `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nversion: "1.1.0"\npieces: none\nimages:\n${['a=quay.io/acme/a:v1', 'c=quay.io/acme/c:1.1.0'].map((i) => `  - "oci:${l}:${i}"\n`).join('')}`,
    );
    const f = await bundle([
      'create',
      '--quiet',
      '-f',
      file,
      '--key',
      keys.key,
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      path.join(dir, 'r1-file.bundle'),
    ]);
    t.equal(f.code, 0, f.stderr);
    t.notOk(
      'pieces' in (await bundleJson(path.join(dir, 'r1-file.bundle'))),
      'pieces: none in the -f file',
    );
    const help = (await bundle(['create', '--help'])).stdout.replace(/\s+/g, ' ');
    t.match(help, /--pieces <mode> digests per 4 MiB piece .* on \(default\) or none/);
  },
);

t.test('a delta lists the pieces of the blobs it carries, not those its base holds', async (t) => {
  const r = await create('1.2.0', 'r2-delta.bundle', ['--base', path.join(dir, 'r1.bundle')]);
  t.equal(r.code, 0, r.stderr);
  const m = (await bundleJson(path.join(dir, 'r2-delta.bundle'))) as Omit<Head, 'blobs'> & {
    pieces?: BundlePieces;
    blobs: { digest: string; size: number; fromBase?: true }[];
  };
  const carriedLong = m.blobs.filter((b) => !b.fromBase && b.size > PIECE_BYTES);
  const baseLong = m.blobs.filter((b) => b.fromBase && b.size > PIECE_BYTES);
  t.equal(carriedLong.length, 1, "b's new layer is carried");
  t.equal(baseLong.length, 1, 'the shared layer comes from the base');
  t.same(
    Object.keys(m.pieces!.blobs),
    carriedLong.map((b) => b.digest),
    'only the carried one is listed',
  );
  const keysInOrder = Object.keys(m);
  t.same(
    keysInOrder.slice(keysInOrder.indexOf('base'), keysInOrder.indexOf('base') + 3),
    ['base', 'pieces', 'signer'],
    'after base, before signer',
  );
  t.equal(
    (await bundle(['verify', '--key', keys.pub, path.join(dir, 'r2-delta.bundle')])).code,
    0,
    'it verifies',
  );
});

t.test(
  'the 0.1.0 reader (frozen) verifies a format 2 bundle with pieces: older readers ignore the field',
  async (t) => {
    const r = await create('1.1.0', 'r1-v2.bundle', ['--format-version', '2']);
    t.equal(r.code, 0, r.stderr);
    t.ok(((await bundleJson(path.join(dir, 'r1-v2.bundle'))) as Head).pieces, 'it carries pieces');
    const frozen = await run(process.execPath, [
      path.join(ROOT, 'test', 'fixtures', 'frozen-reader', 'reader-0b1c790.mjs'),
      'verify',
      path.join(dir, 'r1-v2.bundle'),
      keys.pub,
    ]);
    t.match(
      JSON.parse(frozen.stdout),
      { ok: true, schemaVersion: 2, images: 3 },
      `the old reader verifies it ${frozen.stderr}`,
    );
  },
);

// tier: unit
// Deltas (#27): a bundle whose signed bundle.json lists every blob, names its base by the digest
// of the base's bundle.json, and marks the blobs it does not carry. It verifies on its own (every
// carried blob checked); extracting it fills the rest from a base source, each blob held to the
// delta's own signed digest; without a base, or with a damaged one, nothing is left behind.
import t from 'tap';
import { createReadStream } from 'node:fs';
import { appendFile, cp, mkdir, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  BUNDLE_JSON,
  FormatError,
  RESUME_MARKER,
  SIGNATURE,
  baseEntries,
  blobPath,
  bundleIdentity,
  deltaFacts,
  extractBundle,
  readHeader,
  verifyBundle,
  withBundleFile,
  writeBundle,
  type WriteBundleInput,
} from '@offline-bundle/format';
import { BundleFileStore, catalogOf } from '@offline-bundle/registry';
import {
  assertRejected,
  craft,
  entryNamed,
  flipByte,
  makeBundle,
  readEntries,
  rejectsWith,
  resign,
  type MadeBundle,
} from './craft.js';

let made: MadeBundle;
let baseLayout: string;

t.before(async () => {
  made = await makeBundle(t, { layerSizes: [3000, 70_000, 200_000, 5000] });
  baseLayout = path.join(made.dir, 'base-layout');
  await withBundleFile(made.path, (s) =>
    extractBundle(s, baseLayout, { trust: made.trust, fsync: false }),
  );
});

/** Two of the layers come from the base: the first (3000 bytes) and the largest (200 000). */
const shared = () => new Set([made.blobs[2]!.digest, made.blobs[4]!.digest]);

async function baseRef() {
  const head = await withBundleFile(made.path, (s) => readHeader(s));
  return { bundleJson: bundleIdentity(head.manifestBytes), name: 'test', version: '1.2.3' };
}

async function deltaInput(
  name: string,
  change: Partial<WriteBundleInput> = {},
): Promise<WriteBundleInput> {
  const m = made.written.manifest;
  return {
    release: { ...m.release, version: '1.2.4', upgradeFrom: ['1.2.3'] },
    images: made.images,
    index: made.index,
    blobs: made.blobs.map(({ digest, size, mediaType, path }) => ({
      digest,
      size,
      mediaType,
      path,
    })),
    imageStoreBytes: 1000,
    key: made.key.privateKey,
    output: path.join(made.dir, name),
    createdAt: m.creator.createdAt,
    tool: { name: m.creator.tool, version: m.creator.version },
    base: { ref: await baseRef(), digests: shared() },
    ...change,
  };
}

/** Opens base blobs from a layout directory, as the agent opens them from a kept layout. */
const fromDir = (dir: string) => ({
  open: async (e: { path: string }) => createReadStream(path.join(dir, e.path)),
});
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

t.test(
  'a delta lists every blob, marks those of the base, and carries only the others',
  async (t) => {
    const w = await writeBundle(await deltaInput('delta.bundle'));
    const m = w.manifest;
    t.equal(m.schemaVersion, 3, 'unasked, the version that reads deltas');
    t.same(m.base, await baseRef(), 'names its base by the digest of its bundle.json');
    t.same(
      m.blobs.map((b) => b.digest).sort(),
      made.blobs.map((b) => b.digest).sort(),
      'every blob listed',
    );
    t.same(
      m.blobs
        .filter((b) => b.fromBase)
        .map((b) => b.digest)
        .sort(),
      [...shared()].sort(),
      'the shared ones marked fromBase',
    );
    t.equal(
      m.totals.layoutBytes,
      made.written.manifest.totals.layoutBytes,
      'layoutBytes counts the filled blobs too: what staging writes',
    );
    const names = (await readEntries(path.join(made.dir, 'delta.bundle'))).map(
      (e) => e.header.name,
    );
    for (const d of shared())
      t.notOk(names.includes(blobPath(d)), `${d.slice(7, 19)} is not in the archive`);
    t.equal(names.length, 4 + made.blobs.length - 2, 'the rest is');
    const full = (await stat(made.path)).size;
    t.ok(w.fileSize < full - 200_000, `smaller by the shared bytes (${w.fileSize} vs ${full})`);
    const facts = deltaFacts(m)!;
    t.match(facts, {
      carriedBlobs: made.blobs.length - 2,
      totalBlobs: made.blobs.length,
      baseBytes: 203_000,
    });
    const v = await withBundleFile(path.join(made.dir, 'delta.bundle'), (s) =>
      verifyBundle(s, { trust: made.trust }),
    );
    t.equal(v.fileDigest, w.fileDigest, 'it verifies on its own: every carried blob checked');
    t.same(
      baseEntries(v.manifest)
        .map((e) => e.digest)
        .sort(),
      [...shared()].sort(),
      'and says which blobs it needs from the base',
    );
  },
);

t.test('a delta is not served from its file: its base blobs are not in it', async (t) => {
  await withBundleFile(path.join(made.dir, 'delta.bundle'), async (s) => {
    const { manifest } = await readHeader(s);
    await t.rejects(BundleFileStore.open(s, manifest, catalogOf(manifest)), {
      code: 'LAYOUT_INVALID',
      message:
        /is a delta against 1\.2\.3: the blobs it takes from there are not in it, so it cannot be served from its file/,
    });
  });
});

t.test('version 2 cannot carry a delta: refused by name before anything is written', async (t) => {
  const err = await rejectsWith(
    t,
    writeBundle(await deltaInput('v2-delta.bundle', { schemaVersion: 2 })),
    'UNSUPPORTED_VERSION',
    'version 2',
  );
  t.match(
    err?.message,
    /^a delta against a base bundle needs format version 3 or later \(bundle-agent 0\.2\.0 or later\); format version 2 cannot carry it/,
  );
  t.notOk(await exists(path.join(made.dir, 'v2-delta.bundle')));
});

t.test(
  'extracted with its base, a delta is the whole layout; without one, nothing is left',
  async (t) => {
    const file = path.join(made.dir, 'delta.bundle');
    const none = path.join(made.dir, 'no-base');
    const err = await rejectsWith(
      t,
      withBundleFile(file, (s) => extractBundle(s, none, { trust: made.trust, fsync: false })),
      'BASE_MISSING',
      'no base',
    );
    t.match(
      err?.message,
      /^this bundle is a delta against test 1\.2\.3 \(sha256:[0-9a-f]{64}\): 2 of its 6 blobs are not in it; extract the full bundle instead$/,
    );
    t.notOk(await exists(none), 'no target');
    t.notOk(await exists(`${none}.partial`), 'no partial staging');

    const dir = path.join(made.dir, 'filled');
    const verified: string[] = [];
    await withBundleFile(file, (s) =>
      extractBundle(s, dir, {
        trust: made.trust,
        fsync: false,
        base: fromDir(baseLayout),
        onVerified: (e) => verified.push(e.digest),
      }),
    );
    for (const b of made.blobs)
      t.ok(
        (await readFile(path.join(dir, blobPath(b.digest)))).equals(b.data),
        `${b.digest.slice(7, 19)} in place`,
      );
    for (const d of shared())
      t.ok(
        verified.includes(d),
        `filled ${d.slice(7, 19)} reported verified (pulls may start on it)`,
      );
    t.same(
      (await readdir(path.join(dir, 'blobs', 'sha256'))).length,
      made.blobs.length,
      'nothing else',
    );
  },
);

t.test(
  'a resumed staging of a delta fills its base blobs again, over what the cut left',
  async (t) => {
    const file = path.join(made.dir, 'delta.bundle');
    const out = path.join(made.dir, 'resumed');
    const partial = `${out}.partial`;
    const head = await withBundleFile(file, (s) => readHeader(s));
    await mkdir(path.join(partial, 'blobs', 'sha256'), { recursive: true });
    await writeFile(
      path.join(partial, RESUME_MARKER),
      JSON.stringify({ bundleJson: bundleIdentity(head.manifestBytes) }) + '\n',
    );
    const [first, second] = [...shared()];
    await writeFile(path.join(partial, `${blobPath(first!)}.writing`), 'cut short');
    await writeFile(path.join(partial, blobPath(second!)), 'a kept copy that no longer matches');
    const signed = { keys: made.trust.keys! };
    const v = await withBundleFile(file, (s) =>
      extractBundle(s, out, {
        trust: signed,
        fsync: false,
        resume: true,
        base: fromDir(baseLayout),
      }),
    );
    t.ok(v.resumed, 'resumed');
    for (const b of made.blobs)
      t.ok(
        (await readFile(path.join(out, blobPath(b.digest)))).equals(b.data),
        `${b.digest.slice(7, 19)} in place`,
      );
    t.notOk(await exists(partial), 'the partial directory went into place');
  },
);

t.test(
  'a damaged or longer base blob refuses the delta (BASE_CORRUPT) and leaves nothing',
  async (t) => {
    const file = path.join(made.dir, 'delta.bundle');
    const target = [...shared()][1]!;
    for (const [what, damage] of [
      ['a flipped byte', async (p: string) => writeFile(p, flipByte(await readFile(p), 100))],
      ['a byte too many', (p: string) => appendFile(p, 'x')],
      ['a byte too few', async (p: string) => writeFile(p, (await readFile(p)).subarray(1))],
    ] as const) {
      const bad = path.join(made.dir, `bad-base-${what.replace(/\W+/g, '-')}`);
      await cp(baseLayout, bad, { recursive: true });
      await damage(path.join(bad, blobPath(target)));
      const out = path.join(made.dir, `out-${what.replace(/\W+/g, '-')}`);
      const err = await rejectsWith(
        t,
        withBundleFile(file, (s) =>
          extractBundle(s, out, { trust: made.trust, fsync: false, base: fromDir(bad) }),
        ),
        'BASE_CORRUPT',
        what,
      );
      t.match(
        err?.message,
        /^this update needs 1\.2\.3 on this node, and its copy here is damaged|of the base, as this node holds it, is longer than/,
        what,
      );
      t.notOk(await exists(out), `${what}: no target`);
      t.notOk(await exists(`${out}.partial`), `${what}: no partial staging`);
    }
  },
);

t.test('base fields are untrusted input: each wrong one refused, signed or not', async (t) => {
  const entries = await readEntries(path.join(made.dir, 'delta.bundle'));
  const marked = (doc: any) => doc.blobs.findIndex((b: any) => b.fromBase);
  const carried = (doc: any) =>
    doc.blobs.findIndex((b: any) => !b.fromBase && b.mediaType.includes('layer'));
  const cases: [string, (doc: any) => unknown, RegExp | string][] = [
    [
      'fromBase without a base',
      (d) => {
        delete d.base;
        return d;
      },
      'is marked fromBase but bundle.json names no base',
    ],
    [
      'fromBase false',
      (d) => {
        d.blobs[marked(d)].fromBase = false;
        return d;
      },
      'fromBase must be true or absent',
    ],
    [
      'base not an object',
      (d) => {
        d.base = 'test 1.2.3';
        return d;
      },
      'base must be an object',
    ],
    [
      'base.bundleJson not a digest',
      (d) => {
        d.base.bundleJson = 'sha256:1234';
        return d;
      },
      'base.bundleJson must be a sha256 digest',
    ],
    [
      'base.version a path',
      (d) => {
        d.base.version = '../../etc';
        return d;
      },
      'base.version must be letters',
    ],
    [
      'base.version too long',
      (d) => {
        d.base.version = '1'.repeat(129);
        return d;
      },
      'base.version must be a non-empty string of at most 128',
    ],
    [
      'base.name too long',
      (d) => {
        d.base.name = 'n'.repeat(1025);
        return d;
      },
      'base.name must be a non-empty string',
    ],
    [
      'base.name missing',
      (d) => {
        delete d.base.name;
        return d;
      },
      'base.name must be a non-empty string',
    ],
    [
      'base is this very release',
      (d) => {
        d.base.version = d.release.version;
        return d;
      },
      "is this bundle's own version",
    ],
    [
      'base in a version 2 bundle',
      (d) => ({ ...d, schemaVersion: 2, mediaType: 'application/vnd.offline-bundle.v2+json' }),
      'base is a field of version 3 and later, not of version 2',
    ],
  ];
  for (const [what, edit, message] of cases) {
    const file = path.join(made.dir, `tampered-${what.replace(/\W+/g, '-')}.bundle`);
    await craft(file, resign(entries, made.key.privateKey, { json: edit }));
    const err = await rejectsWith(
      t,
      withBundleFile(file, (s) => verifyBundle(s, { trust: made.trust })),
      'INVALID_MANIFEST',
      what,
    );
    t.match(err?.message, message, what);
  }
  // the listing and the archive disagree: a carried blob marked fromBase, a left-out one not marked
  const extra = path.join(made.dir, 'tampered-carried-marked.bundle');
  await craft(
    extra,
    resign(entries, made.key.privateKey, {
      json: (d: any) => {
        d.blobs[carried(d)].fromBase = true;
        return d;
      },
    }),
  );
  await assertRejected(t, extra, made.trust, ['UNEXPECTED_ENTRY', 'BASE_MISSING']);
  await rejectsWith(
    t,
    withBundleFile(extra, (s) => verifyBundle(s, { trust: made.trust })),
    'UNEXPECTED_ENTRY',
    'a carried blob marked fromBase is an entry the listing does not expect',
  );
  const missing = path.join(made.dir, 'tampered-unmarked.bundle');
  await craft(
    missing,
    resign(entries, made.key.privateKey, {
      json: (d: any) => {
        delete d.blobs[marked(d)].fromBase;
        return d;
      },
    }),
  );
  await rejectsWith(
    t,
    withBundleFile(missing, (s) => verifyBundle(s, { trust: made.trust })),
    'MISSING_ENTRY',
    'a left-out blob not marked fromBase is missing',
  );
  // and unsigned changes are refused as any: the signature covers the base fields
  const unsigned = entries.map((e) =>
    e.header.name === BUNDLE_JSON
      ? { ...e, data: Buffer.from(e.data.toString().replace('"1.2.3"', '"1.2.2"')) }
      : e,
  );
  t.ok(entryNamed(unsigned, SIGNATURE));
  const forged = path.join(made.dir, 'forged-base.bundle');
  await craft(forged, unsigned);
  t.ok(
    await withBundleFile(forged, (s) => verifyBundle(s, { trust: made.trust })).then(
      () => false,
      (e: FormatError) => e.code === 'BAD_SIGNATURE',
    ),
    'a base changed after signing: BAD_SIGNATURE',
  );
});

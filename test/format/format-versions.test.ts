// Bundles old agents read (#27): what `--format-version 2` writes is read by the previous
// release's own reader, frozen from commit 0b1c790 (test/fixtures/frozen-reader, built by
// scripts/freeze-reader.mjs), which refuses version 3 with its own UNSUPPORTED_VERSION; this
// reader reads both, version 3 with its blobs in any order its bundle.json lists.
import t from 'tap';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  BUNDLE_JSON,
  BundleRandomReader,
  FORMAT_VERSIONS,
  FormatError,
  INDEX_JSON,
  OCI_LAYOUT,
  SCHEMA_VERSION,
  SIGNATURE,
  WRITABLE_VERSIONS,
  blobPath,
  extractBundle,
  readHeader,
  verifyBundle,
  withBundleFile,
  writeBundle,
  type WriteBundleInput,
} from '@offline-bundle/format';
import { makeBundle, makeKey, readEntries, writeKeyFiles, type MadeBundle } from './craft.js';
import { ROOT, bundle, run } from '../builder/lib.js';

const FROZEN = path.join(ROOT, 'test', 'fixtures', 'frozen-reader', 'reader-0b1c790.mjs');

interface Frozen {
  code: number | null;
  out: any;
  stderr: string;
}

/** Runs the frozen file with node; its one line of JSON parsed. */
async function frozen(args: string[]): Promise<Frozen> {
  const r = await run(process.execPath, [FROZEN, ...args]);
  let out: unknown;
  try {
    out = JSON.parse(r.stdout);
  } catch {
    out = { unparsed: r.stdout };
  }
  return { code: r.code, out, stderr: r.stderr };
}

/** "0.10.2" against "0.2.0", by number. */
function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++)
    if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

let made: MadeBundle;
let keyPath: string;
let pubPath: string;

t.before(async () => {
  // Ed25519: deterministic signatures, so two writers of the same input give the same bytes
  made = await makeBundle(t, { key: makeKey('ed25519'), layerSizes: [3000, 70_000, 200_000] });
  ({ keyPath, pubPath } = await writeKeyFiles(made.dir, made.key));
});

/** The input makeBundle wrote, to write again with `change`. */
function inputOf(name: string, change: Partial<WriteBundleInput> = {}): WriteBundleInput {
  const m = made.written.manifest;
  return {
    release: m.release,
    images: made.images,
    index: made.index,
    blobs: made.blobs.map(({ digest, size, mediaType, path }) => ({
      digest,
      size,
      mediaType,
      path,
    })),
    imageStoreBytes: m.totals.imageStoreBytes,
    key: made.key.privateKey,
    output: path.join(made.dir, name),
    createdAt: m.creator.createdAt,
    tool: { name: m.creator.tool, version: m.creator.version },
    ...change,
  };
}

const verifyHere = (file: string) =>
  withBundleFile(file, (s) => verifyBundle(s, { trust: made.trust }));
const sortedDigests = () => made.blobs.map((b) => b.digest).sort();
/** The blobs in an order that is not by digest: the reverse of it. */
const pullOrder = () => [...made.blobs].sort((a, b) => (a.digest < b.digest ? 1 : -1));

t.test(
  'one table of versions: each with its media type and the oldest agent that reads it',
  async (t) => {
    t.ok(WRITABLE_VERSIONS.includes(SCHEMA_VERSION), 'the current version is writable');
    t.ok(WRITABLE_VERSIONS.includes(SCHEMA_VERSION - 1), 'and the previous one');
    const versions = Object.keys(FORMAT_VERSIONS)
      .map(Number)
      .sort((a, b) => a - b);
    t.same(
      versions,
      versions.map((_, i) => i + 1),
      'versions 1..N, none skipped',
    );
    for (const v of versions)
      t.equal(
        FORMAT_VERSIONS[v]!.mediaType,
        `application/vnd.offline-bundle.v${v}+json`,
        `version ${v}'s media type`,
      );
    for (const v of versions.slice(1))
      t.ok(
        compareVersions(FORMAT_VERSIONS[v]!.minReader, FORMAT_VERSIONS[v - 1]!.minReader) >= 0,
        `version ${v} needs no older agent than version ${v - 1}`,
      );
  },
);

t.test('the frozen reader is the previous release, and the table says what it reads', async (t) => {
  const about = await frozen(['about']);
  t.equal(about.code, 0, about.stderr);
  t.equal(about.out.commit, '0b1c790');
  t.ok(
    about.out.readsUpTo < SCHEMA_VERSION,
    'it predates the current version: the test has something to refuse',
  );
  // "needs bundle-agent ≥ X" holds for the one agent we can run: it reads exactly the versions whose X it meets
  for (const [v, f] of Object.entries(FORMAT_VERSIONS)) {
    t.equal(
      compareVersions(about.out.version, f.minReader) >= 0,
      Number(v) <= about.out.readsUpTo,
      `version ${v} (needs ${f.minReader}) against agent ${about.out.version}, which reads up to ${about.out.readsUpTo}`,
    );
  }
});

t.test('--format-version 2: the previous release reads it, this one too', async (t) => {
  const w = await writeBundle(inputOf('v2.bundle', { schemaVersion: 2 }));
  t.equal(w.manifest.schemaVersion, 2);
  t.equal(w.manifest.mediaType, FORMAT_VERSIONS[2]!.mediaType);
  t.same(
    w.manifest.blobs.map((b) => b.digest),
    sortedDigests(),
    'blobs by digest, as version 2 requires',
  );
  const old = await frozen(['verify', path.join(made.dir, 'v2.bundle'), pubPath]);
  t.equal(old.code, 0, `the frozen reader exits 0: ${old.stderr}`);
  t.same(old.out, {
    ok: true,
    schemaVersion: 2,
    images: 1,
    blobs: made.blobs.length,
    fileDigest: w.fileDigest,
  });
  t.equal(
    (await verifyHere(path.join(made.dir, 'v2.bundle'))).manifest.schemaVersion,
    2,
    'and this reader',
  );
});

t.test('version 2 is byte for byte what 0b1c790 wrote from the same input', async (t) => {
  const ours = await writeBundle(inputOf('ours-v2.bundle', { schemaVersion: 2 }));
  const spec = path.join(made.dir, 'spec.json');
  const indexPath = path.join(made.dir, 'index.json.in');
  await writeFile(indexPath, made.index);
  const { index: _index, key: _key, ...rest } = inputOf('theirs-v2.bundle');
  await writeFile(spec, JSON.stringify({ ...rest, indexPath, keyPath }));
  const theirs = await frozen(['write', spec]);
  t.equal(theirs.code, 0, theirs.stderr);
  t.equal(theirs.out.fileDigest, ours.fileDigest, 'the same file digest');
  t.ok(
    (await readFile(path.join(made.dir, 'theirs-v2.bundle'))).equals(
      await readFile(path.join(made.dir, 'ours-v2.bundle')),
    ),
    'the same bytes',
  );
});

t.test(
  'unasked, the writer picks the oldest version that carries the bundle: 2, which the previous release reads; 3 only for pull order',
  async (t) => {
    const plain = await writeBundle(inputOf('default.bundle'));
    t.equal(plain.manifest.schemaVersion, 2, 'digest order: version 2');
    t.equal(
      (await frozen(['verify', path.join(made.dir, 'default.bundle'), pubPath])).code,
      0,
      'the previous release reads the default',
    );
    const order = pullOrder();
    const pulled = await writeBundle(
      inputOf('default-pull.bundle', {
        blobOrder: 'listed',
        blobs: order.map(({ digest, size, mediaType, path }) => ({
          digest,
          size,
          mediaType,
          path,
        })),
      }),
    );
    t.equal(pulled.manifest.schemaVersion, 3, 'pull order: version 3');
  },
);

t.test(
  `version ${SCHEMA_VERSION} (the newest): this reader reads it; the previous release refuses it by name`,
  async (t) => {
    const file = path.join(made.dir, 'current.bundle');
    const w = await writeBundle(inputOf('current.bundle', { schemaVersion: SCHEMA_VERSION }));
    t.equal(w.manifest.schemaVersion, SCHEMA_VERSION);
    t.equal(w.manifest.mediaType, FORMAT_VERSIONS[SCHEMA_VERSION]!.mediaType);
    t.equal((await verifyHere(file)).fileDigest, w.fileDigest);
    const old = await frozen(['verify', file, pubPath]);
    t.equal(old.code, 1, 'a refusal, not a crash');
    t.equal(old.out.ok, false);
    t.equal(old.out.code, 'UNSUPPORTED_VERSION', old.out.message);
    t.match(old.out.message, `schemaVersion ${SCHEMA_VERSION}`);
    t.notMatch(old.out.message, /\n/, 'one line');
  },
);

t.test(
  'version 3 with its blobs in pull order: read here, refused (as a newer version, not as altered) by the previous release',
  async (t) => {
    const file = path.join(made.dir, 'pull-order.bundle');
    const order = pullOrder();
    const w = await writeBundle(
      inputOf('pull-order.bundle', {
        schemaVersion: 3,
        blobOrder: 'listed',
        blobs: order.map(({ digest, size, mediaType, path }) => ({
          digest,
          size,
          mediaType,
          path,
        })),
      }),
    );
    t.same(
      w.manifest.blobs.map((b) => b.digest),
      order.map((b) => b.digest),
      'bundle.json lists them as given',
    );
    t.notSame(
      order.map((b) => b.digest),
      sortedDigests(),
      'which is not digest order',
    );
    const names = (await readEntries(file)).map((e) => e.header.name);
    t.same(
      names,
      [BUNDLE_JSON, SIGNATURE, OCI_LAYOUT, INDEX_JSON, ...order.map((b) => blobPath(b.digest))],
      'the archive holds them in that order',
    );

    t.equal((await verifyHere(file)).fileDigest, w.fileDigest, 'the streaming reader verifies it');
    await withBundleFile(file, async (s) => {
      const reader = await BundleRandomReader.open(s, (await readHeader(s)).manifest);
      for (const b of order)
        t.ok(
          (await reader.readVerified(blobPath(b.digest))).equals(await readFile(b.path)),
          `the random reader reads ${b.digest.slice(7, 19)}`,
        );
    });
    const dir = path.join(made.dir, 'pull-order-layout');
    await withBundleFile(file, (s) => extractBundle(s, dir, { trust: made.trust }));
    t.same(
      (await readdir(path.join(dir, 'blobs', 'sha256'))).sort(),
      sortedDigests().map((d) => d.slice(7)),
      'extract writes every blob',
    );

    const old = await frozen(['verify', file, pubPath]);
    t.equal(old.code, 1, 'a refusal, not a crash');
    t.equal(old.out.code, 'UNSUPPORTED_VERSION', old.out.message);
  },
);

t.test(
  'a delta (blobs from a base): read here, refused by the previous release as a newer version, not as a bundle with blobs missing',
  async (t) => {
    const file = path.join(made.dir, 'delta.bundle');
    const shared = new Set([made.blobs[2]!.digest]);
    const base = {
      bundleJson: `sha256:${'0'.repeat(64)}`,
      name: made.written.manifest.release.name,
      version: '1.2.2',
    };
    const w = await writeBundle(inputOf('delta.bundle', { base: { ref: base, digests: shared } }));
    t.equal(w.manifest.schemaVersion, 3, 'unasked, a delta is version 3');
    t.equal((await verifyHere(file)).fileDigest, w.fileDigest, 'this reader verifies it');
    const old = await frozen(['verify', file, pubPath]);
    t.equal(old.code, 1, 'a refusal, not a crash');
    t.equal(old.out.code, 'UNSUPPORTED_VERSION', old.out.message);
  },
);

t.test('what version 2 cannot carry is refused by name before anything is written', async (t) => {
  const cases: [string, Partial<WriteBundleInput>, RegExp][] = [
    [
      'blobs in pull order with version 2',
      { schemaVersion: 2, blobOrder: 'listed' },
      /^blobs in pull order needs format version 3 or later \(bundle-agent \S+ or later\); format version 2 cannot carry it/,
    ],
    [
      'version 1',
      { schemaVersion: 1 },
      /^format version 1 cannot be written; this tool writes 2, 3/,
    ],
    [
      'a version newer than this tool',
      { schemaVersion: SCHEMA_VERSION + 1 },
      new RegExp(
        `^format version ${SCHEMA_VERSION + 1} cannot be written; this tool writes ${WRITABLE_VERSIONS.join(', ')}`,
      ),
    ],
  ];
  for (const [what, change, message] of cases) {
    const name = `refused-${what.replace(/\W+/g, '-')}.bundle`;
    const err = await writeBundle(inputOf(name, change)).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof FormatError, `${what}: a FormatError`, { found: err });
    t.equal((err as FormatError).code, 'UNSUPPORTED_VERSION', what);
    t.match((err as FormatError).message, message, what);
    t.notMatch((err as FormatError).message, /\n/, `${what}: one line`);
    t.equal(
      await stat(path.join(made.dir, name)).then(
        () => true,
        () => false,
      ),
      false,
      `${what}: no file`,
    );
  }
  t.same(
    (await readdir(made.dir)).filter((f) => f.endsWith('.tmp')),
    [],
    'no temp file left',
  );
});

t.test(
  'bundle create --format-version, -f formatVersion and bundle inspect, through the CLI',
  async (t) => {
    const layout = path.join(made.dir, 'src-layout');
    await withBundleFile(made.path, (s) => extractBundle(s, layout, { trust: made.trust }));
    const cache = path.join(made.dir, 'cache');
    const create = (out: string, extra: string[]) =>
      bundle([
        'create',
        '--image',
        `oci:${layout}=example.com/test/app:v1`,
        '--version',
        '1.0',
        '--key',
        keyPath,
        '-o',
        path.join(made.dir, out),
        '--cache',
        cache,
        '--quiet',
        ...extra,
      ]);
    const inspectText = async (out: string) =>
      (await bundle(['inspect', path.join(made.dir, out)])).stdout;
    const inspect = async (out: string) =>
      JSON.parse((await bundle(['inspect', '--json', path.join(made.dir, out)])).stdout);

    const v2 = await create('cli-v2.bundle', ['--format-version', '2']);
    t.equal(v2.code, 0, v2.stderr);
    t.match(
      await inspectText('cli-v2.bundle'),
      `format:    version 2: needs bundle-agent ≥ ${FORMAT_VERSIONS[2]!.minReader}\n`,
    );
    t.same((await inspect('cli-v2.bundle')).format, {
      version: 2,
      mediaType: FORMAT_VERSIONS[2]!.mediaType,
      minAgentVersion: FORMAT_VERSIONS[2]!.minReader,
    });
    const old = await frozen(['verify', path.join(made.dir, 'cli-v2.bundle'), pubPath]);
    t.equal(
      old.code,
      0,
      `the previous release reads what create --format-version 2 wrote: ${JSON.stringify(old.out)} ${old.stderr}`,
    );

    const cur = await create('cli-current.bundle', []);
    t.equal(cur.code, 0, cur.stderr);
    t.same(
      (await inspect('cli-current.bundle')).format,
      {
        version: 2,
        mediaType: FORMAT_VERSIONS[2]!.mediaType,
        minAgentVersion: FORMAT_VERSIONS[2]!.minReader,
      },
      'the default is what the agents in the field read',
    );
    t.equal(
      (await frozen(['verify', path.join(made.dir, 'cli-current.bundle'), pubPath])).code,
      0,
      'the previous release reads the default',
    );
    const v3 = await create('cli-v3.bundle', ['--format-version', '3']);
    t.equal(v3.code, 0, v3.stderr);
    t.same((await inspect('cli-v3.bundle')).format, {
      version: 3,
      mediaType: FORMAT_VERSIONS[3]!.mediaType,
      minAgentVersion: FORMAT_VERSIONS[3]!.minReader,
    });
    t.equal(
      (await frozen(['verify', path.join(made.dir, 'cli-v3.bundle'), pubPath])).out.code,
      'UNSUPPORTED_VERSION',
      'the previous release refuses version 3',
    );

    const bad = await create('cli-v1.bundle', ['--format-version', '1']);
    t.equal(bad.code, 2, 'a usage error');
    t.match(bad.stderr.split('\n')[0], /format version 1 cannot be written; this tool writes 2, 3/);

    const file = (name: string, version: number) => {
      const f = path.join(made.dir, `${name}.yaml`);
      return writeFile(
        f,
        `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nversion: "1.0"\nformatVersion: ${version}\nimages: ["oci:${layout}=example.com/test/app:v1"]\n`,
      ).then(() => f);
    };
    const fromFile = await bundle([
      'create',
      '-f',
      await file('v2', 2),
      '--key',
      keyPath,
      '-o',
      path.join(made.dir, 'file-v2.bundle'),
      '--cache',
      cache,
      '--quiet',
    ]);
    t.equal(fromFile.code, 0, fromFile.stderr);
    t.equal(
      (await inspect('file-v2.bundle')).format.version,
      2,
      'formatVersion in the bundle file',
    );
    const badFile = await bundle([
      'create',
      '-f',
      await file('v1', 1),
      '--key',
      keyPath,
      '-o',
      path.join(made.dir, 'file-v1.bundle'),
      '--cache',
      cache,
      '--quiet',
    ]);
    t.equal(badFile.code, 1);
    t.match(badFile.stderr, /v1\.yaml:4 \(formatVersion\): must be one of 2, 3/);
    t.equal(
      await stat(path.join(made.dir, 'file-v1.bundle')).then(
        () => true,
        () => false,
      ),
      false,
      'nothing written',
    );
  },
);

// `bundle split --out DIR` and `bundle write-media` write their parts and .sha256 under
// predictable temp names beside the final ones: a link planted at such a name must not carry
// the write (or the rename after it) to a file outside. Run in-process, so the PID in the temp
// names is known and every one of them can be planted.
import t from 'tap';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { lstat, mkdir, readFile, readdir, symlink, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { partName } from '@offline-bundle/format';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, keygen } from './lib.js';

const { splitBundle } = await import('../../builder/dist/split.js');
const { writeMedia } = await import('../../builder/dist/write-media.js');
const { Progress } = await import('../../builder/dist/progress.js');

const work = await tmpdir(t, 'ob-temp-links-');
const layout = path.join(work, 'layout');
await writeImageLayout(layout, {
  tag: 'v1',
  platforms: [
    { os: 'linux', architecture: 'amd64', layers: [{ 'srv/a': 'temp links '.repeat(5000) }] },
  ],
});
const keys = await keygen(work, 'factory', 'ed25519');
const src = path.join(work, 'r.bundle');
const c = await bundle([
  'create',
  '--quiet',
  '--version',
  '3.1',
  '--image',
  `oci:${layout}:v1=registry.example.com/links/app:v1`,
  '--key',
  keys.key,
  '-o',
  src,
  '--cache',
  path.join(work, 'cache'),
]);
if (c.code !== 0) throw new Error(c.stderr);
const bytes = await readFile(src);
const PART = 1500;
const count = Math.ceil(bytes.length / PART);

/** A root-only file outside the output directory, and links to it at `names` in `dir`. */
async function plant(dir: string, names: string[]): Promise<string> {
  const outside = path.join(work, `outside-${path.basename(dir)}`);
  await writeFile(outside, 'precious', { mode: 0o600 });
  await mkdir(dir, { recursive: true });
  for (const n of names) await symlink(outside, path.join(dir, n));
  return outside;
}

const partNames = (base: string) =>
  Array.from({ length: count }, (_, i) => partName(base, i + 1, count));
const quiet = () => new Progress({ quiet: true });
// write-media's temp tag: which boot of which machine, and the PID
const bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
const TAG = `${createHash('sha256')
  .update(bootId + hostname())
  .digest('hex')
  .slice(0, 8)}-${process.pid}`;

t.test('split --out: links at every temp name are replaced, not written through', async (t) => {
  const out = path.join(work, 'split-out');
  const temps = [
    ...partNames('r.bundle').map((n) => `.${n}.${process.pid}.tmp`),
    `r.bundle.sha256.${process.pid}.tmp`,
  ];
  const outside = await plant(out, temps);
  const r = await splitBundle(src, PART, out);
  t.equal(await readFile(outside, 'utf8'), 'precious', 'the file outside is unchanged');
  t.equal(r.parts.length, count);
  for (const p of [...r.parts, path.join(out, 'r.bundle.sha256')])
    t.ok((await lstat(p)).isFile(), `${path.basename(p)} is a file, not a link`);
  t.same(
    Buffer.concat(await Promise.all(r.parts.map((p) => readFile(p)))),
    bytes,
    'the parts are the bundle',
  );
  t.same(
    (await readdir(out)).filter((n) => n.endsWith('.tmp')),
    [],
    'no temp name left',
  );
});

t.test(
  'split --out: a directory at a temp name fails in one line, nothing written outside',
  async (t) => {
    const out = path.join(work, 'split-dir');
    const outside = await plant(out, [`.${partNames('r.bundle')[0]}.${process.pid}.tmp`]);
    await mkdir(path.join(out, `.${partNames('r.bundle')[1]}.${process.pid}.tmp`));
    const err = await splitBundle(src, PART, out).catch((e: Error) => e);
    t.type(err, Error);
    t.match((err as Error).message, /^cannot write .*split-dir: [^\n]+$/, (err as Error).message);
    t.equal(await readFile(outside, 'utf8'), 'precious');
    t.same(
      (await readdir(out)).filter((n) => !n.startsWith('.')),
      [],
      'no part under its own name',
    );
  },
);

t.test(
  'write-media: links at the temp names of the parts and the .sha256 are replaced, not written through',
  async (t) => {
    const stick = path.join(work, 'stick');
    const outside = await plant(
      stick,
      [...partNames('r.bundle'), 'r.bundle.sha256'].map((n) => `.${n}.${TAG}.tmp`),
    );
    const r = await writeMedia({
      bundle: src,
      target: stick,
      anyDirectory: true,
      partSize: PART,
      agentImage: false,
      progress: quiet(),
    });
    t.equal(await readFile(outside, 'utf8'), 'precious', 'the file outside is unchanged');
    for (const f of r.files)
      t.ok((await lstat(f)).isFile(), `${path.basename(f)} is a file, not a link`);
    t.same(
      Buffer.concat(
        await Promise.all(r.files.filter((f) => f.includes('.part-')).map((f) => readFile(f))),
      ),
      bytes,
      'the parts read back as the bundle',
    );
  },
);

t.test('write-media: a link at the one-file temp name', async (t) => {
  const stick = path.join(work, 'stick-one');
  const outside = await plant(stick, [`.r.bundle.${TAG}.tmp`]);
  const r = await writeMedia({
    bundle: src,
    target: stick,
    anyDirectory: true,
    agentImage: false,
    progress: quiet(),
  });
  t.equal(await readFile(outside, 'utf8'), 'precious');
  t.ok((await lstat(path.join(stick, 'r.bundle'))).isFile());
  t.same(await readFile(path.join(stick, 'r.bundle')), bytes);
  t.same(
    r.files.map((f: string) => path.basename(f)),
    ['r.bundle', 'r.bundle.sha256'],
  );
});

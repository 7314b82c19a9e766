// An ImageSetConfiguration's archiveSize (GiB) is create's --split-size (#40 item 8), and a
// bundle no larger than the split size stays one NAME.bundle (no lone part-001-of-001).
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen } from './lib.js';

const work = await tmpdir(t, 'ob-archive-size-');
const keys = await keygen(work);
const layout = path.join(work, 'layout');
// random bytes do not compress: a bundle of some 700 KB
await writeImageLayout(layout, {
  tag: 'app',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ noise: randomBytes(700 * 1024) }] }],
});
const source = `oci:${layout}:app=registry.example.com/acme/app:v1`;

let n = 0;
async function createFrom(doc: object | undefined, args: string[]) {
  const dir = path.join(work, `run-${++n}`);
  const file = path.join(work, `isc-${n}.yaml`);
  await mkdir(dir);
  if (doc) await writeFile(file, stringify(doc));
  const r = await bundle([
    'create',
    ...(doc ? ['-f', file] : ['--image', source]),
    '--version',
    '1.0',
    '--key',
    keys.key,
    '--cache',
    path.join(work, 'cache'),
    '-o',
    path.join(dir, 'out.bundle'),
    ...args,
  ]);
  return { ...r, dir, files: async () => (await readdir(dir)).sort() };
}

const imageSet = (archiveSize: unknown) => ({
  kind: 'ImageSetConfiguration',
  apiVersion: 'mirror.openshift.io/v2alpha1',
  archiveSize,
  mirror: { additionalImages: [{ name: source }] },
});

t.test(
  "archiveSize is read as GiB, 4 as FAT32's 4 GiB - 1 (as --split-size 4G); anything but a whole number of GiB is refused by name",
  async (t) => {
    const { translateImageSet } = await import('../../builder/dist/image-set/oc-mirror.js');
    const { FAT32_MAX_FILE } = await import('../../builder/dist/split.js');
    const locate = (p: (string | number)[]) => `f.yaml (${p.join('.')})`;
    const doc = (v: unknown) => ({
      ...imageSet(v),
      mirror: { additionalImages: [{ name: 'registry.example.com/a:1' }] },
    });
    t.equal(translateImageSet(doc(4), locate).file.splitSize, FAT32_MAX_FILE);
    t.equal(translateImageSet(doc(2), locate).file.splitSize, 2 * 1024 ** 3);
    t.same(translateImageSet(doc(2), locate).warnings, [], 'no "not used" warning any more');
    t.equal(
      translateImageSet(doc(undefined), locate).file.splitSize,
      undefined,
      'absent: one file',
    );
    for (const bad of [0, -1, 1.5, '4G'])
      t.throws(
        () => translateImageSet(doc(bad), locate),
        /f\.yaml \(archiveSize\): must be a whole number of GiB/,
        `${JSON.stringify(bad)} refused`,
      );
  },
);

t.test('a bundle that fits archiveSize stays one file with its own name', async (t) => {
  const r = await createFrom(imageSet(1), ['--json']);
  t.equal(r.code, 0, r.stderr);
  t.same(await r.files(), ['out.bundle', 'out.bundle.sha256'], 'no part-001-of-001');
  t.notOk('parts' in JSON.parse(r.stdout));
  t.match(
    r.stderr,
    /not split: out\.bundle \(\d+ bytes\) is no larger than the file's archiveSize \(1073741824 bytes\): one file/,
  );
  t.notMatch(r.stderr, /archiveSize is not used/);
});

t.test(
  '--split-size: a bundle larger is cut into parts, one no larger stays whole; the flag overrides archiveSize',
  async (t) => {
    const cut = await createFrom(imageSet(1), ['--split-size', '256K', '--json']);
    t.equal(cut.code, 0, cut.stderr);
    const parts = JSON.parse(cut.stdout).parts as string[];
    t.ok(parts.length >= 3, `${parts.length} parts of 256 KiB`);
    t.same(
      await cut.files(),
      [...parts.map((p) => path.basename(p)), 'out.bundle.sha256'].sort(),
      'parts only, no whole file',
    );
    const whole = await createFrom(undefined, ['--split-size', '4G']);
    t.equal(whole.code, 0, whole.stderr);
    t.same(await whole.files(), ['out.bundle', 'out.bundle.sha256']);
    t.match(
      whole.stderr,
      /not split: out\.bundle \(\d+ bytes\) is no larger than --split-size \(4294967295 bytes\): one file/,
    );
    const bad = await createFrom(imageSet('4G'), []);
    t.equal(errorCode(bad.stderr), 'INVALID_CONFIG');
    t.match(bad.stderr, /\(archiveSize\): must be a whole number of GiB/);
  },
);

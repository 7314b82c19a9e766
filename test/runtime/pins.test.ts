// CRI-O pinned_images drop-in. CRI-O cannot run here, so this is a contract test against the
// shape crio.conf(5) documents: a [crio.image] table with pinned_images, a list of strings.
import { spawnSync } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import {
  MANAGED_MARKER,
  readPinsDropIn,
  removeDropIn,
  renderPinsDropIn,
  writePinsDropIn,
} from '@offline-bundle/runtime';
import { tmpdir } from '../helpers/tmp.mjs';
import { parseToml } from './lib.js';

const A = `quay.io/openshift-release-dev/ocp-release@sha256:${'a'.repeat(64)}`;
const B = `quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:${'b'.repeat(64)}`;
const C = `registry.example.com:5000/team/tool@sha256:${'c'.repeat(64)}`;

t.test('contract: crio.conf(5) [crio.image] pinned_images', async (t) => {
  const text = renderPinsDropIn([C, B, A, B]);
  t.equal(text.split('\n')[0], MANAGED_MARKER);
  const doc = parseToml(text);
  t.same(
    doc,
    { crio: { image: { pinned_images: [A, B, C] } } },
    'exactly the [crio.image] table with the sorted, deduplicated list',
  );
  t.same(Object.keys(doc), ['crio']);
  t.match(text, /^\[crio\.image\]$/m, 'a [crio.image] table header');
  t.match(text, /^pinned_images = \[/m, 'pinned_images key inside it');
  t.same(parseToml(renderPinsDropIn([])), { crio: { image: { pinned_images: [] } } });
  t.throws(() => renderPinsDropIn(['a b']), { code: 'INVALID_SPEC' });
  t.throws(() => renderPinsDropIn(['x"\n[crio.runtime]']), { code: 'INVALID_SPEC' });
});

t.test('write/read/remove: atomic, own files only', async (t) => {
  const dir = await tmpdir(t, 'ob-rt-pins-');
  t.same(await readPinsDropIn(path.join(dir, 'missing.conf')), [], 'missing file: []');

  const file = await writePinsDropIn(dir, '99-offline-bundle-pins.conf', [B, A]);
  t.equal(file, path.join(dir, '99-offline-bundle-pins.conf'));
  t.same(await readPinsDropIn(file), [A, B]);
  await writePinsDropIn(dir, '99-offline-bundle-pins.conf', [A, B, C]);
  t.same(await readPinsDropIn(file), [A, B, C], 'replaced');
  t.same(await readdir(dir), ['99-offline-bundle-pins.conf'], 'no temp file left');

  // An MCO / installer pins file: readable, never written or removed.
  const mco = path.join(dir, '50-pinned-images');
  const mcoText = `[crio]\n  [crio.image]\n    pinned_images = ["${C}", "${A}"]\n`;
  await writeFile(mco, mcoText);
  t.same(await readPinsDropIn(mco), [A, C], 'foreign pins can be read');
  await t.rejects(writePinsDropIn(dir, '50-pinned-images', [B]), { code: 'FOREIGN_FILE' });
  await t.rejects(removeDropIn(mco), { code: 'FOREIGN_FILE' });
  t.equal(await readFile(mco, 'utf8'), mcoText, 'foreign pins untouched');

  const other = path.join(dir, '10-other.conf');
  await writeFile(other, '[crio.runtime]\nlog_level = "info"\n');
  t.same(await readPinsDropIn(other), [], 'no pinned_images key: []');
  await writeFile(other, '[crio.image\n');
  await t.rejects(readPinsDropIn(other), { code: 'READ_FAILED' });
  await writeFile(other, '[crio.image]\npinned_images = "x"\n');
  await t.rejects(readPinsDropIn(other), { code: 'READ_FAILED' });

  t.equal(await removeDropIn(file), true);
  t.equal(await removeDropIn(file), false);
  t.same((await readdir(dir)).sort(), ['10-other.conf', '50-pinned-images']);
});

t.test('full filesystem: NO_SPACE, the old file intact, no temp file left', async (t) => {
  const dir = await tmpdir(t, 'ob-rt-full-');
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir]);
  if (mounted.status !== 0)
    return t.plan(0, `cannot mount a tmpfs here: ${String(mounted.stderr).trim()}`);
  t.teardown(() => {
    spawnSync('umount', [dir]);
  });
  const file = await writePinsDropIn(dir, '99-offline-bundle-pins.conf', [A]);
  const before = await readFile(file, 'utf8');
  // Fill the filesystem.
  await writeFile(path.join(dir, 'filler'), Buffer.alloc(60 * 1024)).catch(() => {});
  for (let i = 0; ; i++) {
    const ok = await writeFile(path.join(dir, `f${i}`), Buffer.alloc(4096)).then(
      () => true,
      () => false,
    );
    if (!ok) break;
  }
  const many = Array.from({ length: 500 }, (_, i) => `quay.io/ns/img${i}@sha256:${'d'.repeat(64)}`);
  await t.rejects(writePinsDropIn(dir, '99-offline-bundle-pins.conf', many), { code: 'NO_SPACE' });
  t.equal(await readFile(file, 'utf8'), before, 'the previous pins file is intact');
  t.same(
    (await readdir(dir)).filter((n) => n.includes('.tmp')),
    [],
    'no temp file left',
  );
});

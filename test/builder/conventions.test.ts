// Command-line conventions of `bundle`: --tls-verify as skopeo's boolean flag, -o onto an
// existing file only with --force (as keygen), counts with their right plural.
import t from 'tap';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen, refNames } from './lib.js';

const work = await tmpdir(t, 'ob-conventions-');
const keys = await keygen(work);
const layout = path.join(work, 'layout');
await writeImageLayout(layout, {
  tag: 'a',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: 'a' }] }],
});
await writeImageLayout(layout, {
  tag: 'b',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ b: 'b' }] }],
});
const imageA = `oci:${layout}:a=registry.example.com/acme/a:v1`;
const imageB = `oci:${layout}:b=registry.example.com/acme/b:v1`;

let n = 0;
const out = () => path.join(work, `out-${++n}.bundle`);
const create = (args: string[], output = out()) =>
  bundle([
    'create',
    '--quiet',
    '--key',
    keys.key,
    '--version',
    '1.0',
    '--cache',
    path.join(work, 'cache'),
    '-o',
    output,
    ...args,
  ]).then((r) => ({ ...r, output }));

t.test(
  '--tls-verify: bare, =true, =false, or followed by its value; a bare one leaves the next option alone',
  async (t) => {
    for (const form of [
      ['--tls-verify'],
      ['--tls-verify=false'],
      ['--tls-verify=true'],
      ['--tls-verify', 'false'],
    ]) {
      const r = await create([...form, '--image', imageA]);
      t.equal(r.code, 0, `${form.join(' ')} --image …: ${r.stderr}`);
      t.same(
        await refNames(r.output),
        ['registry.example.com/acme/a:v1'],
        `${form.join(' ')}: --image was not taken as its value`,
      );
    }
    const bad = await create(['--tls-verify=maybe', '--image', imageA]);
    t.equal(bad.code, 2);
    t.match(bad.stderr, /must be true or false/);
  },
);

t.test('-o onto an existing file needs --force', async (t) => {
  const output = path.join(work, 'existing.bundle');
  await writeFile(output, 'precious');
  const refused = await create(['--image', imageA], output);
  t.equal(refused.code, 1);
  t.equal(errorCode(refused.stderr), 'OUTPUT_EXISTS');
  t.match(refused.stderr, `${output} exists: pass --force to replace it`);
  t.equal(await readFile(output, 'utf8'), 'precious', 'untouched');

  const forced = await create(['--image', imageA, '--force'], output);
  t.equal(forced.code, 0, forced.stderr);
  t.same(await refNames(output), ['registry.example.com/acme/a:v1']);
});

t.test('counts are pluralised: "1 image", "2 images"', async (t) => {
  const one = await create(['--image', imageA]);
  const two = await create(['--image', imageA, '--image', imageB]);
  const v1 = await bundle(['verify', one.output, '--key', keys.pub]);
  const v2 = await bundle(['verify', two.output, '--key', keys.pub]);
  t.match(v1.stdout, /, 1 image, sha256:/);
  t.match(v2.stdout, /, 2 images, sha256:/);
  const x1 = await bundle([
    'extract',
    one.output,
    path.join(work, 'x1'),
    '--key',
    keys.pub,
    '--quiet',
  ]);
  t.match(x1.stdout, /^extracted 1 image to /);
  const x2 = await bundle([
    'extract',
    two.output,
    path.join(work, 'x2'),
    '--key',
    keys.pub,
    '--quiet',
  ]);
  t.match(x2.stdout, /^extracted 2 images to /);
});

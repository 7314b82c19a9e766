// Input errors all at once, before any download: every bad line of --images-file with its
// file:line, every target name two different sources would both take (the second one used to
// be dropped silently), whether the clash is visible from the lines (two registries' images
// renamed alike) or only once the sources are opened (a release payload image vs a local layout
// naming itself the same). Against a real docker-registry on 127.0.0.1.
import t from 'tap';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-inputs-');
const keys = await keygen(work);
const H = reg.host;
const app = await pushImage(
  {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/bin': 'app' }] }],
  },
  `${H}/in/app:v1`,
);

let n = 0;
async function create(args: string[]) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir);
  const cache = path.join(dir, 'cache');
  const r = await bundle([
    'create',
    '--quiet',
    '--tls-verify=false',
    '--key',
    keys.key,
    '--version',
    '1.0',
    '--cache',
    cache,
    '-o',
    path.join(dir, 'out.bundle'),
    ...args,
  ]);
  const cached = await readdir(cache, { recursive: true }).catch(() => [] as string[]);
  return { ...r, cached, dir };
}

t.test(
  'three bad lines of --images-file: all three, with line numbers, nothing fetched',
  async (t) => {
    const list = path.join(work, 'images.txt');
    await writeFile(
      list,
      [
        '# payload extras',
        `docker://${app.ref}`,
        'docker:/missing-slashes/app:v1',
        '',
        `${H}/in/Upper:v1   # capital letters are not a repository`,
        `containers-storage:${H}/in/app:v1`,
        `${app.ref}`,
      ].join('\n'),
    );
    const r = await create(['--images-file', list]);
    t.equal(r.code, 1);
    const lines = r.stderr.trimEnd().split('\n');
    t.equal(lines.length, 1, 'one line');
    t.match(
      lines[0],
      /^bundle: INVALID_CONFIG: 3 bad image sources, nothing fetched: /,
      'a mix of problems: INVALID_CONFIG',
    );
    for (const line of [3, 5, 6]) t.match(lines[0], `${list}:${line}: `, `line ${line} is named`);
    for (const line of [1, 2, 4, 7])
      t.notMatch(lines[0], `${list}:${line}: `, `line ${line} is fine`);
    t.same(r.cached, [], 'nothing was fetched');
  },
);

t.test('two sources, one target name: both places named, nothing fetched', async (t) => {
  const layout = path.join(work, 'layout-a');
  await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'other/bin': 'other' }] }],
  });
  const list = path.join(work, 'dups.txt');
  await writeFile(
    list,
    [
      `oci:${layout}:v1=${H}/in/app:v1`,
      `oci:${layout}:v1=${H}/in/other:v1`,
      `oci:${layout}:v1=${H}/in/other:v1`,
    ].join('\n'),
  );
  const r = await create(['--image', app.ref, '--images-file', list]);
  t.equal(errorCode(r.stderr), 'DUPLICATE_NAME', r.stderr);
  t.match(r.stderr, `${list}:1: ${H}/in/app:v1 is already the name of the image from --image #1`);
  t.notMatch(r.stderr, `${list}:3`, 'the same source twice is one image, not a clash');
  t.same(r.cached, [], 'nothing was fetched');
});

t.test(
  'a clash seen only once the sources are opened: both named, before any layer is fetched',
  async (t) => {
    // a layout whose own ref name (org.opencontainers.image.ref.name) is the registry image's name
    const layout = path.join(work, 'layout-b');
    const local = await writeImageLayout(layout, {
      tag: `${H}/in/app:v1`,
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'local/bin': 'local' }] }],
    });
    const r = await create(['--image', app.ref, '--image', `oci:${layout}`]);
    t.equal(errorCode(r.stderr), 'DUPLICATE_NAME', r.stderr);
    t.match(
      r.stderr,
      new RegExp(
        `--image #2 and --image #1 both give ${H}/in/app:v1 \\(${local.digest} and ${app.digest}\\)`,
      ),
    );
    const layers = [...app.manifests[0]!.layers, ...local.manifests[0]!.layers].map((d: string) =>
      d.slice(7),
    );
    t.notOk(
      r.cached.some((f) => layers.some((l) => f.includes(l))),
      'no layer fetched',
    );
  },
);

t.test('an --images-file over 1 MiB is refused before it is read whole', async (t) => {
  const big = path.join(work, 'big.txt');
  await writeFile(big, `${app.ref}\n`.repeat(Math.ceil((1024 * 1024 + 1) / (app.ref.length + 1))));
  const r = await create(['--images-file', big]);
  t.equal(errorCode(r.stderr), 'INVALID_CONFIG', r.stderr);
  t.match(r.stderr, /cannot read --images-file .*big\.txt/);
  t.same(r.cached, [], 'nothing fetched');
});

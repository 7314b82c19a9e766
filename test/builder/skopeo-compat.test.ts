// Small conventions shared with skopeo: --tls-verify takes exactly what Go's strconv.ParseBool
// takes; a source repeated in --images-file is kept once and both lines are named.
import t from 'tap';
import { createServer } from 'node:http';
import { writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { bundle, errorCode, keygen, refNames } from './lib.js';

const work = await tmpdir(t, 'ob-skopeo-compat-');
const keys = await keygen(work);

t.test('--tls-verify=VALUE as strconv.ParseBool', async (t) => {
  // plain http, 404 for everything: reached only when TLS is not verified (insecure falls back to http)
  const server = createServer((_req, res) => res.writeHead(404).end());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const image = `docker://127.0.0.1:${(server.address() as AddressInfo).port}/acme/app:v1`;
  const create = (value: string) =>
    bundle([
      'create',
      '--version',
      '1.0',
      '--image',
      image,
      `--tls-verify=${value}`,
      '--key',
      keys.key,
      '--cache',
      path.join(work, 'cache'),
      '-o',
      path.join(work, 'x.bundle'),
    ]);
  const values: [string, boolean | 'usage'][] = [
    ['1', true],
    ['t', true],
    ['T', true],
    ['TRUE', true],
    ['true', true],
    ['True', true],
    ['0', false],
    ['f', false],
    ['F', false],
    ['FALSE', false],
    ['false', false],
    ['False', false],
    ['yes', 'usage'],
    ['no', 'usage'],
    ['tRUE', 'usage'],
    ['2', 'usage'],
    ['', 'usage'],
  ];
  for (let i = 0; i < values.length; i += 4) {
    const batch = values.slice(i, i + 4);
    const runs = await Promise.all(batch.map(([v]) => create(v)));
    for (const [k, [v, want]] of batch.entries()) {
      const r = runs[k]!;
      if (want === 'usage') {
        t.equal(r.code, 2, `--tls-verify=${v}: a usage error`);
        t.match(r.stderr, /must be true or false/);
      } else {
        t.equal(r.code, 1, `--tls-verify=${v}`);
        t.equal(
          errorCode(r.stderr),
          want ? 'TLS_ERROR' : 'NOT_FOUND',
          `--tls-verify=${v} is ${want}: ${r.stderr}`,
        );
      }
    }
  }
});

t.test('a source repeated in --images-file: kept once, both lines named', async (t) => {
  const layout = path.join(work, 'layout');
  await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'srv/a': 'a' }] }],
  });
  const image = `oci:${layout}:v1=registry.example.com/app:v1`;
  const list = path.join(work, 'images.txt');
  await writeFile(list, `# images\n${image}\n\n\n  ${image}  # again\n`);
  const out = path.join(work, 'dup.bundle');
  const r = await bundle([
    'create',
    '--version',
    '1.0',
    '--images-file',
    list,
    '--key',
    keys.key,
    '--cache',
    path.join(work, 'cache'),
    '-o',
    out,
  ]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, `warning: ${list}:5 repeats ${list}:2`);
  t.same(await refNames(out), ['registry.example.com/app:v1']);
});

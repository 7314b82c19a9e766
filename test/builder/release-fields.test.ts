// The release fields given on the command line (--version, --name, --upgrade-from) are held
// to bundle.json's rules before anything is fetched: a bad --version costs no download.
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen, listDir } from './lib.js';

const work = await tmpdir(t, 'ob-release-fields-');
const keys = await keygen(work);
let requests = 0;
const registry = createServer((_req, res) => {
  requests++;
  res.writeHead(404).end();
});
await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
t.teardown(() => registry.close());
const image = `docker://127.0.0.1:${(registry.address() as AddressInfo).port}/acme/app:v1`;
const out = path.join(work, 'out', 'x.bundle');

const cases: [string, string[], RegExp][] = [
  [
    'a slash in --version',
    ['--version', '1.0/evil'],
    /--version "1\.0\/evil" is not a valid release version: it must be letters, digits and \. _ \+ -/,
  ],
  [
    'a space in --version',
    ['--version', '1.0 beta'],
    /--version "1\.0 beta" is not a valid release version/,
  ],
  [
    'a control character in --version',
    ['--version', '1.0\x1b[2J'],
    /--version "1\.0\\u001b\[2J" is not a valid release version/,
  ],
  [
    'an overlong --version',
    ['--version', '1'.repeat(129)],
    /is not a valid release version: it must be a non-empty string of at most 128 characters/,
  ],
  ['an empty --name', ['--version', '1.0', '--name', ''], /--name "" is not a valid release name/],
  [
    'an empty --upgrade-from',
    ['--version', '1.0', '--upgrade-from', '0.9', '--upgrade-from', ''],
    /--upgrade-from "" is not a valid version/,
  ],
];
for (const [what, args, message] of cases) {
  t.test(what, async (t) => {
    const r = await bundle([
      'create',
      ...args,
      '--image',
      image,
      '--tls-verify=false',
      '--key',
      keys.key,
      '--cache',
      path.join(work, 'cache'),
      '-o',
      out,
    ]);
    t.equal(r.code, 1, r.stderr);
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
    t.match(r.stderr, message);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, 'one line');
    t.equal(requests, 0, 'refused before any registry request');
    t.same(await listDir(path.join(work, 'cache')), [], 'nothing downloaded');
  });
}

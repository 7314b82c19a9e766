// A signed bundle.json whose agent field is hostile or wrong: the agent refuses the bundle
// with one line naming the field, before anything is written (the digest would go into a
// systemd drop-in, the version into status and the journal).
import t from 'tap';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { craft, makeBundle, readEntries, resign } from '../format/craft.js';
import { AGENT, nodeRoot, run } from './fixtures.js';

const b = await makeBundle(t);
const pub = join(b.dir, 'factory.pub');
await writeFile(pub, b.key.publicPem);
const root = join(b.dir, 'node');
const config = await nodeRoot(
  root,
  pub,
  'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\nselfUpgrade:\n  mode: quadlet\n',
);
const entries = await readEntries(b.path);
const app = b.images[0]!;
const REPO = 'localhost/offline-bundle/bundle-agent';

const cases: [string, unknown, RegExp][] = [
  [
    'a digest that is not one',
    { version: '0.9.0', repository: REPO, digest: 'sha256:../../etc/passwd' },
    /agent\.digest must be a sha256 digest/,
  ],
  [
    'a version with control characters',
    { version: '0.9.0\u001b[2J\nImage=evil', repository: REPO, digest: app.digest },
    /agent\.version must be a canonical semver version of at most 64 characters/,
  ],
  [
    'a version of 65 characters',
    { version: `1.0.0-${'a'.repeat(59)}`, repository: REPO, digest: app.digest },
    /agent\.version must be a canonical semver version of at most 64/,
  ],
  [
    'a version with a leading v',
    { version: 'v0.9.0', repository: REPO, digest: app.digest },
    /agent\.version must be a canonical semver version/,
  ],
  [
    'a version that is no semver (latest)',
    { version: 'latest', repository: REPO, digest: app.digest },
    /agent\.version must be a canonical semver version/,
  ],
  [
    'a version of two numbers (1.0)',
    { version: '1.0', repository: REPO, digest: app.digest },
    /agent\.version must be a canonical semver version/,
  ],
  [
    'a version with build metadata',
    { version: '1.0.0+b1', repository: REPO, digest: app.digest },
    /agent\.version must be a canonical semver version/,
  ],
  [
    'another repository',
    { version: '0.9.0', repository: 'quay.io/evil/agent', digest: app.digest },
    /agent\.repository must be localhost\/offline-bundle\/bundle-agent/,
  ],
  [
    'a digest of an image the bundle carries under another name',
    { version: '0.9.0', repository: REPO, digest: app.digest },
    /agent\.digest sha256:[0-9a-f]{64} is not among the images as localhost\/offline-bundle\/bundle-agent:0\.9\.0/,
  ],
  [
    'a digest the bundle does not carry',
    { version: '0.9.0', repository: REPO, digest: `sha256:${'0'.repeat(64)}` },
    /is not among the images/,
  ],
  ['not an object', 'latest', /agent must be an object/],
];

for (const [name, agent, message] of cases) {
  t.test(`refused: ${name}`, async (t) => {
    const file = join(b.dir, `hostile-${name.replace(/\W+/g, '-')}.bundle`);
    await craft(file, resign(entries, b.key.privateKey, { json: (doc) => ({ ...doc, agent }) }));
    const r = await run(AGENT, ['load', file, '--config', config]);
    t.equal(r.code, 1, 'exit 1');
    const last = r.stderr.trim().split('\n').at(-1)!;
    t.match(last, /^bundle-agent: \w+: /, 'the error: one line');
    t.match(last, message);
    t.notMatch(r.stderr, /\u001b/, 'no raw escape reaches the terminal');
    t.strictSame(
      await readdir(join(root, 'var/lib/upgrade')).catch(() => []),
      [],
      'nothing staged',
    );
    t.strictSame(
      await readdir(join(root, 'etc/containers/systemd')).catch(() => []),
      [],
      'no drop-in',
    );
  });
}

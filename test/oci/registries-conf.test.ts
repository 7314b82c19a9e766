// RegistriesConf: containers-registries.conf(5) [[registry]] rules with mirrors,
// pull-from-mirror, blocking, location rewrites and registries.conf.d drop-ins.
import t, { type Test } from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { parseReference } from '@offline-bundle/oci';
import { MAX_REGISTRIES_CONF_BYTES, RegistriesConf } from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';

const ociErr = (code: string) => ({ name: 'OciError', code });
const D = 'sha256:' + '0f'.repeat(32);

/** Writes `text` to DIR/NAME and loads it with RegistriesConf.load. */
async function load(t: Test, text: string): Promise<RegistriesConf> {
  const dir = await tmpdir(t);
  const file = path.join(dir, 'registries.conf');
  await writeFile(file, text);
  return RegistriesConf.load(file);
}

/** "registry/repository" of each pull source, and whether it is a mirror. */
const where = (conf: RegistriesConf, ref: string, insecure = false) =>
  conf
    .pullSources(parseReference(ref), insecure)
    .map(
      (s) =>
        `${s.mirror ? 'mirror ' : ''}${s.registry}/${s.repository}${s.insecure ? ' (insecure)' : ''}`,
    );

t.test('no matching rule: the reference itself is the only source', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
location = "quay.io"
[[registry.mirror]]
location = "mirror.local/quay"
`,
  );
  t.equal(conf.match(parseReference('docker.io/library/busybox')), undefined);
  t.strictSame(conf.pullSources(parseReference('busybox')), [
    { registry: 'docker.io', repository: 'library/busybox', insecure: false, mirror: false },
  ]);
  t.strictSame(
    where(conf, 'busybox', true),
    ['docker.io/library/busybox (insecure)'],
    'defaultInsecure applies without a rule',
  );
  t.strictSame(where(new RegistriesConf(), 'quay.io/a/b'), ['quay.io/a/b'], 'empty configuration');
});

t.test('longest prefix wins, and prefixes match only at path boundaries', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
prefix = "quay.io"
location = "quay.io"
[[registry.mirror]]
location = "m.local/whole-quay"

[[registry]]
prefix = "quay.io/a"
location = "quay.io/a"
[[registry.mirror]]
location = "m.local/only-a"

[[registry]]
prefix = "quay.io/a/b"
location = "quay.io/a/b"
[[registry.mirror]]
location = "m.local/only-a-b"
`,
  );
  t.equal(conf.match(parseReference('quay.io/a/x'))?.prefix, 'quay.io/a');
  t.equal(
    conf.match(parseReference('quay.io/a/b'))?.prefix,
    'quay.io/a/b',
    'exact repository match',
  );
  t.equal(conf.match(parseReference('quay.io/a/b/c'))?.prefix, 'quay.io/a/b', 'deepest rule wins');
  t.equal(
    conf.match(parseReference('quay.io/ab/x'))?.prefix,
    'quay.io',
    '"quay.io/a" does not match "quay.io/ab"',
  );
  t.equal(
    conf.match(parseReference('quay.io/a/bc'))?.prefix,
    'quay.io/a',
    '"quay.io/a/b" does not match "quay.io/a/bc"',
  );
  t.equal(
    conf.match(parseReference('quay.io.evil.com/a/x')),
    undefined,
    '"quay.io" does not match "quay.io.evil.com"',
  );
  t.equal(
    conf.match(parseReference('quay.io:443/a/x')),
    undefined,
    '"quay.io" does not match "quay.io:443"',
  );
  t.strictSame(where(conf, 'quay.io/ab/x:1'), ['mirror m.local/whole-quay/ab/x', 'quay.io/ab/x']);
  t.strictSame(where(conf, 'quay.io/a/x:1'), ['mirror m.local/only-a/x', 'quay.io/a/x']);
});

t.test('rule order in the file does not matter for longest-prefix matching', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
prefix = "quay.io/a/b"
location = "quay.io/a/b"
[[registry]]
prefix = "quay.io"
location = "quay.io"
`,
  );
  t.equal(conf.match(parseReference('quay.io/a/b/c'))?.prefix, 'quay.io/a/b');
  t.equal(conf.match(parseReference('quay.io/z'))?.prefix, 'quay.io');
});

t.test('mirrors are tried in file order, then the source; insecure is per endpoint', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
location = "registry.redhat.io"
insecure = false
[[registry.mirror]]
location = "first.local:5000/rh"
insecure = true
[[registry.mirror]]
location = "second.local/rh"
[[registry.mirror]]
location = "third.local/rh"
`,
  );
  t.strictSame(where(conf, 'registry.redhat.io/ubi9/ubi:latest'), [
    'mirror first.local:5000/rh/ubi9/ubi (insecure)',
    'mirror second.local/rh/ubi9/ubi',
    'mirror third.local/rh/ubi9/ubi',
    'registry.redhat.io/ubi9/ubi',
  ]);
  t.strictSame(
    where(conf, 'registry.redhat.io/ubi9/ubi:latest', true),
    [
      'mirror first.local:5000/rh/ubi9/ubi (insecure)',
      'mirror second.local/rh/ubi9/ubi (insecure)',
      'mirror third.local/rh/ubi9/ubi (insecure)',
      'registry.redhat.io/ubi9/ubi (insecure)',
    ],
    'defaultInsecure (--tls-verify=false) makes every endpoint insecure',
  );
  const rule = conf.match(parseReference('registry.redhat.io/ubi9/ubi'));
  t.equal(rule?.prefix, 'registry.redhat.io', 'prefix defaults to location');
  t.strictSame(
    rule?.mirrors.map((m) => m.pullFromMirror),
    ['all', 'all', 'all'],
    'pull-from-mirror defaults to all',
  );
});

t.test('pull-from-mirror: digest-only, tag-only and all', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
location = "quay.io/ocp"
[[registry.mirror]]
location = "m.local/digest"
pull-from-mirror = "digest-only"
[[registry.mirror]]
location = "m.local/tag"
pull-from-mirror = "tag-only"
[[registry.mirror]]
location = "m.local/all"
pull-from-mirror = "all"
`,
  );
  t.strictSame(
    where(conf, `quay.io/ocp/release@${D}`),
    ['mirror m.local/digest/release', 'mirror m.local/all/release', 'quay.io/ocp/release'],
    'by digest: digest-only and all mirrors',
  );
  t.strictSame(
    where(conf, 'quay.io/ocp/release:4.15'),
    ['mirror m.local/tag/release', 'mirror m.local/all/release', 'quay.io/ocp/release'],
    'by tag: tag-only and all mirrors',
  );
  t.strictSame(
    where(conf, `quay.io/ocp/release:4.15@${D}`),
    ['mirror m.local/digest/release', 'mirror m.local/all/release', 'quay.io/ocp/release'],
    'tag plus digest counts as a digest pull',
  );
});

t.test('legacy mirror-by-digest-only = true makes every mirror digest-only', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
prefix = "quay.io/ocp"
location = "quay.io/ocp"
mirror-by-digest-only = true
[[registry.mirror]]
location = "m1.local/ocp"
[[registry.mirror]]
location = "m2.local/ocp"

[[registry]]
prefix = "quay.io/other"
location = "quay.io/other"
mirror-by-digest-only = false
[[registry.mirror]]
location = "m1.local/other"
`,
  );
  t.strictSame(where(conf, `quay.io/ocp/x@${D}`), [
    'mirror m1.local/ocp/x',
    'mirror m2.local/ocp/x',
    'quay.io/ocp/x',
  ]);
  t.strictSame(where(conf, 'quay.io/ocp/x:latest'), ['quay.io/ocp/x'], 'no mirror for a tag pull');
  t.strictSame(
    where(conf, 'quay.io/other/x:latest'),
    ['mirror m1.local/other/x', 'quay.io/other/x'],
    'false keeps mirrors for tags',
  );
});

t.test(
  'mirror-by-digest-only together with a per-mirror pull-from-mirror is a configuration error',
  async (t) => {
    await t.rejects(
      load(
        t,
        `
[[registry]]
location = "quay.io/ocp"
mirror-by-digest-only = true
[[registry.mirror]]
location = "m.local/ocp"
pull-from-mirror = "tag-only"
`,
      ),
      ociErr('INVALID_CONFIG'),
      'as containers/image: "cannot set mirror usage mirror-by-digest-only ... and pull-from-mirror ... at the same time"',
    );
  },
);

t.test('blocked registry: only its mirrors are used; nothing left is NOT_FOUND', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
location = "docker.io"
blocked = true

[[registry]]
location = "quay.io"
blocked = true
[[registry.mirror]]
location = "m.local/quay"
pull-from-mirror = "digest-only"
`,
  );
  t.equal(conf.match(parseReference('busybox'))?.blocked, true);
  t.throws(
    () => conf.pullSources(parseReference('busybox')),
    ociErr('NOT_FOUND'),
    'blocked without mirrors',
  );
  t.strictSame(
    where(conf, `quay.io/a/b@${D}`),
    ['mirror m.local/quay/a/b'],
    'blocked source is not a fallback',
  );
  t.throws(
    () => conf.pullSources(parseReference('quay.io/a/b:v1')),
    ociErr('NOT_FOUND'),
    'blocked, and the only mirror is digest-only',
  );
  t.strictSame(
    where(conf, 'registry.example.com/a'),
    ['registry.example.com/a'],
    'other registries are unaffected',
  );
});

t.test('location rewrites the repository path below the prefix', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
prefix = "example.com/foo"
location = "internal.example.com:5000/bar/foo"
insecure = true
[[registry.mirror]]
location = "m.local/cache/foo"

[[registry]]
prefix = "docker.io"
location = "hub.local/dockerhub"
`,
  );
  t.strictSame(conf.pullSources(parseReference('example.com/foo/app:v1')), [
    { registry: 'm.local', repository: 'cache/foo/app', insecure: false, mirror: true },
    {
      registry: 'internal.example.com:5000',
      repository: 'bar/foo/app',
      insecure: true,
      mirror: false,
    },
  ]);
  t.strictSame(
    where(conf, 'example.com/foo/a/b/c'),
    ['mirror m.local/cache/foo/a/b/c', 'internal.example.com:5000/bar/foo/a/b/c (insecure)'],
    'nested repositories keep their full remainder',
  );
  t.strictSame(
    where(conf, 'example.com/foo'),
    ['mirror m.local/cache/foo', 'internal.example.com:5000/bar/foo (insecure)'],
    'the prefix itself maps to the location itself',
  );
  t.strictSame(
    where(conf, 'busybox'),
    ['hub.local/dockerhub/library/busybox'],
    'short names are matched after normalization',
  );
  t.strictSame(
    where(conf, 'example.com/foobar/x'),
    ['example.com/foobar/x'],
    'no rewrite across a path boundary',
  );
});

t.test('a location that leaves no repository is INVALID_CONFIG', async (t) => {
  const conf = await load(
    t,
    `
[[registry]]
prefix = "quay.io/a/b"
location = "m.local"
`,
  );
  t.throws(() => conf.pullSources(parseReference('quay.io/a/b')), ociErr('INVALID_CONFIG'));
  t.strictSame(where(conf, 'quay.io/a/b/c'), ['m.local/c']);
});

t.test(
  'trailing slashes on prefix and location are ignored (as containers/image parseLocation trims them)',
  async (t) => {
    const conf = await load(
      t,
      `
[[registry]]
prefix = "quay.io/a/"
location = "m.local/x"

[[registry]]
prefix = "quay.io/c"
location = "m.local/y/"
`,
    );
    t.strictSame(where(conf, 'quay.io/a/b'), ['m.local/x/b'], 'prefix "quay.io/a/"');
    t.strictSame(where(conf, 'quay.io/c/d'), ['m.local/y/d'], 'location "m.local/y/"');
  },
);

t.test('configuration errors are INVALID_CONFIG', async (t) => {
  await t.rejects(
    load(t, '[[registry]\nlocation = "quay.io"\n'),
    ociErr('INVALID_CONFIG'),
    'bad TOML',
  );
  await t.rejects(
    load(t, 'location = "quay.io"\nlocation = "x"\n'),
    ociErr('INVALID_CONFIG'),
    'duplicate key',
  );
  await t.rejects(
    load(t, '[[registry]]\ninsecure = true\n'),
    ociErr('INVALID_CONFIG'),
    'registry without location or prefix',
  );
  await t.rejects(
    load(t, '[[registry]]\nprefix = "*.example.com"\nlocation = "m.local"\n'),
    ociErr('INVALID_CONFIG'),
    'wildcard prefix',
  );
  await t.rejects(
    load(t, '[[registry]]\nlocation = "quay.io"\n[[registry.mirror]]\ninsecure = true\n'),
    ociErr('INVALID_CONFIG'),
    'mirror without location',
  );
  await t.rejects(
    load(
      t,
      '[[registry]]\nlocation = "quay.io"\n[[registry.mirror]]\nlocation = "m"\npull-from-mirror = "sometimes"\n',
    ),
    ociErr('INVALID_CONFIG'),
    'unknown pull-from-mirror',
  );
  const dir = await tmpdir(t);
  await t.rejects(
    RegistriesConf.load(path.join(dir, 'missing.conf')),
    ociErr('INVALID_CONFIG'),
    'missing file',
  );
  const huge = path.join(dir, 'huge.conf');
  await writeFile(huge, '#'.repeat(MAX_REGISTRIES_CONF_BYTES + 1));
  await t.rejects(
    RegistriesConf.load(huge),
    { code: 'INVALID_CONFIG', message: /over 1048576 bytes/ },
    'a file over MAX_REGISTRIES_CONF_BYTES: refused, not parsed',
  );
  await t.rejects(
    RegistriesConf.loadDir(dir),
    { code: 'INVALID_CONFIG', message: /huge\.conf.*over/ },
    'the same for a drop-in',
  );
  execFileSync('mkfifo', [path.join(dir, 'fifo.conf')]);
  await t.rejects(
    RegistriesConf.load(path.join(dir, 'fifo.conf')),
    { code: 'INVALID_CONFIG', message: /FIFO/ },
    'a FIFO: refused at once, not waited on',
  );
  const empty = await load(t, '# nothing here\nunqualified-search-registries = ["quay.io"]\n');
  t.strictSame(empty.rules, [], 'a file without [[registry]] has no rules');
});

t.test('loadDir: drop-ins override rules by prefix, files in lexical order', async (t) => {
  const dir = await tmpdir(t);
  const base = path.join(dir, 'registries.conf');
  const d = path.join(dir, 'registries.conf.d');
  await mkdir(d);
  await writeFile(
    base,
    `
[[registry]]
location = "quay.io"
[[registry.mirror]]
location = "base.local/quay"

[[registry]]
location = "registry.redhat.io"
[[registry.mirror]]
location = "base.local/rh"
`,
  );
  // Lexical, not numeric: "10-" sorts before "9-", so 9-late.conf wins for quay.io.
  await writeFile(
    path.join(d, '9-late.conf'),
    '[[registry]]\nlocation = "quay.io"\n[[registry.mirror]]\nlocation = "late.local/quay"\n',
  );
  await writeFile(
    path.join(d, '10-early.conf'),
    `
[[registry]]
location = "quay.io"
[[registry.mirror]]
location = "early.local/quay"

[[registry]]
prefix = "quay.io/special"
location = "quay.io/special"
blocked = true
[[registry.mirror]]
location = "special.local/s"
`,
  );
  await writeFile(
    path.join(d, 'zz-ignored.conf.bak'),
    '[[registry]]\nlocation = "quay.io"\nblocked = true\n',
  );
  await writeFile(path.join(d, 'README'), 'not toml at all [[[');

  const conf = await RegistriesConf.loadDir(d, await RegistriesConf.load(base));
  t.strictSame(
    where(conf, 'quay.io/a/b'),
    ['mirror late.local/quay/a/b', 'quay.io/a/b'],
    'last drop-in in lexical order wins, replacing the whole rule',
  );
  t.strictSame(
    where(conf, 'registry.redhat.io/ubi9/ubi'),
    ['mirror base.local/rh/ubi9/ubi', 'registry.redhat.io/ubi9/ubi'],
    'untouched base rule stays',
  );
  t.strictSame(
    where(conf, 'quay.io/special/x'),
    ['mirror special.local/s/x'],
    'drop-in adds a new, more specific prefix',
  );
  t.equal(conf.rules.length, 3, 'one rule per prefix');

  const noBase = await RegistriesConf.loadDir(d);
  t.strictSame(
    where(noBase, 'registry.redhat.io/ubi9/ubi'),
    ['registry.redhat.io/ubi9/ubi'],
    'without a base only drop-ins count',
  );
  t.strictSame(where(noBase, 'quay.io/a/b'), ['mirror late.local/quay/a/b', 'quay.io/a/b']);

  const missing = await RegistriesConf.loadDir(
    path.join(dir, 'nope'),
    await RegistriesConf.load(base),
  );
  t.strictSame(
    where(missing, 'quay.io/a/b'),
    ['mirror base.local/quay/a/b', 'quay.io/a/b'],
    'a missing directory means no drop-ins',
  );

  await writeFile(path.join(d, '50-broken.conf'), '[[registry]\n');
  await t.rejects(RegistriesConf.loadDir(d), ociErr('INVALID_CONFIG'), 'bad TOML in a drop-in');
});

t.test(
  'a wildcard prefix "*.example.com" covers hosts below example.com, a longer prefix still wins',
  async (t) => {
    const conf = await load(
      t,
      `
[[registry]]
prefix = "*.example.com"
blocked = true
[[registry.mirror]]
location = "m.local/wild"
[[registry]]
prefix = "quay.example.com/team"
location = "m.local/team"
`,
    );
    t.strictSame(
      where(conf, 'a.b.example.com/x/y:1'),
      ['mirror m.local/wild/x/y'],
      'the host replaced, the path kept',
    );
    t.strictSame(
      where(conf, 'example.com/x/y:1'),
      ['example.com/x/y'],
      'the bare domain is not covered',
    );
    t.strictSame(
      where(conf, 'evilexample.com/x/y:1'),
      ['evilexample.com/x/y'],
      'a suffix without the dot is not covered',
    );
    t.strictSame(
      where(conf, 'quay.example.com/team/app:1'),
      ['m.local/team/app'],
      'the longer match',
    );
    t.strictSame(
      where(
        new RegistriesConf((await load(t, '[[registry]]\nprefix = "*.example.com"\n')).rules),
        'a.example.com/x:1',
      ),
      ['a.example.com/x'],
      'no location: the matched host',
    );
  },
);

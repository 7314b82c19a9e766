// Without --registries-conf, `bundle create` reads the system's containers-registries.conf(5)
// as podman and skopeo do: /etc/containers/registries.conf and registries.conf.d/ (taken under
// BUNDLE_SYSTEM_ROOT, a temp dir here), or $CONTAINERS_REGISTRIES_CONF. The original names are
// unresolvable (.invalid): only the mirror, a real docker-registry on 127.0.0.1, serves them.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode, keygen } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-sysconf-');
const keys = await keygen(work);
const app = await pushImage(
  { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }] },
  `${reg.host}/mirrored/app:v1`,
);
const ORIGINAL = 'registry.unresolvable.invalid/team/app:v1';
const mirrorConf = `[[registry]]\nprefix = "registry.unresolvable.invalid/team"\nlocation = "registry.unresolvable.invalid/team"\n[[registry.mirror]]\nlocation = "${reg.host}/mirrored"\ninsecure = true\n`;

let n = 0;
async function create(env: Record<string, string>, extra: string[] = [], image = ORIGINAL) {
  const dir = path.join(work, `run-${++n}`);
  const root = path.join(dir, 'root');
  const home = path.join(dir, 'home');
  await mkdir(path.join(root, 'etc', 'containers', 'registries.conf.d'), { recursive: true });
  await mkdir(home, { recursive: true });
  const output = path.join(dir, 'test.bundle');
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--key',
      keys.key,
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      output,
      '--version',
      '1',
      '--image',
      image,
      ...extra,
    ],
    {
      env: { BUNDLE_SYSTEM_ROOT: root, HOME: home, ...env },
    },
  );
  return { ...r, output, root, home };
}
const etcFile = (root: string, name: string) => path.join(root, 'etc', 'containers', name);

t.test('a mirror in the system registries.conf serves a name that does not resolve', async (t) => {
  const dir = path.join(work, 'pre');
  await mkdir(path.join(dir, 'etc', 'containers'), { recursive: true });
  await writeFile(
    etcFile(dir, 'registries.conf'),
    `unqualified-search-registries = ["docker.io"]\n${mirrorConf}`,
  );
  const r = await create({ BUNDLE_SYSTEM_ROOT: dir });
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(
    m.images.map((i) => [`${i.repository}:${i.tag}`, i.digest]),
    [[ORIGINAL, app.digest]],
    "the original name, the mirror's image",
  );
});

t.test('a drop-in of registries.conf.d is read too', async (t) => {
  const dir = path.join(work, 'dropin');
  await mkdir(path.join(dir, 'etc', 'containers', 'registries.conf.d'), { recursive: true });
  await writeFile(etcFile(dir, 'registries.conf.d/50-mirror.conf'), mirrorConf);
  const r = await create({ BUNDLE_SYSTEM_ROOT: dir });
  t.equal(r.code, 0, r.stderr);
  t.equal((await bundleJson(r.output)).images[0]!.digest, app.digest);
});

t.test('$CONTAINERS_REGISTRIES_CONF names the file instead', async (t) => {
  const file = path.join(work, 'env.conf');
  await writeFile(file, mirrorConf);
  const r = await create({ CONTAINERS_REGISTRIES_CONF: file });
  t.equal(r.code, 0, r.stderr);
  const missing = await create({ CONTAINERS_REGISTRIES_CONF: path.join(work, 'absent.conf') });
  t.equal(errorCode(missing.stderr), 'INVALID_CONFIG', 'a named file that is missing is an error');
  t.match(missing.stderr, /absent\.conf/, 'naming the file');
});

t.test('--registries-conf replaces the system configuration', async (t) => {
  const dir = path.join(work, 'replaced');
  await mkdir(path.join(dir, 'etc', 'containers'), { recursive: true });
  await writeFile(etcFile(dir, 'registries.conf'), mirrorConf);
  const empty = path.join(work, 'empty.conf');
  await writeFile(empty, '');
  const r = await create({ BUNDLE_SYSTEM_ROOT: dir }, ['--registries-conf', empty]);
  t.equal(r.code, 1, 'the mirror is not used');
  t.match(r.stderr, /registry\.unresolvable\.invalid/);
});

t.test('a system registries.conf that is not TOML is named', async (t) => {
  const dir = path.join(work, 'bad');
  await mkdir(path.join(dir, 'etc', 'containers'), { recursive: true });
  await writeFile(etcFile(dir, 'registries.conf'), '[[registry]\n');
  const r = await create({ BUNDLE_SYSTEM_ROOT: dir });
  t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
  t.match(
    r.stderr,
    new RegExp(
      `${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/etc/containers/registries.conf is not valid TOML`,
    ),
  );
});

t.test(
  "a wildcard prefix (containers-registries.conf(5)) covers the subdomains' hosts",
  async (t) => {
    const dir = path.join(work, 'wildcard');
    await mkdir(path.join(dir, 'etc', 'containers'), { recursive: true });
    await writeFile(
      etcFile(dir, 'registries.conf'),
      `[[registry]]\nprefix = "*.unresolvable.invalid"\n[[registry.mirror]]\nlocation = "${reg.host}/mirrored"\ninsecure = true\n`,
    );
    const r = await create({ BUNDLE_SYSTEM_ROOT: dir }, [], 'registry.unresolvable.invalid/app:v1');
    t.equal(r.code, 0, r.stderr);
    t.equal(
      (await bundleJson(r.output)).images[0]!.digest,
      app.digest,
      "pulled through the wildcard's mirror",
    );
  },
);

t.test(
  'a system registries.conf create cannot use is in the way of no create that pulls nothing from a registry',
  async (t) => {
    const dir = path.join(work, 'broken-system');
    await mkdir(path.join(dir, 'etc', 'containers'), { recursive: true });
    await writeFile(
      etcFile(dir, 'registries.conf'),
      '[[registry]]\nprefix = "*.example.com"\nlocation = "elsewhere.example.com"\n',
    );
    const layout = path.join(work, 'layout');
    await writeImageLayout(layout, {
      tag: 'v1',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': 'layout' }] }],
    });
    const local = await create(
      { BUNDLE_SYSTEM_ROOT: dir },
      [],
      `oci:${layout}:v1=registry.example.com/team/app:v1`,
    );
    t.equal(local.code, 0, local.stderr);
    const pulled = await create({ BUNDLE_SYSTEM_ROOT: dir });
    t.equal(errorCode(pulled.stderr), 'INVALID_CONFIG', 'a pull needs it: refused');
    t.match(
      pulled.stderr,
      /etc\/containers\/registries\.conf: wildcard prefix "\*\.example\.com" .*read by default, as podman does; --registries-conf FILE replaces it, \/dev\/null for none/,
    );
    t.equal(pulled.stderr.trim().split('\n').length, 1, 'one line');
  },
);

t.test(
  '/dev/null as --registries-conf or $CONTAINERS_REGISTRIES_CONF is no configuration',
  async (t) => {
    const dir = path.join(work, 'devnull');
    await mkdir(path.join(dir, 'etc', 'containers'), { recursive: true });
    await writeFile(etcFile(dir, 'registries.conf'), mirrorConf);
    for (const [name, r] of [
      [
        '--registries-conf',
        await create({ BUNDLE_SYSTEM_ROOT: dir }, ['--registries-conf', '/dev/null']),
      ],
      [
        'CONTAINERS_REGISTRIES_CONF',
        await create({ BUNDLE_SYSTEM_ROOT: dir, CONTAINERS_REGISTRIES_CONF: '/dev/null' }),
      ],
    ] as const) {
      t.equal(r.code, 1, `${name}: the system mirror is not used`);
      t.notMatch(r.stderr, /dev\/null|not a regular file/, `${name}: /dev/null read as empty`);
      t.match(r.stderr, /registry\.unresolvable\.invalid/, name);
    }
  },
);

t.test(
  "the tests' environment: neither the developer's $CONTAINERS_REGISTRIES_CONF nor ~/.config/containers reaches a create",
  async (t) => {
    const home = path.join(work, 'developer-home');
    await mkdir(path.join(home, '.config', 'containers'), { recursive: true });
    await writeFile(path.join(home, '.config', 'containers', 'registries.conf'), mirrorConf);
    const envFile = path.join(work, 'developer.conf');
    await writeFile(envFile, mirrorConf);
    for (const [name, value] of [
      ['HOME', home],
      ['CONTAINERS_REGISTRIES_CONF', envFile],
    ] as const) {
      const saved = process.env[name];
      process.env[name] = value;
      const r = await bundle([
        'create',
        '--quiet',
        '--key',
        keys.key,
        '--cache',
        path.join(work, `dev-cache-${name}`),
        '-o',
        path.join(work, `dev-${name}.bundle`),
        '--version',
        '1',
        '--image',
        ORIGINAL,
      ]);
      process.env[name] = saved;
      t.equal(r.code, 1, `${name} of the test process is not used: the mirror it names is not`);
    }
  },
);

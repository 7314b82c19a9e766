// The registries.conf.d drop-in, proven by podman 4.3 (same containers/image code as CRI-O):
// a pull of quay.io/ns/app@sha256:... succeeds although quay.io is unreachable, because the
// drop-in sends it to a real docker-registry on 127.0.0.1 that plays the local mirror and
// serves the image under mirrorPath('quay.io/ns/app').
//
// podman 4.3 does NOT read a registries.conf.d next to a custom CONTAINERS_REGISTRIES_CONF
// (checked: a drop-in in $(dirname CONTAINERS_REGISTRIES_CONF)/registries.conf.d is ignored).
// With CONTAINERS_REGISTRIES_CONF set it reads /etc/containers/registries.conf.d (never
// written here) plus the per-user $HOME/.config/containers/registries.conf.d, so the test
// points HOME at a temp dir and writes the drop-in there.
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { parseToml as parse } from './lib.js';
import { mirrorPath } from '@offline-bundle/oci';
import {
  MANAGED_MARKER,
  RuntimeError,
  removeDropIn,
  renderRegistriesDropIn,
  writeRegistriesDropIn,
} from '@offline-bundle/runtime';
import { pushImage } from '../helpers/images.mjs';
import { startRegistry } from '../helpers/registry.mjs';
import { tmpdir } from '../helpers/tmp.mjs';

function run(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

t.test(
  'renderRegistriesDropIn: valid TOML in the containers-registries.conf(5) shape',
  async (t) => {
    const text = renderRegistriesDropIn({
      mirror: '127.0.0.1:5000',
      repositories: [
        { repository: 'quay.io/ns/app', digestOnly: true },
        { repository: 'example.com:8443/team/tool', digestOnly: false },
        { repository: 'quay.io/ns/app', digestOnly: true },
        { repository: 'quay.io/ns/both', digestOnly: true },
        { repository: 'quay.io/ns/both', digestOnly: false },
      ],
    });
    t.equal(text.split('\n')[0], MANAGED_MARKER, 'marker on the first line');
    t.same(parse(text), {
      registry: [
        {
          prefix: 'example.com:8443/team/tool',
          location: 'example.com:8443/team/tool',
          mirror: [{ location: '127.0.0.1:5000/example.com_8443/team/tool', insecure: true }],
        },
        {
          prefix: 'quay.io/ns/app',
          location: 'quay.io/ns/app',
          mirror: [
            {
              location: '127.0.0.1:5000/quay.io/ns/app',
              insecure: true,
              'pull-from-mirror': 'digest-only',
            },
          ],
        },
        {
          // a tag reference to the same repository needs tags from the mirror
          prefix: 'quay.io/ns/both',
          location: 'quay.io/ns/both',
          mirror: [{ location: '127.0.0.1:5000/quay.io/ns/both', insecure: true }],
        },
      ],
    });
    for (const bad of [
      {
        mirror: '127.0.0.1:5000',
        repositories: [{ repository: 'quay.io/ns/app:v1', digestOnly: true }],
      },
      { mirror: '127.0.0.1:5000', repositories: [{ repository: 'busybox', digestOnly: true }] },
      {
        mirror: '127.0.0.1:5000',
        repositories: [{ repository: 'quay.io/ns/app"\n[x]', digestOnly: true }],
      },
      {
        mirror: 'http://127.0.0.1:5000',
        repositories: [{ repository: 'quay.io/ns/app', digestOnly: true }],
      },
      { mirror: '127.0.0.1:5000', repositories: [] },
    ]) {
      t.throws(() => renderRegistriesDropIn(bad), { code: 'INVALID_SPEC' }, JSON.stringify(bad));
    }
  },
);

t.test('write/remove: atomic, idempotent, never another file', async (t) => {
  const dir = await tmpdir(t, 'ob-rt-reg-');
  const spec = {
    mirror: '127.0.0.1:5000',
    repositories: [{ repository: 'quay.io/ns/app', digestOnly: true }],
  };
  const file = await writeRegistriesDropIn(dir, 'offline-bundle-mirror.conf', spec);
  t.equal(file, path.join(dir, 'offline-bundle-mirror.conf'));
  await writeRegistriesDropIn(dir, 'offline-bundle-mirror.conf', {
    ...spec,
    mirror: '127.0.0.1:6000',
  });
  t.match(await readFile(file, 'utf8'), /127\.0\.0\.1:6000/, 'rewritten in place');
  t.same(await readdir(dir), ['offline-bundle-mirror.conf'], 'no temp file left');
  await t.rejects(writeRegistriesDropIn(dir, '../escape.conf', spec), { code: 'INVALID_SPEC' });
  await t.rejects(
    writeRegistriesDropIn(dir, 'mirror.toml', spec),
    { code: 'INVALID_SPEC' },
    'containers/image reads *.conf only',
  );

  const foreign = path.join(dir, '01-admin.conf');
  await writeFile(foreign, '[[registry]]\nlocation = "quay.io"\n');
  await t.rejects(writeRegistriesDropIn(dir, '01-admin.conf', spec), { code: 'FOREIGN_FILE' });
  await t.rejects(removeDropIn(foreign), { code: 'FOREIGN_FILE' });
  t.equal(
    await readFile(foreign, 'utf8'),
    '[[registry]]\nlocation = "quay.io"\n',
    'foreign drop-in untouched',
  );

  t.equal(await removeDropIn(file), true);
  t.equal(await removeDropIn(file), false, 'second remove is a no-op');
  t.same(await readdir(dir), ['01-admin.conf']);

  const missing = await writeRegistriesDropIn(path.join(dir, 'missing'), 'x.conf', spec).catch(
    (e: unknown) => e,
  );
  t.ok(missing instanceof RuntimeError, 'a RuntimeError');
  t.equal((missing as RuntimeError).code, 'WRITE_FAILED', 'directory missing: WRITE_FAILED');
});

t.test('podman pulls by digest through the drop-in; digest-only refuses a tag', async (t) => {
  const reg = await startRegistry();
  t.teardown(() => reg.stop());
  const base = await tmpdir(t, 'ob-rt-podman-');
  const home = path.join(base, 'home');
  const dropInDir = path.join(home, '.config', 'containers', 'registries.conf.d');
  await mkdir(dropInDir, { recursive: true });
  // A registries.conf without any mirror: on its own, quay.io/... goes to quay.io.
  const conf = path.join(base, 'registries.conf');
  await writeFile(conf, 'unqualified-search-registries = []\n');
  const env = { ...process.env, HOME: home, CONTAINERS_REGISTRIES_CONF: conf };
  const podman = (ref: string) =>
    run(
      'podman',
      [
        '--root',
        path.join(base, 'root'),
        '--runroot',
        path.join(base, 'runroot'),
        '--storage-driver',
        'vfs',
        '--events-backend',
        'none',
        'pull',
        ref,
      ],
      env,
    );

  const app = await pushImage(
    {
      tag: 'v1',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app.txt': 'app v1' }] }],
    },
    `${reg.host}/${mirrorPath('quay.io/ns/app')}:v1`,
  );
  const tool = await pushImage(
    {
      tag: 'v2',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'tool.txt': 'tool v2' }] }],
    },
    `${reg.host}/${mirrorPath('quay.io/ns/tool')}:v2`,
  );
  const appRef = `quay.io/ns/app@${app.digest}`;

  const before = await podman(appRef);
  t.not(before.code, 0, 'without the drop-in the pull goes to quay.io and fails (no network)');

  await writeRegistriesDropIn(dropInDir, 'offline-bundle-mirror.conf', {
    mirror: reg.host,
    repositories: [
      { repository: 'quay.io/ns/app', digestOnly: true },
      { repository: 'quay.io/ns/tool', digestOnly: false },
    ],
  });

  const byDigest = await podman(appRef);
  t.equal(byDigest.code, 0, `podman pull ${appRef}: ${byDigest.stderr.trim().split('\n').pop()}`);
  t.equal(
    byDigest.stdout.trim(),
    app.manifests[0]?.config.replace('sha256:', ''),
    'podman printed the image ID (config digest)',
  );

  const byTag = await podman('quay.io/ns/app:v1');
  t.not(byTag.code, 0, 'digest-only: a tag pull is not served by the mirror');
  t.match(byTag.stderr, /quay\.io/, 'it went to quay.io instead');

  const toolTag = await podman('quay.io/ns/tool:v2');
  t.equal(
    toolTag.code,
    0,
    `a mirror without digest-only serves tags too: ${toolTag.stderr.trim().split('\n').pop()}`,
  );
  t.equal(toolTag.stdout.trim(), tool.manifests[0]?.config.replace('sha256:', ''));
});

// tier: unit
// AuthStore and defaultAuthFiles: containers-auth.json(5) lookup rules.
import t, { type Test } from 'tap';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { AuthStore, MAX_AUTH_FILE_BYTES, defaultAuthFiles } from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';

const ociErr = (code: string) => ({ name: 'OciError', code });
const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');

/** Writes each doc as a JSON auth file in one temp dir; returns the paths in order. */
async function authFiles(t: Test, ...docs: unknown[]): Promise<string[]> {
  const dir = await tmpdir(t);
  const out: string[] = [];
  for (const [i, doc] of docs.entries()) {
    const file = path.join(dir, `auth-${i}.json`);
    await writeFile(file, typeof doc === 'string' ? doc : JSON.stringify(doc));
    out.push(file);
  }
  return out;
}

t.test('the most specific key wins: host/ns/repo, then host/ns, then host', async (t) => {
  const files = await authFiles(t, {
    auths: {
      'quay.io': { auth: b64('host:h') },
      'quay.io/org': { auth: b64('ns:n') },
      'quay.io/org/app': { auth: b64('repo:r') },
      'quay.io/org/deep/er': { auth: b64('deep:d') },
    },
  });
  const store = new AuthStore(files);
  t.strictSame(await store.lookup('quay.io', 'org/app'), { username: 'repo', password: 'r' });
  t.strictSame(await store.lookup('quay.io', 'org/other'), { username: 'ns', password: 'n' });
  t.strictSame(
    await store.lookup('quay.io', 'org/deep/er/x'),
    { username: 'deep', password: 'd' },
    'nested namespace key',
  );
  t.strictSame(await store.lookup('quay.io', 'org/deep/x'), { username: 'ns', password: 'n' });
  t.strictSame(await store.lookup('quay.io', 'another/app'), { username: 'host', password: 'h' });
  t.strictSame(
    await store.lookup('quay.io', 'org/app/sub'),
    { username: 'repo', password: 'r' },
    'key covers repositories below it',
  );
  t.strictSame(
    await store.lookup('quay.io', 'organization/app'),
    { username: 'host', password: 'h' },
    '"quay.io/org" does not cover "quay.io/organization"',
  );
  t.equal(
    await store.lookup('registry.redhat.io', 'org/app'),
    undefined,
    'other hosts have nothing',
  );
  t.equal(
    await store.lookup('quay.io:8443', 'org/app'),
    undefined,
    'host:port is a different host',
  );
});

t.test('host keys with ports and password containing ":"', async (t) => {
  const [file] = await authFiles(t, {
    auths: { 'localhost:5000': { auth: b64('u:p:with:colons') } },
  });
  const store = new AuthStore([file!]);
  t.strictSame(
    await store.lookup('localhost:5000', 'app'),
    { username: 'u', password: 'p:with:colons' },
    'split at the first colon',
  );
  t.equal(await store.lookup('localhost', 'app'), undefined);
});

t.test('the first file with any match wins, even if a later file is more specific', async (t) => {
  const files = await authFiles(
    t,
    { auths: { 'quay.io': { auth: b64('first:1') } } },
    {
      auths: {
        'quay.io/org/app': { auth: b64('second:2') },
        'registry.redhat.io': { auth: b64('rh:3') },
      },
    },
  );
  const store = new AuthStore(files);
  t.strictSame(await store.lookup('quay.io', 'org/app'), { username: 'first', password: '1' });
  t.strictSame(
    await store.lookup('registry.redhat.io', 'ubi9/ubi'),
    { username: 'rh', password: '3' },
    'later files are consulted when earlier ones have no match',
  );
  const reversed = new AuthStore([...files].reverse());
  t.strictSame(
    await reversed.lookup('quay.io', 'org/app'),
    { username: 'second', password: '2' },
    'order of the file list decides',
  );
});

t.test('missing files are skipped; empty and auths-less files match nothing', async (t) => {
  const dir = await tmpdir(t);
  const files = await authFiles(
    t,
    {},
    { auths: {} },
    { auths: { 'quay.io': { auth: b64('u:p') } } },
  );
  const store = new AuthStore([path.join(dir, 'nope.json'), ...files]);
  t.strictSame(await store.lookup('quay.io', 'a/b'), { username: 'u', password: 'p' });
  t.equal(await new AuthStore([path.join(dir, 'nope.json')]).lookup('quay.io', 'a/b'), undefined);
  t.equal(await new AuthStore([]).lookup('quay.io', 'a/b'), undefined);
});

t.test('legacy docker keys: https://index.docker.io/v1/ and URL forms', async (t) => {
  const [file] = await authFiles(t, {
    auths: {
      'https://index.docker.io/v1/': { auth: b64('hub:secret') },
      'https://quay.io': { auth: b64('q:1') },
      'http://registry.local:5000/v2/': { auth: b64('l:2') },
    },
  });
  const store = new AuthStore([file!]);
  t.strictSame(
    await store.lookup('docker.io', 'library/busybox'),
    { username: 'hub', password: 'secret' },
    'index.docker.io/v1/ is docker.io',
  );
  t.strictSame(
    await store.lookup('quay.io', 'a/b'),
    { username: 'q', password: '1' },
    'scheme is dropped',
  );
  t.strictSame(
    await store.lookup('registry.local:5000', 'a'),
    { username: 'l', password: '2' },
    'scheme and /v2/ are dropped',
  );

  const [file2] = await authFiles(t, { auths: { 'index.docker.io': { auth: b64('a:1') } } });
  t.strictSame(
    await new AuthStore([file2!]).lookup('docker.io', 'library/busybox'),
    { username: 'a', password: '1' },
    'bare index.docker.io',
  );
  const [file3] = await authFiles(t, { auths: { 'registry-1.docker.io': { auth: b64('b:2') } } });
  t.strictSame(
    await new AuthStore([file3!]).lookup('docker.io', 'library/busybox'),
    { username: 'b', password: '2' },
    'registry-1.docker.io',
  );
  const [file4] = await authFiles(t, {
    auths: { 'docker.io/myorg': { auth: b64('org:3') }, 'docker.io': { auth: b64('all:4') } },
  });
  const s4 = new AuthStore([file4!]);
  t.strictSame(
    await s4.lookup('docker.io', 'myorg/app'),
    { username: 'org', password: '3' },
    'docker.io namespace key',
  );
  t.strictSame(await s4.lookup('docker.io', 'library/busybox'), { username: 'all', password: '4' });
});

t.test('identitytoken and username/password entries', async (t) => {
  const [file] = await authFiles(t, {
    auths: {
      'a.example.com': { identitytoken: 'refresh-123' },
      'b.example.com': { username: 'plain', password: 'pw' },
      'c.example.com': { username: 'nopass' },
      'd.example.com': {},
    },
  });
  const store = new AuthStore([file!]);
  t.strictSame(await store.lookup('a.example.com', 'x'), { identityToken: 'refresh-123' });
  t.strictSame(await store.lookup('b.example.com', 'x'), { username: 'plain', password: 'pw' });
  t.strictSame(await store.lookup('c.example.com', 'x'), { username: 'nopass', password: '' });
  t.strictSame(
    await store.lookup('d.example.com', 'x'),
    {},
    'an empty entry is an (anonymous) match',
  );
});

t.test('bad "auth" values are INVALID_CONFIG', async (t) => {
  const [file] = await authFiles(t, {
    auths: {
      'nocolon.example.com': { auth: b64('username') },
      'garbage.example.com': { auth: '%%%%' },
      'plaintext.example.com': { auth: 'user:password' },
      'stray.example.com': { auth: b64('user:pass') + '!!!' },
    },
  });
  const store = new AuthStore([file!]);
  await t.rejects(
    store.lookup('nocolon.example.com', 'x'),
    ociErr('INVALID_CONFIG'),
    'base64 of a string without ":"',
  );
  await t.rejects(
    store.lookup('garbage.example.com', 'x'),
    ociErr('INVALID_CONFIG'),
    'not base64 at all',
  );
  await t.rejects(
    store.lookup('plaintext.example.com', 'x'),
    ociErr('INVALID_CONFIG'),
    'user:password not base64-encoded',
  );
  await t.rejects(
    store.lookup('stray.example.com', 'x'),
    ociErr('INVALID_CONFIG'),
    'valid base64 followed by non-base64 characters',
  );
});

t.test('unreadable or invalid auth files are INVALID_CONFIG', async (t) => {
  const [bad] = await authFiles(t, '{ "auths": { "quay.io": ');
  t.throws(() => new AuthStore([bad!]), ociErr('INVALID_CONFIG'), 'not JSON');
  const dir = await tmpdir(t);
  t.throws(
    () => new AuthStore([dir]),
    ociErr('NOT_A_REGULAR_FILE'),
    'a directory is not silently skipped',
  );
  const [huge] = await authFiles(t, `{"auths":{},"pad":"${'x'.repeat(MAX_AUTH_FILE_BYTES)}"}`);
  t.throws(
    () => new AuthStore([huge!]),
    ociErr('FILE_TOO_LARGE'),
    `an auth file over ${MAX_AUTH_FILE_BYTES} bytes`,
  );
});

t.test(
  'defaultAuthFiles follows containers-auth.json(5) and containers/image getAuthFilePaths',
  async (t) => {
    const paths = (env: NodeJS.ProcessEnv, uid = 1000) =>
      defaultAuthFiles(env, { uid, systemRoot: '/sys-root' }).map((f) => f.path);
    t.strictSame(
      paths({
        REGISTRY_AUTH_FILE: '/x/auth.json',
        HOME: '/home/u',
        XDG_RUNTIME_DIR: '/run/user/1',
      }),
      ['/x/auth.json'],
      'REGISTRY_AUTH_FILE replaces all defaults',
    );
    t.strictSame(paths({ HOME: '/home/u', XDG_RUNTIME_DIR: '/run/user/1' }), [
      '/run/user/1/containers/auth.json',
      '/home/u/.config/containers/auth.json',
      '/home/u/.docker/config.json',
      '/home/u/.dockercfg',
    ]);
    t.strictSame(
      paths({ HOME: '/home/u', XDG_CONFIG_HOME: '/cfg' }),
      [
        '/sys-root/run/containers/1000/auth.json',
        '/cfg/containers/auth.json',
        '/home/u/.docker/config.json',
        '/home/u/.dockercfg',
      ],
      'no XDG_RUNTIME_DIR: /run/containers/$UID (under the system root); XDG_CONFIG_HOME honoured',
    );
    t.strictSame(
      paths({ HOME: '/home/u', DOCKER_CONFIG: '/dcfg' }).slice(1, 3),
      ['/home/u/.config/containers/auth.json', '/dcfg/config.json'],
      'DOCKER_CONFIG replaces ~/.docker (as containers/image getAuthFilePaths)',
    );
    t.strictSame(
      paths({ HOME: '/root' }, 0),
      [
        '/sys-root/run/containers/0/auth.json',
        '/root/.config/containers/auth.json',
        '/root/.docker/config.json',
        '/root/.dockercfg',
        '/sys-root/etc/containers/auth.json',
      ],
      'root (podman login without XDG_RUNTIME_DIR) reads /run/containers/0, and /etc/containers/auth.json last',
    );
    t.equal(
      paths({ HOME: '/root', INVOCATION_ID: 'x' }, 0)[0],
      '/sys-root/etc/containers/auth.json',
      'root in a systemd unit reads the system file first',
    );
    t.ok(
      defaultAuthFiles({ HOME: '/home/u' }, { uid: 1 }).find((f) => f.path === '/home/u/.dockercfg')
        ?.legacy,
      '.dockercfg is the legacy format',
    );
  },
);

t.test('legacy ~/.dockercfg, credsStore-style empty entries, --creds', async (t) => {
  const [legacy] = await authFiles(t, {
    'https://old.example.com': { auth: b64('old:o'), email: 'x@y' },
  });
  t.strictSame(
    await new AuthStore([{ path: legacy!, legacy: true }]).lookup('old.example.com', 'a'),
    { username: 'old', password: 'o' },
  );
  t.strictSame(
    await new AuthStore([{ path: legacy! }]).lookup('old.example.com', 'a'),
    undefined,
    'read as auth.json it has no "auths"',
  );
  const [file] = await authFiles(t, { auths: { 'quay.io': { auth: b64('file:f') } } });
  t.strictSame(
    await new AuthStore([file!], { creds: 'cli:p:w' }).lookup('quay.io', 'a'),
    { username: 'cli', password: 'p:w' },
    '--creds wins over files',
  );
  t.throws(
    () => new AuthStore([], { creds: 'nopassword' }),
    ociErr('INVALID_CONFIG'),
    '--creds without a colon',
  );
});

t.test(
  'the system-wide /etc/containers/auth.json is refused when others may read it',
  async (t) => {
    const [file] = await authFiles(t, { auths: { 'quay.io': { auth: b64('sys:s') } } });
    await chmod(file!, 0o644);
    t.throws(() => new AuthStore([{ path: file!, ownerOnly: true }]), ociErr('INVALID_CONFIG'));
    await chmod(file!, 0o600);
    t.strictSame(await new AuthStore([{ path: file!, ownerOnly: true }]).lookup('quay.io', 'a'), {
      username: 'sys',
      password: 's',
    });
  },
);

t.test('REGISTRY_AUTH_FILE end to end: the override file is the only one consulted', async (t) => {
  const home = await tmpdir(t);
  await mkdir(path.join(home, '.docker'));
  await writeFile(
    path.join(home, '.docker', 'config.json'),
    JSON.stringify({ auths: { 'quay.io': { auth: b64('home:h') } } }),
  );
  const [override] = await authFiles(t, { auths: { 'quay.io': { auth: b64('override:o') } } });
  t.strictSame(
    await new AuthStore(defaultAuthFiles({ HOME: home }, { systemRoot: home })).lookup(
      'quay.io',
      'a/b',
    ),
    { username: 'home', password: 'h' },
    'without the override, ~/.docker/config.json is used',
  );
  t.strictSame(
    await new AuthStore(defaultAuthFiles({ REGISTRY_AUTH_FILE: override!, HOME: home })).lookup(
      'quay.io',
      'a/b',
    ),
    { username: 'override', password: 'o' },
  );
  const none = defaultAuthFiles({
    REGISTRY_AUTH_FILE: path.join(home, 'missing.json'),
    HOME: home,
  });
  t.equal(
    await new AuthStore(none).lookup('quay.io', 'a/b'),
    undefined,
    'a missing override file means anonymous, not a fallback to ~/.docker',
  );
});

t.test(
  'AuthStore.fromOptions: an explicit --authfile is the only file, and must exist',
  async (t) => {
    const [file] = await authFiles(t, { auths: { 'quay.io': { auth: b64('cli:c') } } });
    t.strictSame(await AuthStore.fromOptions(file).lookup('quay.io', 'a'), {
      username: 'cli',
      password: 'c',
    });
    t.throws(() => AuthStore.fromOptions(`${file}.missing`), {
      code: 'INVALID_CONFIG',
      message: /--authfile .*missing: no such file/,
    });
  },
);

// Registry access as skopeo has it, each case against a real docker-registry on 127.0.0.1:
// TLS from a test CA found through certs.d (and --cert-dir, client certificates), a proxy
// (a CONNECT proxy written here), docker-credential-* helpers (a script on PATH), root's
// /run/containers/0/auth.json, --creds, a missing --authfile, and the plain-http hint.
// System paths (/etc/containers, /run/containers) are read under BUNDLE_SYSTEM_ROOT, a temp dir.
import t from 'tap';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { makeTestCa } from '../helpers/test-ca.mjs';
import { startConnectProxy } from '../helpers/connect-proxy.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  BUNDLE_BIN,
  bundle,
  bundleJson,
  errorCode,
  hermeticEnv,
  keygen,
  listDir,
  q,
  writeAuthFile,
} from './lib.js';

const work = await tmpdir(t, 'ob-access-');
const keys = await keygen(work);
const ca = await makeTestCa(await mkdirP(path.join(work, 'ca')), {
  names: ['127.0.0.1', 'registry.factory.test'],
});
const spec = (secret: string) => ({
  tag: 'v1',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ secret }] }],
});

async function mkdirP(dir: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  return dir;
}

let n = 0;
/** `bundle create` of one image into a fresh dir; env: no auth file, a system root of its own. */
async function create(args: string[], env: Record<string, string | undefined> = {}) {
  const dir = await mkdirP(path.join(work, `run-${++n}`));
  const outDir = await mkdirP(path.join(dir, 'out'));
  const output = path.join(outDir, 'a.bundle');
  const r = await bundle(
    [
      'create',
      '--key',
      keys.key,
      '--version',
      '1.0',
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      output,
      ...args,
    ],
    {
      env: { BUNDLE_SYSTEM_ROOT: await mkdirP(path.join(dir, 'root')), ...env },
    },
  );
  return { ...r, output, outDir, root: path.join(dir, 'root') };
}

/** A certs.d directory for `host` under `base`, holding the test CA (and the client certificate). */
async function certsD(base: string, host: string, client = false): Promise<string> {
  const dir = await mkdirP(path.join(base, host));
  await copyFile(ca.caCert, path.join(dir, 'ca.crt'));
  if (client) {
    await copyFile(ca.clientCert, path.join(dir, 'client.cert'));
    await copyFile(ca.clientKey, path.join(dir, 'client.key'));
  }
  return dir;
}

t.test(
  'TLS from a private CA: certs.d under /etc/containers and /etc/docker, --cert-dir, client certificates',
  async (t) => {
    const reg = await startRegistry({ tls: { certificate: ca.serverCert, key: ca.serverKey } });
    t.teardown(() => reg.stop());
    const img = await pushImage(spec('behind TLS'), `${reg.host}/app:v1`);

    const untrusted = await create(['--image', img.ref]);
    t.equal(untrusted.code, 1);
    t.equal(errorCode(untrusted.stderr), 'TLS_ERROR', 'an unknown CA is a TLS error');
    t.match(
      untrusted.stderr,
      new RegExp(
        `/etc/containers/certs\\.d/${reg.host.replace(/\./g, '\\.')}/ca\\.crt or pass --cert-dir`,
      ),
      'the hint names the certs.d path',
    );
    t.notMatch(untrusted.stderr, /retrying/, 'not retried: no retry can fix a certificate');
    t.same(await listDir(untrusted.outDir), []);

    const run = n + 1;
    await certsD(path.join(work, `run-${run}`, 'root', 'etc', 'containers', 'certs.d'), reg.host);
    const viaContainers = await create(['--image', img.ref]);
    t.equal(
      viaContainers.code,
      0,
      `/etc/containers/certs.d/HOST:PORT/ca.crt: ${viaContainers.stderr}`,
    );
    t.equal((await bundleJson(viaContainers.output)).images[0]!.digest, img.digest);

    await certsD(path.join(work, `run-${n + 1}`, 'root', 'etc', 'docker', 'certs.d'), reg.host);
    const viaDocker = await create(['--image', img.ref]);
    t.equal(viaDocker.code, 0, `/etc/docker/certs.d/HOST:PORT/ca.crt: ${viaDocker.stderr}`);

    const certDir = await certsD(path.join(work, 'cert-dir'), 'any');
    const viaFlag = await create(['--image', img.ref, '--cert-dir', certDir]);
    t.equal(viaFlag.code, 0, `--cert-dir: ${viaFlag.stderr}`);

    const keyOnly = await mkdirP(path.join(work, 'key-only'));
    await copyFile(ca.clientKey, path.join(keyOnly, 'client.key'));
    const bad = await create(['--image', img.ref, '--cert-dir', keyOnly]);
    t.equal(errorCode(bad.stderr), 'INVALID_CONFIG', 'a key without its .cert');
    t.match(bad.stderr, /client\.key is a key without its client certificate client\.cert/);
  },
);

t.test('a registry that requires a client certificate: *.cert + *.key in certs.d', async (t) => {
  const reg = await startRegistry({
    tls: { certificate: ca.serverCert, key: ca.serverKey, clientcas: [ca.caCert] },
  });
  t.teardown(() => reg.stop());
  const skopeoDir = await certsD(path.join(work, 'skopeo-certs'), 'x', true);
  const img = await pushImage(spec('mutual TLS'), `${reg.host}/app:v1`, { certDir: skopeoDir });

  const caOnly = await create([
    '--image',
    img.ref,
    '--cert-dir',
    await certsD(path.join(work, 'ca-only'), 'x'),
  ]);
  t.equal(caOnly.code, 1, 'without a client certificate the registry refuses the connection');
  const mutual = await create(['--image', img.ref, '--cert-dir', skopeoDir]);
  t.equal(mutual.code, 0, mutual.stderr);
  t.equal((await bundleJson(mutual.output)).images[0]!.digest, img.digest);
});

t.test(
  'HTTPS_PROXY / https_proxy / NO_PROXY: a registry whose name only the proxy resolves',
  async (t) => {
    const reg = await startRegistry({ tls: { certificate: ca.serverCert, key: ca.serverKey } });
    t.teardown(() => reg.stop());
    const port = reg.host.split(':')[1]!;
    const name = `registry.factory.test:${port}`;
    await pushImage(spec('through the proxy'), `${reg.host}/app:v1`);
    const proxy = await startConnectProxy(t, { [name]: reg.host });
    const certDir = await certsD(path.join(work, 'proxy-certs'), 'x');

    const upper = await create(['--image', `${name}/app:v1`, '--cert-dir', certDir], {
      HTTPS_PROXY: proxy.url,
    });
    t.equal(upper.code, 0, `HTTPS_PROXY: ${upper.stderr}`);
    t.ok(
      proxy.seen.includes(`CONNECT ${name}`),
      `the proxy saw CONNECT ${name} (${proxy.seen.join(', ')})`,
    );
    t.equal(
      (await bundleJson(upper.output)).images[0]!.repository,
      `${name}/app`,
      'the bundle keeps the name',
    );

    proxy.seen.length = 0;
    const lower = await create(['--image', `${name}/app:v1`, '--cert-dir', certDir], {
      https_proxy: proxy.url,
    });
    t.equal(lower.code, 0, `https_proxy: ${lower.stderr}`);
    t.ok(proxy.seen.includes(`CONNECT ${name}`));

    proxy.seen.length = 0;
    const bypass = await create(['--image', `${name}/app:v1`, '--cert-dir', certDir], {
      HTTPS_PROXY: proxy.url,
      NO_PROXY: 'factory.test',
    });
    t.equal(bypass.code, 1, 'NO_PROXY: connected directly, where the name does not resolve');
    t.equal(errorCode(bypass.stderr), 'NETWORK_ERROR');
    t.same(proxy.seen, [], 'the proxy saw nothing');

    proxy.seen.length = 0;
    const loopback = await create(['--image', `${reg.host}/app:v1`, '--cert-dir', certDir], {
      HTTPS_PROXY: proxy.url,
    });
    t.equal(loopback.code, 0, `127.0.0.1 is never proxied (as Go's net/http): ${loopback.stderr}`);
    t.same(proxy.seen, []);
  },
);

t.test(
  'credential helpers: credHelpers and credsStore run docker-credential-NAME from PATH',
  async (t) => {
    const reg = await startRegistry({ htpasswd: { user: 'alice', password: 'wonderland' } });
    t.teardown(() => reg.stop());
    const img = await pushImage(spec('helper'), `${reg.host}/private/app:v1`, { creds: reg.creds });
    const bin = await mkdirP(path.join(work, 'bin'));
    const log = path.join(work, 'helper.log');
    // the docker-credential-helpers protocol: "get", the server on stdin, JSON on stdout
    await writeFile(
      path.join(bin, 'docker-credential-test'),
      `#!/bin/sh
server=$(cat)
echo "$1 $server" >> ${log}
if [ "$server" = "${reg.host}" ]; then
  printf '{"ServerURL":"%s","Username":"alice","Secret":"wonderland"}' "$server"
else
  echo "credentials not found in native keychain"; exit 1
fi
`,
    );
    await chmod(path.join(bin, 'docker-credential-test'), 0o755);
    await writeFile(path.join(bin, 'docker-credential-chatty'), '#!/bin/sh\nyes credentials\n');
    await chmod(path.join(bin, 'docker-credential-chatty'), 0o755);
    const env = (home: string) => ({
      REGISTRY_AUTH_FILE: undefined,
      XDG_RUNTIME_DIR: undefined,
      HOME: home,
      PATH: `${bin}:${process.env.PATH}`,
    });

    const helpersHome = await mkdirP(path.join(work, 'home-helpers'));
    await mkdirP(path.join(helpersHome, '.docker'));
    await writeFile(
      path.join(helpersHome, '.docker', 'config.json'),
      JSON.stringify({ credHelpers: { [reg.host]: 'test' } }),
    );
    const viaHelpers = await create(['--tls-verify=false', '--image', img.ref], env(helpersHome));
    t.equal(viaHelpers.code, 0, `credHelpers: ${viaHelpers.stderr}`);
    t.match(
      await readFile(log, 'utf8'),
      `get ${reg.host}\n`,
      'the helper was asked for the registry',
    );

    const storeHome = await mkdirP(path.join(work, 'home-store'));
    await mkdirP(path.join(storeHome, '.docker'));
    await writeFile(
      path.join(storeHome, '.docker', 'config.json'),
      JSON.stringify({ auths: { [reg.host]: {} }, credsStore: 'test' }),
    );
    const viaStore = await create(['--tls-verify=false', '--image', img.ref], env(storeHome));
    t.equal(viaStore.code, 0, `credsStore: ${viaStore.stderr}`);

    const missingHome = await mkdirP(path.join(work, 'home-missing'));
    await mkdirP(path.join(missingHome, '.docker'));
    await writeFile(
      path.join(missingHome, '.docker', 'config.json'),
      JSON.stringify({ credHelpers: { [reg.host]: 'absent' } }),
    );
    const missing = await create(['--tls-verify=false', '--image', img.ref], env(missingHome));
    t.equal(errorCode(missing.stderr), 'CREDENTIAL_HELPER_ERROR');
    t.match(
      missing.stderr,
      /docker-credential-absent \(from credHelpers in .*config\.json\) is not on PATH/,
    );

    const chattyHome = await mkdirP(path.join(work, 'home-chatty'));
    await mkdirP(path.join(chattyHome, '.docker'));
    await writeFile(
      path.join(chattyHome, '.docker', 'config.json'),
      JSON.stringify({ credsStore: 'chatty' }),
    );
    const chatty = await create(['--tls-verify=false', '--image', img.ref], env(chattyHome));
    t.equal(
      errorCode(chatty.stderr),
      'CREDENTIAL_HELPER_ERROR',
      'a helper that never stops writing is stopped',
    );
    t.match(chatty.stderr, /wrote more than 65536 bytes/);
  },
);

t.test('auth.json where podman and skopeo keep it; --creds; a missing --authfile', async (t) => {
  const reg = await startRegistry({ htpasswd: { user: 'alice', password: 'wonderland' } });
  t.teardown(() => reg.stop());
  const img = await pushImage(spec('root login'), `${reg.host}/private/app:v1`, {
    creds: reg.creds,
  });
  const home = await mkdirP(path.join(work, 'home-empty'));
  const env = { REGISTRY_AUTH_FILE: undefined, XDG_RUNTIME_DIR: undefined, HOME: home };

  // root's "podman login" without XDG_RUNTIME_DIR writes /run/containers/0/auth.json
  await writeAuthFile(
    path.join(
      work,
      `run-${n + 1}`,
      'root',
      'run',
      'containers',
      String(process.getuid!()),
      'auth.json',
    ),
    reg.host,
    reg.creds!,
  );
  const rootLogin = await create(['--tls-verify=false', '--image', img.ref], env);
  t.equal(rootLogin.code, 0, `/run/containers/$UID/auth.json: ${rootLogin.stderr}`);

  const anonymous = await create(['--tls-verify=false', '--image', img.ref], env);
  t.equal(errorCode(anonymous.stderr), 'UNAUTHORIZED', 'the same run without that file');

  const runtimeDir = await mkdirP(path.join(work, 'xdg-runtime'));
  await writeAuthFile(path.join(runtimeDir, 'containers', 'auth.json'), reg.host, reg.creds!);
  const xdg = await create(['--tls-verify=false', '--image', img.ref], {
    ...env,
    XDG_RUNTIME_DIR: runtimeDir,
  });
  t.equal(xdg.code, 0, `$XDG_RUNTIME_DIR/containers/auth.json: ${xdg.stderr}`);

  const legacyHome = await mkdirP(path.join(work, 'home-legacy'));
  await writeFile(
    path.join(legacyHome, '.dockercfg'),
    JSON.stringify({
      [`https://${reg.host}`]: { auth: Buffer.from(reg.creds!).toString('base64'), email: 'a@b' },
    }),
  );
  const legacy = await create(['--tls-verify=false', '--image', img.ref], {
    ...env,
    HOME: legacyHome,
  });
  t.equal(legacy.code, 0, `~/.dockercfg: ${legacy.stderr}`);

  const creds = await create(
    ['--tls-verify=false', '--image', img.ref, '--creds', reg.creds!],
    env,
  );
  t.equal(creds.code, 0, `--creds: ${creds.stderr}`);
  const wrong = await create(
    ['--tls-verify=false', '--image', img.ref, '--creds', 'alice:nope'],
    env,
  );
  t.equal(errorCode(wrong.stderr), 'UNAUTHORIZED', '--creds with a wrong password');

  // --creds USER: the password is asked on the terminal (a pty from script(1)), not echoed
  const dir = await mkdirP(path.join(work, 'prompt'));
  const output = path.join(dir, 'a.bundle');
  const cmd = [
    process.execPath,
    BUNDLE_BIN,
    'create',
    '--tls-verify=false',
    '--image',
    img.ref,
    '--creds',
    'alice',
    '--key',
    keys.key,
    '--version',
    '1.0',
    '--cache',
    path.join(dir, 'cache'),
    '-o',
    output,
  ]
    .map(q)
    .join(' ');
  const child = spawn('script', ['-qec', cmd, '/dev/null'], {
    env: hermeticEnv({ ...env, BUNDLE_SYSTEM_ROOT: dir }),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let screen = '';
  let typed = false;
  child.stdout.on('data', (d: Buffer) => {
    screen += d;
    if (!typed && screen.includes('Password for alice: ')) {
      typed = true;
      child.stdin.write('wonderland\r');
    }
  });
  const code = await new Promise<number | null>((r) => child.once('close', (c) => r(c)));
  t.equal(code, 0, `--creds alice, password typed at the prompt: ${screen}`);
  t.notMatch(screen, /wonderland/, 'the password is not echoed');
  t.equal((await bundleJson(output)).images[0]!.digest, img.digest);
  const noTty = await create(['--tls-verify=false', '--image', img.ref, '--creds', 'alice'], env);
  t.match(
    noTty.stderr,
    /--creds without a password needs a terminal to ask it on/,
    'without a terminal: an error, not a hang',
  );

  const absent = path.join(work, 'no-such-auth.json');
  const missing = await create(['--tls-verify=false', '--image', img.ref, '--authfile', absent]);
  t.equal(missing.code, 1);
  t.equal(errorCode(missing.stderr), 'INVALID_CONFIG');
  t.match(missing.stderr, `--authfile ${absent}: no such file`, 'names the file');
  t.equal(missing.stderr.trim().split('\n').length, 1, 'one line');
});

t.test(
  'plain-http registry without --tls-verify=false: one line that names the fix, no retries',
  async (t) => {
    const reg = await startRegistry();
    t.teardown(() => reg.stop());
    const img = await pushImage(spec('plain'), `${reg.host}/app:v1`);
    const r = await create(['--image', img.ref]);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'TLS_ERROR');
    t.equal(
      r.stderr
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('bundle:')).length,
      1,
    );
    t.match(r.stderr, `${reg.host} answered plain HTTP to a TLS request: pass --tls-verify=false`);
    t.notMatch(r.stderr, /retrying|SSL routines/, 'no retries, no OpenSSL text');

    const ok = await create(['--tls-verify=false', '--image', img.ref]);
    t.equal(ok.code, 0, ok.stderr);
  },
);

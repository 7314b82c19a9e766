// The pieces of registry access, one by one: proxy variables, certs.d lookup and reading,
// docker-credential-* helpers (with their time and output limits), dir: sources.
import t from 'tap';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fetchStoreSignatures } from '@offline-bundle/openshift-release';
import {
  AuthStore,
  DirSource,
  MAX_CERT_FILE_BYTES,
  certDirFor,
  helperCredentials,
  readCertDir,
} from '@offline-bundle/image-fetch';
import { bypassesProxy, proxyFromEnv } from '@offline-bundle/host';
import { startConnectProxy } from '../helpers/connect-proxy.mjs';
import { makeTestCa } from '../helpers/test-ca.mjs';
import { tmpdir } from '../helpers/tmp.mjs';

const ociErr = (code: string, message?: RegExp) => ({
  name: 'OciError',
  code,
  ...(message ? { message } : {}),
});

t.test('proxyFromEnv reads the variables as Go does for skopeo', async (t) => {
  t.equal(proxyFromEnv({}), undefined, 'no proxy: none');
  t.equal(proxyFromEnv({ NO_PROXY: 'x' }), undefined, 'NO_PROXY alone is no proxy');
  t.strictSame(
    proxyFromEnv({ HTTPS_PROXY: 'http://a:3128', https_proxy: 'http://b:3128', no_proxy: '.corp' }),
    {
      httpProxy: '',
      httpsProxy: 'http://a:3128',
      noProxy: '.corp,localhost,127.0.0.1,[::1]',
    },
    'upper case wins; loopback is never proxied',
  );
  t.equal(
    proxyFromEnv({ http_proxy: 'proxy.corp:8080' })?.httpProxy,
    'http://proxy.corp:8080',
    'a bare host:port is http://',
  );
});

t.test("bypassesProxy reads NO_PROXY as Go's httpproxy", async (t) => {
  const cases: [string, string, boolean][] = [
    ['reg.corp.example', '', false],
    ['reg.corp.example', '*', true],
    ['reg.corp.example', 'corp.example', true],
    ['corp.example', 'corp.example', true],
    ['reg.corp.example', '.corp.example', true],
    ['corp.example', '.corp.example', false],
    ['corp.example', '*.corp.example', false],
    ['reg.corp.example', '*.corp.example', true],
    ['notcorp.example', 'corp.example', false],
    ['reg.corp.example:5000', 'reg.corp.example:5000', true],
    ['reg.corp.example:5001', 'reg.corp.example:5000', false],
    ['reg.corp.example', 'reg.corp.example:443', true],
    ['10.1.2.3:5000', '10.0.0.0/8', true],
    ['11.1.2.3:5000', '10.0.0.0/8', false],
    ['10.1.2.3', '10.1.2.3', true],
    ['[fd00::5]:5000', 'fd00::/8', true],
    ['[fd00::5]:5000', 'fd00::5', true],
    ['127.0.0.2:5000', '', true],
    ['localhost:5000', '', true],
    ['[::1]:5000', '', true],
    ['Reg.Corp.Example', 'other.example, CORP.example', true],
  ];
  for (const [host, noProxy, want] of cases)
    t.equal(bypassesProxy(host, noProxy), want, `${host} with NO_PROXY=${JSON.stringify(noProxy)}`);
});

t.test(
  'certDirFor: --cert-dir, else ~/.config/containers/certs.d, /etc/containers/certs.d, /etc/docker/certs.d',
  async (t) => {
    const root = await tmpdir(t);
    const home = await tmpdir(t);
    const host = 'reg.example.com:5000';
    t.equal(await certDirFor(host, { systemRoot: root, home }), undefined, 'none exists');
    await mkdir(path.join(root, 'etc', 'docker', 'certs.d', host), { recursive: true });
    t.equal(
      await certDirFor(host, { systemRoot: root, home }),
      path.join(root, 'etc', 'docker', 'certs.d', host),
    );
    await mkdir(path.join(root, 'etc', 'containers', 'certs.d', host), { recursive: true });
    t.equal(
      await certDirFor(host, { systemRoot: root, home }),
      path.join(root, 'etc', 'containers', 'certs.d', host),
      '/etc/containers before /etc/docker',
    );
    await mkdir(path.join(home, '.config', 'containers', 'certs.d', host), { recursive: true });
    t.equal(
      await certDirFor(host, { systemRoot: root, home }),
      path.join(home, '.config', 'containers', 'certs.d', host),
      '$HOME first',
    );
    t.equal(
      await certDirFor(host, { systemRoot: root, home, certDir: '/flag' }),
      '/flag',
      '--cert-dir overrides all',
    );
    t.equal(
      await certDirFor('reg.example.com', { systemRoot: root, home }),
      undefined,
      'the port is part of the name',
    );
  },
);

t.test('readCertDir: *.crt are CAs, *.cert + *.key a client certificate; limits', async (t) => {
  const dir = await tmpdir(t);
  await writeFile(path.join(dir, 'b.crt'), 'CA-B');
  await writeFile(path.join(dir, 'a.crt'), 'CA-A');
  await writeFile(path.join(dir, 'me.cert'), 'CERT');
  await writeFile(path.join(dir, 'me.key'), 'KEY');
  await writeFile(path.join(dir, 'README'), 'ignored');
  t.strictSame(await readCertDir(dir), { dir, ca: ['CA-A', 'CA-B'], cert: 'CERT', key: 'KEY' });

  const orphan = await tmpdir(t);
  await writeFile(path.join(orphan, 'me.cert'), 'CERT');
  await t.rejects(
    readCertDir(orphan),
    ociErr(
      'INVALID_CONFIG',
      /me\.cert is a client certificate without its key me\.key \(a CA certificate must end in \.crt\)/,
    ),
  );

  const huge = await tmpdir(t);
  await writeFile(path.join(huge, 'ca.crt'), Buffer.alloc(MAX_CERT_FILE_BYTES + 1, 0x41));
  await t.rejects(
    readCertDir(huge),
    ociErr('INVALID_CONFIG', /ca\.crt is over 1048576 bytes/),
    `a .crt over ${MAX_CERT_FILE_BYTES} bytes is refused`,
  );

  await t.rejects(
    readCertDir(path.join(huge, 'nope')),
    ociErr('INVALID_CONFIG', /cannot read certificate directory/),
    'a --cert-dir that does not exist',
  );
});

t.test(
  'helperCredentials: the docker-credential-helpers protocol, bounded in time and output',
  async (t) => {
    const bin = await tmpdir(t);
    const helper = async (name: string, script: string) => {
      await writeFile(path.join(bin, `docker-credential-${name}`), `#!/bin/sh\n${script}\n`);
      await chmod(path.join(bin, `docker-credential-${name}`), 0o755);
    };
    await helper(
      'pw',
      'read -r s; printf \'{"ServerURL":"%s","Username":"u-%s","Secret":"p"}\' "$s" "$s"',
    );
    await helper('token', 'printf \'{"Username":"<token>","Secret":"refresh"}\'');
    await helper('none', 'echo "credentials not found in native keychain"; exit 1');
    await helper('broken', 'echo "keychain locked" >&2; exit 3');
    await helper('garbage', 'echo hello');
    await helper('slow', 'exec sleep 60');
    await helper('flood', 'exec yes');
    const opts = { env: { PATH: `${bin}:/usr/bin:/bin` } };

    t.strictSame(
      await helperCredentials('pw', 'reg:5000', 'test', opts),
      { username: 'u-reg:5000', password: 'p' },
      'the server is read from stdin',
    );
    t.strictSame(
      await helperCredentials('token', 'reg', 'test', opts),
      { identityToken: 'refresh' },
      '"<token>" is an identity token',
    );
    t.equal(await helperCredentials('none', 'reg', 'test', opts), undefined, 'not logged in');
    await t.rejects(
      helperCredentials('broken', 'reg', 'credHelpers in X', opts),
      ociErr(
        'CREDENTIAL_HELPER_ERROR',
        /docker-credential-broken \(from credHelpers in X\) failed for reg: keychain locked/,
      ),
    );
    await t.rejects(
      helperCredentials('garbage', 'reg', 'test', opts),
      ociErr('CREDENTIAL_HELPER_ERROR', /not JSON/),
    );
    await t.rejects(
      helperCredentials('absent', 'reg', 'test', opts),
      ociErr('CREDENTIAL_HELPER_ERROR', /is not on PATH/),
    );
    await t.rejects(
      helperCredentials('../../bin/sh', 'reg', 'test', opts),
      ociErr('INVALID_CONFIG'),
      'a helper name is no path',
    );
    await t.rejects(
      helperCredentials('slow', 'reg', 'test', { ...opts, timeoutMs: 300 }),
      ociErr('CREDENTIAL_HELPER_ERROR', /did not answer within/),
      'a helper that hangs is killed',
    );
    await t.rejects(
      helperCredentials('flood', 'reg', 'test', opts),
      ociErr('CREDENTIAL_HELPER_ERROR', /wrote more than 65536 bytes/),
      'a helper that floods is killed',
    );

    const config = path.join(bin, 'config.json');
    await writeFile(
      config,
      JSON.stringify({
        credHelpers: { 'docker.io': 'pw', 'quay.io': 'none' },
        credsStore: 'token',
      }),
    );
    const store = new AuthStore([config], { helpers: opts });
    t.strictSame(
      await store.lookup('docker.io', 'library/busybox'),
      { username: 'u-https://index.docker.io/v1/', password: 'p' },
      'Docker Hub is asked for by its v1 index URL, as docker login stores it',
    );
    t.equal(
      await store.lookup('quay.io', 'a/b'),
      undefined,
      'a credHelpers entry that has nothing: anonymous (credsStore is not asked)',
    );
    t.strictSame(
      await store.lookup('ghcr.io', 'a/b'),
      { identityToken: 'refresh' },
      'other registries: credsStore',
    );
  },
);

t.test(
  'DirSource: version file, manifest limit, child manifests checked against their digest',
  async (t) => {
    const dir = await tmpdir(t);
    await t.rejects(
      DirSource.open(dir, 'dir:x', 'reg.example.com/a:v1'),
      ociErr('NOT_FOUND', /no readable "version" file/),
    );
    await writeFile(path.join(dir, 'version'), 'Directory Transport Version: 9.0\n');
    await t.rejects(
      DirSource.open(dir, 'dir:x', 'reg.example.com/a:v1'),
      ociErr('INVALID_MANIFEST'),
      'an unknown version',
    );
    await writeFile(path.join(dir, 'version'), 'Directory Transport Version: 1.1\n');
    const src = await DirSource.open(dir, 'dir:x', 'reg.example.com/a:v1');
    await writeFile(path.join(dir, 'manifest.json'), Buffer.alloc(4 * 1024 * 1024 + 1, 0x20));
    await t.rejects(src.getManifest(), ociErr('INVALID_MANIFEST', /larger than 4 MiB/));
    const fake = `sha256:${'a'.repeat(64)}`;
    await writeFile(path.join(dir, `${'a'.repeat(64)}.manifest.json`), '{"schemaVersion":2}');
    await t.rejects(src.getManifest(fake), ociErr('DIGEST_MISMATCH'));
    await t.rejects(src.getBlob(fake, 1), ociErr('NOT_FOUND'));
  },
);

t.test(
  'a signature store over https goes through the same proxy and certs.d as the registries',
  async (t) => {
    const dir = await tmpdir(t);
    const ca = await makeTestCa(dir, { names: ['sigs.factory.test'] });
    const digest = `sha256:${'b'.repeat(64)}`;
    const server = https.createServer(
      { cert: await readFile(ca.serverCert), key: await readFile(ca.serverKey) },
      (req, res) => {
        if (req.url === `/store/sha256=${'b'.repeat(64)}/signature-1`) res.end('SIG-1');
        else res.writeHead(404).end();
      },
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.teardown(
      () =>
        new Promise<void>((r) => {
          server.closeAllConnections();
          server.close(() => r());
        }),
    );
    const port = (server.address() as AddressInfo).port;
    const name = `sigs.factory.test:${port}`;
    const proxy = await startConnectProxy(t, { [name]: `127.0.0.1:${port}` });
    const certDir = path.join(dir, 'certs');
    await mkdir(certDir);
    await copyFile(ca.caCert, path.join(certDir, 'ca.crt'));

    const sigs = await fetchStoreSignatures(`https://${name}/store`, digest, {
      connection: { env: { HTTPS_PROXY: proxy.url }, certDir },
    });
    t.strictSame(
      sigs.map((b) => b.toString()),
      ['SIG-1'],
    );
    t.ok(proxy.seen.includes(`CONNECT ${name}`), 'through the proxy');
    await t.rejects(
      fetchStoreSignatures(`https://${name}/store`, digest, {
        connection: { env: { HTTPS_PROXY: proxy.url }, systemRoot: dir },
      }),
      ociErr('TLS_ERROR', /certificate not trusted/),
      'without the CA: a TLS error that names the fix',
    );
  },
);

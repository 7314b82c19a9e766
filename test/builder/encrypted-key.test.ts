// Encrypted signing keys: an encrypted PKCS#8 key (made by openssl, and by `bundle keygen
// --passphrase-file`) signs a bundle with its passphrase from --passphrase-file or
// BUNDLE_KEY_PASSPHRASE, and every wrong key gets a message that names its problem: encrypted
// without a passphrase, a wrong passphrase, a public key, an OpenSSH key, an RSA key, a P-384 key.
// The key is read before anything is fetched, so these runs need no registry.
import t from 'tap';
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode } from './lib.js';

const exec = promisify(execFile);
const work = await tmpdir(t, 'ob-enc-key-');
const layout = path.join(work, 'layout');
await writeImageLayout(layout, {
  tag: 'v1',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'etc/x': 'x' }] }],
});
const passFile = path.join(work, 'pass.txt');
await writeFile(passFile, 'correct horse battery staple\n', { mode: 0o600 });
const wrongFile = path.join(work, 'wrong.txt');
await writeFile(wrongFile, 'tr0ub4dor&3\n');

let n = 0;
const create = (key: string, extra: string[] = [], env: Record<string, string> = {}) => {
  const out = path.join(work, `b-${++n}.bundle`);
  return bundle(
    [
      'create',
      '--quiet',
      '--version',
      '1',
      '--image',
      `oci:${layout}:v1=example.com/enc/app:v1`,
      '--key',
      key,
      '-o',
      out,
      '--cache',
      path.join(work, 'cache'),
      ...extra,
    ],
    { env },
  ).then((r) => ({ ...r, out }));
};

// openssl's own encrypted PKCS#8 (AES-256-CBC, scrypt-free PBKDF2), the format keys usually come in
const opensslKey = path.join(work, 'openssl-enc.key');
await exec('openssl', [
  'genpkey',
  '-algorithm',
  'EC',
  '-pkeyopt',
  'ec_paramgen_curve:P-256',
  '-aes-256-cbc',
  '-pass',
  `file:${passFile}`,
  '-out',
  opensslKey,
]);
const opensslPub = path.join(work, 'openssl-enc.pub');
await exec('openssl', [
  'pkey',
  '-in',
  opensslKey,
  '-passin',
  `file:${passFile}`,
  '-pubout',
  '-out',
  opensslPub,
]);

t.test(
  'an openssl-encrypted key signs with --passphrase-file, or with BUNDLE_KEY_PASSPHRASE',
  async (t) => {
    t.match(
      await readFile(opensslKey, 'utf8'),
      /^-----BEGIN ENCRYPTED PRIVATE KEY-----/,
      'fixture: an encrypted PKCS#8 file',
    );
    const byFile = await create(opensslKey, ['--passphrase-file', passFile]);
    t.equal(byFile.code, 0, byFile.stderr);
    const v = await bundle(['verify', byFile.out, '--key', opensslPub, '--quiet']);
    t.equal(v.code, 0, v.stderr);
    const byEnv = await create(opensslKey, [], {
      BUNDLE_KEY_PASSPHRASE: 'correct horse battery staple',
    });
    t.equal(byEnv.code, 0, byEnv.stderr);
    t.equal(
      (await bundleJson(byEnv.out)).signer.fingerprint,
      (await bundleJson(byFile.out)).signer.fingerprint,
    );
  },
);

t.test(
  'bundle keygen --passphrase-file writes a key openssl opens with that passphrase',
  async (t) => {
    const prefix = path.join(work, 'made');
    const k = await bundle([
      'keygen',
      '--out',
      prefix,
      '--type',
      'ed25519',
      '--passphrase-file',
      passFile,
    ]);
    t.equal(k.code, 0, k.stderr);
    t.match(await readFile(`${prefix}.key`, 'utf8'), /^-----BEGIN ENCRYPTED PRIVATE KEY-----/);
    const pub = await exec('openssl', [
      'pkey',
      '-in',
      `${prefix}.key`,
      '-passin',
      `file:${passFile}`,
      '-pubout',
    ]);
    t.equal(
      pub.stdout,
      await readFile(`${prefix}.pub`, 'utf8'),
      'openssl derives the same public key',
    );
    const r = await create(`${prefix}.key`, ['--passphrase-file', passFile]);
    t.equal(r.code, 0, r.stderr);
    t.equal((await bundle(['verify', r.out, '--key', `${prefix}.pub`, '--quiet'])).code, 0);
  },
);

t.test('each wrong key: KEY_ERROR naming its problem, one line, nothing written', async (t) => {
  const rsa = path.join(work, 'rsa.key');
  await exec('openssl', [
    'genpkey',
    '-algorithm',
    'RSA',
    '-pkeyopt',
    'rsa_keygen_bits:2048',
    '-out',
    rsa,
  ]);
  const p384 = path.join(work, 'p384.key');
  await exec('openssl', [
    'genpkey',
    '-algorithm',
    'EC',
    '-pkeyopt',
    'ec_paramgen_curve:P-384',
    '-out',
    p384,
  ]);
  const ssh = path.join(work, 'id_ed25519');
  await exec('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', ssh]).catch(() => undefined);
  const bigPass = path.join(work, 'big-pass.txt');
  await writeFile(bigPass, 'x'.repeat(4097));
  const cases: [string, string, string[], Record<string, string>, RegExp][] = [
    [
      'encrypted, no passphrase',
      opensslKey,
      [],
      {},
      /is encrypted: give its passphrase with --passphrase-file FILE or the BUNDLE_KEY_PASSPHRASE environment variable/,
    ],
    [
      'encrypted, wrong passphrase file',
      opensslKey,
      ['--passphrase-file', wrongFile],
      {},
      /: wrong passphrase/,
    ],
    [
      'encrypted, wrong passphrase in the environment',
      opensslKey,
      [],
      { BUNDLE_KEY_PASSPHRASE: 'nope' },
      /: wrong passphrase/,
    ],
    [
      'a missing passphrase file',
      opensslKey,
      ['--passphrase-file', path.join(work, 'none.txt')],
      {},
      /the passphrase file \S*none\.txt does not exist: give the file whose first line is the passphrase \(or set BUNDLE_KEY_PASSPHRASE\)/,
    ],
    [
      'a passphrase file over 4 KiB',
      opensslKey,
      ['--passphrase-file', bigPass],
      {},
      /cannot read the passphrase file .*big-pass\.txt/,
    ],
    [
      'the public key',
      opensslPub,
      [],
      {},
      /is a public key, not a private key: sign with the private key/,
    ],
    ['an RSA key', rsa, [], {}, /rsa\.key: unsupported key type rsa: use ECDSA P-256 or Ed25519/],
    ['a P-384 key', p384, [], {}, /p384\.key: unsupported key type ec \(secp384r1\)/],
    [
      'an OpenSSH key',
      ssh,
      [],
      {},
      /is an OpenSSH key, which is not read here: sign with a PEM PKCS#8 key/,
    ],
  ];
  for (const [what, key, extra, env, message] of cases) {
    if (what === 'an OpenSSH key' && !(await readFile(ssh, 'utf8').catch(() => ''))) {
      t.skip('ssh-keygen is not installed');
      continue;
    }
    const r = await create(key, extra, env);
    t.equal(errorCode(r.stderr), 'KEY_ERROR', `${what}: ${r.stderr.trim()}`);
    t.match(r.stderr, message, what);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, `${what}: one line`);
    t.notOk(await readFile(r.out).catch(() => undefined), `${what}: no bundle`);
  }
});

// Keys: what loads, what is refused (KEY_ERROR), fingerprints as openssl computes them, and
// signatures a person can check with openssl alone.
import t from 'tap';
import { execFile } from 'node:child_process';
import { createHash, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  BUNDLE_JSON,
  SIGNATURE,
  algorithmOf,
  fingerprint,
  generateKeyPair,
  loadPrivateKey,
  loadPublicKey,
  signBytes,
  verifyBytes,
  writeBundle,
} from '@offline-bundle/format';
import {
  entryNamed,
  makeBundle,
  makeKey,
  readEntries,
  rejectsWith,
  tmpdir,
  writeKeyFiles,
} from './craft.js';

const exec = promisify(execFile);

async function openssl(
  args: string[],
  encoding: 'buffer' | 'utf8' = 'utf8',
): Promise<Buffer | string> {
  const { stdout } = await exec('openssl', args, { encoding, maxBuffer: 1 << 20 });
  return stdout;
}

for (const type of ['ecdsa-p256', 'ed25519'] as const) {
  t.test(`${type}: generated keys load, sign and verify`, async (t) => {
    const dir = await tmpdir(t);
    const { keyPath, pubPath } = await writeKeyFiles(dir, makeKey(type));
    const priv = await loadPrivateKey(keyPath);
    const pub = await loadPublicKey(pubPath);
    t.equal(algorithmOf(priv), type === 'ed25519' ? 'ed25519' : 'ecdsa-p256-sha256');
    t.equal(
      pub.fingerprint,
      fingerprint(priv),
      'fingerprint of the private key = of its public key',
    );
    t.equal(pub.source, pubPath);
    const data = Buffer.from('hello');
    const sig = signBytes(data, priv);
    t.ok(verifyBytes(data, sig, pub.key));
    t.notOk(verifyBytes(Buffer.from('hellp'), sig, pub.key), 'other data');
    t.notOk(verifyBytes(data, sig, makeKey(type).publicKey), 'other key');
    t.notOk(
      verifyBytes(data, Buffer.from('not a signature'), pub.key),
      'garbage signature: false, no throw',
    );
  });

  t.test(`${type}: fingerprint = sha256 of openssl pkey -pubin -outform DER`, async (t) => {
    const dir = await tmpdir(t);
    const { pubPath } = await writeKeyFiles(dir, makeKey(type));
    const der = (await openssl(
      ['pkey', '-pubin', '-in', pubPath, '-outform', 'DER'],
      'buffer',
    )) as Buffer;
    const pub = await loadPublicKey(pubPath);
    t.equal(pub.fingerprint, 'sha256:' + createHash('sha256').update(der).digest('hex'));
  });

  t.test(`${type}: openssl verifies the signature over bundle.json`, async (t) => {
    const key = makeKey(type);
    const b = await makeBundle(t, { key });
    const entries = await readEntries(b.path);
    const { pubPath } = await writeKeyFiles(b.dir, key);
    const mj = path.join(b.dir, BUNDLE_JSON);
    const sig = path.join(b.dir, SIGNATURE);
    await writeFile(mj, entryNamed(entries, BUNDLE_JSON).data);
    await writeFile(sig, entryNamed(entries, SIGNATURE).data);
    const args =
      type === 'ed25519'
        ? ['pkeyutl', '-verify', '-pubin', '-inkey', pubPath, '-rawin', '-in', mj, '-sigfile', sig]
        : ['dgst', '-sha256', '-verify', pubPath, '-signature', sig, mj];
    t.match(await openssl(args), /Verified OK|Signature Verified Successfully/);
    // and refuses a changed bundle.json
    await writeFile(mj, Buffer.concat([entryNamed(entries, BUNDLE_JSON).data, Buffer.from(' ')]));
    await t.rejects(openssl(args), 'openssl refuses an altered bundle.json');
  });
}

t.test('keys made by openssl load', async (t) => {
  const dir = await tmpdir(t);
  const cases: [string, string[]][] = [
    ['ed25519 (PKCS#8)', ['genpkey', '-algorithm', 'ed25519']],
    ['P-256 (PKCS#8)', ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256']],
    ['P-256 (SEC1 "EC PRIVATE KEY")', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout']],
  ];
  for (const [what, args] of cases) {
    const keyPath = path.join(dir, `${what.replace(/\W+/g, '_')}.key`);
    await openssl([...args, '-out', keyPath]);
    const pubPath = `${keyPath}.pub`;
    await openssl(['pkey', '-in', keyPath, '-pubout', '-out', pubPath]);
    const priv = await loadPrivateKey(keyPath);
    const pub = await loadPublicKey(pubPath);
    t.equal(pub.fingerprint, fingerprint(priv), `${what}: loads, and the fingerprints agree`);
  }
});

t.test('loadPrivateKey on a .pub file: KEY_ERROR', async (t) => {
  const dir = await tmpdir(t);
  for (const type of ['ecdsa-p256', 'ed25519'] as const) {
    const { pubPath } = await writeKeyFiles(dir, makeKey(type), type);
    await rejectsWith(t, loadPrivateKey(pubPath), 'KEY_ERROR', `${type} .pub`);
  }
});

t.test('RSA keys are refused: KEY_ERROR', async (t) => {
  const dir = await tmpdir(t);
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPath = path.join(dir, 'rsa.key');
  const pubPath = path.join(dir, 'rsa.pub');
  await writeFile(keyPath, privateKey.export({ type: 'pkcs8', format: 'pem' }));
  await writeFile(pubPath, publicKey.export({ type: 'spki', format: 'pem' }));
  await rejectsWith(t, loadPrivateKey(keyPath), 'KEY_ERROR', 'loadPrivateKey(rsa)');
  await rejectsWith(t, loadPublicKey(pubPath), 'KEY_ERROR', 'loadPublicKey(rsa)');
  t.throws(() => algorithmOf(privateKey), { code: 'KEY_ERROR' });
  t.throws(() => signBytes(Buffer.from('x'), privateKey), { code: 'KEY_ERROR' });
  // writeBundle refuses it too, and leaves nothing behind
  const b = await makeBundle(t);
  const output = path.join(b.dir, 'rsa.bundle');
  await rejectsWith(
    t,
    writeBundle({
      release: b.written.manifest.release,
      images: b.images,
      index: b.index,
      blobs: b.blobs,
      imageStoreBytes: 0,
      key: privateKey,
      output,
      createdAt: '2026-01-01T00:00:00Z',
      tool: { name: 't', version: '0' },
    }),
    'KEY_ERROR',
    'writeBundle(rsa)',
  );
  t.notOk(
    (await readdir(b.dir)).some((f) => f.startsWith('rsa.bundle')),
    'no output or temp files',
  );
});

t.test('other curves are refused: KEY_ERROR', async (t) => {
  const dir = await tmpdir(t);
  for (const curve of ['secp384r1', 'secp256k1']) {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: curve });
    const keyPath = path.join(dir, `${curve}.key`);
    const pubPath = path.join(dir, `${curve}.pub`);
    await writeFile(keyPath, privateKey.export({ type: 'pkcs8', format: 'pem' }));
    await writeFile(pubPath, publicKey.export({ type: 'spki', format: 'pem' }));
    await rejectsWith(t, loadPrivateKey(keyPath), 'KEY_ERROR', `loadPrivateKey(${curve})`);
    await rejectsWith(t, loadPublicKey(pubPath), 'KEY_ERROR', `loadPublicKey(${curve})`);
  }
  const x448 = generateKeyPairSync('ed448');
  t.throws(() => algorithmOf(x448.privateKey), { code: 'KEY_ERROR' }, 'ed448');
});

t.test('unreadable or malformed key files: KEY_ERROR', async (t) => {
  const dir = await tmpdir(t);
  await rejectsWith(
    t,
    loadPrivateKey(path.join(dir, 'missing.key')),
    'KEY_ERROR',
    'missing private key',
  );
  await rejectsWith(
    t,
    loadPublicKey(path.join(dir, 'missing.pub')),
    'KEY_ERROR',
    'missing public key',
  );
  const junk = path.join(dir, 'junk.pem');
  await writeFile(
    junk,
    '-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n',
  );
  await rejectsWith(t, loadPrivateKey(junk), 'KEY_ERROR', 'junk private key');
  await rejectsWith(t, loadPublicKey(junk), 'KEY_ERROR', 'junk public key');
  const empty = path.join(dir, 'empty.pem');
  await writeFile(empty, '');
  await rejectsWith(t, loadPrivateKey(empty), 'KEY_ERROR', 'empty file');
  const encrypted = path.join(dir, 'encrypted.key');
  await openssl([
    'genpkey',
    '-algorithm',
    'ed25519',
    '-aes-256-cbc',
    '-pass',
    'pass:secret',
    '-out',
    encrypted,
  ]);
  await rejectsWith(t, loadPrivateKey(encrypted), 'KEY_ERROR', 'encrypted private key');
});

t.test('generateKeyPair writes PEM: PKCS#8 private, SPKI public', async (t) => {
  for (const type of ['ecdsa-p256', 'ed25519'] as const) {
    const { privatePem, publicPem } = generateKeyPair(type);
    t.match(privatePem, /^-----BEGIN PRIVATE KEY-----\n/);
    t.match(publicPem, /^-----BEGIN PUBLIC KEY-----\n/);
    t.equal(fingerprint(createPublicKey(privatePem)), fingerprint(createPublicKey(publicPem)));
  }
  t.equal(generateKeyPair().privatePem.length > 0, true, 'ECDSA P-256 is the default');
  t.equal(algorithmOf(createPublicKey(generateKeyPair().publicPem)), 'ecdsa-p256-sha256');
});

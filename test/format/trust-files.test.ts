// Key files as loadTrust reads them for both CLIs and the agent: bounded, regular files
// only, public keys only, and refused (or, when asked, warned about) when others could change them.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  FormatError,
  MAX_KEY_FILE_BYTES,
  generateKeyPair,
  loadPrivateKey,
  loadPublicKey,
  loadTrust,
} from '@offline-bundle/format';
import { makeKey, tmpdir, writeKeyFiles } from './craft.js';

const failure = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as FormatError & { cause?: { code?: string } },
  );

t.test('key files are bounded and must be regular files', async (t) => {
  const dir = await tmpdir(t);
  const started = Date.now();
  const dev = await failure(loadTrust(['/dev/urandom']));
  t.equal(dev?.code, 'KEY_ERROR', '/dev/urandom: KEY_ERROR');
  t.equal(dev?.cause?.code, 'NOT_A_REGULAR_FILE', 'because it is a device');
  t.ok(Date.now() - started < 2000, 'at once, nothing read');
  const fifo = join(dir, 'fifo.pub');
  execFileSync('mkfifo', [fifo]);
  t.equal(
    (await failure(loadTrust([fifo])))?.cause?.code,
    'NOT_A_REGULAR_FILE',
    'a FIFO: refused, not waited on',
  );
  t.equal((await failure(loadPrivateKey(fifo)))?.code, 'KEY_ERROR', 'the signing key too');
  const big = join(dir, 'big.pub');
  const key = makeKey();
  await writeFile(big, key.publicPem + ' '.repeat(MAX_KEY_FILE_BYTES));
  const over = await failure(loadTrust([big]));
  t.equal(over?.code, 'KEY_ERROR');
  t.equal(over?.cause?.code, 'FILE_TOO_LARGE', `over ${MAX_KEY_FILE_BYTES} bytes`);
});

// issue #39: Node derives a public key from a private one, so the signing key used to be
// trusted as it was ("signed by factory.key") and could be copied to every node unnoticed
t.test(
  'a private key where a trust key belongs is refused, naming the file and its public half',
  async (t) => {
    const dir = await tmpdir(t);
    const key = makeKey();
    const sec1 = (cipher?: { cipher: string; passphrase: string }) =>
      key.privateKey.export({ type: 'sec1', format: 'pem', ...cipher }).toString();
    const cases: [string, string, string][] = [
      ['PKCS#8', 'factory.key', key.privatePem],
      ['Ed25519 PKCS#8', 'ed.key', generateKeyPair('ed25519').privatePem],
      ['encrypted PKCS#8', 'sealed.key', generateKeyPair('ecdsa-p256', 'secret').privatePem],
      ['traditional EC', 'ec.pem', sec1()],
      [
        'traditional EC, encrypted',
        'ec-sealed.key',
        sec1({ cipher: 'aes-256-cbc', passphrase: 'secret' }),
      ],
      ['a public key with the private key after it', 'both.pub', key.publicPem + key.privatePem],
    ];
    for (const [what, name, pem] of cases) {
      const file = join(dir, name);
      await writeFile(file, pem, { mode: 0o600 });
      const err = await failure(loadTrust([file]));
      t.equal(err?.code, 'KEY_ERROR', `${what}: KEY_ERROR`);
      t.match(
        err?.message,
        new RegExp(
          `^${file.replace(/[.]/g, '\\.')} is an? (encrypted )?private key: give its public half \\(`,
        ),
        `${what}: names the file (${err?.message})`,
      );
      t.match(
        err?.message,
        `"openssl pkey -in ${file} -pubout`,
        `${what}: and how to make the public half`,
      );
      t.notMatch(err?.message, /passphrase/, `${what}: no passphrase asked for`);
      t.equal(
        (await failure(loadPublicKey(file)))?.code,
        'KEY_ERROR',
        `${what}: loadPublicKey too`,
      );
    }
    t.match(
      (await failure(loadTrust([join(dir, 'factory.key')])))?.message,
      `(${join(dir, 'factory.pub')}, made by "bundle keygen" beside it`,
      'the .pub keygen writes beside a .key is named',
    );
    t.match(
      (await failure(loadTrust([join(dir, 'sealed.key')])))?.message,
      /is an encrypted private key/,
      'an encrypted one is said to be one',
    );
    const { pubPath } = await writeKeyFiles(dir, key);
    t.equal((await loadTrust([pubPath])).keys?.length, 1, 'its public half: trusted');
  },
);

t.test('a key others could change is refused, or warned about when asked', async (t) => {
  const dir = await tmpdir(t);
  await chmod(dir, 0o755);
  const { pubPath } = await writeKeyFiles(dir, makeKey());
  await chmod(pubPath, 0o644);
  t.equal((await loadTrust([pubPath])).keys?.length, 1, '0644: trusted');
  for (const mode of [0o666, 0o646, 0o664]) {
    await chmod(pubPath, mode);
    const err = await failure(loadTrust([pubPath]));
    t.equal(err?.code, 'UNSAFE_PERMISSIONS', `mode ${mode.toString(8)}: UNSAFE_PERMISSIONS`);
    t.ok(err?.message.includes(`chmod go-w ${pubPath}`), 'the message names the fix');
    const warnings: string[] = [];
    const trust = await loadTrust([pubPath], undefined, { onUnsafeKey: (m) => warnings.push(m) });
    t.equal(trust.keys?.length, 1, 'with a warning callback: loaded');
    t.equal(warnings.length, 1, 'and warned once');
  }
  await chmod(pubPath, 0o644);
  if (process.getuid?.() === 0) {
    execFileSync('chown', ['4321', pubPath]);
    t.equal(
      (await failure(loadTrust([pubPath])))?.code,
      'UNSAFE_PERMISSIONS',
      'owned by someone else',
    );
  }
});

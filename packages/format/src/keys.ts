import {
  createPublicKey,
  createPrivateKey,
  generateKeyPairSync,
  sign,
  verify,
  createHash,
  type KeyObject,
} from 'node:crypto';
import type { Stats } from 'node:fs';
import { OciError } from '@offline-bundle/oci';
import { HostError, PIPE_READ_TIMEOUT_MS, readSmallFile } from '@offline-bundle/host';
import { FormatError } from './errors.js';
import type { SignatureAlgorithm } from './manifest.js';

export type KeyType = 'ecdsa-p256' | 'ed25519';

export interface TrustedKey {
  key: KeyObject;
  fingerprint: string;
  /** Where it came from, for messages. */
  source: string;
}

export function generateKeyPair(
  type: KeyType = 'ecdsa-p256',
  passphrase?: string,
): { privatePem: string; publicPem: string } {
  const { privateKey, publicKey } =
    type === 'ed25519'
      ? generateKeyPairSync('ed25519')
      : generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  return {
    privatePem: privateKeyPem(privateKey, passphrase),
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

/** sha256 of the DER SubjectPublicKeyInfo: `openssl pkey -pubin -outform DER | sha256sum` gives the same. */
export function fingerprint(key: KeyObject): string {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  return (
    'sha256:' +
    createHash('sha256')
      .update(pub.export({ type: 'spki', format: 'der' }))
      .digest('hex')
  );
}

export function algorithmOf(key: KeyObject): SignatureAlgorithm {
  if (key.asymmetricKeyType === 'ed25519') return 'ed25519';
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1')
    return 'ecdsa-p256-sha256';
  throw new FormatError(
    'KEY_ERROR',
    `unsupported key type ${key.asymmetricKeyType ?? '?'}${key.asymmetricKeyDetails?.namedCurve ? ` (${key.asymmetricKeyDetails.namedCurve})` : ''}: use ECDSA P-256 or Ed25519 ("bundle keygen")`,
  );
}

/** Largest key file read: a PEM key is well under 1 KiB; `--key /dev/urandom` must not fill memory. */
export const MAX_KEY_FILE_BYTES = 64 * 1024;

async function readKeyFile(path: string): Promise<{ pem: string; stats: Stats }> {
  try {
    const { bytes, stats } = await readSmallFile(path, MAX_KEY_FILE_BYTES);
    return { pem: bytes.toString('utf8'), stats };
  } catch (cause) {
    // the usual slips in one plain sentence, not a raw ENOENT
    const code = (cause as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new FormatError(
        'KEY_ERROR',
        `the key file ${path} does not exist: check the path (keys are made by "bundle keygen --out PREFIX")`,
        { cause },
      );
    if (code === 'EACCES')
      throw new FormatError(
        'KEY_ERROR',
        `the key file ${path} cannot be read by this user (permission denied)`,
        { cause },
      );
    throw new FormatError('KEY_ERROR', `cannot read key ${path}: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/** Where a signing key's passphrase may come from, besides --passphrase-file. */
export const PASSPHRASE_ENV = 'BUNDLE_KEY_PASSPHRASE';
/** Largest passphrase file read. */
export const MAX_PASSPHRASE_FILE_BYTES = 4096;

/**
 * The passphrase from a file (its first line) or else the environment; undefined without either.
 * `signal` ends a wait on a pipe at once (the abort's reason is thrown as it is).
 */
export async function readPassphrase(
  file: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
  signal?: AbortSignal,
): Promise<string | undefined> {
  if (file === undefined) return env[PASSPHRASE_ENV] || undefined;
  let passphrase: string;
  try {
    // <(pass show key) is a pipe: read as it comes, bounded in size and time
    const { bytes } = await readSmallFile(file, MAX_PASSPHRASE_FILE_BYTES, {
      pipe: { timeoutMs: PIPE_READ_TIMEOUT_MS, ...(signal ? { signal } : {}) },
    });
    passphrase = bytes.toString('utf8').split(/\r?\n/)[0]!;
  } catch (cause) {
    if (signal?.aborted) throw cause;
    const what =
      (cause as NodeJS.ErrnoException).code === 'ENOENT'
        ? `the passphrase file ${file} does not exist: give the file whose first line is the passphrase (or set ${PASSPHRASE_ENV})`
        : `cannot read the passphrase file ${file}: ${(cause as Error).message}`;
    // a command that never answered is not a bad key
    if (cause instanceof HostError && cause.code === 'INPUT_TIMEOUT')
      throw new OciError('INPUT_TIMEOUT', what, { cause });
    throw new FormatError('KEY_ERROR', what, { cause });
  }
  // an empty first line is no passphrase (a command that failed, the wrong file): never a key's
  if (passphrase === '')
    throw new FormatError(
      'KEY_ERROR',
      `the passphrase file ${file} is empty: its first line must hold the passphrase`,
    );
  return passphrase;
}

const PEM_LABEL = /-----BEGIN ([A-Z0-9 ]+)-----/;
/** Any private key block (PKCS#8, encrypted or not, traditional EC/RSA, OpenSSH), wherever it sits in the file. */
const PRIVATE_PEM_LABEL = /-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY)-----/;

const isEncrypted = (label: string, pem: string) =>
  label === 'ENCRYPTED PRIVATE KEY' || /Proc-Type:\s*4,ENCRYPTED/.test(pem);

/** What kind of key file this is, from its PEM label, for a message that names the problem. */
function keyFileProblem(
  path: string,
  pem: string,
  passphrase: string | undefined,
  cause: unknown,
): FormatError {
  const label = PEM_LABEL.exec(pem)?.[1];
  const fix = 'sign with the private key "bundle keygen" wrote (PREFIX.key)';
  const msg = (m: string) => new FormatError('KEY_ERROR', m, { cause });
  if (label === undefined) return msg(`${path} is not a PEM key file: ${fix}`);
  if (/PUBLIC KEY|CERTIFICATE/.test(label))
    return msg(
      `${path} is a ${label.toLowerCase()}, not a private key: ${fix}, and give the .pub file to the clusters`,
    );
  if (label === 'OPENSSH PRIVATE KEY')
    return msg(
      `${path} is an OpenSSH key, which is not read here: sign with a PEM PKCS#8 key ("bundle keygen")`,
    );
  const encrypted = isEncrypted(label, pem);
  if (encrypted && passphrase === undefined)
    return msg(
      `${path} is encrypted: give its passphrase with --passphrase-file FILE or the ${PASSPHRASE_ENV} environment variable`,
    );
  if (encrypted)
    return msg(
      `${path}: wrong passphrase (or a damaged key): check --passphrase-file / ${PASSPHRASE_ENV}`,
    );
  return msg(`${path} is not a readable private key (${label}): ${fix}`);
}

/**
 * A signing key: PKCS#8 (plain or encrypted with `passphrase`) or a traditional EC PEM. Every
 * wrong kind of file gets its own message: a public key, an encrypted key without or with a
 * wrong passphrase, an OpenSSH key, an RSA or other-curve key (algorithmOf).
 */
export async function loadPrivateKey(
  path: string,
  opts: { passphrase?: string } = {},
): Promise<KeyObject> {
  const { pem } = await readKeyFile(path);
  let key: KeyObject;
  try {
    // an empty passphrase is still one: OpenSSL then fails on a key that needs another
    key = createPrivateKey({ key: pem, format: 'pem', passphrase: opts.passphrase ?? '' });
  } catch (cause) {
    throw keyFileProblem(path, pem, opts.passphrase, cause);
  }
  try {
    algorithmOf(key);
  } catch (err) {
    throw new FormatError('KEY_ERROR', `${path}: ${(err as Error).message}`, { cause: err });
  }
  return key;
}

/** A private key as PEM PKCS#8, encrypted (AES-256-CBC, as `openssl pkcs8 -topk8 -v2 aes-256-cbc`) when a passphrase is given. */
function privateKeyPem(key: KeyObject, passphrase?: string): string {
  return key
    .export(
      passphrase !== undefined
        ? { type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase }
        : { type: 'pkcs8', format: 'pem' },
    )
    .toString();
}

export async function loadPublicKey(path: string): Promise<TrustedKey> {
  return (await readPublicKey(path)).trusted;
}

/** A private key given where a public one is trusted: the file, and how to get its public half. */
function privateKeyAsTrust(path: string, encrypted: boolean): FormatError {
  const beside = /\.key$/.test(path) ? `${path.slice(0, -'.key'.length)}.pub` : undefined;
  const make = `"openssl pkey -in ${path} -pubout -out ${beside ?? 'PREFIX.pub'}"`;
  return new FormatError(
    'KEY_ERROR',
    `${path} is ${encrypted ? 'an encrypted' : 'a'} private key: give its public half (${beside ? `${beside}, made by "bundle keygen" beside it` : 'the PREFIX.pub "bundle keygen" wrote beside PREFIX.key'}, or ${make}); the private key stays with the signer`,
  );
}

/** A public key and the stats of the file it was read from (for the permission check of loadTrust). */
export async function readPublicKey(path: string): Promise<{ trusted: TrustedKey; stats: Stats }> {
  const { pem, stats } = await readKeyFile(path);
  // createPublicKey takes a private key too and derives its public half: the signing key would
  // then be trusted, and copied to every node, without a word (#39). Refused before any parsing,
  // so an encrypted one never reaches a passphrase prompt.
  const privateLabel = PRIVATE_PEM_LABEL.exec(pem)?.[1];
  if (privateLabel !== undefined) throw privateKeyAsTrust(path, isEncrypted(privateLabel, pem));
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (cause) {
    throw new FormatError('KEY_ERROR', `${path} is not a PEM public key`, { cause });
  }
  algorithmOf(key);
  return { trusted: { key, fingerprint: fingerprint(key), source: path }, stats };
}

/** ECDSA signatures are DER (what `openssl dgst -sha256 -sign` writes); Ed25519 ones are the raw 64 bytes. */
export function signBytes(data: Uint8Array, key: KeyObject): Buffer {
  return sign(algorithmOf(key) === 'ed25519' ? null : 'sha256', data, key);
}

export function verifyBytes(data: Uint8Array, signature: Uint8Array, key: KeyObject): boolean {
  try {
    return verify(algorithmOf(key) === 'ed25519' ? null : 'sha256', data, key, signature);
  } catch {
    return false;
  }
}

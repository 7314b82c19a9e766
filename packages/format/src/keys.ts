import { createPublicKey, createPrivateKey, generateKeyPairSync, sign, verify, createHash, type KeyObject } from 'node:crypto';
import type { Stats } from 'node:fs';
import { readSmallFile } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import type { SignatureAlgorithm } from './manifest.js';

export type KeyType = 'ecdsa-p256' | 'ed25519';

export interface TrustedKey {
  key: KeyObject;
  fingerprint: string;
  /** Where it came from, for messages. */
  source: string;
}

export function generateKeyPair(type: KeyType = 'ecdsa-p256'): { privatePem: string; publicPem: string } {
  const { privateKey, publicKey } = type === 'ed25519'
    ? generateKeyPairSync('ed25519')
    : generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  return {
    privatePem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

/** sha256 of the DER SubjectPublicKeyInfo: `openssl pkey -pubin -outform DER | sha256sum` gives the same. */
export function fingerprint(key: KeyObject): string {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  return 'sha256:' + createHash('sha256').update(pub.export({ type: 'spki', format: 'der' })).digest('hex');
}

export function algorithmOf(key: KeyObject): SignatureAlgorithm {
  if (key.asymmetricKeyType === 'ed25519') return 'ed25519';
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') return 'ecdsa-p256-sha256';
  throw new FormatError('KEY_ERROR', `unsupported key type ${key.asymmetricKeyType ?? '?'}${key.asymmetricKeyDetails?.namedCurve ? ` (${key.asymmetricKeyDetails.namedCurve})` : ''}: use ECDSA P-256 or Ed25519 ("bundle keygen")`);
}

/** Largest key file read: a PEM key is well under 1 KiB; `--key /dev/urandom` must not fill memory. */
export const MAX_KEY_FILE_BYTES = 64 * 1024;

async function readKeyFile(path: string): Promise<{ pem: string; stats: Stats }> {
  try {
    const { bytes, stats } = await readSmallFile(path, MAX_KEY_FILE_BYTES);
    return { pem: bytes.toString('utf8'), stats };
  } catch (cause) {
    throw new FormatError('KEY_ERROR', `cannot read key ${path}: ${(cause as Error).message}`, { cause });
  }
}

export async function loadPrivateKey(path: string): Promise<KeyObject> {
  const { pem } = await readKeyFile(path);
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (cause) {
    throw new FormatError('KEY_ERROR', `${path} is not a PEM private key (did you pass the .pub file?)`, { cause });
  }
  algorithmOf(key);
  return key;
}

export async function loadPublicKey(path: string): Promise<TrustedKey> {
  return (await readPublicKey(path)).trusted;
}

/** A public key and the stats of the file it was read from (for the permission check of loadTrust). */
export async function readPublicKey(path: string): Promise<{ trusted: TrustedKey; stats: Stats }> {
  const { pem, stats } = await readKeyFile(path);
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

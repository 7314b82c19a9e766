// Test release keys and signatures made with openpgp.js: the OpenShift release signature format
// (an OpenPGP signed message over an "atomic container signature" JSON document, as
// containers/image's simple signing writes it and the cluster-version operator reads it).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import * as openpgp from 'openpgp';

export interface TestReleaseKey {
  privateKey: openpgp.PrivateKey;
  /** Armored public key: a --release-keyring file's content. */
  armored: string;
  keyId: string;
}

export async function releaseKey(name = 'Test Release Signing'): Promise<TestReleaseKey> {
  // RSA, as Red Hat's release keys are (the CVO's Go OpenPGP reads RSA v4 keys)
  const { privateKey, publicKey } = await openpgp.generateKey({
    type: 'rsa',
    rsaBits: 2048,
    userIDs: [{ name, email: 'release@example.com' }],
    format: 'object',
  });
  return { privateKey, armored: publicKey.armor(), keyId: privateKey.getKeyID().toHex() };
}

/** The signed document, exactly as containers/image's simple signing lays it out. */
export function atomicSignatureDocument(reference: string, digest: string): string {
  return JSON.stringify({
    critical: {
      identity: { 'docker-reference': reference },
      image: { 'docker-manifest-digest': digest },
      type: 'atomic container signature',
    },
    optional: { creator: 'offline-bundle tests', timestamp: 1763900000 },
  });
}

/** A release signature: binary OpenPGP signed message (what signature-N files of a store hold). */
export async function signRelease(
  key: TestReleaseKey,
  reference: string,
  digest: string,
): Promise<Buffer> {
  const message = await openpgp.createMessage({
    binary: Buffer.from(atomicSignatureDocument(reference, digest)),
  });
  return Buffer.from(
    await openpgp.sign({ message, signingKeys: key.privateKey, format: 'binary' }),
  );
}

/** Writes signatures into a store directory: DIR/sha256=<hex>/signature-N. Returns its file:// URL. */
export async function writeSignatureStore(
  dir: string,
  digest: string,
  signatures: Buffer[],
): Promise<string> {
  const d = path.join(dir, `sha256=${digest.slice('sha256:'.length)}`);
  await mkdir(d, { recursive: true });
  for (const [i, s] of signatures.entries()) await writeFile(path.join(d, `signature-${i + 1}`), s);
  return `file://${dir}`;
}

import { newSha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { blobPath } from './layout.js';
import { releasePath, type BundleManifest, type ReleaseSignatureRef } from './manifest.js';
import { BundleRandomReader } from './random-reader.js';
import { readHeader } from './bundle-ends.js';
import type { BundleSource } from './source.js';
import { assertTrust, checkSignature, type Trust } from './trust.js';
import type { TrustedKey } from './keys.js';

export interface BundleReleaseSignatures {
  manifest: BundleManifest;
  /** In bundle.json's order (signature-1, -2, …), each checked against its signed digest. */
  signatures: (ReleaseSignatureRef & { bytes: Buffer })[];
  /** Every release of the bundle's update path (releasePath), the final one last, with its signatures read as those are. */
  path: {
    version: string;
    digest: string | null;
    signatures: (ReleaseSignatureRef & { bytes: Buffer })[];
  }[];
  signer?: TrustedKey;
}

/**
 * The release signatures a bundle carries, for the cluster side: bundle.json is trusted first
 * (its signature against `trust.keys`, and/or the whole file against `trust.digest`), then
 * each signature blob is read through the seek index and checked against its signed digest.
 * The images are not read: `bundle verify` checks those.
 */
export async function readReleaseSignatures(
  source: BundleSource,
  trust: Trust,
): Promise<BundleReleaseSignatures> {
  assertTrust(trust);
  const { manifest, manifestBytes, signature } = await readHeader(source);
  const signer = checkSignature(manifestBytes, signature, manifest.signer.fingerprint, trust);
  if (trust.digest) {
    const digest = await sourceDigest(source);
    if (digest !== trust.digest) {
      throw new FormatError(
        'FILE_DIGEST_MISMATCH',
        `the file's sha256 is ${digest}, not the expected ${trust.digest}: wrong file, or damaged in copying; copy it again`,
      );
    }
  }
  const hops = releasePath(manifest);
  const reader = hops.some((h) => h.signatures?.length)
    ? await BundleRandomReader.open(source, manifest)
    : undefined;
  const path: BundleReleaseSignatures['path'] = [];
  for (const hop of hops) {
    const signatures: BundleReleaseSignatures['signatures'] = [];
    for (const ref of hop.signatures ?? [])
      signatures.push({ ...ref, bytes: await reader!.readVerified(blobPath(ref.digest)) });
    path.push({ version: hop.version, digest: hop.digest, signatures });
  }
  return {
    manifest,
    signatures: path[path.length - 1]!.signatures,
    path,
    ...(signer ? { signer } : {}),
  };
}

async function sourceDigest(source: BundleSource): Promise<string> {
  const hash = newSha256();
  try {
    for await (const chunk of source.stream(0, source.size)) hash.update(chunk as Buffer);
  } catch (cause) {
    throw new FormatError(
      'IO_ERROR',
      `cannot read ${source.identity}: ${(cause as Error).message}`,
      { cause },
    );
  }
  return 'sha256:' + hash.digest('hex');
}

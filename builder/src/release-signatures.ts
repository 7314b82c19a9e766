import {
  BlobCache, MAX_RELEASE_SIGNATURE_BYTES, OciError, connectionOptions, readReleaseFile, fetchStoreSignatures, loadReleaseKeyring, sha256, verifyReleaseSignature, type ReleaseKeyring,
} from '@offline-bundle/oci';
import { RELEASE_SIGNATURE_MEDIA_TYPE, type BundleBlob, type ReleaseSignatureRef } from '@offline-bundle/format';
import type { Progress } from './progress.js';

export interface ReleaseSignatureOptions {
  releaseSignatures?: string[];
  signatureStore?: string;
  releaseKeyring?: string;
  /** --cert-dir: as for the registries. */
  certDir?: string;
}

/**
 * The release signatures to carry: from files and/or a signature store, each checked to sign
 * `digest` (and, with a keyring, to verify with one of its keys), then put in the cache as
 * blobs of the layout. Duplicates (same bytes) are carried once. None asked for: none.
 */
export async function releaseSignatureBlobs(digest: string, cache: BlobCache, opts: ReleaseSignatureOptions, progress: Progress): Promise<{ refs: ReleaseSignatureRef[]; blobs: (BundleBlob & { path: string })[] }> {
  const found: { bytes: Buffer; where: string }[] = [];
  for (const file of opts.releaseSignatures ?? []) {
    const bytes = await readReleaseFile(file, MAX_RELEASE_SIGNATURE_BYTES, '--release-signature');
    found.push({ bytes, where: file });
  }
  if (opts.signatureStore) {
    const fetched = await fetchStoreSignatures(opts.signatureStore, digest, { connection: connectionOptions(process.env, opts.certDir) });
    fetched.forEach((bytes, i) => found.push({ bytes, where: `signature-${i + 1} of ${opts.signatureStore}` }));
  }
  if (found.length === 0) {
    if (opts.releaseKeyring) throw new OciError('INVALID_CONFIG', '--release-keyring checks release signatures: give --release-signature FILE or --signature-store URL too');
    return { refs: [], blobs: [] };
  }
  const keyring: ReleaseKeyring | undefined = opts.releaseKeyring ? await loadReleaseKeyring(opts.releaseKeyring) : undefined;
  const refs: ReleaseSignatureRef[] = [];
  const blobs: (BundleBlob & { path: string })[] = [];
  for (const { bytes, where } of found) {
    const info = await verifyReleaseSignature(bytes, digest, { where, ...(keyring ? { keyring } : {}) });
    const d = sha256(bytes);
    if (refs.some((r) => r.digest === d)) continue;
    refs.push({ digest: d, keyIds: info.keyIds });
    blobs.push({ digest: d, size: bytes.length, mediaType: RELEASE_SIGNATURE_MEDIA_TYPE, path: await cache.putBytes(d, bytes) });
    progress.log(`release signature ${refs.length}: key ${info.keyIds.join(', ')}${keyring ? ` (verified with ${keyring.source})` : ' (not verified: no --release-keyring)'}`);
  }
  return { refs, blobs };
}

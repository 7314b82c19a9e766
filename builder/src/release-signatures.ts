import { OciError, sha256 } from '@offline-bundle/oci';
import {
  MAX_RELEASE_SIGNATURE_BYTES,
  readReleaseFile,
  readReleaseSignature,
  fetchStoreSignatures,
  loadReleaseKeyring,
  verifyReleaseSignature,
  type ReleaseKeyring,
} from '@offline-bundle/openshift-release';
import { BlobCache, connectionOptions } from '@offline-bundle/image-fetch';
import {
  RELEASE_SIGNATURE_MEDIA_TYPE,
  type BundleBlob,
  type ReleaseSignatureRef,
} from '@offline-bundle/format';
import type { Progress } from './progress.js';

interface ReleaseSignatureOptions {
  releaseSignatures?: string[];
  signatureStore?: string;
  releaseKeyring?: string;
  /** --cert-dir: as for the registries. */
  certDir?: string;
}

type SignatureBlob = BundleBlob & { path: string };

/** A signature's bytes, where they came from, and the release (digest) it is taken for. */
interface Found {
  bytes: Buffer;
  where: string;
  digest: string;
}

/**
 * Which release each --release-signature file signs. With one release, the file must sign it
 * (verifyReleaseSignature says so); with a path, the file goes to the release it signs, and one
 * that signs none of them is refused by name.
 */
async function fileSignatures(files: string[], digests: string[]): Promise<Found[]> {
  const found: Found[] = [];
  for (const file of files) {
    const bytes = await readReleaseFile(file, MAX_RELEASE_SIGNATURE_BYTES, '--release-signature');
    const signed =
      digests.length === 1 ? digests[0]! : (await readReleaseSignature(bytes, file)).digest;
    if (!digests.includes(signed))
      throw new OciError(
        'BAD_RELEASE_SIGNATURE',
        `${file} signs ${signed}, none of the path's releases (${digests.join(', ')}): take the signature of one of them`,
      );
    found.push({ bytes, where: file, digest: signed });
  }
  return found;
}

/**
 * The release signatures to carry for each release of `digests` (one, or an update path's):
 * from files and/or a signature store, each checked to sign its release (and, with a keyring,
 * to verify with one of its keys), then put in the cache as blobs of the layout. Duplicates
 * (same bytes) are carried once. None asked for: none; some but not every release's: refused.
 */
export async function releaseSignatureBlobs(
  digests: string[],
  cache: BlobCache,
  opts: ReleaseSignatureOptions,
  progress: Progress,
  versions: string[] = [],
): Promise<{ refs: ReleaseSignatureRef[][]; blobs: SignatureBlob[] }> {
  const found = await fileSignatures(opts.releaseSignatures ?? [], digests);
  if (opts.signatureStore) {
    for (const digest of digests) {
      const fetched = await fetchStoreSignatures(opts.signatureStore, digest, {
        connection: connectionOptions(process.env, opts.certDir),
      });
      fetched.forEach((bytes, i) =>
        found.push({
          bytes,
          where: `signature-${i + 1} of ${opts.signatureStore} for ${digest}`,
          digest,
        }),
      );
    }
  }
  const refs: ReleaseSignatureRef[][] = digests.map(() => []);
  if (found.length === 0) {
    if (opts.releaseKeyring)
      throw new OciError(
        'INVALID_CONFIG',
        '--release-keyring checks release signatures: give --release-signature FILE or --signature-store URL too',
      );
    return { refs, blobs: [] };
  }
  const keyring: ReleaseKeyring | undefined = opts.releaseKeyring
    ? await loadReleaseKeyring(opts.releaseKeyring)
    : undefined;
  const blobs: SignatureBlob[] = [];
  for (const { bytes, where, digest } of found) {
    const info = await verifyReleaseSignature(bytes, digest, {
      where,
      ...(keyring ? { keyring } : {}),
    });
    const d = sha256(bytes);
    const mine = refs[digests.indexOf(digest)]!;
    if (mine.some((r) => r.digest === d)) continue;
    mine.push({ digest: d, keyIds: info.keyIds });
    if (!blobs.some((b) => b.digest === d))
      blobs.push({
        digest: d,
        size: bytes.length,
        mediaType: RELEASE_SIGNATURE_MEDIA_TYPE,
        path: await cache.putBytes(d, bytes),
      });
    const of = digests.length > 1 ? ` of ${digest}` : '';
    progress.log(
      `release signature ${mine.length}${of}: key ${info.keyIds.join(', ')}${keyring ? ` (verified with ${keyring.source})` : ' (not verified: no --release-keyring)'}`,
    );
  }
  // signatures for some releases of a path but not all: the offline upgrade would stop at the unsigned one
  const unsigned = refs.findIndex((r) => r.length === 0);
  if (unsigned >= 0) {
    const release = `${versions[unsigned] ? `${versions[unsigned]} (${digests[unsigned]})` : digests[unsigned]}`;
    throw new OciError(
      'INVALID_CONFIG',
      `release ${release} of the path has no release signature, though others do: the cluster's upgrade would stop at it; add --release-signature FILE for it (or a --signature-store that has it)`,
    );
  }
  return { refs, blobs };
}

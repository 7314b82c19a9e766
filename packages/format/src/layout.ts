/** The bundle format as constants: entry names, limits and sizes (docs/FORMAT.md). */

/**
 * Version 2 drops `totals.archiveBytes`: the compressed size of the layout is known only after
 * compressing it, and a bundle.json that waits for it forces a second full write of the file.
 * Readers still read version 1.
 */
export const SCHEMA_VERSION = 2;
export const FORMAT_MEDIA_TYPE = 'application/vnd.offline-bundle.v2+json';
/** Versions a reader accepts, with the media type each carries. */
export const READABLE_VERSIONS: Readonly<Record<number, string>> = {
  1: 'application/vnd.offline-bundle.v1+json',
  2: FORMAT_MEDIA_TYPE,
};

export const BUNDLE_JSON = 'bundle.json';
export const SIGNATURE = 'bundle.json.sig';
export const OCI_LAYOUT = 'oci-layout';
export const INDEX_JSON = 'index.json';
export const BLOB_DIR = 'blobs/sha256/';

/**
 * Media type of a release signature carried as a blob (bundle.json release.signatures): the
 * exact bytes of a signature store's signature-N file, an OpenPGP signed message.
 */
export const RELEASE_SIGNATURE_MEDIA_TYPE = 'application/vnd.offline-bundle.release-signature.v1+pgp';

export const OCI_LAYOUT_CONTENT = '{"imageLayoutVersion":"1.0.0"}';

/** Largest uncompressed zstd frame: bounds the memory and the work of one random read. */
export const FRAME_BYTES = 4 * 1024 * 1024;
export const MAX_BUNDLE_JSON_BYTES = 16 * 1024 * 1024;
export const MAX_SIGNATURE_BYTES = 4096;
export const MAX_INDEX_JSON_BYTES = 16 * 1024 * 1024;

export const TAR_BLOCK = 512;
/** Fixed mtime for every entry: the same inputs give the same bytes. */
export const ENTRY_MTIME = new Date(0);

export function blobPath(digest: string): string {
  return BLOB_DIR + digest.slice('sha256:'.length);
}

export function paddedSize(size: number): number {
  return Math.ceil(size / TAR_BLOCK) * TAR_BLOCK;
}

/** Bytes of the tar stream for entries of these sizes: a header and padded data each, then two zero blocks. */
export function tarStreamBytes(sizes: number[]): number {
  return sizes.reduce((sum, s) => sum + TAR_BLOCK + paddedSize(s), 0) + 2 * TAR_BLOCK;
}

/** Read size for streaming a bundle or a blob: fewer, larger reads matter on USB media. */
export const READ_CHUNK = 1024 * 1024;

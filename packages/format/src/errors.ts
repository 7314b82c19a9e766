import { BaseError } from '@offline-bundle/host';

/**
 * Stable error codes of @offline-bundle/format. Every rejection of a bundle has its own
 * code so the agent can report a condition reason and tests can assert on it. New rules
 * reuse the code of the condition they refine (docs/FORMAT.md §2 lists which): the agent
 * maps each code it knows to a reason, and a new one would surface there as Internal.
 */
export type FormatErrorCode =
  | 'NO_TRUST' // neither a key nor a digest was given
  | 'BAD_SIGNATURE' // the signature does not match bundle.json for the key that claims it, or bundle.json's signer names another key than the one that verified
  | 'UNTRUSTED_KEY' // bundle.json was signed by a key that is not trusted
  | 'FILE_DIGEST_MISMATCH' // the whole file does not hash to the expected digest
  | 'BLOB_DIGEST_MISMATCH' // an entry's bytes do not hash to the digest bundle.json lists
  | 'SIZE_MISMATCH' // an entry is shorter than bundle.json lists
  | 'OVERSIZED_ENTRY' // an entry is larger than bundle.json lists (or than a fixed limit)
  | 'UNEXPECTED_ENTRY' // a path that bundle.json does not list, or outside the layout; a header other than the writer's fixed one; pax/GNU extension headers
  | 'DUPLICATE_ENTRY' // the same path twice
  | 'NOT_A_FILE' // a link, device, directory or other non-regular entry
  | 'MISSING_ENTRY' // a listed entry never came
  | 'BAD_ORDER' // bundle.json or its signature are not the first two entries, or the layout entries are out of order
  | 'TRAILING_DATA' // bytes after the end of the archive, or non-zero bytes in its two end blocks
  | 'TRUNCATED' // the file ends before the archive does
  | 'CORRUPT' // not zstd, not tar, or damaged; a zstd frame without its content checksum or size
  | 'BAD_SEEK_TABLE' // the trailing seek index is missing or inconsistent with the file, or another skippable frame exists
  | 'INVALID_MANIFEST' // bundle.json does not follow the schema (blobs sorted before version 3, every image a listed blob)
  | 'UNSUPPORTED_VERSION' // bundle.json's schemaVersion is newer than this reader; or a writer asked for a version it cannot write, or cannot carry what it was asked for
  | 'KEY_ERROR' // a key file cannot be read, is of an unsupported type, or is a private key given as a trust key
  | 'UNSAFE_PERMISSIONS' // a trusted key file others than root or this user could change
  | 'NO_SPACE' // the filesystem written to is full (writer)
  | 'BAD_PARTS' // a split bundle's parts are incomplete or do not belong together (missing, twice, another count, cut short, too long)
  | 'BASE_MISSING' // a delta (bundle.json names a base) with no base to fill its uncarried blobs from
  | 'BASE_CORRUPT' // a delta's base blob, as the node holds it, does not hash to the digest bundle.json lists
  | 'IO_ERROR';

export class FormatError extends BaseError<FormatErrorCode> {}

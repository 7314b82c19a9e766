import { BaseError } from '@offline-bundle/host';

/** Stable error codes of @offline-bundle/oci; callers branch on `code`, never on message text. */
export type OciErrorCode =
  | 'INVALID_REFERENCE'
  | 'INVALID_DIGEST'
  | 'INVALID_MANIFEST'
  | 'UNSUPPORTED_TRANSPORT'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'PLATFORM_NOT_FOUND'
  | 'NOT_FOUND'
  | 'UNAUTHORIZED'
  | 'REGISTRY_ERROR'
  | 'NETWORK_ERROR'
  | 'CREDENTIAL_HELPER_ERROR' // a docker-credential-* helper missing, failing, stuck or answering nonsense
  | 'OUTPUT_EXISTS' // -o names an existing file and --force was not given
  | 'TLS_ERROR' // plain http where TLS was asked for, or a certificate not trusted: no retry helps
  | 'DIGEST_MISMATCH'
  | 'SIZE_MISMATCH'
  | 'INVALID_CONFIG'
  | 'INVALID_RELEASE'
  | 'INVALID_ARCHIVE'
  | 'NOT_A_REGULAR_FILE' // a FIFO, device, directory or socket where a file was expected
  | 'FILE_TOO_LARGE' // a key, config or list over its size limit
  | 'TOO_DEEPLY_NESTED' // YAML or JSON from outside nested past MAX_NESTING_DEPTH (host)
  | 'STATUS_DAMAGED' // the agent's own status file is not a status (damaged, replaced, too large)
  | 'BUSY' // the blob cache is in use by another run (cache prune while a create runs)
  | 'INPUT_TIMEOUT' // a pipe given as a file (--passphrase-file <(cmd)) gave no end in time
  | 'CANNOT_CREATE_DIR' // a directory cannot be made where asked (e.g. on /proc)
  | 'NO_SPACE' // the filesystem written to (the blob cache, the output) is full or too small
  | 'NOT_WRITABLE' // the output cannot be written where asked (permissions, read-only)
  | 'DUPLICATE_NAME' // two sources would give the bundle two images of one name
  | 'SIGNATURE_NOT_FOUND' // no release signature at the store, or a --release-signature file missing
  | 'BAD_RELEASE_SIGNATURE' // not an OpenPGP signed message, bad signature, or not over this release's digest
  | 'UNTRUSTED_RELEASE_SIGNATURE' // signed by a key that is not in the release keyring
  | 'INVALID_KEYRING'; // the release keyring cannot be read

export class OciError extends BaseError<OciErrorCode> {}

import { BaseError } from './base-error.js';

/**
 * Stable codes of the host primitives (files, directories). The same strings the OCI code
 * used for them before this package existed, so outputs and condition reasons did not change.
 */
export type HostErrorCode =
  | 'NOT_A_REGULAR_FILE' // a FIFO, device, directory or socket where a file was expected
  | 'FILE_TOO_LARGE' // a key, config or list over its size limit
  | 'INPUT_TIMEOUT' // a pipe given as a file (--passphrase-file <(cmd)) gave no end in time
  | 'TOO_DEEPLY_NESTED' // YAML or JSON from outside nested past MAX_NESTING_DEPTH
  | 'CANNOT_CREATE_DIR'; // a directory cannot be made where asked (e.g. on /proc)

export class HostError extends BaseError<HostErrorCode> {}

import { BaseError, firstLine } from '@offline-bundle/host';

/** Stable error codes of @offline-bundle/runtime; callers branch on `code`, never on message text. */
export type RuntimeErrorCode =
  /** An argument (repository, mirror address, image reference, command) is malformed. */
  | 'INVALID_SPEC'
  /** A file at the target path was not written by offline-bundle: it is left alone. */
  | 'FOREIGN_FILE'
  /** Writing or removing a configuration file failed (other than for lack of space). */
  | 'WRITE_FAILED'
  /** Reading a configuration file failed, or it is not valid TOML of the expected shape. */
  | 'READ_FAILED'
  /** The CRI socket does not answer (runtime stopped, wrong path, permission). */
  | 'RUNTIME_UNAVAILABLE'
  /** The image store (or the drop-in directory) is out of space. */
  | 'NO_SPACE'
  /** The runtime (or the registry behind it) does not know the image. */
  | 'IMAGE_NOT_FOUND'
  /** PullImage failed for another reason. */
  | 'PULL_FAILED'
  /** A CRI call or a command did not finish in time. */
  | 'TIMEOUT'
  /** A pull moved no bytes for the time allowed (a watchdog cancelled it). */
  | 'STALLED'
  /** A CRI call other than PullImage failed for another reason. */
  | 'CRI_ERROR'
  /** Setting the containerd pin label failed. */
  | 'PIN_FAILED'
  /** The runtime reload command failed. */
  | 'RELOAD_FAILED';

export class RuntimeError extends BaseError<RuntimeErrorCode> {}

export { firstLine };

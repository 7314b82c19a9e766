import type { FormatErrorCode } from '@offline-bundle/format';
import { firstLine as oneLine, type HostErrorCode } from '@offline-bundle/host';
import type { OciErrorCode } from '@offline-bundle/oci';
import type { RegistryErrorCode } from '@offline-bundle/registry';
import type { RuntimeErrorCode } from '@offline-bundle/runtime';
import { FAILURE_REASONS, type FailureReason } from '@offline-bundle/status';

/**
 * Why the agent refused or stopped, as a condition reason (CamelCase) with a message that
 * names the cause and the fix, in one line. The list lives with the technician's sentences
 * (status), so a reason without a sentence does not compile.
 */
export const AGENT_REASONS = FAILURE_REASONS;
export type AgentReason = FailureReason;

export class AgentError extends Error {
  constructor(
    readonly reason: AgentReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'AgentError';
  }
}

/** The system calls' codes a load can meet that name their own cause (a full disk, a stick gone). */
type ErrnoCode = 'ENOSPC' | 'EDQUOT' | 'EIO' | 'ENODEV' | 'ENXIO' | 'ENOTCONN' | 'ECONNABORTED';
type LibraryCode =
  FormatErrorCode | HostErrorCode | OciErrorCode | RegistryErrorCode | RuntimeErrorCode | ErrnoCode;

/** Library error codes (format, host, oci, registry, runtime, the system) → condition reasons; a code no library has does not compile. */
const CODE_REASONS: Readonly<Partial<Record<LibraryCode, AgentReason>>> = {
  NO_TRUST: 'NoTrust',
  BAD_SIGNATURE: 'BadSignature',
  UNTRUSTED_KEY: 'UntrustedKey',
  FILE_DIGEST_MISMATCH: 'DigestMismatch',
  TRUNCATED: 'Truncated',
  IO_ERROR: 'MediaRemoved',
  UNSUPPORTED_VERSION: 'UnsupportedVersion',
  KEY_ERROR: 'InvalidConfig',
  UNSAFE_PERMISSIONS: 'InvalidConfig',
  CANNOT_CREATE_DIR: 'InvalidConfig',
  NOT_A_REGULAR_FILE: 'Corrupt',
  INVALID_CONFIG: 'InvalidConfig',
  RUNTIME_UNAVAILABLE: 'RuntimeUnavailable',
  CRI_ERROR: 'RuntimeUnavailable',
  NO_SPACE: 'NoSpaceInImageStore',
  BAD_PARTS: 'PartsIncomplete',
  BASE_MISSING: 'BaseMissing',
  BASE_CORRUPT: 'BaseCorrupt',
  PULL_FAILED: 'PullFailed',
  IMAGE_NOT_FOUND: 'PullFailed',
  TIMEOUT: 'PullFailed',
  STALLED: 'PullStalled',
  PIN_FAILED: 'PinFailed',
  RELOAD_FAILED: 'ReloadFailed',
  FOREIGN_FILE: 'ForeignFile',
  WRITE_FAILED: 'WriteFailed',
  STATUS_DAMAGED: 'StatusDamaged',
  LAYOUT_INVALID: 'StagingFailed',
  ENOSPC: 'InsufficientSpace',
  EDQUOT: 'InsufficientSpace',
  EIO: 'MediaRemoved',
  ENODEV: 'MediaRemoved',
  ENXIO: 'MediaRemoved',
  // a FUSE stick (exFAT, FAT32 through fusefat) whose daemon died: ENOTCONN, or ECONNABORTED for a request in flight
  ENOTCONN: 'MediaRemoved',
  ECONNABORTED: 'MediaRemoved',
};
// Everything the format reader refuses that is not listed above is a damaged or altered bundle.
const FORMAT_DAMAGE: ReadonlySet<string> = new Set<FormatErrorCode | OciErrorCode>([
  'BLOB_DIGEST_MISMATCH',
  'SIZE_MISMATCH',
  'OVERSIZED_ENTRY',
  'UNEXPECTED_ENTRY',
  'DUPLICATE_ENTRY',
  'NOT_A_FILE',
  'MISSING_ENTRY',
  'BAD_ORDER',
  'TRAILING_DATA',
  'CORRUPT',
  'BAD_SEEK_TABLE',
  'INVALID_MANIFEST',
]);

/** Maps errors from the libraries to the reason a status condition carries. */
export function reasonOf(err: unknown): AgentReason {
  if (err instanceof AgentError) return err.reason;
  if ((err as Error)?.name === 'AbortError') return 'Interrupted';
  const code = (err as { code?: unknown })?.code;
  if (typeof code !== 'string') return 'Internal';
  // own keys only: a code such as "constructor" is not a reason
  const known = Object.hasOwn(CODE_REASONS, code) ? CODE_REASONS[code as LibraryCode] : undefined;
  if (known) return known;
  if (FORMAT_DAMAGE.has(code)) return 'Corrupt';
  return 'Internal';
}

/**
 * The reason and message of a failed load. Where the library error says only what the system
 * call said, name the cause and the fix: a disk filling up mid-load says which directory
 * needs the room. (The bundle file vanishing is turned into MediaRemoved by mediaGone first.)
 */
export function failureOf(
  err: unknown,
  upgradeDir: string,
): { reason: AgentReason; message: string } {
  const e = err as NodeJS.ErrnoException | undefined;
  const reason = reasonOf(err);
  if (reason === 'InsufficientSpace' && (e?.code === 'ENOSPC' || e?.code === 'EDQUOT')) {
    return {
      reason,
      message: `the disk filled up while the bundle was loaded (${oneLine(err)}): free space on the filesystem of ${upgradeDir} (the staging copy) and plug the stick in again`,
    };
  }
  return { reason, message: oneLine(err) };
}

export { oneLine };

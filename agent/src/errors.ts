/**
 * Why the agent refused or stopped, as a condition reason (CamelCase) with a message that
 * names the cause and the fix, in one line.
 */
export const AGENT_REASONS = [
  'NoTrust', 'BadSignature', 'UntrustedKey', 'DigestMismatch', 'Corrupt', 'Truncated',
  'WrongArch', 'Downgrade', 'NotAnUpgradeSource', 'UnknownRunningVersion', 'ClusterForbidden', 'ClusterUnreachable', 'InsufficientSpace', 'StagingFailed',
  'RegistryFailed', 'RuntimeUnavailable', 'PullFailed', 'PullStalled', 'NoSpaceInImageStore', 'PinFailed',
  'ReloadFailed', 'MediaRemoved', 'InvalidConfig', 'UnsupportedVersion', 'ForeignFile', 'WriteFailed',
  'Interrupted', 'Busy', 'Internal', 'MirrorNotUsed', 'RestoreFailed', 'NotRecorded', 'InUse', 'StatusDamaged', 'PartsIncomplete',
  'PartsMixed', 'PartCutShort', 'PartsOtherBundle', 'BaseMissing', 'BaseCorrupt',
  'NoPeerHasBundle', 'PeersSuspect', 'ApprovalRevoked', 'RuntimeIgnoresMirror',
] as const;
export type AgentReason = (typeof AGENT_REASONS)[number];

export class AgentError extends Error {
  constructor(readonly reason: AgentReason, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AgentError';
  }
}

/** Library error codes (format, runtime, oci) → condition reasons. */
const CODE_REASONS: Record<string, AgentReason> = {
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
const FORMAT_DAMAGE = new Set(['BLOB_DIGEST_MISMATCH', 'SIZE_MISMATCH', 'OVERSIZED_ENTRY', 'UNEXPECTED_ENTRY', 'DUPLICATE_ENTRY', 'NOT_A_FILE',
  'MISSING_ENTRY', 'BAD_ORDER', 'TRAILING_DATA', 'CORRUPT', 'BAD_SEEK_TABLE', 'INVALID_MANIFEST']);

/** Maps errors from the libraries to the reason a status condition carries. */
export function reasonOf(err: unknown): AgentReason {
  if (err instanceof AgentError) return err.reason;
  if ((err as Error)?.name === 'AbortError') return 'Interrupted';
  const code = (err as { code?: string })?.code;
  if (code && CODE_REASONS[code]) return CODE_REASONS[code]!;
  if (code && FORMAT_DAMAGE.has(code)) return 'Corrupt';
  return 'Internal';
}

/**
 * The reason and message of a failed load. Where the library error says only what the system
 * call said, name the cause and the fix: a disk filling up mid-load says which directory
 * needs the room. (The bundle file vanishing is turned into MediaRemoved by mediaGone first.)
 */
export function failureOf(err: unknown, upgradeDir: string): { reason: AgentReason; message: string } {
  const e = err as NodeJS.ErrnoException | undefined;
  const reason = reasonOf(err);
  if (reason === 'InsufficientSpace' && (e?.code === 'ENOSPC' || e?.code === 'EDQUOT')) {
    return { reason, message: `the disk filled up while the bundle was loaded (${oneLine(err)}): free space on the filesystem of ${upgradeDir} (the staging copy) and plug the stick in again` };
  }
  return { reason, message: oneLine(err) };
}

import { firstLine as oneLine } from '@offline-bundle/host';
export { oneLine };

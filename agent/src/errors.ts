/**
 * Why the agent refused or stopped, as a condition reason (CamelCase) with a message that
 * names the cause and the fix, in one line.
 */
export type AgentReason =
  | 'NoTrust' | 'BadSignature' | 'UntrustedKey' | 'DigestMismatch' | 'Corrupt' | 'Truncated'
  | 'WrongArch' | 'Downgrade' | 'NotAnUpgradeSource' | 'InsufficientSpace' | 'StagingFailed'
  | 'RegistryFailed' | 'RuntimeUnavailable' | 'PullFailed' | 'NoSpaceInImageStore' | 'PinFailed'
  | 'ReloadFailed' | 'MediaRemoved' | 'InvalidConfig' | 'Internal';

export class AgentError extends Error {
  constructor(readonly reason: AgentReason, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AgentError';
  }
}

const FORMAT_REASONS: Record<string, AgentReason> = {
  NO_TRUST: 'NoTrust',
  BAD_SIGNATURE: 'BadSignature',
  UNTRUSTED_KEY: 'UntrustedKey',
  FILE_DIGEST_MISMATCH: 'DigestMismatch',
  TRUNCATED: 'Truncated',
  IO_ERROR: 'MediaRemoved',
};

/** Maps errors from the libraries to the reason a status condition carries. */
export function reasonOf(err: unknown): AgentReason {
  if (err instanceof AgentError) return err.reason;
  const code = (err as { code?: string })?.code;
  if (code && FORMAT_REASONS[code]) return FORMAT_REASONS[code]!;
  if (code === 'RUNTIME_UNAVAILABLE') return 'RuntimeUnavailable';
  if (code === 'NO_SPACE') return 'NoSpaceInImageStore';
  if (code === 'PULL_FAILED' || code === 'IMAGE_NOT_FOUND') return 'PullFailed';
  if (code === 'RELOAD_FAILED') return 'ReloadFailed';
  if (code === 'INVALID_CONFIG') return 'InvalidConfig';
  if (code === 'ENOSPC') return 'InsufficientSpace';
  if (code === 'ENOENT' || code === 'EIO' || code === 'ENODEV' || code === 'ENXIO') return 'MediaRemoved';
  if (typeof code === 'string' && /^[A-Z_]+$/.test(code)) return 'Corrupt';
  return 'Internal';
}

export { firstLine as oneLine } from '@offline-bundle/oci';

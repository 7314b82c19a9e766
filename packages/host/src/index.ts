export { BaseError, describeSystemError, errnoReason, firstLine } from './base-error.js';
export { HostError } from './errors.js';
export { replaceFile, writeFileAtomic } from './atomic-file.js';
export { createExclusive } from './exclusive-file.js';
export { syncDirBestEffort, syncPath, writeSynced } from './sync-file.js';
export { MAX_QUOTED_CHARS, escapeControls, quoteName, textTable } from './safe-text.js';
export {
  PIPE_READ_TIMEOUT_MS,
  assertRegularFile,
  openRegularFile,
  readSmallFile,
  unsafePermissions,
} from './small-file.js';
export { pidExists } from './pid.js';
export { makeDirs } from './make-dirs.js';
export { filesystemFree } from './free-space.js';
export { SYSTEM_ROOT_ENV, systemRoot } from './system-root.js';
export { ReadBuffers, giveBack, readBuffers } from './read-buffers.js';
export { ConnectionGate, addressKey } from './connection-gate.js';
export { isLoopback } from './loopback.js';
export { bypassesProxy, proxyFromEnv } from './proxy-env.js';
export {
  JsonNestingGauge,
  MAX_NESTING_DEPTH,
  assertNesting,
  assertValueNesting,
  nestingTooDeep,
  tooDeepError,
  valueTooDeep,
} from './nesting-depth.js';

export type { HostErrorCode } from './errors.js';
export type { ProxySettings } from './proxy-env.js';
export type { GateCounts, GateLimits, GatedSocket } from './connection-gate.js';

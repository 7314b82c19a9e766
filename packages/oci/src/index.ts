export { OciError } from './errors.js';
export { assertDigest, digestHex, isDigest, newSha256, sha256, sha256File } from './digest.js';
export {
  MediaType,
  MANIFEST_ACCEPT,
  isIndexMediaType,
  isManifestMediaType,
} from './media-types.js';
export {
  parseReference,
  parseOciUrlReference,
  formatReference,
  repositoryName,
  digestReference,
} from './reference.js';
export {
  parsePlatform,
  formatPlatform,
  platformMatches,
  normalizeArch,
  isKnownArch,
  KNOWN_ARCHES,
} from './platform.js';
export { MAX_MANIFEST_BYTES, parseManifest } from './manifest.js';
export {
  addPhase,
  startPhaseTimes,
  timedAsync,
  timedSync,
  writePhaseTimes,
} from './phase-times.js';
export { mirrorPath } from './mirror-path.js';
export type { OciErrorCode } from './errors.js';
export type { ImageReference } from './reference.js';
export type { Platform } from './platform.js';
export type { Descriptor, ImageIndex, ImageManifest } from './manifest.js';
export { ZstdDecompressStream, zstdBinding } from './zstd-stream.js';

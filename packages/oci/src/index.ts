export { OciError } from './errors.js';
export { BaseError, firstLine, ignoreBrokenPipe, runCli, usageExitCode } from './base-error.js';
export { writeFileAtomic } from './atomic-file.js';
export { escapeControls } from './safe-text.js';
export { assertRegularFile, readSmallFile, unsafePermissions } from './small-file.js';
export { makeDirs } from './make-dirs.js';
export { filesystemFree } from './free-space.js';
export { assertDigest, digestHex, isDigest, newSha256, sha256, sha256File } from './digest.js';
export { MediaType, MANIFEST_ACCEPT, isIndexMediaType, isManifestMediaType } from './media-types.js';
export { parseReference, formatReference, repositoryName, digestReference } from './reference.js';
export { parsePlatform, formatPlatform, platformMatches, normalizeArch } from './platform.js';
export { parseManifest } from './manifest.js';
export { AuthStore, defaultAuthFiles } from './auth.js';
export { RegistriesConf } from './registries-conf.js';
export { RegistryClient, skipBytes } from './registry-client.js';
export { withRetry } from './retry.js';
export { LayoutSource, REF_NAME_ANNOTATION } from './layout-source.js';
export { DockerArchiveSource } from './docker-archive-source.js';
export { DockerSource } from './docker-source.js';
export { parseSourceSpec, openSource } from './transport.js';
export { BlobCache, cacheInfo, pruneCache } from './blob-cache.js';
export { UnpackedCounter, MAX_UNPACK_RATIO } from './unpacked-size.js';
export { mirrorPath } from './mirror-path.js';
export { readReleasePayload, IMAGE_REFERENCES_PATH, RELEASE_METADATA_PATH } from './release.js';
export { RELEASE_MANIFESTS_DIR, isReleaseManifest, pullAlwaysWorkloads } from './release-manifests.js';
export {
  ATOMIC_SIGNATURE_TYPE, MAX_STORE_SIGNATURES, signatureStoreUrl, fetchStoreSignatures, loadReleaseKeyring, readReleaseSignature,
  verifyReleaseSignature,
} from './release-signature.js';

export type { OciErrorCode } from './errors.js';
export type { ImageReference } from './reference.js';
export type { Platform } from './platform.js';
export type { Descriptor, ImageIndex, ImageManifest, ParsedManifest } from './manifest.js';
export type { Credentials } from './auth.js';
export type { RegistryRule, PullSource, PullFromMirror } from './registries-conf.js';
export type { RegistryLocation, RegistryClientOptions } from './registry-client.js';
export type { ImageSource, FetchedManifest } from './source.js';
export type { SourceSpec, TransportName, TransportContext } from './transport.js';
export type { ReleasePayload } from './release.js';
export type { CacheInfo } from './blob-cache.js';
export type { PullAlwaysWorkload } from './release-manifests.js';
export type { ReleaseSignatureInfo, ReleaseKeyring } from './release-signature.js';
export type { CacheFetchOptions } from './blob-cache.js';

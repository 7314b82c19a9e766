export { OciError } from './errors.js';
export { assertDigest, digestHex, isDigest, newSha256, sha256, sha256File } from './digest.js';
export { MediaType, MANIFEST_ACCEPT, isIndexMediaType, isManifestMediaType } from './media-types.js';
export { parseReference, parseOciUrlReference, formatReference, repositoryName, digestReference } from './reference.js';
export { parsePlatform, formatPlatform, platformMatches, normalizeArch, isKnownArch, KNOWN_ARCHES } from './platform.js';
export { parseManifest } from './manifest.js';
export { AuthStore, MAX_AUTH_FILE_BYTES, defaultAuthFiles, parseCreds } from './auth.js';
export { CREDENTIAL_HELPER_TIMEOUT_MS, MAX_CREDENTIAL_HELPER_OUTPUT, helperCredentials } from './credential-helper.js';
export { MAX_CERT_FILE_BYTES, certDirFor, readCertDir } from './cert-dirs.js';
export { Connections, bypassesProxy, connectionOptions, proxyFromEnv } from './connections.js';
export { MAX_REGISTRIES_CONF_BYTES, REGISTRIES_CONF_ENV, RegistriesConf } from './registries-conf.js';
export { RegistryClient, skipBytes } from './registry-client.js';
export { withRetry } from './retry.js';
export { LayoutSource, REF_NAME_ANNOTATION } from './layout-source.js';
export { DockerArchiveSource } from './docker-archive-source.js';
export { DockerSource } from './docker-source.js';
export { DirSource } from './dir-source.js';
export { parseSourceSpec, openSource } from './transport.js';
export { BlobCache, cacheInfo, lockCache, pruneCache } from './blob-cache.js';
export { UnpackedCounter, MAX_UNPACK_RATIO } from './unpacked-size.js';
export { PHASE_TIMES_ENV, addPhase, phaseTimesOn, startPhaseTimes, threadCpuSeconds, timedAsync, timedSync, writePhaseTimes } from './phase-times.js';
export { mirrorPath } from './mirror-path.js';
export { MAX_LAYER_FILE_BYTES, MAX_LAYER_TOTAL_BYTES, MAX_LAYER_UNPACKED_BYTES, readLayerFiles, readReleasePayload, IMAGE_REFERENCES_PATH, RELEASE_METADATA_PATH } from './release.js';
export { RELEASE_MANIFESTS_DIR, isReleaseManifest, pullAlwaysWorkloads } from './release-manifests.js';
export {
  ATOMIC_SIGNATURE_TYPE, MAX_RELEASE_KEYRING_BYTES, MAX_RELEASE_SIGNATURE_BYTES, MAX_SIGNED_PAYLOAD_BYTES, MAX_STORE_SIGNATURES, readReleaseFile, signatureStoreUrl, fetchStoreSignatures, loadReleaseKeyring, readReleaseSignature,
  verifyReleaseSignature,
} from './release-signature.js';

export type { OciErrorCode } from './errors.js';
export type { ImageReference } from './reference.js';
export type { Platform } from './platform.js';
export type { Descriptor, ImageIndex, ImageManifest, ParsedManifest } from './manifest.js';
export type { Credentials, AuthFile, AuthStoreOptions } from './auth.js';
export type { ConnectionOptions, ProxySettings } from './connections.js';
export type { CertDirOptions, HostTls } from './cert-dirs.js';
export type { RegistryRule, PullSource, PullFromMirror } from './registries-conf.js';
export type { RegistryLocation, RegistryClientOptions } from './registry-client.js';
export type { ImageSource, FetchedManifest } from './source.js';
export type { SourceSpec, TransportName, TransportContext } from './transport.js';
export type { LayerReader, ReleasePayload } from './release.js';
export type { CacheInfo } from './blob-cache.js';
export type { PullAlwaysWorkload } from './release-manifests.js';
export type { ReleaseSignatureInfo, ReleaseKeyring } from './release-signature.js';
export type { CacheFetchOptions } from './blob-cache.js';
export { ZstdDecompressStream, zstdBinding } from './zstd-stream.js';

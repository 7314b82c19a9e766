export { AuthStore, MAX_AUTH_FILE_BYTES, defaultAuthFiles } from './auth.js';
export { helperCredentials } from './credential-helper.js';
export { MAX_CERT_FILE_BYTES, certDirFor, readCertDir } from './cert-dirs.js';
export {
  Connections,
  bypassesProxy,
  connectionError,
  connectionOptions,
  proxyFromEnv,
} from './connections.js';
export { MAX_REGISTRIES_CONF_BYTES, RegistriesConf } from './registries-conf.js';
export { RegistryClient, skipBytes } from './registry-client.js';
export { REF_NAME_ANNOTATION } from './layout-source.js';
export { DirSource } from './dir-source.js';
export { parseSourceSpec, openSource } from './transport.js';
export { BlobCache, cacheInfo, lockCache, pruneCache } from './blob-cache.js';
export type { CacheFetchOptions } from './blob-cache.js';
export { UnpackedCounter, MAX_UNPACK_RATIO } from './unpacked-size.js';
export type { ConnectionOptions } from './connections.js';
export type { RegistryLocation } from './registry-client.js';
export type { ImageSource } from './source.js';
export type { SourceSpec } from './transport.js';

export { startRegistry, ServedLog } from './server.js';
export { catalogOf, servedNames, layoutRange, LayoutStore, BundleFileStore } from './store.js';
export type { RegistryErrorCode } from './store.js';
export type { RunningRegistry } from './server.js';
export type { BlobStore, Catalog } from './store.js';
export { REGISTRY_STALL_MS } from './client-pace.js';

export { buildRegistry, startRegistry, ServedLog } from './server.js';
export { catalogOf, servedNames, layoutRange, LayoutStore, LayoutError, BundleFileStore } from './store.js';
export { ReadBuffers, readBuffers } from './read-buffers.js';
export type { RegistryServerOptions, RunningRegistry } from './server.js';
export type { BlobStore, Catalog } from './store.js';

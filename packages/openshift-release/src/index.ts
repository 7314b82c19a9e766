export {
  MAX_LAYER_FILE_BYTES,
  MAX_LAYER_TOTAL_BYTES,
  MAX_LAYER_UNPACKED_BYTES,
  readLayerFiles,
  readReleasePayload,
  IMAGE_REFERENCES_PATH,
  RELEASE_METADATA_PATH,
} from './release.js';
export {
  MAX_RELEASE_SIGNATURE_BYTES,
  readReleaseFile,
  fetchStoreSignatures,
  loadReleaseKeyring,
  readReleaseSignature,
  verifyReleaseSignature,
} from './release-signature.js';
export { pullAlwaysWorkloads } from './release-manifests.js';
export type { LayerReader } from './release.js';
export type { ReleaseKeyring } from './release-signature.js';

export { MAX_LAYER_FILE_BYTES, MAX_LAYER_TOTAL_BYTES, MAX_LAYER_UNPACKED_BYTES, readLayerFiles, readReleasePayload, IMAGE_REFERENCES_PATH, RELEASE_METADATA_PATH } from './release.js';
export { RELEASE_MANIFESTS_DIR, isReleaseManifest, pullAlwaysWorkloads } from './release-manifests.js';
export {
  ATOMIC_SIGNATURE_TYPE, MAX_RELEASE_KEYRING_BYTES, MAX_RELEASE_SIGNATURE_BYTES, MAX_SIGNED_PAYLOAD_BYTES, MAX_STORE_SIGNATURES, readReleaseFile, signatureStoreUrl, fetchStoreSignatures, loadReleaseKeyring, readReleaseSignature,
  verifyReleaseSignature,
} from './release-signature.js';
export type { LayerReader, ReleasePayload } from './release.js';
export type { PullAlwaysWorkload } from './release-manifests.js';
export type { ReleaseSignatureInfo, ReleaseKeyring } from './release-signature.js';

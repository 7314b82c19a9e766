export { FormatError } from './errors.js';
export {
  BUNDLE_JSON,
  SIGNATURE,
  OCI_LAYOUT,
  INDEX_JSON,
  BLOB_DIR,
  OCI_LAYOUT_CONTENT,
  FRAME_BYTES,
  MAX_BUNDLE_JSON_BYTES,
  MAX_SIGNATURE_BYTES,
  SCHEMA_VERSION,
  RELEASE_SIGNATURE_MEDIA_TYPE,
  blobPath,
  tarStreamBytes,
  FORMAT_VERSIONS,
  WRITABLE_VERSIONS,
  VERSIONED_FEATURES,
  featureNeedsVersion,
  defaultVersionFor,
  unwritableVersion,
  versionAllows,
} from './layout.js';
export {
  validateManifest,
  checkReleaseFields,
  releasePath,
  MAX_RELEASE_PATH_HOPS,
  OPERATOR_CATALOG_COMPONENT,
  isPayloadComponent,
  parseManifestBytes,
  serializeManifest,
  AGENT_REPOSITORY,
  AGENT_VERSION_RULE,
  isAgentVersion,
  isReleaseVersion,
  isReleaseArch,
} from './manifest.js';
export {
  MAX_KEY_FILE_BYTES,
  MAX_PASSPHRASE_FILE_BYTES,
  PASSPHRASE_ENV,
  readPassphrase,
  generateKeyPair,
  loadPrivateKey,
  loadPublicKey,
  fingerprint,
  algorithmOf,
  signBytes,
  verifyBytes,
} from './keys.js';
export { assertTrust, checkSignature, loadTrust } from './trust.js';
export {
  encodeSeekTable,
  decodeSeekTable,
  SEEKABLE_MAGIC,
  SKIPPABLE_MAGIC_SEEK_TABLE,
} from './seekable.js';
export {
  digestLine,
  writeBundle,
  writeFailure,
  estimateImageStoreBytes,
  estimateBundleBytes,
} from './writer.js';
export { rawFrame } from './raw-frame.js';
export { verifyBundle } from './reader.js';
export { readHeader, readSeekIndex, endsWithSeekTable, misplacedFrame } from './bundle-ends.js';
export { FileSource, openBundleFile, withBundleFile } from './sources/file.js';
export {
  MAX_PARTS,
  PartsSource,
  findParts,
  isPartName,
  namesSplitBundle,
  openBundle,
  parsePartName,
  partName,
  partNamesIn,
  withBundle,
} from './sources/parts.js';
export {
  BundleRandomReader,
  type RandomReaderOptions,
  type VerifiedFrames,
} from './random-reader.js';
export { ByteBudget, FRAME_BUDGET_BYTES, processFrameBudget } from './frame-budget.js';
export { FRAME_SLICE_BYTES } from './frame-stream.js';
export { extractBundle, finishLayout, readLayoutDescription } from './extract.js';
export {
  MAX_RESUME_MARKER_BYTES,
  RESUME_MARKER,
  bundleIdentity,
  partialBundle,
  verifiedInPlace,
  writeResumeMarker,
} from './extract-resume.js';
// the staged-layout writer extractBundle writes through, for every origin of a layout's entries (peers too)
export {
  EntryFiles,
  EntryAppend,
  WRITING_SUFFIX,
  emptyStaging,
  removeUnfinishedWrites,
  stagingProbe,
} from './entry-files.js';
export type { AppendOptions } from './entry-files.js';
export { layoutEntries, baseEntries, baseLabel, deltaFacts, type DeltaFacts } from './listing.js';
export { checkSigner } from './trust.js';
export { needsBase, type BaseSource } from './base-fill.js';
export { compareVersions } from './release-version.js';
export { positionOnPath, type PathStep } from './release-position.js';
export { readReleaseSignatures } from './release-signatures.js';
export { BoundedDecompress, decompressFrame } from './zstd-bounded.js';
export { FrameInspector, parseFrameHeader } from './frame-inspector.js';
export { canonicalHeader } from './entry-header.js';
export {
  MAX_PIECE_BYTES,
  MIN_PIECE_BYTES,
  PIECE_BYTES,
  PieceDigests,
  PieceHasher,
  decodePieceList,
  hasPieces,
  listChars,
  pieceCount,
  pieceRange,
  validatePieces,
  type BundlePieces,
} from './pieces.js';
export { PieceHashThread, pieceThreadsRunning, type PieceStream } from './piece-hash-thread.js';

export type { FormatErrorCode } from './errors.js';
export type { FormatVersion, VersionedFeature } from './layout.js';
export type {
  BundleManifest,
  BundleAgent,
  BundleBase,
  BundleImage,
  BundleBlob,
  BundleRelease,
  ReleaseHop,
  HopAdds,
  ReleaseSignatureRef,
  SignatureAlgorithm,
} from './manifest.js';
export type { KeyType, TrustedKey } from './keys.js';
export type { LoadTrustOptions, Trust } from './trust.js';
export type { FrameEntry, SeekIndex } from './seekable.js';
export type { WriteBundleInput, WrittenBundle, ReadyBlob } from './writer.js';
export type { VerifyOptions, VerifiedBundle, LayoutEntry } from './verify-options.js';
export type { BundleSource, StreamOptions } from './source.js';
export type { FoundPart } from './sources/parts.js';
export type { ExtractOptions, ExtractedBundle } from './extract.js';
export type { ResumeInfo } from './extract-resume.js';
export type { BundleReleaseSignatures } from './release-signatures.js';
export type { BoundedDecompressOptions } from './zstd-bounded.js';

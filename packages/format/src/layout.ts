/** The bundle format as constants: its versions, entry names, limits and sizes (docs/FORMAT.md). */

/**
 * One format version (bundle.json's `schemaVersion`): the media type bundle.json carries with
 * it and the oldest release of bundle-agent (and of `bundle`) that reads it.
 * docs/FORMAT.md §7 and docs/ARCHITECTURE.md "Format versions" describe each.
 */
export interface FormatVersion {
  mediaType: string;
  /** The oldest bundle-agent release that reads this version: what `bundle inspect` says a bundle needs. */
  minReader: string;
}

/**
 * Every version this tool knows, the one place that knows them. Versions 1 and 2 came before
 * any release was numbered past 0.1.0. Version 3 is read from 0.2.0 on: the agents in the field
 * (0.1.0, commit 0b1c790, frozen in test/fixtures/frozen-reader) refuse it; the packages are
 * numbered 0.2.0 from the release that reads it on.
 */
export const FORMAT_VERSIONS: Readonly<Record<number, FormatVersion>> = {
  // the first: totals.archiveBytes, the layout's compressed size, is required
  1: { mediaType: 'application/vnd.offline-bundle.v1+json', minReader: '0.1.0' },
  // no totals.archiveBytes: it is known only after compressing, and a bundle.json that waits
  // for it forces a second full write of the file
  2: { mediaType: 'application/vnd.offline-bundle.v2+json', minReader: '0.1.0' },
  // blobs in any order bundle.json lists them (pull order): a reader that holds them to digest
  // order would refuse such a bundle as altered, so it must refuse it as too new instead
  3: { mediaType: 'application/vnd.offline-bundle.v3+json', minReader: '0.2.0' },
};

/** The newest version this tool reads and writes. */
export const SCHEMA_VERSION = 3;
/** Versions a reader accepts, with the media type each carries. */
export const READABLE_VERSIONS: Readonly<Record<number, string>> = Object.fromEntries(
  Object.entries(FORMAT_VERSIONS).map(([v, f]) => [Number(v), f.mediaType]),
);
/**
 * Versions a writer writes (`bundle create --format-version`): the current one and the one
 * before it, for agents not yet upgraded. Version 1 would need the second full write again.
 */
export const WRITABLE_VERSIONS: readonly number[] = [2, 3];

/**
 * What a writer may be asked for that only some versions allow, by the version that allows it
 * first: asked for one with an older version, the writer refuses by name (featureNeedsVersion).
 */
export const VERSIONED_FEATURES = {
  /** Blobs packed in the order the caller lists them, not sorted by digest. */
  'blobs in pull order': 3,
  /**
   * A delta (`base` and blobs marked `fromBase`): some listed blobs are not in the archive. A
   * reader before version 3 would call them missing (the bundle damaged), not needing a base.
   */
  'a delta against a base bundle': 3,
} as const;
export type VersionedFeature = keyof typeof VERSIONED_FEATURES;

/**
 * The version a writer picks when not told: the oldest writable one that carries every feature
 * asked for, so a bundle reaches every agent that can read what it holds (a newer version that
 * adds nothing to it would only lock out the agents in the field).
 */
export function defaultVersionFor(features: readonly VersionedFeature[]): number {
  return Math.max(WRITABLE_VERSIONS[0]!, ...features.map((f) => VERSIONED_FEATURES[f]));
}

/** Whether bundles of `version` may carry `feature`. */
export function versionAllows(version: number, feature: VersionedFeature): boolean {
  return version >= VERSIONED_FEATURES[feature];
}

/** The one-line reason a writer cannot write `version`, or undefined when it can. */
export function unwritableVersion(version: number): string | undefined {
  if (WRITABLE_VERSIONS.includes(version)) return undefined;
  return `format version ${String(version)} cannot be written; this tool writes ${WRITABLE_VERSIONS.join(', ')} (by default the oldest that carries what the bundle holds)`;
}

/** The one-line reason `feature` cannot go into a bundle of `version`, or undefined when it can. */
export function featureNeedsVersion(
  feature: VersionedFeature,
  version: number,
): string | undefined {
  if (versionAllows(version, feature)) return undefined;
  const needed = VERSIONED_FEATURES[feature];
  return `${feature} needs format version ${needed} or later (bundle-agent ${FORMAT_VERSIONS[needed]!.minReader} or later); format version ${version} cannot carry it: drop --format-version ${version}, or build without ${feature}`;
}

export const BUNDLE_JSON = 'bundle.json';
export const SIGNATURE = 'bundle.json.sig';
export const OCI_LAYOUT = 'oci-layout';
export const INDEX_JSON = 'index.json';
export const BLOB_DIR = 'blobs/sha256/';

/**
 * Media type of a release signature carried as a blob (bundle.json release.signatures): the
 * exact bytes of a signature store's signature-N file, an OpenPGP signed message.
 */
export const RELEASE_SIGNATURE_MEDIA_TYPE =
  'application/vnd.offline-bundle.release-signature.v1+pgp';

export const OCI_LAYOUT_CONTENT = '{"imageLayoutVersion":"1.0.0"}';

/** Largest uncompressed zstd frame: bounds the memory and the work of one random read. */
export const FRAME_BYTES = 4 * 1024 * 1024;
export const MAX_BUNDLE_JSON_BYTES = 16 * 1024 * 1024;
export const MAX_SIGNATURE_BYTES = 4096;
export const MAX_INDEX_JSON_BYTES = 16 * 1024 * 1024;

export const TAR_BLOCK = 512;
/** Fixed mtime for every entry: the same inputs give the same bytes. */
export const ENTRY_MTIME = new Date(0);

export function blobPath(digest: string): string {
  return BLOB_DIR + digest.slice('sha256:'.length);
}

export function paddedSize(size: number): number {
  return Math.ceil(size / TAR_BLOCK) * TAR_BLOCK;
}

/** Bytes of the tar stream for entries of these sizes: a header and padded data each, then two zero blocks. */
export function tarStreamBytes(sizes: number[]): number {
  return sizes.reduce((sum, s) => sum + TAR_BLOCK + paddedSize(s), 0) + 2 * TAR_BLOCK;
}

/** Read size for streaming a bundle or a blob: fewer, larger reads matter on USB media. */
export const READ_CHUNK = 1024 * 1024;

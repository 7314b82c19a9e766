import { isDigest, isManifestMediaType, type Platform } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { compareVersions } from './release-version.js';
import {
  READABLE_VERSIONS,
  RELEASE_SIGNATURE_MEDIA_TYPE,
  SCHEMA_VERSION,
  VERSIONED_FEATURES,
  versionAllows,
} from './layout.js';
import { validatePieces, type BundlePieces } from './pieces.js';

export interface BundleRelease {
  /** Human name: the OpenShift version, or what --name said. */
  name: string;
  version: string;
  arch: string;
  /** The release image, when the bundle carries an OpenShift release payload. */
  image: string | null;
  digest: string | null;
  /** Versions a cluster may be running to accept this bundle; empty: any. */
  upgradeFrom: string[];
  /**
   * The release image's signatures (signature-1, -2, … in this order), each a blob of the
   * layout with media type RELEASE_SIGNATURE_MEDIA_TYPE. Absent in bundles without any.
   */
  signatures?: ReleaseSignatureRef[];
  /**
   * An update path (#43): the releases a cluster takes before this one, oldest first, each
   * carried whole (its release image and payload among `images`). Absent in a bundle of one
   * release. A reader that predates the field reads the bundle as this release alone, which
   * it is: a node that runs the last hop's source upgrades from it; one further back is refused
   * as today, this release's upgradeFrom does not name it. releasePath() gives the whole list.
   */
  via?: ReleaseHop[];
  /** With `via`: what this release's payload adds over the hop before it. */
  adds?: HopAdds;
  /**
   * With `via`: the digests of this release's own images, each among `images`: its release
   * image and every image its payload's image-references names (what the agent reads from the
   * release image itself), sorted. The cluster side pins each release apart with it, so an
   * earlier release's pins can go once the cluster is past it. Absent in bundles built before
   * it (the path is then pinned as one); readers that predate it ignore it.
   */
  payload?: string[];
}

/** One release of an update path: a release's own fields (bundle.json requires `adds` on each of `via`). */
export type ReleaseHop = Omit<BundleRelease, 'via'>;

/**
 * What a hop's payload adds over the hop before it (the first hop: its whole payload): its
 * images the one before does not have, and the bytes of its blobs the one before does not
 * have. For display (inspect, diff): how much of a second payload the stick holds.
 */
export interface HopAdds {
  images: number;
  bytes: number;
}

/**
 * The component the builder gives an operator catalog's image: the one component name that is
 * not a release payload's, so no release's `payload` lists it.
 */
export const OPERATOR_CATALOG_COMPONENT = 'operator-catalog';

/** Whether an image's component names a release payload's part (the release image's "release" among them): one the builder took from a payload. */
export const isPayloadComponent = (component: string | undefined): boolean =>
  component !== undefined && component !== OPERATOR_CATALOG_COMPONENT;

/** Most releases an update path holds: an EUS-to-EUS upgrade is two; more is a mistake or a bomb. */
export const MAX_RELEASE_PATH_HOPS = 4;

/**
 * The releases of a bundle in the order a cluster takes them, the final one (bundle.json's
 * `release`, without its path fields) last: one entry in a bundle of one release. The one
 * reading of the path for the agent and the cluster side.
 */
export function releasePath(m: Pick<BundleManifest, 'release'>): ReleaseHop[] {
  const { via, ...final } = m.release;
  return [...(via ?? []), final];
}

export interface ReleaseSignatureRef {
  /** Digest of the blob holding the signature's bytes. */
  digest: string;
  /** OpenPGP key IDs of its issuers (16 lowercase hex digits), as the signature names them. */
  keyIds: string[];
}

export interface BundleImage {
  /** Registry and repository, as the cluster names the image: "quay.io/ns/repo". */
  repository: string;
  tag: string | null;
  /** Digest of the top manifest (an index when the source had one). */
  digest: string;
  mediaType: string;
  /** Platforms kept (an index may list more whose manifests are not in the bundle). */
  platforms: Platform[];
  /** Component name from the release payload, when it came from one. */
  component?: string;
}

/** The fixed name a bundled agent image goes by on the node (and in the Quadlet drop-in). */
export const AGENT_REPOSITORY = 'localhost/offline-bundle/bundle-agent';
/**
 * An agent version: canonical semver (what semver.valid(v) returns for it is v itself: no
 * leading v or =, no spaces, no leading zeros, no +build, which an image tag cannot hold),
 * at most 64 characters (it names an image tag and is shown in status). The one check the
 * builder (--agent-version, the label) and bundle.json's validation share.
 */
const CANONICAL_SEMVER =
  /^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?$/;
export function isAgentVersion(v: unknown): v is string {
  if (typeof v !== 'string' || v.length > 64) return false;
  const m = CANONICAL_SEMVER.exec(v);
  // semver refuses a major, minor or patch beyond Number.MAX_SAFE_INTEGER
  return !!m && [m[1], m[2], m[3]].every((x) => Number(x) <= Number.MAX_SAFE_INTEGER);
}
/** What isAgentVersion asks, for messages. */
export const AGENT_VERSION_RULE =
  'a canonical semver version of at most 64 characters, e.g. 0.9.0 or 1.0.0-rc.1 (no leading v, no +build)';

/** The bundle-agent image a bundle carries, for the agent's self-upgrade. */
export interface BundleAgent {
  /** The agent's version (the image's org.opencontainers.image.version label). */
  version: string;
  /** Always AGENT_REPOSITORY; the image is in `images` as AGENT_REPOSITORY:version. */
  repository: string;
  /** The image's top manifest digest, one of `images`. */
  digest: string;
}

export interface BundleBlob {
  digest: string;
  size: number;
  mediaType: string;
  /** A delta's blob not in the archive: the node fills it from what it holds of `base`. Absent (never false) otherwise. */
  fromBase?: true;
}

/** The release a delta was made against: the node must hold its blobs (docs/FORMAT.md, "Deltas"). */
export interface BundleBase {
  /** Digest of the base's bundle.json (its identity, as resume markers name a bundle). */
  bundleJson: string;
  name: string;
  version: string;
}

export interface BundleManifest {
  schemaVersion: number;
  mediaType: string;
  release: BundleRelease;
  images: BundleImage[];
  /**
   * Helm charts stored as OCI artifacts: served by the node's registry like the images, but
   * never pulled or pinned (a container runtime cannot run a chart). A list of its own, not a
   * mark on images: a reader that predates it ignores the field and so never hands a chart to
   * its runtime (absent when the bundle carries none).
   */
  charts?: BundleImage[];
  /** Every file under blobs/ (manifests, configs, layers), in the archive's order: by digest before version 3, any order from it. */
  blobs: BundleBlob[];
  /** The layout's index.json. */
  index: { digest: string; size: number };
  totals: {
    /** Bytes of oci-layout, index.json and every blob: what staging writes. */
    layoutBytes: number;
    /** Version 1 only: compressed bytes of the layout's frames (the seek table has them too). */
    archiveBytes?: number;
    /** Estimated bytes the images take once unpacked in the runtime's store. */
    imageStoreBytes: number;
  };
  creator: { tool: string; version: string; createdAt: string };
  /** A new bundle-agent carried in the bundle; absent in most bundles (readers that predate the field ignore it). */
  agent?: BundleAgent;
  /** A delta's base: the blobs marked `fromBase` are listed but not carried (version 3 on). */
  base?: BundleBase;
  /** Per-piece digests of the large blobs (pieces.ts); absent in bundles built before them. */
  pieces?: BundlePieces;
  signer: { algorithm: SignatureAlgorithm; fingerprint: string };
}

export type SignatureAlgorithm = 'ecdsa-p256-sha256' | 'ed25519';

const bad = (msg: string): never => {
  throw new FormatError('INVALID_MANIFEST', `bundle.json: ${msg}`);
};
const SAFE_NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;
/** A release version as bundle.json may carry it, and so as it may name `<version>-<arch>` on a node: never a path. */
export const isReleaseVersion = (v: unknown): v is string =>
  typeof v === 'string' && v.length <= 128 && SAFE_NAME.test(v);
/** A release arch, by the same rule (at most 32 characters). */
export const isReleaseArch = (v: unknown): v is string =>
  typeof v === 'string' && v.length <= 32 && SAFE_NAME.test(v);
const isObj = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown, where: string, max = 1024): string =>
  typeof v === 'string' && v.length > 0 && v.length <= max
    ? v
    : bad(`${where} must be a non-empty string`);
const optStr = (v: unknown, where: string): string | null => (v === null ? null : str(v, where));
const int = (v: unknown, where: string): number =>
  Number.isSafeInteger(v) && (v as number) >= 0
    ? (v as number)
    : bad(`${where} must be a non-negative integer`);
const digest = (v: unknown, where: string): string =>
  typeof v === 'string' && isDigest(v) ? v : bad(`${where} must be a sha256 digest`);
const arr = (v: unknown, where: string, max = 1_000_000): unknown[] =>
  Array.isArray(v) && v.length <= max ? v : bad(`${where} must be a list`);

/**
 * The release fields a builder knows before it fetches anything (name, version, arch,
 * upgradeFrom): the rules validateManifest holds bundle.json to, so `bundle create` can refuse
 * them up front. Absent fields are skipped here (validateManifest requires them); `fail` gets
 * the field (release.version, release.upgradeFrom[2]) and the rule it breaks.
 */
export function checkReleaseFields(
  r: { name?: unknown; version?: unknown; arch?: unknown; upgradeFrom?: unknown },
  fail: (field: string, rule: string) => never,
): void {
  const text = (v: unknown, field: string, max: number): string =>
    typeof v === 'string' && v.length > 0 && v.length <= max
      ? v
      : fail(
          field,
          `must be a non-empty string${max < 1024 ? ` of at most ${max} characters` : ''}`,
        );
  if (r.name !== undefined) text(r.name, 'release.name', 1024);
  // version and arch name directories on the node (<version>-<arch>): never a path
  if (r.version !== undefined && !isReleaseVersion(text(r.version, 'release.version', 128)))
    fail('release.version', 'must be letters, digits and . _ + - (it names a directory)');
  if (r.arch !== undefined && !isReleaseArch(text(r.arch, 'release.arch', 32)))
    fail('release.arch', 'must be letters, digits and . _ + -');
  if (Array.isArray(r.upgradeFrom))
    r.upgradeFrom.forEach((v, i) => text(v, `release.upgradeFrom[${i}]`, 128));
}

/**
 * Checks the shape of bundle.json after its signature was checked: everything later code
 * relies on (digests, sizes, names) is validated here, once.
 */
export function validateManifest(doc: unknown): BundleManifest {
  if (!isObj(doc)) return bad('not an object');
  const version = doc.schemaVersion;
  const mediaType = Number.isSafeInteger(version)
    ? READABLE_VERSIONS[version as number]
    : undefined;
  if (mediaType === undefined) {
    if (Number.isSafeInteger(version) && (version as number) > SCHEMA_VERSION) {
      throw new FormatError(
        'UNSUPPORTED_VERSION',
        `bundle.json has schemaVersion ${String(version)}; this tool reads up to ${SCHEMA_VERSION}: update offline-bundle`,
      );
    }
    bad(`schemaVersion must be one of ${Object.keys(READABLE_VERSIONS).join(', ')}`);
  }
  if (doc.mediaType !== mediaType)
    bad(`mediaType must be ${mediaType} for schemaVersion ${String(version)}`);
  const r = isObj(doc.release) ? doc.release : bad('release missing');
  arr(r.upgradeFrom, 'release.upgradeFrom');
  checkReleaseFields(r, (field, rule) => bad(`${field} ${rule}`));
  optStr(r.image, 'release.image');
  if (r.digest !== null) digest(r.digest, 'release.digest');
  validateImages(doc.images, 'images');
  if (doc.charts !== undefined) {
    validateImages(doc.charts, 'charts');
    validateCharts(doc.charts as BundleImage[], doc.images as BundleImage[]);
  }
  const seen = new Set<string>();
  let previous = '';
  // the archive holds the blobs in this order whatever it is; before version 3 it is the one
  // order, by digest, so a reader of those versions refuses any other as altered
  const anyOrder = versionAllows(version as number, 'blobs in pull order');
  arr(doc.blobs, 'blobs').forEach((v, i) => {
    const b = isObj(v) ? v : bad(`blobs[${i}] must be an object`);
    const d = digest(b.digest, `blobs[${i}].digest`);
    if (seen.has(d)) bad(`blobs lists ${d} twice`);
    if (!anyOrder && d < previous)
      bad(
        `blobs must be sorted by digest in version ${String(version)}; ${d} comes after ${previous}`,
      );
    seen.add(d);
    previous = d;
    int(b.size, `blobs[${i}].size`);
    str(b.mediaType, `blobs[${i}].mediaType`);
    if (b.fromBase !== undefined && b.fromBase !== true)
      bad(`blobs[${i}].fromBase must be true or absent`);
  });
  // every image's (and chart's) top manifest travels in the bundle: one that does not cannot be served
  for (const list of ['images', 'charts'] as const) {
    ((doc[list] ?? []) as { digest: string }[]).forEach((im, i) => {
      if (!seen.has(im.digest)) bad(`${list}[${i}].digest ${im.digest} is not among the blobs`);
    });
  }
  const ix = isObj(doc.index) ? doc.index : bad('index missing');
  digest(ix.digest, 'index.digest');
  int(ix.size, 'index.size');
  const t = isObj(doc.totals) ? doc.totals : bad('totals missing');
  int(t.layoutBytes, 'totals.layoutBytes');
  int(t.imageStoreBytes, 'totals.imageStoreBytes');
  // one way to know each fact: version 2 leaves the compressed size to the seek table
  if (version === 1) int(t.archiveBytes, 'totals.archiveBytes');
  else if (t.archiveBytes !== undefined) bad('totals.archiveBytes is a version 1 field');
  const c = isObj(doc.creator) ? doc.creator : bad('creator missing');
  str(c.tool, 'creator.tool');
  str(c.version, 'creator.version');
  str(c.createdAt, 'creator.createdAt');
  const s = isObj(doc.signer) ? doc.signer : bad('signer missing');
  if (s.algorithm !== 'ecdsa-p256-sha256' && s.algorithm !== 'ed25519')
    bad('signer.algorithm must be ecdsa-p256-sha256 or ed25519');
  digest(s.fingerprint, 'signer.fingerprint');
  if (r.signatures !== undefined)
    validateReleaseSignatures(r.signatures, doc.blobs as { digest: string; mediaType: string }[]);
  if (r.via !== undefined || r.adds !== undefined || r.payload !== undefined)
    validateReleasePath(
      r,
      doc.images as BundleImage[],
      doc.blobs as BundleBlob[],
      t.layoutBytes as number,
    );
  if (doc.agent !== undefined) validateAgent(doc.agent, doc.images as BundleImage[]);
  validateBase(doc.base, version as number, r.version as string, doc.blobs as BundleBlob[]);
  if (doc.pieces !== undefined) validatePieces(doc.pieces, doc.blobs as BundleBlob[]);
  return doc as unknown as BundleManifest;
}

/** images and charts: one shape (a chart's platforms are empty: it runs nowhere). */
function validateImages(v: unknown, list: 'images' | 'charts'): void {
  arr(v, list).forEach((x, i) => {
    const im = isObj(x) ? x : bad(`${list}[${i}] must be an object`);
    str(im.repository, `${list}[${i}].repository`);
    if (im.tag !== null) str(im.tag, `${list}[${i}].tag`, 128);
    digest(im.digest, `${list}[${i}].digest`);
    str(im.mediaType, `${list}[${i}].mediaType`);
    arr(im.platforms, `${list}[${i}].platforms`).forEach((p, j) => {
      const pl = isObj(p) ? p : bad(`${list}[${i}].platforms[${j}] must be an object`);
      str(pl.os, `${list}[${i}].platforms[${j}].os`);
      str(pl.architecture, `${list}[${i}].platforms[${j}].architecture`);
    });
    if (im.component !== undefined) str(im.component, `${list}[${i}].component`);
  });
}

/**
 * A chart is served, never pulled by a runtime: one that took an image's name or manifest would
 * change what a node's runtime pulls under that name (and a 0.1.0 agent, which ignores charts,
 * would serve the image instead). So a chart is one manifest of its own, under a name no image has.
 */
function validateCharts(charts: BundleImage[], images: BundleImage[]): void {
  const names = new Set(
    images.filter((im) => im.tag !== null).map((im) => `${im.repository}:${im.tag!}`),
  );
  const digests = new Set(images.map((im) => im.digest));
  charts.forEach((c, i) => {
    if (!isManifestMediaType(c.mediaType))
      bad(`charts[${i}].mediaType must be an image manifest's, not ${c.mediaType}`);
    if (c.platforms.length) bad(`charts[${i}].platforms must be empty: a chart runs nowhere`);
    if (digests.has(c.digest)) bad(`charts[${i}].digest ${c.digest} is an image's manifest`);
    if (c.tag !== null && names.has(`${c.repository}:${c.tag}`))
      bad(`charts[${i}] is named ${c.repository}:${c.tag}, an image's name`);
  });
}

/**
 * agent: the node writes its digest into a systemd drop-in and shows its version, so each is
 * held to a shape, and the image must be one the bundle carries under the fixed name.
 */
function validateAgent(v: unknown, images: BundleImage[]): void {
  const a = isObj(v) ? v : bad('agent must be an object');
  if (!isAgentVersion(a.version)) bad(`agent.version must be ${AGENT_VERSION_RULE}`);
  if (a.repository !== AGENT_REPOSITORY) bad(`agent.repository must be ${AGENT_REPOSITORY}`);
  const d = digest(a.digest, 'agent.digest');
  if (
    !images.some(
      (im) => im.repository === AGENT_REPOSITORY && im.tag === a.version && im.digest === d,
    )
  ) {
    bad(`agent.digest ${d} is not among the images as ${AGENT_REPOSITORY}:${a.version as string}`);
  }
}

/**
 * base: only with a version that reads deltas, naming another version of the release by the
 * digest of its bundle.json; and a blob marked fromBase only in a bundle that names a base, so
 * every listed blob is either in the archive or declared as the base's.
 */
function validateBase(
  v: unknown,
  version: number,
  releaseVersion: string,
  blobs: BundleBlob[],
): void {
  const marked = blobs.findIndex((b) => b.fromBase === true);
  if (v === undefined) {
    if (marked >= 0) bad(`blobs[${marked}] is marked fromBase but bundle.json names no base`);
    return;
  }
  if (!versionAllows(version, 'a delta against a base bundle'))
    bad(
      `base is a field of version ${VERSIONED_FEATURES['a delta against a base bundle']} and later, not of version ${version}`,
    );
  const b = isObj(v) ? v : bad('base must be an object');
  digest(b.bundleJson, 'base.bundleJson');
  checkReleaseFields({ name: b.name, version: b.version }, (field, rule) =>
    bad(`base.${field.slice('release.'.length)} ${rule}`),
  );
  str(b.name, 'base.name');
  str(b.version, 'base.version', 128);
  if (b.version === releaseVersion)
    bad(
      `base.version ${releaseVersion} is this bundle's own version; a delta is against an earlier release`,
    );
}

const KEY_ID = /^[0-9a-f]{16}$/;

/** release.signatures (or a hop's, `field`): each names a listed blob of the signature media type, once. */
function validateReleaseSignatures(
  v: unknown,
  blobs: { digest: string; mediaType: string }[],
  field = 'release.signatures',
): void {
  const seen = new Set<string>();
  arr(v, field, 64).forEach((x, i) => {
    const sig = isObj(x) ? x : bad(`${field}[${i}] must be an object`);
    const d = digest(sig.digest, `${field}[${i}].digest`);
    if (seen.has(d)) bad(`${field} lists ${d} twice`);
    seen.add(d);
    const blob = blobs.find((b) => b.digest === d);
    if (!blob || blob.mediaType !== RELEASE_SIGNATURE_MEDIA_TYPE)
      bad(`${field}[${i}] must name a blob of media type ${RELEASE_SIGNATURE_MEDIA_TYPE}`);
    arr(sig.keyIds, `${field}[${i}].keyIds`, 16).forEach((k, j) => {
      if (typeof k !== 'string' || !KEY_ID.test(k))
        bad(`${field}[${i}].keyIds[${j}] must be 16 lowercase hex digits`);
    });
  });
}

/** A hop's adds: counts no larger than the bundle's images and layout. */
function validateAdds(v: unknown, field: string, images: number, layoutBytes: number): void {
  const a = isObj(v) ? v : bad(`${field} must be an object`);
  if (int(a.images, `${field}.images`) > images)
    bad(`${field}.images is more than the bundle's ${images} images`);
  if (int(a.bytes, `${field}.bytes`) > layoutBytes)
    bad(`${field}.bytes is more than the bundle's layout (${layoutBytes} bytes)`);
}

/** One release of the path the bundle carries, as the path's order checks read it. */
interface PathRelease {
  field: string;
  version: string;
  upgradeFrom: string[];
  digest: string;
}

/** A hop of release.via (`field`): a release image the bundle carries, of the bundle's arch. */
function validateHop(
  x: unknown,
  field: string,
  r: Record<string, unknown>,
  images: BundleImage[],
  blobs: BundleBlob[],
  layoutBytes: number,
): PathRelease {
  const h = isObj(x) ? x : bad(`${field} must be an object`);
  checkReleaseFields(h, (f, rule) => bad(`${field}.${f.slice('release.'.length)} ${rule}`));
  // checkReleaseFields skips absent fields: a hop names all three
  str(h.version, `${field}.version`, 128);
  str(h.name, `${field}.name`);
  str(h.arch, `${field}.arch`);
  if (h.arch !== r.arch) bad(`${field}.arch must be the bundle's (${String(r.arch)})`);
  const d = digest(h.digest, `${field}.digest`);
  if (!images.some((im) => im.digest === d))
    bad(`${field}.digest ${d} is not among the images: every release of the path is carried`);
  const image = str(h.image, `${field}.image`);
  if (!images.some((im) => im.digest === d && namesImage(image, im.repository, d)))
    bad(
      `${field}.image ${image} is not the carried image of ${field}.digest ${d} (its repository, and that digest if it names one)`,
    );
  arr(h.upgradeFrom, `${field}.upgradeFrom`);
  if (h.signatures !== undefined)
    validateReleaseSignatures(h.signatures, blobs, `${field}.signatures`);
  if (h.via !== undefined) bad(`${field}.via: a hop has no path of its own`);
  validateAdds(h.adds, `${field}.adds`, images.length, layoutBytes);
  return {
    field,
    version: h.version as string,
    upgradeFrom: h.upgradeFrom as string[],
    digest: d,
  };
}

/** Each release of the path an upgrade of the one before, never skipping one an older agent would. */
function validatePathOrder(all: PathRelease[]): void {
  for (let i = 1; i < all.length; i++) {
    const [prev, next] = [all[i - 1]!, all[i]!];
    // an older agent reads release.upgradeFrom alone: a hop naming the path's start, or a hop
    // before the one it follows, would have it skip a release of the path
    const skipped = [
      ...all[0]!.upgradeFrom.filter(
        (v) => typeof v === 'string' && minorOf(v) < minorOf(all[0]!.version),
      ),
      ...all.slice(0, i - 1).map((h) => h.version),
    ];
    const skips = next.upgradeFrom.find((v) => skipped.includes(v));
    if (skips !== undefined)
      bad(
        `${next.field}.upgradeFrom names ${skips}, a release before ${prev.version} on the path: ${next.version} is reached through ${prev.version}`,
      );
    if (compareVersions(next.version, prev.version) <= 0)
      bad(
        `${next.field}.version ${next.version} is not later than ${prev.field}.version ${prev.version}: a path goes forward`,
      );
    if (!next.upgradeFrom.includes(prev.version))
      bad(
        `${next.field}.upgradeFrom does not name ${prev.version}: ${next.version} is not an upgrade of the hop before it`,
      );
    if (all.slice(0, i).some((h) => h.digest === next.digest))
      bad(`${next.field}.digest ${next.digest} is another hop's`);
  }
}

/**
 * release.via: at most MAX_RELEASE_PATH_HOPS releases in all, each an OpenShift release image
 * the bundle carries, of the bundle's arch, each an upgrade of the one before (its upgradeFrom
 * names it, its version is later): a path a cluster can take hop by hop.
 */
function validateReleasePath(
  r: Record<string, unknown>,
  images: BundleImage[],
  blobs: BundleBlob[],
  layoutBytes: number,
): void {
  if (r.via === undefined)
    return bad(
      `release.${r.adds !== undefined ? 'adds' : 'payload'} is a field of a release with via (an update path)`,
    );
  const via = arr(r.via, 'release.via');
  if (via.length === 0)
    bad('release.via must name at least one release (a bundle of one release has no via)');
  if (via.length >= MAX_RELEASE_PATH_HOPS)
    bad(
      `release.via makes a path of ${via.length + 1} releases; a bundle carries at most ${MAX_RELEASE_PATH_HOPS}`,
    );
  if (r.image === null || r.digest === null)
    bad('release.via needs release.image: an update path is one of release images');
  validateAdds(r.adds, 'release.adds', images.length, layoutBytes);
  const hops = via.map((x, i) =>
    validateHop(x, `release.via[${i}]`, r, images, blobs, layoutBytes),
  );
  const all = [
    ...hops,
    {
      field: 'release',
      version: r.version as string,
      upgradeFrom: r.upgradeFrom as string[],
      digest: r.digest as string,
    },
  ];
  const adds = [...via, r].map((h) => (h as { adds: { images: number; bytes: number } }).adds);
  if (adds.reduce((n, a) => n + a.images, 0) > images.length)
    bad(`the path's adds count more images than the bundle's ${images.length}`);
  if (adds.reduce((n, a) => n + a.bytes, 0) > layoutBytes)
    bad(`the path's adds count more bytes than the bundle's layout (${layoutBytes} bytes)`);
  validatePathOrder(all);
  validatePayloads(
    [...via, r] as Record<string, unknown>[],
    all.map((h) => h.field),
    images,
  );
}

/**
 * Each release's payload (all of them or none): digests of carried images, each once, its own
 * release image among them and no other release's, every one of them a payload's component (no
 * add-on, no operator catalog), and more than the release image alone (a release's
 * image-references is never empty); together every image the bundle names as a payload's
 * component, so a cluster that pins release by release leaves none of the path's images unpinned.
 * Which release a component belongs to the head does not say: the agent checks each list
 * against the release image's own image-references.
 */
function validatePayloads(
  releases: Record<string, unknown>[],
  fields: string[],
  images: BundleImage[],
): void {
  const given = releases.filter((h) => h.payload !== undefined).length;
  if (given === 0) return;
  const lacking = releases.findIndex((h) => h.payload === undefined);
  if (lacking >= 0)
    bad(`${fields[lacking]!}.payload is missing: a path lists every release's payload or none`);
  const entries = new Map<string, BundleImage[]>();
  for (const im of images) entries.set(im.digest, [...(entries.get(im.digest) ?? []), im]);
  const releaseOf = new Map(releases.map((h) => [h.digest as string, String(h.version)]));
  const listed = new Set<string>();
  releases.forEach((h, i) => {
    const field = `${fields[i]!}.payload`;
    const own = new Set<string>();
    arr(h.payload, field, images.length).forEach((v, j) => {
      const d = digest(v, `${field}[${j}]`);
      if (own.has(d)) bad(`${field} lists ${d} twice`);
      const of = entries.get(d);
      if (!of) bad(`${field}[${j}] ${d} is not among the images: a release's payload is carried`);
      if (of!.some((im) => im.component === OPERATOR_CATALOG_COMPONENT))
        bad(
          `${field}[${j}] ${d} is the operator catalog's image: a release's payload lists only its release image and its image-references`,
        );
      if (!of!.some((im) => isPayloadComponent(im.component)))
        bad(
          `${field}[${j}] ${d} (${of![0]!.repository}) has no payload component in images: an add-on is no release's payload`,
        );
      if (d !== h.digest && releaseOf.has(d))
        bad(
          `${field}[${j}] ${d} is ${releaseOf.get(d)!}'s release image: a release's payload names its own release image only`,
        );
      own.add(d);
      listed.add(d);
    });
    if (!own.has(h.digest as string))
      bad(`${field} does not list the release image ${String(h.digest)}`);
    if (own.size < 2)
      bad(
        `${field} lists only the release image: a release's payload lists its image-references too`,
      );
  });
  const missed = images.find((im) => isPayloadComponent(im.component) && !listed.has(im.digest));
  if (missed)
    bad(
      `images' ${missed.repository}@${missed.digest} (component ${missed.component!}) is in no release's payload: the payloads together list every payload image`,
    );
}

/** Whether `image` (repository[:tag][@digest]) names `repository`, and `digest` if it names one. */
function namesImage(image: string, repository: string, digest: string): boolean {
  const at = image.indexOf('@');
  if (at >= 0 && image.slice(at + 1) !== digest) return false;
  const name = at >= 0 ? image.slice(0, at) : image;
  const colon = name.lastIndexOf(':');
  return (colon > name.lastIndexOf('/') ? name.slice(0, colon) : name) === repository;
}

/** major.minor as one comparable number ("4.14.30" → 4_000_014): the path's start is of an earlier minor. */
function minorOf(version: string): number {
  const m = /^(\d+)\.(\d+)/.exec(version);
  return m ? Number(m[1]) * 1_000_000 + Number(m[2]) : -1;
}

export function parseManifestBytes(bytes: Uint8Array): BundleManifest {
  let doc: unknown;
  try {
    doc = JSON.parse(Buffer.from(bytes).toString('utf8'));
  } catch (cause) {
    throw new FormatError('INVALID_MANIFEST', 'bundle.json is not valid JSON', { cause });
  }
  return validateManifest(doc);
}

export function serializeManifest(m: BundleManifest): Buffer {
  return Buffer.from(JSON.stringify(m, null, 2) + '\n');
}

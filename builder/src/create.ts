import { readFile } from 'node:fs/promises';
import { setMaxListeners } from 'node:events';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import pLimit, { type LimitFunction } from 'p-limit';
import {
  OciError,
  formatPlatform,
  formatReference,
  parseManifest,
  parsePlatform,
  platformMatches,
  repositoryName,
  MediaType,
  addPhase,
  parseReference,
  startPhaseTimes,
  timedAsync,
  writePhaseTimes,
  type Descriptor,
  type Platform,
} from '@offline-bundle/oci';
import { readReleasePayload, type LayerReader } from '@offline-bundle/openshift-release';
import {
  AuthStore,
  BlobCache,
  lockCache,
  RegistriesConf,
  RegistryClient,
  REF_NAME_ANNOTATION,
  connectionOptions,
  openSource,
  parseSourceSpec,
  type ImageSource,
  type SourceSpec,
} from '@offline-bundle/image-fetch';
import {
  PIECE_BYTES,
  estimateBundleBytes,
  estimateImageStoreBytes,
  baseLabel,
  deltaFacts,
  featureNeedsVersion,
  loadPrivateKey,
  unwritableVersion,
  writeBundle,
  type BundleAgent,
  type BundleImage,
  type BundleRelease,
  type HopAdds,
  type ReleaseSignatureRef,
  type ReadyBlob,
  type WrittenBundle,
} from '@offline-bundle/format';
import { checkSources, readImagesFile, type SourceLine } from './inputs.js';
import {
  agentImageVersion,
  agentSourceSpec,
  asAgentImage,
  checkAgentImageSpec,
  checkAgentVersion,
} from './agent-image.js';
import {
  archProblem,
  checkCacheDir,
  checkOutput,
  checkReleaseOptions,
  checkSpace,
  type FileKeys,
} from './preflight.js';
import { releaseSignatureBlobs } from './release-signatures.js';
import { hopAdds, pathLines, payloadOf, type PathSummary } from './release-path.js';
import { checkDeltaBase, readDeltaBase, sharedWithBase, type DeltaBase } from './delta-base.js';
import { formatBytes, plural } from '@offline-bundle/cli';
import { Progress } from './progress.js';
import { TOOL_NAME, TOOL_VERSION } from './version.js';
import { createReadStream } from 'node:fs';
import type { KeyObject } from 'node:crypto';
import { planOf, type BundlePlan } from './image-set/plan.js';
import { operatorImages } from './image-set/catalog.js';
import { resolveSource } from './image-set/bundle-file.js';
import { CATALOG_COMPONENT } from './image-set/catalog-source.js';
import type { OperatorSelection } from './image-set/schema.js';
import {
  HELM_CONFIG_MEDIA_TYPE,
  chartSource,
  checkChartManifest,
  type ChartLine,
} from './image-set/chart.js';
import { blobOrderProblem, digestOrder, pullOrder, type BlobOrder } from './blob-order.js';
import type { PieceMode } from './piece-mode.js';
import { PieceFacts } from './piece-facts.js';

export interface CreateOptions {
  /** An OpenShift release image; its payload images come along. */
  release?: string;
  /** An update path's releases before `release`, oldest first (the graph's version and payload of each): carried too. */
  releaseVia?: { version: string; payload: string }[];
  /** The version the cluster runs: an upgrade source of the path's first release (the graph has the edge). */
  releaseFrom?: string;
  /** Image sources: docker://REF (default transport), oci:DIR[:REF][=NAME], oci-archive:FILE[:REF][=NAME], docker-archive:FILE[:REF][=NAME]. */
  images?: string[];
  /** Where each of `images` was given ("bundle.yaml:7 (images[0])"), for messages; default "--image #N". */
  imageWhere?: string[];
  imagesFile?: string;
  /** The directory relative paths of imagesFile's lines are taken from (a bundle file's); default: the working directory. */
  imagesFileBase?: string;
  /** The values a -f file gave, for messages. */
  fileKeys?: FileKeys;
  /** A bundle-agent image (any source --image takes, without =NAME): carried as AGENT_REPOSITORY:VERSION for the agent's self-upgrade. */
  agentImage?: string;
  /** The agent image's version when its image has no org.opencontainers.image.version label. */
  agentVersion?: string;
  arch?: string;
  allPlatforms?: boolean;
  version?: string;
  name?: string;
  upgradeFrom?: string[];
  /** Release signature files (signature-N of a signature store), in order. Needs `release`. */
  releaseSignatures?: string[];
  /** A signature store (file:// or http(s)://, `<store>/sha256=<hex>/signature-N`). Needs `release`. */
  signatureStore?: string;
  /** OpenPGP public keys the release signatures must verify with. */
  releaseKeyring?: string;
  key: string;
  /** Unlocks an encrypted PKCS#8 key. */
  passphrase?: string;
  output: string;
  cache?: string;
  jobs?: number;
  authfile?: string;
  /** --creds USER:PASSWORD, for every registry. */
  creds?: string;
  /** --cert-dir: CAs and client certificate for every registry, instead of certs.d per host. */
  certDir?: string;
  tlsVerify?: boolean;
  registriesConf?: string;
  level?: number;
  /** bundle.json's format version (default: the newest); an older one for agents not yet upgraded. */
  formatVersion?: number;
  /**
   * `digest` (default): blobs sorted by digest, which every agent reads. `pull`: image by image
   * as a runtime pulls them, so a load can pull each image as soon as it is read from the stick;
   * needs format version 3 (bundle-agent 0.2.0 or later), chosen unless --format-version says otherwise.
   */
  blobOrder?: BlobOrder;
  /** `on` (default): bundle.json carries per-piece digests of the large blobs (peers check each piece as it arrives). `none`: it does not. */
  pieces?: PieceMode;
  /** Creation time; defaults to SOURCE_DATE_EPOCH when set (reproducible builds), else now. */
  createdAt?: string;
  progress?: Progress;
  /** Ctrl-C: stops downloads and the write; the cache keeps what arrived, the output is not touched. */
  signal?: AbortSignal;
  /** Helm charts stored as OCI artifacts (oci://HOST/REPO/NAME:VERSION or HOST/REPO/NAME@DIGEST): served by the node's registry, never pulled. */
  charts?: string[];
  /** Where each of `charts` was given ("bundle.yaml:9 (charts[0])"); default "--chart #N". */
  chartWhere?: string[];
  /** Operators from catalog images: the selected bundles' images and the catalog image come along. */
  operators?: OperatorSelection[];
  /** Resolve every image (manifests only) and return the plan: no key, no output, no layer fetched. */
  dryRun?: boolean;
  /** A dry run's images, charts and blobs as bundle.json would list them: what `bundle diff -f` compares. */
  onContents?: (contents: PlannedContents) => void;
  /**
   * A delta: the previous release's bundle, its parts or its bundle.json. The blobs it lists
   * are listed but not carried; the node fills them from what it holds of that release.
   */
  base?: string;
}

interface CreateWarning {
  kind: 'PullAlways' | 'WholeCatalog';
  object: string;
  image: string;
  message: string;
}

interface CreateResult extends WrittenBundle {
  output: string;
  images: number;
  blobs: number;
  downloadedBytes: number;
  /**
   * PullAlways: payload workloads that pull a bundled image with imagePullPolicy: Always (they
   * fail without a registry). WholeCatalog: an operator catalog carried whole, with its size.
   */
  warnings: CreateWarning[];
}

interface Blob {
  digest: string;
  size: number;
  mediaType: string;
}
interface ResolvedImage {
  source: ImageSource;
  entry: BundleImage;
  blobs: Blob[];
  layers: Descriptor[];
  where: string;
  chart?: true;
}

export function defaultCacheDir(env = process.env): string {
  return join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'offline-bundle');
}

/** The top manifest of a source; a missing image names the line or flag that asked for it. */
function topManifest(source: ImageSource, where: string) {
  return source.getManifest().catch((err: unknown) => {
    throw err instanceof OciError && err.code === 'NOT_FOUND'
      ? new OciError('NOT_FOUND', `${where}: ${err.message}`, { cause: err })
      : err;
  });
}

/** A Helm chart (an OCI artifact of Helm's shape): its manifest, config and layers, no platform (it runs nowhere). */
async function resolveChart(
  source: ImageSource,
  cache: BlobCache,
  where: string,
): Promise<ResolvedImage> {
  const top = await topManifest(source, where);
  checkChartManifest(top.bytes, top.mediaType, `${where}: ${formatReference(source.name)}`);
  await cache.putBytes(top.digest, top.bytes);
  const { config, layers } = (
    parseManifest(top.bytes, top.mediaType) as {
      kind: 'manifest';
      manifest: { config: Descriptor; layers: Descriptor[] };
    }
  ).manifest;
  const blobs: Blob[] = [
    { digest: top.digest, size: top.bytes.length, mediaType: top.mediaType },
    ...[config, ...layers].map((d) => ({ digest: d.digest, size: d.size, mediaType: d.mediaType })),
  ];
  const entry: BundleImage = {
    repository: repositoryName(source.name),
    tag: source.name.tag ?? null,
    digest: top.digest,
    mediaType: top.mediaType,
    platforms: [],
  };
  return { source, entry, blobs, layers, where, chart: true };
}

/** An image's manifests, blobs and layers as they are gathered (several with --all-platforms). */
interface Gathered {
  blobs: Blob[];
  layers: Descriptor[];
  platforms: Platform[];
}

/** One image manifest's config and layers added to what is gathered; returns its config. */
function addImageManifest(
  into: Gathered,
  bytes: Buffer,
  digest: string,
  name: string,
  where: string,
): Descriptor {
  const parsed = parseManifest(bytes);
  if (parsed.kind !== 'manifest')
    throw new OciError('INVALID_MANIFEST', `${name}: ${digest} nests an index inside an index`);
  const { config } = parsed.manifest;
  // served as a chart, never pulled: under images the node would pull it and pin it
  if (config.mediaType === HELM_CONFIG_MEDIA_TYPE)
    throw new OciError(
      'UNSUPPORTED_MEDIA_TYPE',
      `${where}: ${name} is a Helm chart: list it under charts (or --chart)`,
    );
  into.blobs.push({ digest: config.digest, size: config.size, mediaType: config.mediaType });
  for (const l of parsed.manifest.layers) {
    if (l.urls?.length)
      throw new OciError(
        'UNSUPPORTED_MEDIA_TYPE',
        `${name}: layer ${l.digest} is foreign (urls); such images cannot be carried offline`,
      );
    into.blobs.push({ digest: l.digest, size: l.size, mediaType: l.mediaType });
    into.layers.push(l);
  }
  return config;
}

/** An index's manifests for the platforms asked for (the first match, or every one with a platform). */
async function gatherIndex(
  into: Gathered,
  index: { manifests: Descriptor[] },
  source: ImageSource,
  cache: BlobCache,
  want: Platform,
  allPlatforms: boolean,
  { name, where }: { name: string; where: string },
): Promise<void> {
  const chosen = allPlatforms
    ? index.manifests.filter((m) => m.platform)
    : index.manifests.filter((m) => platformMatches(want, m.platform));
  if (chosen.length === 0) {
    const have = index.manifests
      .map((m) => (m.platform ? formatPlatform(m.platform) : '?'))
      .join(', ');
    throw new OciError(
      'PLATFORM_NOT_FOUND',
      `${name} has no ${formatPlatform(want)} image (it has: ${have}); pick another --arch`,
    );
  }
  for (const m of allPlatforms ? chosen : chosen.slice(0, 1)) {
    const child = await source.getManifest(m.digest);
    await cache.putBytes(child.digest, child.bytes);
    into.blobs.push({ digest: child.digest, size: child.bytes.length, mediaType: child.mediaType });
    addImageManifest(into, child.bytes, child.digest, name, where);
    into.platforms.push(m.platform!);
  }
}

/** A single image manifest: its platform read from its config, held to the one asked for. */
async function gatherManifest(
  into: Gathered,
  top: { bytes: Buffer; digest: string },
  source: ImageSource,
  cache: BlobCache,
  want: Platform,
  allPlatforms: boolean,
  { name, where }: { name: string; where: string },
): Promise<void> {
  const config = addImageManifest(into, top.bytes, top.digest, name, where);
  const path = await cache.fetch(config.digest, config.size, (offset) =>
    source.getBlob(config.digest, config.size, offset),
  );
  const doc = JSON.parse(await readFile(path, 'utf8')) as {
    os?: string;
    architecture?: string;
    variant?: string;
  };
  const have: Platform = {
    os: doc.os ?? 'linux',
    architecture: doc.architecture ?? 'unknown',
    ...(doc.variant ? { variant: doc.variant } : {}),
  };
  if (!allPlatforms && !platformMatches(want, have)) {
    throw new OciError(
      'PLATFORM_NOT_FOUND',
      `${name} is a ${formatPlatform(have)} image, not ${formatPlatform(want)}: pick the right image or --arch`,
    );
  }
  into.platforms.push(have);
}

/** Resolves one image to its manifests and blobs, keeping the platforms asked for. */
async function resolveImage(
  source: ImageSource,
  cache: BlobCache,
  want: Platform,
  allPlatforms: boolean,
  where: string,
  component?: string,
): Promise<ResolvedImage> {
  const top = await topManifest(source, where);
  await cache.putBytes(top.digest, top.bytes);
  const into: Gathered = {
    blobs: [{ digest: top.digest, size: top.bytes.length, mediaType: top.mediaType }],
    layers: [],
    platforms: [],
  };
  const named = { name: formatReference(source.name), where };
  const parsed = parseManifest(top.bytes, top.mediaType);
  if (parsed.kind === 'index')
    await gatherIndex(into, parsed.index, source, cache, want, allPlatforms, named);
  else await gatherManifest(into, top, source, cache, want, allPlatforms, named);
  const entry: BundleImage = {
    repository: repositoryName(source.name),
    tag: source.name.tag ?? null,
    digest: top.digest,
    mediaType: top.mediaType,
    platforms: into.platforms,
    ...(component ? { component } : {}),
  };
  return { source, entry, blobs: into.blobs, layers: into.layers, where };
}

/**
 * Runs tasks through `limit` like Promise.all, but after the first failure the queued tasks
 * are skipped and the running ones are left to settle before it is rethrown: otherwise they
 * keep going (and retrying) against the registry client that the caller's `finally` closes,
 * which keeps the process alive for many seconds and logs after the error line.
 */
async function allOrFirstError<T>(
  limit: LimitFunction,
  tasks: (() => Promise<T>)[],
  signal?: AbortSignal,
): Promise<T[]> {
  let failure: { err: unknown } | undefined;
  const onAbort = () => {
    failure ??= { err: signal!.reason };
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  const settled = await Promise.allSettled(
    tasks.map((task) =>
      limit(async () => {
        if (failure) return undefined as T;
        try {
          return await task();
        } catch (err) {
          failure ??= { err };
          throw err;
        }
      }),
    ),
  ).finally(() => signal?.removeEventListener('abort', onAbort));
  if (failure) throw failure.err;
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

/** A promise with its settlers at hand (Promise.withResolvers is Node 22); a rejection nobody awaits is not unhandled. */
function deferred<T>(): {
  promise: Promise<T>;
  resolve: (v: T) => void;
  reject: (err: unknown) => void;
} {
  let resolve!: (v: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

function refName(img: BundleImage): string {
  return img.tag ? `${img.repository}:${img.tag}` : `${img.repository}@${img.digest}`;
}

/**
 * One index entry per name. The same image reached twice (a payload image also given with
 * --image) is kept once; two different images under one name are every clash, in one error.
 */
function byName(resolved: ResolvedImage[]): Map<string, ResolvedImage> {
  const names = new Map<string, ResolvedImage>();
  const clashes: string[] = [];
  for (const r of resolved) {
    const first = names.get(refName(r.entry));
    if (!first) names.set(refName(r.entry), r);
    else if (first.entry.digest !== r.entry.digest)
      clashes.push(
        `${r.where} and ${first.where} both give ${refName(r.entry)} (${r.entry.digest} and ${first.entry.digest})`,
      );
  }
  if (clashes.length)
    throw new OciError(
      'DUPLICATE_NAME',
      `${clashes.join('; ')}: give one of each pair another name (=REGISTRY/REPO:TAG)`,
    );
  return names;
}

/** Compressed layers are measured as they arrive: the image-store estimate uses what they unpack to. */
const isCompressedLayer = (mediaType: string) => /gzip|zstd/.test(mediaType);

/** What the options settle before anything is fetched; a dry run loads no key. */
interface Preflight {
  key: KeyObject | undefined;
  want: Platform;
  output: string;
  specs: string[];
  whereOf: Map<string, string>;
  charts: ChartLine[];
  base?: DeltaBase;
}

/** The signing key, loaded first: a wrong passphrase is told before anything else. */
function preflightKey(opts: CreateOptions): Promise<KeyObject | undefined> {
  return opts.dryRun
    ? Promise.resolve(undefined)
    : timedAsync('start: key loading', () =>
        loadPrivateKey(
          opts.key,
          opts.passphrase !== undefined ? { passphrase: opts.passphrase } : {},
        ),
      );
}

/** --arch, the release's naming options and the format version asked for; returns the platform. */
function checkPlatformAndFormat(opts: CreateOptions): Platform {
  const badArch = archProblem(opts.arch ?? 'amd64');
  if (badArch)
    throw new OciError(
      'INVALID_CONFIG',
      `${opts.fileKeys?.keys?.includes('arch') ? `${opts.fileKeys.file}: arch` : '--arch'} ${badArch}`,
    );
  const want = parsePlatform(opts.arch ?? 'amd64');
  checkReleaseOptions(
    {
      version: opts.version,
      name: opts.name,
      arch: want.architecture,
      upgradeFrom: opts.upgradeFrom,
    },
    opts.fileKeys,
  );
  const unwritable =
    (opts.formatVersion === undefined ? undefined : unwritableVersion(opts.formatVersion)) ??
    blobOrderProblem(opts.blobOrder, opts.formatVersion);
  if (unwritable) throw new OciError('INVALID_CONFIG', unwritable);
  return want;
}

/** Every --image, then every line of --images-file, each with where it was given. */
async function sourceLines(opts: CreateOptions): Promise<SourceLine[]> {
  return [
    ...(opts.images ?? []).map((spec, i) => ({
      spec,
      where: opts.imageWhere?.[i] ?? `--image #${i + 1}`,
    })),
    ...(opts.imagesFile
      ? (await readImagesFile(opts.imagesFile, opts.signal)).map((l) =>
          opts.imagesFileBase ? { ...l, spec: resolveSource(l.spec, opts.imagesFileBase) } : l,
        )
      : []),
  ];
}

function checkAgentOptions(opts: CreateOptions): void {
  if (opts.agentImage !== undefined) checkAgentImageSpec(opts.agentImage);
  else if (opts.agentVersion !== undefined)
    throw new OciError('INVALID_CONFIG', '--agent-version goes with --agent-image');
  if (opts.agentVersion !== undefined) checkAgentVersion(opts.agentVersion, '--agent-version');
}

/** Something to carry, and what only a release allows given with one. */
function checkContentsAsked(opts: CreateOptions, specs: string[], charts: ChartLine[]): void {
  if (
    !opts.release &&
    specs.length === 0 &&
    opts.agentImage === undefined &&
    !opts.operators?.length &&
    !charts.length
  )
    throw new OciError(
      'INVALID_CONFIG',
      'nothing to bundle: give --release and/or --image / --images-file / --agent-image / --chart',
    );
  if (!opts.release && (opts.releaseSignatures?.length || opts.signatureStore)) {
    throw new OciError(
      'INVALID_CONFIG',
      'release signatures sign a release image: give --release with --release-signature / --signature-store',
    );
  }
  if (!opts.release && !opts.version)
    throw new OciError(
      'INVALID_CONFIG',
      'a bundle without --release needs --version (the version the cluster will report)',
    );
}

/** Checks the options, the key, the sources, the output and the cache before hours of downloads. */
async function preflight(opts: CreateOptions, progress: Progress): Promise<Preflight> {
  const key = await preflightKey(opts);
  const want = checkPlatformAndFormat(opts);
  const output = resolve(opts.output);
  const lines = await sourceLines(opts);
  const specs = checkSources(lines, (m) => progress.log(`warning: ${m}`));
  checkAgentOptions(opts);
  // the first line of a repeated source is the one kept, and named
  const whereOf = new Map(lines.map((l) => [l.spec, l.where]).reverse() as [string, string][]);
  // before anything is fetched: hours of downloads must not end in EACCES
  if (!opts.dryRun) await checkOutput(opts.output && output);
  await checkCacheDir(
    resolve(opts.cache ?? defaultCacheDir()),
    resolve(opts.cache ?? defaultCacheDir()) === resolve(defaultCacheDir()),
  );
  const charts = (opts.charts ?? []).map((ref, i) => {
    const where = opts.chartWhere?.[i] ?? `--chart #${i + 1}`;
    return { source: chartSource(ref, where), where };
  });
  checkChartsApart(charts, lines);
  checkContentsAsked(opts, specs, charts);
  const base =
    opts.base === undefined ? undefined : await deltaPreflight(opts.base, opts.formatVersion);
  return { key, want, output, specs, whereOf, charts, ...(base ? { base } : {}) };
}

/** A reference given both as an image and as a chart: one of them would be dropped (or pinned) without a word. */
function checkChartsApart(charts: ChartLine[], images: SourceLine[]): void {
  const chartAt = new Map(charts.map((c) => [c.source.target, c.where]));
  for (const l of images) {
    let name: string | undefined;
    try {
      const spec = parseSourceSpec(l.spec);
      name = spec.transport === 'docker' ? formatReference(parseReference(spec.target)) : undefined;
    } catch {
      continue; // checkSources has said what is wrong with it
    }
    const chart = name === undefined ? undefined : chartAt.get(name);
    if (chart)
      throw new OciError(
        'INVALID_CONFIG',
        `${name} is given both as an image (${l.where}) and as a chart (${chart}): a Helm chart goes under charts only; drop the other`,
      );
  }
}

/** --base read and held to the format version asked for, before anything is fetched. */
async function deltaPreflight(path: string, formatVersion: number | undefined): Promise<DeltaBase> {
  const tooOld =
    formatVersion === undefined
      ? undefined
      : featureNeedsVersion('a delta against a base bundle', formatVersion);
  if (tooOld)
    throw new OciError(
      'INVALID_CONFIG',
      tooOld.replace('build without a delta against a base bundle', 'build without --base'),
    );
  return readDeltaBase(path);
}

/** The cache, the registry client and the sources opened for one create, closed together. */
interface Session {
  opts: CreateOptions;
  progress: Progress;
  want: Platform;
  cache: BlobCache;
  client: RegistryClient;
  limit: LimitFunction;
  /** Stops downloads: on Ctrl-C, or once the write they feed has failed. */
  work: AbortController;
  stopWork: () => void;
  opened: ImageSource[];
  open: (spec: string | SourceSpec) => Promise<ImageSource>;
}

async function openSession(
  opts: CreateOptions,
  progress: Progress,
  want: Platform,
): Promise<Session> {
  // Downloads stop on Ctrl-C, and also when the write they feed has failed (a full disk): the
  // one-pass writer fails while later blobs may still be minutes from arriving.
  const work = new AbortController();
  // each job in flight listens on it with a request and a cache write (12 at once at --jobs 4):
  // past Node's default of 10 it printed a leak warning that was not one; a real leak still warns
  const jobs = Math.max(1, opts.jobs ?? 4);
  setMaxListeners(4 * jobs + 8, work.signal);
  const stopWork = () => work.abort(opts.signal?.reason);
  if (opts.signal?.aborted) stopWork();
  else opts.signal?.addEventListener('abort', stopWork, { once: true });
  const cache = new BlobCache(resolve(opts.cache ?? defaultCacheDir()), work.signal);
  const client = new RegistryClient({
    auth: AuthStore.fromOptions(
      opts.authfile,
      opts.creds !== undefined ? { creds: opts.creds } : {},
    ),
    connection: connectionOptions(process.env, opts.certDir),
    userAgent: `${TOOL_NAME}/${TOOL_VERSION}`,
    onRetry: (m) => progress.log(`retrying: ${m}`),
    signal: work.signal,
  });
  const ctx = {
    client,
    insecure: opts.tlsVerify === false,
    // --registries-conf replaces the system's configuration, as podman's and skopeo's does
    registriesConf: opts.registriesConf
      ? await RegistriesConf.load(opts.registriesConf)
      : await RegistriesConf.loadSystem(),
  };
  const limit = pLimit(jobs);
  const opened: ImageSource[] = [];
  const open = async (spec: string | SourceSpec) => {
    const s = await openSource(typeof spec === 'string' ? parseSourceSpec(spec) : spec, ctx);
    opened.push(s);
    return s;
  };
  return { opts, progress, want, cache, client, limit, work, stopWork, opened, open };
}

async function closeSession(s: Session): Promise<void> {
  s.opts.signal?.removeEventListener('abort', s.stopWork);
  await Promise.all(s.opened.map((o) => o.close().catch(() => undefined)));
  await s.client.close();
}

interface ReleaseInfo {
  image: string;
  digest: string;
  upgradeFrom: string[];
  version: string;
}

/** One release of an update path: its facts and its images (the release image first). */
interface PathRelease {
  info: ReleaseInfo;
  images: ResolvedImage[];
}

/** Every image to carry, with the release's version and facts and the agent image's entry. */
interface ResolvedAll {
  version: string | undefined;
  releaseInfo: ReleaseInfo | undefined;
  /** Every release of an update path, the final one (releaseInfo) last; empty without a path. */
  path: PathRelease[];
  warnings: CreateResult['warnings'];
  resolved: ResolvedImage[];
  agent: BundleAgent | undefined;
}

/** A release image, then its payload's images (the payload names them and gives the version). */
async function readRelease(
  s: Session,
  release: string,
  where: string,
  into: ResolvedAll,
): Promise<PathRelease> {
  const { opts, progress, cache, want, limit, work, open } = s;
  progress.log(`resolving release ${release}`);
  const rel = await resolveImage(await open(release), cache, want, false, where, 'release');
  const payload = await timedAsync("registry: the release image's layers read", () =>
    readReleasePayload(
      rel.layers.map((l) => cachedLayer(cache, rel.source, l)),
      `the release image ${formatReference(rel.source.name)}`,
    ),
  );
  progress.log(`release ${payload.version}: ${payload.images.length} payload images`);
  for (const w of payload.pullAlways) {
    into.warnings.push({
      kind: 'PullAlways',
      object: w.object,
      image: w.image,
      message: `${w.file}: pulls ${w.image} with imagePullPolicy: Always, which fails on a node without a registry even though the bundle loads it`,
    });
  }
  const payloadImages = await allOrFirstError(
    limit,
    payload.images.map(
      (p) => async () =>
        resolveImage(
          await open(`docker://${formatReference(p.reference)}`),
          cache,
          want,
          opts.allPlatforms === true,
          `the release payload's ${p.name}`,
          p.name,
        ),
    ),
    work.signal,
  );
  const images = [rel, ...payloadImages];
  into.resolved.push(...images);
  return {
    info: {
      image: formatReference(rel.source.name),
      digest: rel.entry.digest,
      upgradeFrom: payload.previous,
      version: payload.version,
    },
    images,
  };
}

/**
 * The release, and before it each release of its update path (#43), each payload read as the
 * graph named it: a payload of another version than the graph says is refused. Images the
 * releases share are one entry and their blobs one each (byName, planContents).
 */
async function resolveRelease(s: Session, release: string, into: ResolvedAll): Promise<void> {
  const via = s.opts.releaseVia ?? [];
  for (const hop of via) {
    const r = await readRelease(s, hop.payload, `the update path's ${hop.version}`, into);
    if (r.info.version !== hop.version)
      throw new OciError(
        'INVALID_RELEASE',
        `the update graph gives ${hop.payload} as ${hop.version}, but its release-metadata says ${r.info.version}: save the graph again`,
      );
    into.path.push(r);
  }
  const final = await readRelease(s, release, '--release', into);
  if (s.opts.version && s.opts.version !== final.info.version) {
    throw new OciError(
      'INVALID_RELEASE',
      `--version ${s.opts.version} contradicts the release image, which is ${final.info.version}`,
    );
  }
  into.version = final.info.version;
  into.releaseInfo = final.info;
  if (via.length) {
    into.path.push(final);
    s.progress.log(`update path: ${pathLines(planPath(s.opts, into)!, '').join('; ')}`);
  }
}

/** A layer read from the cache (fetched first when missing); a copy that does not unpack is dropped from it. */
function cachedLayer(
  cache: BlobCache,
  source: ImageSource,
  l: { digest: string; size: number },
): LayerReader {
  return {
    digest: l.digest,
    open: async () =>
      createReadStream(
        await cache.fetch(l.digest, l.size, (offset) => source.getBlob(l.digest, l.size, offset)),
        // the default 64 KiB reads made the release image's scan, alone before any other fetch, a
        // round trip per 64 KiB (with gunzip's 16 KiB chunks, about half its time)
        { highWaterMark: 1024 * 1024 },
      ),
    drop: () => cache.drop(l.digest),
  };
}

/** Each release of the update path with its upgrade sources and what it adds over the one before; empty without a path. */
function pathHops(
  opts: CreateOptions,
  all: ResolvedAll,
): (ReleaseInfo & { adds: HopAdds; payload: string[] })[] {
  return all.path.map((r, i) => {
    const prev = all.path[i - 1];
    // the graph's edges: from the version the cluster runs into the first, each into the next
    const extra = prev
      ? [prev.info.version]
      : [...(opts.releaseFrom ? [opts.releaseFrom] : []), ...(opts.upgradeFrom ?? [])];
    // release-metadata may name an edge the graph pulled: past the first hop, the start is none
    // of their sources (else an agent that reads the final release alone would take it in one)
    const own = prev
      ? r.info.upgradeFrom.filter((v) => v !== opts.releaseFrom)
      : r.info.upgradeFrom;
    return {
      ...r.info,
      upgradeFrom: [...new Set([...own, ...extra])].sort(),
      adds: hopAdds(prev?.images, r.images),
      payload: payloadOf(r.images),
    };
  });
}

/** The path as a dry run and the log show it; undefined for one release. */
function planPath(opts: CreateOptions, all: ResolvedAll): PathSummary | undefined {
  const hops = pathHops(opts, all);
  if (hops.length < 2) return undefined;
  return {
    from: opts.releaseFrom ? [opts.releaseFrom] : hops[0]!.upgradeFrom,
    releases: hops.map((h) => ({
      version: h.version,
      image: h.image,
      digest: h.digest,
      adds: h.adds,
    })),
  };
}

/**
 * bundle.json's release: the final one as a bundle of one release has it (what readers that
 * predate paths read), and with a path each release before it under `via`, with its signatures.
 */
function releaseOf(
  opts: CreateOptions,
  all: ResolvedAll,
  arch: string,
  signatures: ReleaseSignatureRef[][],
): BundleRelease {
  const hops = pathHops(opts, all);
  const sigs = (i: number) => (signatures[i]?.length ? { signatures: signatures[i] } : {});
  const last = hops.length - 1;
  return {
    name: opts.name ?? all.version!,
    version: all.version!,
    arch,
    image: all.releaseInfo?.image ?? null,
    digest: all.releaseInfo?.digest ?? null,
    upgradeFrom: hops.length
      ? hops[last]!.upgradeFrom
      : [
          ...new Set([
            ...(all.releaseInfo?.upgradeFrom ?? []),
            ...(opts.upgradeFrom ?? []),
            ...(opts.releaseFrom ? [opts.releaseFrom] : []),
          ]),
        ].sort(),
    ...sigs(Math.max(last, 0)),
    ...(hops.length
      ? {
          via: hops.slice(0, last).map((h, i) => ({
            name: h.version,
            version: h.version,
            arch,
            image: h.image,
            digest: h.digest,
            upgradeFrom: h.upgradeFrom,
            ...sigs(i),
            adds: h.adds,
            payload: h.payload,
          })),
          adds: hops[last]!.adds,
          payload: hops[last]!.payload,
        }
      : {}),
  };
}

/** Operators' catalog and bundle images, then every --image / --images-file source, each named by where it was given. */
async function resolveSources(
  s: Session,
  pre: Preflight,
  { resolved, warnings }: ResolvedAll,
): Promise<void> {
  const { opts, cache, want, limit, work, open } = s;
  const { specs, whereOf } = pre;
  const operatorLines = await operatorImages(
    opts.operators ?? [],
    async (spec, where) => {
      const r = await resolveImage(await open(spec), cache, want, false, where, CATALOG_COMPONENT);
      resolved.push(r);
      return {
        blobs: r.blobs,
        layers: r.layers.map((l) => cachedLayer(cache, r.source, l)),
        blobPath: (b) =>
          cache.fetch(b.digest, b.size, (offset) => r.source.getBlob(b.digest, b.size, offset)),
      };
    },
    (catalog, message) =>
      warnings.push({ kind: 'WholeCatalog', object: catalog, image: catalog, message }),
  );
  const sources = [
    ...specs.map((spec) => ({ spec, where: whereOf.get(spec) ?? spec })),
    ...operatorLines,
  ];
  resolved.push(
    ...(await allOrFirstError(
      limit,
      sources.map(
        (l) => async () =>
          resolveImage(await open(l.spec), cache, want, opts.allPlatforms === true, l.where),
      ),
      work.signal,
    )),
  );
  resolved.push(
    ...(await allOrFirstError(
      limit,
      pre.charts.map((l) => async () => resolveChart(await open(l.source), cache, l.where)),
      work.signal,
    )),
  );
}

/** The bundle-agent image, renamed to AGENT_REPOSITORY:VERSION; one platform, the bundle's: the node runs it. */
async function resolveAgentImage(s: Session, agentImage: string, into: ResolvedAll): Promise<void> {
  const r = await resolveImage(
    await s.open(agentSourceSpec(agentImage)),
    s.cache,
    s.want,
    false,
    '--agent-image',
  );
  const version = await agentImageVersion(r.blobs, r.source, s.cache, s.opts.agentVersion);
  const named = asAgentImage(r.entry, version);
  into.agent = named.agent;
  into.resolved.push({ ...r, entry: named.entry });
  s.progress.log(`agent image ${named.entry.repository}:${version} (${r.entry.digest})`);
}

async function resolveAll(s: Session, pre: Preflight): Promise<ResolvedAll> {
  const all: ResolvedAll = {
    version: s.opts.version,
    releaseInfo: undefined,
    path: [],
    warnings: [],
    resolved: [],
    agent: undefined,
  };
  if (s.opts.release) await resolveRelease(s, s.opts.release, all);
  await resolveSources(s, pre, all);
  if (s.opts.agentImage !== undefined) await resolveAgentImage(s, s.opts.agentImage, all);
  return all;
}

/** What goes into the bundle: one index entry per reference, one blob per digest (with the source to fetch it from). */
interface Contents {
  byRef: Map<string, ResolvedImage>;
  blobs: Map<string, { blob: Blob; source: ImageSource }>;
  /** Every blob's bytes: what the fetch phase counts to. */
  total: number;
  /** The bytes of the blobs not yet in the cache (what the cache must have room for). */
  missing: number;
  /** Of those, the bytes read from local files (oci:, oci-archive:, docker-archive:, dir:), not downloaded. */
  local: number;
}

/** One index entry per reference; one download per blob however many images share it. */
async function planContents(s: Session, resolved: ResolvedImage[]): Promise<Contents> {
  const byRef = byName(resolved);
  const blobs = new Map<string, { blob: Blob; source: ImageSource }>();
  for (const r of byRef.values())
    for (const b of r.blobs)
      if (!blobs.has(b.digest)) blobs.set(b.digest, { blob: b, source: r.source });
  const total = [...blobs.values()].reduce((sum, b) => sum + b.blob.size, 0);
  let missing = 0;
  let local = 0;
  for (const { blob, source } of blobs.values()) {
    if (await s.cache.has(blob.digest, blob.size)) continue;
    missing += blob.size;
    if (source.local) local += blob.size;
  }
  return { byRef, blobs, total, missing, local };
}

/** What a dry run would write in bundle.json: its release, images, charts and blobs. */
export interface PlannedContents {
  release: { name: string; version: string; digest: string | null; path?: PathSummary };
  images: BundleImage[];
  charts: BundleImage[];
  blobs: { digest: string; size: number }[];
}

function plannedContents(opts: CreateOptions, all: ResolvedAll, c: Contents): PlannedContents {
  const { images, charts } = imageIndex(c);
  const path = planPath(opts, all);
  return {
    release: {
      name: opts.name ?? all.version!,
      version: all.version!,
      digest: all.releaseInfo?.digest ?? null,
      ...(path ? { path } : {}),
    },
    images,
    charts,
    blobs: [...c.blobs.values()].map((b) => ({ digest: b.blob.digest, size: b.blob.size })),
  };
}

/** What a dry run answers: every image resolved, the bytes to carry and those still to download. */
function dryRunPlan(opts: CreateOptions, all: ResolvedAll, c: Contents): BundlePlan {
  const path = planPath(opts, all);
  return planOf(
    c.byRef.values(),
    {
      version: all.version!,
      image: all.releaseInfo?.image ?? null,
      digest: all.releaseInfo?.digest ?? null,
      ...(path ? { path } : {}),
    },
    {
      blobs: c.blobs.size,
      totalBytes: c.total,
      downloadBytes: c.missing - c.local,
      localBytes: c.local,
    },
  );
}

/** Room for the bundle and the downloads, checked before either starts. */
async function checkRoom(
  s: Session,
  output: string,
  c: Contents,
  base: DeltaBase | undefined,
): Promise<void> {
  // bundle.json, its signature, oci-layout and index.json: a few hundred bytes per blob and image
  const metadataBytes = 8192 + 400 * (c.blobs.size + c.byRef.size);
  // a delta packs only what its base lacks
  const shared = base
    ? sharedWithBase(
        base,
        [...c.blobs.values()].map((b) => b.blob),
      )
    : new Set<string>();
  const packed = [...c.blobs.values()].filter((b) => !shared.has(b.blob.digest));
  await checkSpace(
    output,
    estimateBundleBytes([...packed.map((b) => b.blob.size), metadataBytes]),
    s.cache.dir,
    c.missing,
  );
}

/** The bundle's images and charts by name, and its OCI index.json naming each (a chart too: the layout is whole). */
function imageIndex(c: Contents): { images: BundleImage[]; charts: BundleImage[]; index: Buffer } {
  const sorted = (chart: boolean) =>
    [...c.byRef.values()]
      .filter((r) => (r.chart === true) === chart)
      .map((r) => r.entry)
      .sort((a, b) => (refName(a) < refName(b) ? -1 : 1));
  const [images, charts] = [sorted(false), sorted(true)];
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MediaType.OciIndex,
      manifests: [...images, ...charts].map((img) => ({
        mediaType: img.mediaType,
        digest: img.digest,
        size: c.blobs.get(img.digest)!.blob.size,
        annotations: { [REF_NAME_ANNOTATION]: refName(img) },
      })),
    }),
  );
  return { images, charts, index };
}

/** Creation time: --created-at, else SOURCE_DATE_EPOCH when set (reproducible builds), else now. */
function creationTime(opts: CreateOptions): string {
  const epoch = process.env.SOURCE_DATE_EPOCH;
  return (
    opts.createdAt ??
    (epoch && /^\d+$/.test(epoch) ? new Date(Number(epoch) * 1000) : new Date()).toISOString()
  );
}

/** What the fetch and the write tell each other while both run. */
interface Pass {
  /** Each blob's arrival in the cache, which the writer waits for. */
  arrivals: Map<string, ReturnType<typeof deferred<ReadyBlob>>>;
  ordered: { blob: Blob; source: ImageSource }[];
  writeFailure: { err: unknown } | undefined;
  /** The fetch failed of its own, not because a failed write (or Ctrl-C) stopped it. */
  fetchFailedFirst: boolean;
  fetched: boolean;
  /** What the writer packed while downloads went on, shown once they end. */
  packedSoFar: [number, number] | undefined;
  /** Each blob's piece list, worked out as it arrives (none with --pieces none). */
  pieces: PieceFacts | undefined;
}

/** Fetches every missing blob into the cache (in parallel, resuming), telling the writer of each arrival. */
function fetchBlobs(s: Session, c: Contents, pass: Pass, writeTotal: () => number): Promise<void> {
  const { progress, cache } = s;
  let done = 0;
  // An image is done when every one of its blobs is: counted for the progress line.
  const waiting = new Map(
    [...c.byRef.values()].map((r) => [r, new Set(r.blobs.map((b) => b.digest))]),
  );
  let imagesDone = [...waiting.values()].filter((w) => w.size === 0).length;
  const items = () => `${imagesDone}/${c.byRef.size} images`;
  progress.start(
    `fetching ${plural(c.blobs.size, 'blob')} of ${plural(c.byRef.size, 'image')}`,
    c.total,
  );
  const fetchStart = process.hrtime.bigint();
  return allOrFirstError(
    s.limit,
    pass.ordered.map(({ blob, source }) => async () => {
      // the write failed (a full disk): no more downloads for it
      if (pass.writeFailure) throw pass.writeFailure.err;
      const path = await cache.fetch(
        blob.digest,
        blob.size,
        (offset) => source.getBlob(blob.digest, blob.size, offset),
        {
          onBytes: (n) => progress.update((done += n), items()),
          measure: isCompressedLayer(blob.mediaType),
          ...(pass.pieces ? { tap: pass.pieces.tap(blob) } : {}),
        },
      );
      const pieces = pass.pieces;
      pass.arrivals.get(blob.digest)!.resolve({
        path,
        verified: cache.verified(blob.digest),
        ...(pieces ? { pieces: () => pieces.listOf(blob, path) } : {}),
      });
      for (const w of waiting.values()) if (w.delete(blob.digest) && w.size === 0) imagesDone++;
      progress.update(done, items());
    }),
    s.work.signal,
  ).then(
    () => {
      addPhase(
        'registry reads: every blob fetched (wall)',
        Number(process.hrtime.bigint() - fetchStart) / 1e9,
      );
      // the write failed meanwhile: no writing phase to show
      if (pass.writeFailure) return;
      progress.finish();
      pass.fetched = true;
      progress.start(`writing ${s.opts.output}`, writeTotal());
      if (pass.packedSoFar) progress.update(pass.packedSoFar[0], undefined, pass.packedSoFar[1]);
    },
    (err: unknown) => {
      // a failure of its own, not the stop that a failed write (or Ctrl-C) caused
      pass.fetchFailedFirst = !s.work.signal.aborted;
      // the writer waits for blobs that will not come now
      for (const a of pass.arrivals.values()) a.reject(err);
      throw err;
    },
  );
}

/** What the writer leaves out for a delta: the blobs the base lists (none shared: a full bundle, said so). */
function deltaOf(
  base: DeltaBase | undefined,
  blobs: Blob[],
  progress: Progress,
): { ref: DeltaBase['ref']; digests: Set<string> } | undefined {
  if (!base) return undefined;
  const digests = sharedWithBase(base, blobs);
  if (digests.size === 0) {
    progress.log(
      `warning: --base ${base.path} (${base.ref.version}) shares no blob with this release: writing a full bundle`,
    );
    return undefined;
  }
  return { ref: base.ref, digests };
}

/**
 * The blobs in the order they are fetched and packed: the fetch follows the writer, so the
 * writer waits on no download a later blob could have used.
 */
function writeOrder(
  c: Contents,
  images: BundleImage[],
  order: BlobOrder | undefined,
): { blob: Blob; source: ImageSource }[] {
  if (order !== 'pull') return digestOrder([...c.blobs.values()], (b) => b.blob.digest);
  return pullOrder(images.map((img) => c.byRef.get(refName(img))!.blobs)).map((b) =>
    c.blobs.get(b.digest)!,
  );
}

/**
 * One pass: the writer packs each blob (in its order, by digest) as soon as it is in the
 * cache, while later ones are still being fetched.
 */
async function fetchAndWrite(
  s: Session,
  pre: Preflight,
  all: ResolvedAll,
  c: Contents,
  { images, charts, index }: { images: BundleImage[]; charts: BundleImage[]; index: Buffer },
): Promise<WrittenBundle> {
  const { opts, cache } = s;
  // its thread lives as long as the fetch and the write
  const pieces = opts.pieces === 'none' ? undefined : new PieceFacts(cache, PIECE_BYTES);
  try {
    const written = await fetchAndWriteWith(s, pre, all, c, { images, charts, index }, pieces);
    // every blob was packed, each checked against its digest: the lists of files found are sound
    await pieces?.keepChecked();
    return written;
  } finally {
    await pieces?.stop();
  }
}

/** The release signatures of the release and of each release of its path, fetched into the cache. */
async function signaturesOf(
  s: Session,
  all: ResolvedAll,
): Promise<Awaited<ReturnType<typeof releaseSignatureBlobs>> | undefined> {
  const digests = all.path.length
    ? all.path.map((r) => r.info.digest)
    : all.releaseInfo
      ? [all.releaseInfo.digest]
      : [];
  return digests.length
    ? await releaseSignatureBlobs(
        digests,
        s.cache,
        s.opts,
        s.progress,
        all.path.map((r) => r.info.version),
      )
    : undefined;
}

/** The image-store need, asked once every blob is packed (so fetched and measured); charts are never unpacked. */
function imageStoreBytesOf(
  cache: BlobCache,
  c: Contents,
  ordered: Pass['ordered'],
): () => Promise<number> {
  // a chart is served from the bundle's layout, never unpacked into the node's image store
  const inImageStore = new Set(
    [...c.byRef.values()].filter((r) => !r.chart).flatMap((r) => r.blobs.map((b) => b.digest)),
  );
  return async () =>
    estimateImageStoreBytes(
      await Promise.all(
        ordered
          .filter(({ blob }) => inImageStore.has(blob.digest))
          .map(async ({ blob }) => ({
            ...blob,
            unpackedSize: isCompressedLayer(blob.mediaType)
              ? await cache.unpackedSize(blob.digest)
              : undefined,
          })),
      ),
    );
}

/** What the writer is given: every blob as it arrives, the signatures, the options' format choices. */
function writeInput(
  s: Session,
  pre: Preflight,
  all: ResolvedAll,
  c: Contents,
  { images, charts, index }: { images: BundleImage[]; charts: BundleImage[]; index: Buffer },
  pass: Pass,
  signatures: Awaited<ReturnType<typeof signaturesOf>>,
): Parameters<typeof writeBundle>[0] {
  const { opts, progress } = s;
  const blobList = pass.ordered.map(({ blob }) => ({
    ...blob,
    ready: () => pass.arrivals.get(blob.digest)!.promise,
  }));
  const base = deltaOf(
    pre.base,
    pass.ordered.map((o) => o.blob),
    progress,
  );
  return {
    release: releaseOf(opts, all, pre.want.architecture, signatures?.refs ?? []),
    images,
    ...(charts.length ? { charts } : {}),
    index,
    blobs: [...blobList, ...(signatures?.blobs ?? [])],
    imageStoreBytes: imageStoreBytesOf(s.cache, c, pass.ordered),
    ...(all.agent ? { agent: all.agent } : {}),
    // a dry run has returned before the write: the key is loaded
    key: pre.key!,
    output: pre.output,
    createdAt: creationTime(opts),
    tool: { name: TOOL_NAME, version: TOOL_VERSION },
    ...(opts.level !== undefined ? { level: opts.level } : {}),
    ...(opts.formatVersion !== undefined ? { schemaVersion: opts.formatVersion } : {}),
    ...(base ? { base } : {}),
    ...(opts.blobOrder === 'pull' ? { blobOrder: 'listed' as const } : {}),
    ...(opts.pieces === 'none' ? {} : { pieceSize: PIECE_BYTES }),
    // the writer's total also counts index.json and oci-layout
    onProgress: (d, t) => {
      // while downloads go on, the line shows them; the packing so far shows once they end
      if (pass.fetched) progress.update(d, undefined, t);
      else pass.packedSoFar = [d, t];
    },
    onFinishing: () => progress.phaseNote('finishing: syncing and renaming'),
    ...(opts.signal ? { signal: opts.signal } : {}),
  };
}

async function fetchAndWriteWith(
  s: Session,
  pre: Preflight,
  all: ResolvedAll,
  c: Contents,
  named: { images: BundleImage[]; charts: BundleImage[]; index: Buffer },
  pieces: PieceFacts | undefined,
): Promise<WrittenBundle> {
  const signatures = await signaturesOf(s, all);
  const ordered = writeOrder(c, [...named.images, ...named.charts], s.opts.blobOrder);
  const pass: Pass = {
    arrivals: new Map(ordered.map(({ blob }) => [blob.digest, deferred<ReadyBlob>()])),
    ordered,
    writeFailure: undefined,
    fetchFailedFirst: false,
    fetched: false,
    packedSoFar: undefined,
    pieces,
  };
  // before the fetch starts: a delta's warning goes out ahead of the progress line
  const input = writeInput(s, pre, all, c, named, pass, signatures);
  const fetching = fetchBlobs(s, c, pass, () => ordered.reduce((sum, o) => sum + o.blob.size, 0));
  const writing = writeBundle(input);
  const [fetchResult, writeResult] = await Promise.allSettled([
    fetching,
    writing.catch((err: unknown) => {
      pass.writeFailure ??= { err };
      // the downloads still running feed nothing now
      s.work.abort(err);
      throw err;
    }),
  ]);
  // a fetch failing fails the write too: its own error is the one to report, unless the
  // fetches were stopped because the write had failed first
  if (fetchResult.status === 'rejected' && pass.fetchFailedFirst) throw fetchResult.reason;
  if (writeResult.status === 'rejected') throw writeResult.reason;
  return writeResult.value;
}

/**
 * Builds a signed bundle: resolve every image (and a release payload), fetch each blob
 * once into the content-addressed cache (in parallel, resuming), then write the archive.
 */
export async function createBundle(opts: CreateOptions & { dryRun?: false }): Promise<CreateResult>;
export async function createBundle(opts: CreateOptions & { dryRun: true }): Promise<BundlePlan>;
export async function createBundle(opts: CreateOptions): Promise<CreateResult | BundlePlan> {
  const progress = opts.progress ?? new Progress({ quiet: true });
  // node's start and module loading: what a small build pays before any of its work
  addPhase('start: process start and module loading', performance.now() / 1000);
  startPhaseTimes();
  const pre = await timedAsync('start: preflight', () => preflight(opts, progress));
  const s = await openSession(opts, progress, pre.want);
  // shared with other creates; "bundle cache prune" waits for none of them, it refuses (BUSY)
  const unlockCache = await lockCache(s.cache.dir, 'shared');
  try {
    const all = await timedAsync('registry: resolve manifests', () => resolveAll(s, pre));
    // the version is known once the release is read: before anything is fetched
    if (pre.base)
      checkDeltaBase(pre.base, {
        name: opts.name ?? all.version!,
        version: all.version!,
        arch: pre.want.architecture,
      });
    const c = await planContents(s, all.resolved);
    if (opts.dryRun) {
      opts.onContents?.(plannedContents(opts, all, c));
      return { ...dryRunPlan(opts, all, c), warnings: all.warnings };
    }
    await checkRoom(s, pre.output, c, pre.base);
    const { images, charts, index } = imageIndex(c);
    const written = await timedAsync('fetch and write (wall)', () =>
      fetchAndWrite(s, pre, all, c, { images, charts, index }),
    );
    const delta = deltaFacts(written.manifest);
    const carried = delta
      ? ` (a delta against ${baseLabel(delta.base)}: ${delta.carriedBlobs} of them carried, ${delta.totalBlobs - delta.carriedBlobs} from the base)`
      : '';
    progress.finish(
      `wrote ${opts.output}: ${formatBytes(written.fileSize)}, ${plural(images.length, 'image')}${charts.length ? `, ${plural(charts.length, 'chart')}` : ''}, ${plural(c.blobs.size, 'blob')}${carried}, ${written.fileDigest}`,
    );
    return {
      ...written,
      output: pre.output,
      images: images.length,
      blobs: c.blobs.size,
      downloadedBytes: c.total,
      warnings: all.warnings,
    };
  } catch (err) {
    // stopped: the caller's reason, not whichever stream or task noticed first
    throw opts.signal?.aborted ? opts.signal.reason : err;
  } finally {
    await closeSession(s);
    await unlockCache();
    writePhaseTimes();
  }
}

/**
 * `bundle cluster prepare` and `upgrade` as a library: what the bundle needs from the cluster
 * before the cluster-version operator may start (its signatures in the ConfigMap, a running
 * version the release accepts as a source, warnings about what will pull from a registry that
 * is not there), and the start itself: ClusterVersion spec.desiredUpdate = the release image by
 * digest, never `force`.
 */
import {
  apiCall,
  ClusterError,
  listAll,
  requestOptions,
  type AdminApis,
} from '@offline-bundle/kube';
import { nextSteps, readRollup, type Rollup } from './cluster-rollup.js';
import {
  applySignatureConfigMap,
  missingSignatureKeys,
  signatureConfigMap,
  type SignatureConfigMap,
} from './release-configmap.js';
import { publishGate, type GateResult } from './upgrade-gate.js';
import {
  applyPinnedImageSets,
  type PassedRelease,
  type PinnedSetsResult,
} from './pinned-image-sets.js';
import { nodeHoldings, type NodeHoldings } from './node-holdings.js';
import { pathPosition, releasesOf, type PathRelease } from './release-path.js';

/** What the cluster commands need of a (trusted) bundle. */
export interface AdminBundle {
  /** The whole file's sha256: what every node reports once Ready. */
  fileDigest: string;
  version: string;
  /** Release image as named at build time, and its manifest digest. */
  image: string | null;
  digest: string | null;
  upgradeFrom: string[];
  /** `component`: the head's (a release payload's part, or none for an add-on): what a release's pins may leave to another. */
  images: { repository: string; tag: string | null; digest: string; component?: string }[];
  signatures: Uint8Array[];
  /**
   * An update path (#43): every release of it, oldest first, the final one last; absent for a
   * bundle of one release. `payload`: the signed head's digests of that release's images
   * (absent in bundles built before the head said).
   */
  path?: (PathRelease & { payload?: string[] })[];
}

export interface Warning {
  kind: 'Autoscaling' | 'PullAlways' | 'AlreadyRunning';
  /** namespace/kind/name of the object concerned. */
  object: string;
  message: string;
}

export interface ClusterVersionDoc {
  spec?: { desiredUpdate?: { image?: string; version?: string; force?: boolean } };
  status?: {
    history?: { state?: string; version?: string; image?: string }[];
    conditions?: { type?: string; status?: string; message?: string }[];
  };
}

export const CV = {
  group: 'config.openshift.io',
  version: 'v1',
  plural: 'clusterversions',
  name: 'version',
};

/** The release image by digest: REPOSITORY@sha256:… (tag dropped). */
export function releaseImageByDigest(b: Pick<AdminBundle, 'image' | 'digest'>): string {
  if (!b.image || !b.digest)
    throw new ClusterError(
      'NO_RELEASE_IMAGE',
      "the bundle carries no OpenShift release image (built without --release): start the upgrade with your distribution's own tooling",
    );
  const noDigest = b.image.split('@')[0]!;
  const slash = noDigest.lastIndexOf('/');
  const colon = noDigest.lastIndexOf(':');
  return `${colon > slash ? noDigest.slice(0, colon) : noDigest}@${b.digest}`;
}

export const ocCommand = (image: string): string =>
  `oc adm upgrade --allow-explicit-upgrade --to-image=${image}`;

export async function readClusterVersion(apis: AdminApis): Promise<ClusterVersionDoc> {
  const cv = await apiCall(
    'read ClusterVersion "version"',
    () => apis.custom.getClusterCustomObject(CV),
    { notFound: () => undefined },
  );
  if (!cv)
    throw new ClusterError(
      'NOT_OPENSHIFT',
      'the cluster has no ClusterVersion "version": prepare and upgrade are for OpenShift; on other clusters use their own upgrade tooling once "bundle cluster status" exits 0',
    );
  const history = (cv as ClusterVersionDoc).status?.history;
  if (typeof cv !== 'object' || (history !== undefined && !Array.isArray(history))) {
    throw new ClusterError(
      'API_NOT_JSON',
      'the API server\'s ClusterVersion "version" is not one (status.history is not a list): is --kubeconfig\'s server an API server?',
    );
  }
  return cv as ClusterVersionDoc;
}

export const running = (cv: ClusterVersionDoc) =>
  cv.status?.history?.find((h) => h.state === 'Completed' && h.version)?.version;

/** The running version must be on the bundle's path or one it starts from (an empty list accepts any). */
function checkGraph(
  b: AdminBundle,
  cv: ClusterVersionDoc,
  warnings: Warning[],
): string | undefined {
  const path = releasesOf(b);
  const at = pathPosition(path, running(cv));
  if (at.done === path.length - 1)
    warnings.push({
      kind: 'AlreadyRunning',
      object: 'ClusterVersion/version',
      message: `the cluster already runs ${at.running}`,
    });
  return at.running;
}

interface PodLike {
  metadata?: {
    namespace?: string;
    name?: string;
    ownerReferences?: { kind?: string; name?: string; controller?: boolean }[];
  };
  spec?: {
    containers?: { image?: string; imagePullPolicy?: string }[];
    initContainers?: { image?: string; imagePullPolicy?: string }[];
  };
}

const containers = (v: unknown) =>
  (Array.isArray(v) ? v : []).map((c: { image?: unknown; imagePullPolicy?: unknown }) => ({
    ...(typeof c?.image === 'string' ? { image: c.image } : {}),
    ...(typeof c?.imagePullPolicy === 'string' ? { imagePullPolicy: c.imagePullPolicy } : {}),
  }));

/** What pullAlwaysWarnings reads of a Pod: a page of full Pods is dropped as soon as it is read. */
function pickPod(p: Record<string, unknown>): PodLike {
  const m = (p.metadata ?? {}) as PodLike['metadata'] & object;
  const spec = (p.spec ?? {}) as { containers?: unknown; initContainers?: unknown };
  return {
    metadata: {
      namespace: m.namespace,
      name: m.name,
      ownerReferences: (Array.isArray(m.ownerReferences) ? m.ownerReferences : []).map((o) => ({
        kind: o?.kind,
        name: o?.name,
        controller: o?.controller,
      })),
    } as PodLike['metadata'],
    spec: {
      containers: containers(spec.containers),
      initContainers: containers(spec.initContainers),
    },
  };
}

/** Pods that pull an image of the bundle with imagePullPolicy Always: they fail without a registry. */
/** The names a bundle's images answer to on a node: registry/repository@digest, and registry/repository:tag. */
export function bundleImageNames(images: AdminBundle['images']): Set<string> {
  const names = new Set<string>();
  for (const i of images) {
    names.add(`${i.repository}@${i.digest}`);
    if (i.tag) names.add(`${i.repository}:${i.tag}`);
  }
  return names;
}

export function pullAlwaysWarnings(
  pods: readonly PodLike[],
  b: Pick<AdminBundle, 'images'>,
): Warning[] {
  const names = bundleImageNames(b.images);
  const digests = new Set(b.images.map((i) => i.digest));
  const out: Warning[] = [];
  const seen = new Set<string>();
  for (const p of pods) {
    for (const c of [...(p.spec?.initContainers ?? []), ...(p.spec?.containers ?? [])]) {
      if (c.imagePullPolicy !== 'Always' || !c.image) continue;
      const d = /@(sha256:[0-9a-f]{64})$/.exec(c.image)?.[1];
      if (!names.has(c.image) && !(d && digests.has(d))) continue;
      const owner =
        p.metadata?.ownerReferences?.find((o) => o.controller) ?? p.metadata?.ownerReferences?.[0];
      const object = `${p.metadata?.namespace}/${owner?.kind ?? 'Pod'}/${owner?.name ?? p.metadata?.name}`;
      if (seen.has(object + c.image)) continue;
      seen.add(object + c.image);
      out.push({
        kind: 'PullAlways',
        object,
        message: `pulls ${c.image} with imagePullPolicy: Always, which fails on a node without a registry even though the image is loaded: set IfNotPresent`,
      });
    }
  }
  return out;
}

async function autoscalingWarnings(apis: AdminApis): Promise<Warning[]> {
  const none = () => [];
  const mas = await listAll(
    'list MachineAutoscalers',
    (q) =>
      apis.custom.listCustomObjectForAllNamespaces({
        group: 'autoscaling.openshift.io',
        version: 'v1beta1',
        plural: 'machineautoscalers',
        ...q,
      }),
    (m) => m as { metadata?: { namespace?: string; name?: string } },
    { notFound: none },
  );
  const cas = await listAll(
    'list ClusterAutoscalers',
    (q) =>
      apis.custom.listClusterCustomObject({
        group: 'autoscaling.openshift.io',
        version: 'v1',
        plural: 'clusterautoscalers',
        ...q,
      }),
    (c) =>
      c as { metadata?: { name?: string }; spec?: { resourceLimits?: { maxNodesTotal?: number } } },
    { notFound: none },
  );
  const out: Warning[] = [];
  for (const m of mas)
    out.push({
      kind: 'Autoscaling',
      object: `${m.metadata?.namespace}/MachineAutoscaler/${m.metadata?.name}`,
      message:
        "a machine the autoscaler adds boots without the bundle's images: pause it (min = max replicas) until the upgrade completes, and plug the stick into any new node",
    });
  for (const c of cas) {
    if (c.spec?.resourceLimits?.maxNodesTotal === 0) continue;
    out.push({
      kind: 'Autoscaling',
      object: `/ClusterAutoscaler/${c.metadata?.name}`,
      message:
        "the cluster autoscaler may add nodes that lack the bundle's images: scale it to zero or delete it until the upgrade completes",
    });
  }
  return out;
}

export interface PrepareResult {
  configMap: SignatureConfigMap;
  /** Keys that were missing or different before (none: it was already in place). */
  changed: string[];
  runningVersion?: string;
  warnings: Warning[];
  dryRun: boolean;
  /** The upgrade gate as written (not on a dry run). */
  gate?: GateResult;
  /** The PinnedImageSets, once every node holds the images (not on a dry run). */
  pinned?: PinnedSetsResult;
  /** Per node, what its runtime holds of the bundle's images, as its agent publishes it. */
  holdings: NodeHoldings[];
}

/** The signatures of every release of the path, applied per release (each its own field manager) unless dryRun; all of them as one ConfigMap. */
async function prepareSignatures(
  apis: AdminApis,
  path: readonly PathRelease[],
  dryRun: boolean,
): Promise<{ configMap: SignatureConfigMap; changed: string[] }> {
  const changed: string[] = [];
  let all: SignatureConfigMap | undefined;
  for (const r of path) {
    const cm = signatureConfigMap(r.digest!, r.signatures);
    const missing = await missingSignatureKeys(apis, cm);
    if (missing.length && !dryRun) await applySignatureConfigMap(apis, r.digest!, cm);
    changed.push(...missing);
    all = all ? { ...all, binaryData: { ...all.binaryData, ...cm.binaryData } } : cm;
  }
  return { configMap: all!, changed };
}

/** The release signature ConfigMap keys of the path the cluster lacks (empty: prepared). */
export async function unpreparedKeys(
  apis: AdminApis,
  path: readonly PathRelease[],
): Promise<string[]> {
  const out: string[] = [];
  for (const r of path)
    if (r.signatures.length)
      out.push(...(await missingSignatureKeys(apis, signatureConfigMap(r.digest!, r.signatures))));
  return out;
}

/** Each release of the path with no signature, refused: the cluster would refuse that hop. */
export function requireSignatures(path: readonly PathRelease[]): ClusterError | undefined {
  const bare = path.filter((r) => r.signatures.length === 0).map((r) => r.version);
  if (!bare.length) return undefined;
  return new ClusterError(
    'NO_RELEASE_SIGNATURES',
    `the bundle carries no release signature${path.length > 1 ? ` for ${bare.join(', ')}` : ''}, so the cluster would refuse the update: rebuild it with --release-signature FILE or --signature-store URL`,
  );
}

/** The gate's release: the final one, with the whole path when there is one. */
export function gateRelease(
  b: AdminBundle,
): NonNullable<Parameters<typeof publishGate>[2]['release']> {
  const path = releasesOf(b);
  return {
    version: b.version,
    image: releaseImageByDigest(b),
    ...(path.length > 1
      ? { path: path.map((r) => ({ version: r.version, image: releaseImageByDigest(r) })) }
      : {}),
  };
}

const completedVersions = (cv: ClusterVersionDoc) =>
  new Set(
    (cv.status?.history ?? [])
      .filter((h) => h.state === 'Completed' && h.version)
      .map((h) => h.version!),
  );

/** The versions a path started from that the cluster ran (ClusterVersion's history). */
const pathStarts = (cv: ClusterVersionDoc, path: readonly PathRelease[]) =>
  path.length > 1 ? path[0]!.upgradeFrom.filter((v) => completedVersions(cv).has(v)) : [];

/**
 * The releases of the path (and the one it started from) the cluster has moved past: each before
 * the latest release of the path ClusterVersion's history says Completed (the CVO's Completed:
 * every cluster operator, the control plane's pool among them, at that release), never the
 * running one. Their PinnedImageSets go from each pool whose nodes run a later release too
 * (applyPinnedImageSets asks each pool); the later releases' are written first and hold every
 * image they share. None for a path whose head lists no payloads (built before it did): its one
 * series keeps the start's sets, as before.
 */
export function passedReleases(
  cv: ClusterVersionDoc,
  path: readonly (PathRelease & { payload?: readonly string[] })[],
): PassedRelease[] {
  if (path.length < 2 || path.some((r) => !r.payload)) return [];
  const done = completedVersions(cv);
  let last = -1;
  path.forEach((r, i) => {
    if (done.has(r.version)) last = i;
  });
  if (last < 0) return [];
  const now = running(cv);
  const before = [...pathStarts(cv, path), ...path.slice(0, last).map((r) => r.version)];
  return [...new Set(before)]
    .filter((v) => v !== now)
    .map((version) => ({ version, after: path[last]!.version }));
}

/** The versions whose PinnedImageSets stay: the running one, and the one a path started from until a release of the path Completed. */
export function keptReleases(cv: ClusterVersionDoc, path: readonly PathRelease[]): string[] {
  const now = running(cv);
  const passed = new Set(passedReleases(cv, path).map((p) => p.version));
  return [...new Set([...(now ? [now] : []), ...pathStarts(cv, path)])].filter(
    (v) => !passed.has(v),
  );
}

/** Applies the signature ConfigMap (unless dryRun), checks the version graph, gathers warnings. */
export async function prepareCluster(
  apis: AdminApis,
  b: AdminBundle,
  opts: { dryRun?: boolean } = {},
): Promise<PrepareResult> {
  const path = releasesOf(b);
  for (const r of path) releaseImageByDigest(r);
  const bare = requireSignatures(path);
  if (bare) throw bare;
  const warnings: Warning[] = [];
  const cv = await readClusterVersion(apis);
  const runningVersion = checkGraph(b, cv, warnings);
  const { configMap: cm, changed } = await prepareSignatures(apis, path, opts.dryRun === true);
  warnings.push(...(await autoscalingWarnings(apis)));
  const pods = await listAll('list pods', (q) => apis.core.listPodForAllNamespaces(q), pickPod);
  warnings.push(...pullAlwaysWarnings(pods, b));
  const r = await readRollup(apis, { digest: b.fileDigest, clusterVersion: cv });
  const holdings = nodeHoldings(
    r.rows.map((x) => x.node),
    r.holdings ?? {},
    bundleImageNames(b.images),
  );
  if (opts.dryRun)
    return {
      configMap: cm,
      changed,
      ...(runningVersion ? { runningVersion } : {}),
      warnings,
      dryRun: true,
      holdings,
    };
  // the gate learns the release image here (every release's, on a path), so oc adm upgrade --to-image passes once the nodes are ready
  const gate = await publishGate(apis, r, {
    by: 'bundle cluster prepare',
    release: gateRelease(b),
  });
  const pinned = r.ready
    ? await applyPinnedImageSets(apis, b, keptReleases(cv, path), passedReleases(cv, path))
    : {
        applied: [],
        removed: [],
        skipped:
          'not every node holds the images yet (the MCD would pull what a node lacks, and degrade its pool without a registry): run prepare again once "bundle cluster status" exits 0, or let upgrade write them',
      };
  return {
    configMap: cm,
    changed,
    ...(runningVersion ? { runningVersion } : {}),
    warnings,
    dryRun: false,
    gate,
    pinned,
    holdings,
  };
}

export interface UpgradeResult {
  image: string;
  ocCommand: string;
  patch: { spec: { desiredUpdate: { image: string; version: string; force: false } } };
  /** false: desiredUpdate already named this image. */
  changed: boolean;
  dryRun: boolean;
  rollup: Rollup;
  gate?: GateResult;
  pinned?: PinnedSetsResult;
}

/**
 * Starts the upgrade: refuses (NODES_NOT_READY) unless every node (of `selector`) is Ready for
 * this bundle's file digest, (NOT_PREPARED) unless the signature ConfigMap holds its signatures,
 * and (NOT_AN_UPGRADE_SOURCE) unless the running version is an accepted source. Then a merge
 * patch of ClusterVersion spec.desiredUpdate (image by digest, version, force: false).
 */
export async function upgradeCluster(
  apis: AdminApis,
  b: AdminBundle,
  opts: { dryRun?: boolean; selector?: string } = {},
): Promise<UpgradeResult> {
  const image = releaseImageByDigest(b);
  // a dry run names every blocker at once; a real run stops at the first
  const blockers: ClusterError[] = [];
  const block = (e: ClusterError) => {
    if (!opts.dryRun) throw e;
    blockers.push(e);
  };
  const r = await readRollup(apis, {
    digest: b.fileDigest,
    ...(opts.selector ? { selector: opts.selector } : {}),
  });
  if (!r.ready)
    block(
      new ClusterError(
        'NODES_NOT_READY',
        `${r.summary}: ${nextSteps(r)}, until "bundle cluster status" exits 0`,
      ),
    );
  const bare = requireSignatures(releasesOf(b));
  if (bare) block(bare);
  const missing = b.signatures.length
    ? await missingSignatureKeys(apis, signatureConfigMap(b.digest!, b.signatures))
    : [];
  if (missing.length)
    block(
      new ClusterError(
        'NOT_PREPARED',
        `the release signature ConfigMap lacks ${missing.join(', ')}: run "bundle cluster prepare" with this bundle first`,
      ),
    );
  const cv = await readClusterVersion(apis);
  let now: string | undefined;
  try {
    now = checkGraph(b, cv, []);
  } catch (err) {
    if (!(err instanceof ClusterError)) throw err;
    block(err);
  }
  if (blockers.length === 1) throw blockers[0]!;
  if (blockers.length > 1)
    throw new ClusterError(
      blockers[0]!.code,
      `${blockers.length} things stand in the way: ${blockers.map((e) => `${e.code}: ${e.message}`).join('; ')}`,
    );
  const patch = { spec: { desiredUpdate: { image, version: b.version, force: false as const } } };
  const changed = cv.spec?.desiredUpdate?.image !== image;
  // written just before the change, from the roll-up just read: the cluster's check then agrees with ours
  // (a dry run writes nothing; a selection of nodes speaks for no other)
  const writes = !opts.dryRun && !opts.selector;
  const gate = writes
    ? await publishGate(apis, r, {
        by: 'bundle cluster upgrade',
        release: { version: b.version, image },
      })
    : undefined;
  // before the MCO starts on the new OS image: it must find it pinned in containers-storage
  const pinned = writes ? await applyPinnedImageSets(apis, b, now ? [now] : []) : undefined;
  if (changed && !opts.dryRun) {
    await apiCall('update ClusterVersion "version"', () =>
      apis.custom.patchClusterCustomObject(
        { ...CV, body: patch },
        requestOptions(undefined, 'application/merge-patch+json'),
      ),
    );
  }
  return {
    image,
    ocCommand: ocCommand(image),
    patch,
    changed,
    dryRun: opts.dryRun === true,
    rollup: r,
    ...(gate ? { gate } : {}),
    ...(pinned ? { pinned } : {}),
  };
}

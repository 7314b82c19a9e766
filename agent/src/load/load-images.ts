// Steps 6 to 9 of the data flow, from a verified blob store to pinned images: shared by a
// load from a bundle file and by a restore from a layout kept on disk.
import { releasePath, type BundleManifest, type ReleaseHop } from '@offline-bundle/format';
import {
  catalogOf,
  startRegistry,
  type BlobStore,
  type Catalog,
  type RunningRegistry,
} from '@offline-bundle/registry';
import { runningReleases, type ClusterRelease, type HistoryEntry } from '@offline-bundle/status';
import { oneLine } from '../errors.js';
import type { PipelineContext } from './pipeline-context.js';
import { adoptRunningRelease } from './running-release.js';
import { checkMirrorUsed, imagesPresent } from '../runtime/runtime-checks.js';
import {
  imageRefs,
  imagesCovered,
  type ImageInspector,
  type PullGate,
} from '../runtime/runtime-target.js';
import { passedOnPath, type ReleaseRecord } from '../state/release-records.js';
import { pullActivity } from './pull-activity.js';
import { pinRelease } from './pin-release.js';

interface ImagesInput {
  manifest: BundleManifest;
  store: BlobStore;
  /** What the agent recorded of earlier releases (the running one may be added). */
  releases: ReleaseRecord[];
  running?: ClusterRelease;
  /**
   * The store is still being staged: each pull waits for `gate(ref)`, and `done` (the whole
   * bundle verified and staged) settles before anything is pinned. The phase stays Staging
   * (the stick must stay in) until then.
   */
  staging?: { gate: PullGate; done: Promise<void> };
  /** The last stop before the pins passed: from here the attempt is committed (runLoad ignores a withdrawal). */
  onPinning?: () => void;
}

/** The last stop before the pins: past it the attempt is committed (onPinning), and the phase says Pinning. */
function beginPinning(ctx: PipelineContext, input: ImagesInput): void {
  ctx.signal?.throwIfAborted();
  input.onPinning?.();
  ctx.tracker.phase('Pinning');
}

/**
 * Serves the store on loopback, points the runtime at it, pulls every image (none that only a
 * release of its update path the node went past carries, #43: a stick seen again brings those
 * back no more), proves the pulls came through us, removes the mirror, pins this release and the ones still in use, and reads
 * the pins back. The registry is stopped and the mirror removed whatever happens.
 */
export async function loadImages(ctx: PipelineContext, input: ImagesInput): Promise<void> {
  const { log, tracker, runtime, signal } = ctx;
  const { store, releases, running, staging } = input;
  const m = withoutPassedReleases(input.manifest, runningNow(tracker.current.history, running));
  let [registry, unmirror]: [RunningRegistry | undefined, (() => Promise<void>) | undefined] = [
    undefined,
    undefined,
  ];
  try {
    signal?.throwIfAborted();
    const catalog = catalogOf(m);
    registry = await startRegistry({ store, catalog });
    // counted by image (bundle.json's images), as `bundle inspect` counts them; a tagged image is pulled by two names
    const images = m.images.length;
    tracker.update((s) => {
      if (!staging) s.phase = 'Serving';
      Object.assign(s.progress, { imagesDone: 0, imagesTotal: images });
    });
    tracker.condition('Serving', 'True', 'RegistryUp', `temporary registry on ${registry.address}`);
    log.info('serving', `temporary registry on ${registry.address}`, { address: registry.address });
    // Asked before the mirror exists: an image the runtime holds already is not pulled through us.
    const inspector = await runtime.inspector();
    const present = inspector ? await imagesPresent(inspector, m) : undefined;
    if (running) await adoptRunning(ctx, m, input.releases, running, inspector);
    unmirror = await runtime.mirror(registry.address, m);

    await pullImages(ctx, input, m, { registry, catalog, present });

    beginPinning(ctx, input);
    // The mirror goes before the pins are applied: one reload (CRI-O) covers both.
    await unmirror();
    unmirror = undefined;
    await pinRelease(ctx, m, releases, inspector);
  } finally {
    await unmirror?.().catch((err) =>
      log.error('mirror', `could not remove the mirror drop-in: ${oneLine(err)}`),
    );
    await runtime
      .apply()
      .catch((err) =>
        log.error('reload', `the runtime did not take the removal of the mirror: ${oneLine(err)}`),
      );
    await registry?.close().catch(() => undefined);
    if (registry)
      tracker.condition('Serving', 'False', 'RegistryStopped', 'temporary registry stopped');
  }
}

/** The running release this agent did not load: recorded, so its images stay pinned until the incoming one is complete. */
async function adoptRunning(
  ctx: PipelineContext,
  m: BundleManifest,
  releases: ReleaseRecord[],
  running: ClusterRelease,
  inspector: ImageInspector | undefined,
): Promise<void> {
  const { config, log } = ctx;
  const rel = m.release;
  const adopted = await adoptRunningRelease({
    stateDir: config.paths.stateDir,
    arch: rel.arch,
    running,
    incoming: m,
    releases,
    ...(inspector ? { inspector } : {}),
  });
  if (adopted) {
    releases.push(adopted);
    log.info(
      'pin',
      `the running release ${adopted.version} was not loaded by this agent: its ${adopted.refs.length} images on this node stay pinned until ${rel.version} is complete`,
      { version: adopted.version },
    );
  }
}

/** Every image pulled through the registry, then (the whole bundle verified) proven to have come from it. */
async function pullImages(
  ctx: PipelineContext,
  input: ImagesInput,
  m: BundleManifest,
  served: { registry: RunningRegistry; catalog: Catalog; present: Set<string> | undefined },
): Promise<void> {
  const { config, log, tracker, runtime, signal } = ctx;
  const { store, staging } = input;
  const { registry, catalog, present } = served;
  const refs = imageRefs(m);
  const images = m.images.length;
  tracker.update((s) => {
    if (!staging) s.phase = 'Preloading';
    Object.assign(s.progress, { imagesDone: 0, imagesTotal: images });
  });
  const pulled = new Set<string>();
  await runtime.preload(
    refs,
    (done, total, ref) => {
      pulled.add(ref);
      tracker.progress({ imagesDone: imagesCovered(m, pulled), imagesTotal: images });
      log.info('preload', `pulled ${ref} (${done}/${total} names)`, { ref });
    },
    signal,
    staging?.gate,
    {
      lastMoved: pullActivity(m, store, catalog, registry.served),
      onRetry: (ref, attempt, err) =>
        log.warn(
          'preload',
          `retrying ${ref} (retry ${attempt} of ${config.preload.retries}): ${oneLine(err)}`,
          { ref, code: err.code },
        ),
    },
  );
  // nothing is pinned, and no Ready, before the whole bundle is verified
  await staging?.done;
  if (config.preload.method === 'none') {
    tracker.condition(
      'Preloaded',
      'False',
      'PreloadDisabled',
      'preload.method is none: no image was pulled into the runtime',
    );
  } else {
    if (present) checkMirrorUsed(m, present, registry.served);
    else
      log.warn(
        'preload',
        "the runtime does not answer on its CRI socket: cannot prove the pulls went through the bundle's registry",
      );
    tracker.condition(
      'Preloaded',
      'True',
      'AllImagesPulled',
      `${images} images (${refs.length} names) in the runtime's store (${registry.served.blobs} blobs served)`,
    );
  }
}

/** The versions the node runs, as a load reads them: the history's, and the cluster's release the policy was checked against. */
export function runningNow(history: readonly HistoryEntry[], running?: ClusterRelease): string[] {
  return [
    ...new Set([
      ...runningReleases(history).map((e) => e.version),
      ...(running ? [running.version] : []),
    ]),
  ];
}

/**
 * `m` without the images that only releases of its update path the node went past carry
 * (passedOnPath), by each release's payload in bundle.json (a bundle built before it names only
 * each release image). An image another release of the path also lists stays.
 */
export function withoutPassedReleases(
  m: BundleManifest,
  running: readonly string[],
): BundleManifest {
  const hops = releasePath(m);
  if (hops.length < 2) return m;
  const path = hops.map((h) => h.version);
  const own = (h: ReleaseHop) => h.payload ?? (h.digest ? [h.digest] : []);
  const passed = hops.filter((h) => passedOnPath({ version: h.version, path }, running));
  if (passed.length === 0) return m;
  const needed = new Set(hops.filter((h) => !passed.includes(h)).flatMap(own));
  const drop = new Set(passed.flatMap(own).filter((d) => !needed.has(d)));
  return { ...m, images: m.images.filter((img) => !drop.has(img.digest)) };
}

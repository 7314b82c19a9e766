// Step 10 of a load: each release of the bundle recorded, then Ready said in the status and the
// journal.
import { bundleIdentity } from '@offline-bundle/format';
import { KEPT_COPY_MEDIA, markLoaded, markRunningLoaded } from '@offline-bundle/status';
import { runningNow } from './load-images.js';
import type { PipelineContext } from './pipeline-context.js';
import { compareVersions } from './policy.js';
import { forgetKeptCopy } from '../state/kept-copies.js';
import { imageRefs } from '../runtime/runtime-target.js';
import { passedOnPath, recordRelease } from '../state/release-records.js';
import type { PathRelease } from './path-releases.js';
import { step, type Admitted, type LoadResult, type Staged } from './load-attempt.js';

/** What the load decided about its layout and read of its update path, for the records. */
interface Loaded {
  /** The layout outlives the load (staging.keep, or served until the cluster completes it). */
  keepLayout: boolean;
  /** Which images are each release's of the update path (#43), read from the store. */
  hops?: PathRelease[];
}

/** A load whose images are pinned: its releases recorded, Ready shown; what it loaded. */
export async function recordLoad(
  ctx: PipelineContext,
  a: Admitted,
  staged: Staged,
  loaded: Loaded,
): Promise<LoadResult> {
  const m = a.head.manifest;
  const rel = m.release;
  const refs = imageRefs(m);
  await recordReleases(ctx, a, staged, loaded);
  showLoaded(ctx, a, staged);
  return {
    version: rel.version,
    arch: rel.arch,
    mode: staged.mode,
    images: m.images.length,
    refs,
    fileDigest: staged.fileDigest,
    ...(m.agent ? { agent: m.agent } : {}),
  };
}

/** Each release the bundle brings that the node has not gone past, recorded with the layout kept. */
async function recordReleases(
  ctx: PipelineContext,
  a: Admitted,
  staged: Staged,
  { keepLayout, hops }: Loaded,
): Promise<void> {
  const { config, tracker } = ctx;
  const m = a.head.manifest;
  const rel = m.release;
  const refs = imageRefs(m);
  if (staged.target) await forgetKeptCopy(config.paths.stateDir, staged.target);
  const kept = staged.target && keepLayout ? { layout: staged.target } : {};
  const loadedAt = new Date().toISOString();
  const common = {
    arch: rel.arch,
    ...(staged.fileDigest ? { digest: staged.fileDigest } : {}),
    loadedAt,
    identity: bundleIdentity(a.head.manifestBytes),
    ...kept,
  };
  // a path's earlier releases first: a load killed between two writes leaves the final unrecorded, so loaded again
  const path = hops?.map((h) => h.version);
  // none for a release the node went past (#43): loadImages left its images out, and prune may take it
  const runs = runningNow(tracker.current.history, a.running);
  const recorded = (hops ?? [{ version: rel.version, refs }]).filter(
    (h) => !path || !passedOnPath({ version: h.version, path }, runs),
  );
  step(ctx, 'record-release');
  for (const h of recorded)
    await recordRelease(config.paths.stateDir, {
      version: h.version,
      ...common,
      refs: h.refs,
      ...(path ? { path } : {}),
    });
}

/** The history, the Ready condition and the journal line of a load that is done. */
function showLoaded(ctx: PipelineContext, a: Admitted, staged: Staged): void {
  const { config, log, tracker } = ctx;
  const rel = a.head.manifest.release;
  // the release the cluster already runs (a node that joined later): now held here, as after an upgrade
  const loadedRunning =
    a.running?.version !== undefined && compareVersions(a.running.version, rel.version) === 0;
  tracker.update((s) => {
    s.phase = 'Ready';
    const digest = staged.fileDigest ? { digest: staged.fileDigest } : {};
    s.history = loadedRunning
      ? markRunningLoaded(s.history, rel.version, digest)
      : markLoaded(s.history, rel.version, digest);
  });
  if (config.preload.method === 'none')
    tracker.condition(
      'Ready',
      'True',
      'NotPreloaded',
      `update ${rel.version} verified, but its images were NOT loaded (preload.method is none): the node cannot install it from this`,
    );
  // from peers there is no stick to remove
  else
    tracker.condition(
      'Ready',
      'True',
      'Loaded',
      a.source
        ? `update ${rel.version} loaded: you may remove the USB stick`
        : ctx.media === KEPT_COPY_MEDIA
          ? `update ${rel.version} loaded from the copy kept on this node`
          : `update ${rel.version} loaded from other nodes`,
    );
  // the journal says what the technician's line says: with preload.method none nothing was loaded
  const done =
    config.preload.method === 'none'
      ? `update ${rel.version} verified, but NOT loaded on this node (preload.method is none): no image was pulled into the runtime`
      : `update ${rel.version} is loaded on this node`;
  log.info('ready', a.source ? `${done}; the USB stick may be removed` : done, {
    version: rel.version,
  });
}

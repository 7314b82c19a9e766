// Images can vanish from the runtime after they were loaded: CRI-O wipes its storage after an
// unclean shutdown (crio-wipe.service on OpenShift), and a pruned store loses unpinned ones. A
// layout kept on disk (staging.keep) brings them back with no stick.
import { plural, runningReleases, versionsInUse } from '@offline-bundle/status';
import { oneLine } from '../errors.js';
import { loadImages } from './load-images.js';
import type { PipelineContext } from './pipeline.js';
import { openKeptLayout, type KeptLayout } from './kept-layout.js';
import { loadedAhead } from './loaded-ahead.js';
import { heldForPath, readReleases } from '../state/release-records.js';
import { missingImages } from '../runtime/runtime-checks.js';
import { namesOf } from '../runtime/runtime-target.js';

/**
 * For every release still in use whose layout is kept: when any of its images is missing from
 * the runtime, serve the layout again (its signature checked and every blob hashed anew, as
 * the disk is not trusted since) and pull and pin them. Returns the layouts it restored from,
 * by path, checked and hashed: serving one next (kept-serving.ts) need not read it all again.
 */
export async function restoreVanishedImages(ctx: PipelineContext): Promise<Map<string, KeptLayout>> {
  const { config, log, tracker, runtime } = ctx;
  const inspector = await runtime.inspector().catch(() => undefined);
  if (!inspector) return new Map();
  const releases = await readReleases(config.paths.stateDir);
  // and a release loaded but not yet run: the upgrade to it needs its images as much
  const h = tracker.current.history;
  const runs = runningReleases(h).map((e) => e.version);
  // and a path's earlier release (#43), which the cluster takes before the final one
  const inUse = new Set([...versionsInUse(h), ...loadedAhead(h), ...releases.filter((r) => heldForPath(r, releases, runs)).map((r) => r.version)]);
  const checked = new Map<string, KeptLayout>();
  const unrestorable = new Set<string>();
  for (const rec of releases) {
    if (!inUse.has(rec.version) || unrestorable.has(rec.version)) continue;
    // another bundle of the same release keeps a copy: that one restores it
    if (!rec.layout && releases.some((r) => r.version === rec.version && r.arch === rec.arch && r.layout)) continue;
    const missing = await missingImages(inspector, rec.refs);
    if (missing.length === 0) continue;
    if (!rec.layout) {
      unrestorable.add(rec.version);
      sayUnrestorable(ctx, rec.version, missing.length, rec.refs.length);
      continue;
    }
    log.warn('restore', `images of ${rec.version} are gone from the runtime (${missing.length} of their ${rec.refs.length} names); loading them again from the kept layout ${rec.layout}`, { version: rec.version });
    try {
      const kept = await openKeptLayout(config, { ...rec, layout: rec.layout });
      const { manifest, store } = kept;
      const gone = new Set(missing);
      const lost = manifest.images.filter((img) => namesOf(img).some((n) => gone.has(n))).length;
      try {
        tracker.update((s) => {
          s.bundle = { file: rec.layout!, media: 'kept layout', name: manifest.release.name, version: rec.version, arch: rec.arch, mode: 'staged', ...(rec.digest ? { digest: rec.digest } : {}) };
          s.conditions = [];
        });
        await loadImages(ctx, { manifest, store, releases });
        checked.set(rec.layout, kept);
      } catch (err) {
        await store.close();
        throw err;
      }
      tracker.phase('Ready');
      tracker.condition('Ready', 'True', 'Restored', `${lost} of the ${plural(manifest.images.length, 'image')} of ${rec.version} had vanished from the runtime and were loaded again from the layout kept on this node`);
    } catch (err) {
      tracker.condition('Failed', 'True', 'RestoreFailed', `images of ${rec.version} vanished from the runtime and could not be restored from ${rec.layout} (${oneLine(err)}): plug the USB stick in again`);
      tracker.phase('Failed');
      log.error('restore', `restoring ${rec.version} failed: ${oneLine(err)}`, { version: rec.version });
    }
  }
  return checked;
}

/** Images of a release in use are gone (crio-wipe, a pruned store) and no copy is kept: said, not hidden behind an old Ready. */
function sayUnrestorable(ctx: Pick<PipelineContext, 'log' | 'tracker'>, version: string, missing: number, total: number): void {
  const message = `${missing} of the ${plural(total, 'image name')} of ${version} are gone from the runtime (CRI-O empties its store after an unclean shutdown) and this node kept no copy of it: plug the USB stick with ${version} in again (staging.keep: true keeps a copy to restore from)`;
  ctx.tracker.failed('RestoreFailed', message);
  ctx.log.error('restore', message, { version });
}

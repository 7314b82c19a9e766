// Images can vanish from the runtime after they were loaded: CRI-O wipes its storage after an
// unclean shutdown (crio-wipe.service on OpenShift), and a pruned store loses unpinned ones. A
// layout kept on disk (staging.keep) brings them back with no stick.
import { bundleIdentity, readLayoutDescription } from '@offline-bundle/format';
import { runningReleases, versionsInUse, type HistoryEntry } from '@offline-bundle/status';
import { plural } from '@offline-bundle/cli';
import { oneLine } from '../errors.js';
import { loadImages } from './load-images.js';
import type { PipelineContext } from './pipeline.js';
import { openKeptLayout, type KeptLayout } from './kept-layout.js';
import { loadedAhead } from './loaded-ahead.js';
import {
  heldForPath,
  passedOnPath,
  readReleases,
  type ReleaseRecord,
} from '../state/release-records.js';
import { missingImages } from '../runtime/runtime-checks.js';
import { namesOf } from '../runtime/runtime-target.js';

/**
 * The releases whose images a restore brings back: those still in use (the running one, one
 * loaded and not run yet, an update path's earlier release the cluster takes before the final
 * one), but no release of a path the node went past (#43), which prune may take.
 */
function releasesToRestore(
  releases: readonly ReleaseRecord[],
  history: readonly HistoryEntry[],
): ReleaseRecord[] {
  const runs = runningReleases(history).map((e) => e.version);
  const inUse = new Set([
    ...versionsInUse(history),
    ...loadedAhead(history),
    ...releases.filter((r) => heldForPath(r, releases, runs)).map((r) => r.version),
  ]);
  return releases.filter((r) => inUse.has(r.version) && !passedOnPath(r, runs));
}

/**
 * For every release still in use whose layout is kept: when any of its images is missing from
 * the runtime, serve the layout again (its signature checked and every blob hashed anew, as
 * the disk is not trusted since) and pull and pin them, with those of every other release
 * restored from the same layout (an update path's). Returns the layouts it restored from,
 * by path, checked and hashed: serving one next (kept-serving.ts) need not read it all again.
 */
export async function restoreVanishedImages(
  ctx: PipelineContext,
): Promise<Map<string, KeptLayout>> {
  const inspector = await ctx.runtime.inspector().catch(() => undefined);
  if (!inspector) return new Map();
  const releases = await withoutOverwrittenLayouts(await readReleases(ctx.config.paths.stateDir));
  const wanted = releasesToRestore(releases, ctx.tracker.current.history);
  const checked = new Map<string, KeptLayout>();
  const unrestorable = new Set<string>();
  const tried = new Set<string>();
  for (const rec of wanted) {
    if (unrestorable.has(rec.version) || (rec.layout && tried.has(rec.layout))) continue;
    // another bundle of the same release keeps a copy: that one restores it
    if (
      !rec.layout &&
      releases.some((r) => r.version === rec.version && r.arch === rec.arch && r.layout)
    )
      continue;
    const missing = await missingImages(inspector, rec.refs);
    if (missing.length === 0) continue;
    if (!rec.layout) {
      unrestorable.add(rec.version);
      sayUnrestorable(ctx, rec.version, missing.length, rec.refs.length);
      continue;
    }
    tried.add(rec.layout);
    const together = wanted.filter((r) => r.layout === rec.layout && r.identity === rec.identity);
    const names = [...new Set(together.flatMap((r) => r.refs))];
    const lost = await missingImages(inspector, names);
    const kept = await restoreFrom(
      ctx,
      { ...rec, layout: rec.layout },
      { together, names, missing: lost, releases },
    );
    if (kept) checked.set(rec.layout, kept);
  }
  return checked;
}

/**
 * The records as they stand on disk: one whose layout directory holds another bundle now (two
 * bundles of one release stage in the same <version>-<arch>; records written before a load
 * dropped the overwritten one's layout) has no copy, so the record the directory does hold is
 * the one restored from, whichever comes first. An unreadable directory stays named: its restore
 * says why it failed.
 */
async function withoutOverwrittenLayouts(records: ReleaseRecord[]): Promise<ReleaseRecord[]> {
  const holder = new Map<string, string | undefined>();
  for (const dir of new Set(records.flatMap((r) => (r.layout ? [r.layout] : [])))) {
    holder.set(
      dir,
      await readLayoutDescription(dir).then(
        (d) => bundleIdentity(d.manifestBytes),
        () => undefined,
      ),
    );
  }
  return records.map((r) => {
    const held = r.layout ? holder.get(r.layout) : undefined;
    if (held === undefined || r.identity === undefined || held === r.identity) return r;
    const { layout: _, ...rest } = r;
    return rest;
  });
}

/** What one restore from a kept layout brings back: every release in use kept in it, their names, those gone. */
interface RestoreSet {
  together: readonly ReleaseRecord[];
  names: readonly string[];
  missing: readonly string[];
  /** Every release record, for the pins (loadImages). */
  releases: ReleaseRecord[];
}

/**
 * Loads the images of the releases in use kept in `rec`'s layout from that layout again; the
 * images of a release of the same path the node went past stay out. Returns the layout,
 * checked and hashed, or undefined when it failed (said in the status).
 */
async function restoreFrom(
  ctx: PipelineContext,
  rec: ReleaseRecord & { layout: string },
  set: RestoreSet,
): Promise<KeptLayout | undefined> {
  const { config, log, tracker } = ctx;
  const { names, missing, releases } = set;
  const versions = [...new Set(set.together.map((r) => r.version))].join(' and ');
  log.warn(
    'restore',
    `images of ${versions} are gone from the runtime (${missing.length} of their ${names.length} names); loading them again from the kept layout ${rec.layout}`,
    { version: rec.version },
  );
  try {
    const kept = await openKeptLayout(config, rec);
    const { store } = kept;
    // a path's layout holds every release of it: only those still in use come back
    const wanted = new Set(names);
    const manifest = rec.path
      ? {
          ...kept.manifest,
          images: kept.manifest.images.filter((img) => namesOf(img).some((n) => wanted.has(n))),
        }
      : kept.manifest;
    const gone = new Set(missing);
    const lost = manifest.images.filter((img) => namesOf(img).some((n) => gone.has(n))).length;
    try {
      tracker.update((s) => {
        s.bundle = {
          file: rec.layout,
          media: 'kept layout',
          name: manifest.release.name,
          version: manifest.release.version,
          arch: rec.arch,
          mode: 'staged',
          ...(rec.digest ? { digest: rec.digest } : {}),
          ...(rec.path ? { path: rec.path } : {}),
        };
        s.conditions = [];
      });
      await loadImages(ctx, { manifest, store, releases });
    } catch (err) {
      await store.close();
      throw err;
    }
    tracker.phase('Ready');
    tracker.condition(
      'Ready',
      'True',
      'Restored',
      `${lost} of the ${plural(manifest.images.length, 'image')} of ${versions} had vanished from the runtime and were loaded again from the layout kept on this node`,
    );
    return kept;
  } catch (err) {
    tracker.condition(
      'Failed',
      'True',
      'RestoreFailed',
      `images of ${versions} vanished from the runtime and could not be restored from ${rec.layout} (${oneLine(err)}): plug the USB stick in again`,
    );
    tracker.phase('Failed');
    log.error('restore', `restoring ${versions} failed: ${oneLine(err)}`, { version: rec.version });
    return undefined;
  }
}

/** Images of a release in use are gone (crio-wipe, a pruned store) and no copy is kept: said, not hidden behind an old Ready. */
function sayUnrestorable(
  ctx: Pick<PipelineContext, 'log' | 'tracker'>,
  version: string,
  missing: number,
  total: number,
): void {
  const message = `${missing} of the ${plural(total, 'image name')} of ${version} are gone from the runtime (CRI-O empties its store after an unclean shutdown) and this node kept no copy of it: plug the USB stick with ${version} in again (staging.keep: true keeps a copy to restore from)`;
  ctx.tracker.failed('RestoreFailed', message);
  ctx.log.error('restore', message, { version });
}

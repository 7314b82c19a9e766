// What a killed load leaves behind, removed (or kept for the next staging) before the next one.
import { readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { partialBundle, readLayoutDescription, writeResumeMarker } from '@offline-bundle/format';
import { runningReleases, type HistoryEntry } from '@offline-bundle/status';
import { removeStalePartials } from './resume.js';
import { layoutKept, type AgentConfig } from '../config.js';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { readKeptCopies } from '../state/kept-copies.js';
import { loadedAhead } from './loaded-ahead.js';
import { readServing } from '../state/serving-state.js';
import type { RuntimeTarget } from '../runtime/runtime-target.js';
import { heldForPath, readReleases, recordRelease } from '../state/release-records.js';
import { rememberedClusterRelease } from './running-release.js';

/**
 * layoutKept on this node: OpenShift once it read a ClusterVersion (remembered in the state
 * directory); a load's own layout only if the daemon will serve it (`serves`), not one by hand.
 */
export async function layoutKeptHere(
  config: AgentConfig,
  serves = true,
): Promise<boolean | 'untilComplete'> {
  return layoutKept(
    config,
    serves && (await rememberedClusterRelease(config.paths.stateDir)) !== undefined,
  );
}

/**
 * What a killed load (SIGKILL, power cut) leaves: partial staging, staged layouts no release
 * keeps, mirror drop-ins pointing at a registry that is gone. Run under the load lock before
 * every load and at daemon start, so neither waits for the other to clean up. A layout kept
 * with `staging.keep: untilComplete` goes once the cluster runs its release (`history`).
 */
export async function removeLeftovers(
  config: AgentConfig,
  runtime: RuntimeTarget,
  log: Logger,
  history: readonly HistoryEntry[],
  spare?: string,
): Promise<void> {
  const stale = await removeStalePartials(config.paths.upgradeDir);
  if (stale.length)
    log.warn('staging', `removed unfinished staging that names no bundle: ${stale.join(', ')}`);
  const releases = await readReleases(config.paths.stateDir);
  const runs = runningReleases(history).map((e) => e.version);
  // a path's earlier release (#43) is pending as long as its final one
  const pending = new Set([
    ...loadedAhead(history),
    ...history.filter((e) => e.state === 'installing').map((e) => e.version),
    ...releases.filter((r) => heldForPath(r, releases, runs)).map((r) => r.version),
  ]);
  // the layout a load is about to open, and the copies kept to be loaded again (a fetch's whole
  // staging is a partial directory under its resume marker: removeStalePartials keeps it)
  const unloaded = await readKeptCopies(config.paths.stateDir);
  // and the layout the daemon still serves (a release the cluster completed whose OS update this node has not applied yet)
  const served = (await readServing(config.paths.stateDir))?.layout;
  const keep = new Set<string>([
    ...(spare ? [spare] : []),
    ...(served ? [served] : []),
    ...unloaded.map((f) => f.layout),
  ]);
  const keeps = await layoutKeptHere(config);
  const recorded = new Set(releases.flatMap((r) => (r.layout ? [r.layout] : [])));
  for (const r of releases) {
    if (!r.layout) continue;
    if (
      keeps === true ||
      (keeps === 'untilComplete' && pending.has(r.version)) ||
      r.layout === served
    )
      keep.add(r.layout);
    else await recordRelease(config.paths.stateDir, { ...r, layout: undefined });
  }
  const names = await readdir(config.paths.upgradeDir).catch(() => [] as string[]);
  // staged layouts are "<version>-<arch>" directories holding a bundle.json
  const gone: string[] = [];
  for (const n of names) {
    const dir = join(config.paths.upgradeDir, n);
    // a partial staging is removeStalePartials' (one put back below keeps its bundle.json)
    if (
      n.endsWith('.partial') ||
      keep.has(dir) ||
      !(await stat(join(dir, 'bundle.json')).then(
        () => true,
        () => false,
      ))
    )
      continue;
    // no record: a load killed after the staging was whole (a fetch's, renamed before the pulls); its next staging re-hashes it, reads nothing again
    if (!recorded.has(dir) && (await backToPartial(dir, log))) continue;
    await rm(dir, { recursive: true, force: true });
    gone.push(n);
  }
  if (gone.length)
    log.warn('staging', `removed staged layouts no release needs any more: ${gone.join(', ')}`);
  await runtime
    .cleanup()
    .catch((err) => log.warn('mirror', `could not remove a stale mirror drop-in: ${oneLine(err)}`));
}

/**
 * A whole staged layout no load finished, put back as `<dir>.partial` under the resume marker
 * naming its bundle.json, as a staging cut short leaves it: the same bundle's next staging (a
 * stick's or a fetch's) hashes every entry again and reads only what no longer matches. Marked
 * before the rename, so a kill in between leaves a layout this runs on again, not an unmarked
 * partial removeStalePartials drops. False (the caller removes it) when its bundle.json is unreadable.
 */
export async function backToPartial(dir: string, log: Logger): Promise<boolean> {
  // a staging under way there (its marker) is not this layout's to replace
  if (await partialBundle(`${dir}.partial`)) return false;
  try {
    const { manifestBytes } = await readLayoutDescription(dir);
    await writeResumeMarker(dir, manifestBytes);
    await rm(`${dir}.partial`, { recursive: true, force: true });
    await rename(dir, `${dir}.partial`);
  } catch (err) {
    log.warn(
      'staging',
      `cannot keep the unfinished layout ${dir} for the next staging (${oneLine(err)}): it is removed`,
    );
    return false;
  }
  log.info(
    'staging',
    `kept the layout ${dir} that no load finished as ${dir}.partial: the same bundle's next staging checks it again and reads only what is missing`,
  );
  return true;
}

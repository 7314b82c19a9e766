// Partial staging kept across a pulled stick, a stop or a reboot, so the same bundle's return
// resumes it (packages/format/src/extract-resume.ts does the resuming; this decides which
// partial directories stay).
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  partialBundle,
  readLayoutDescription,
  type BundleManifest,
  type ExtractOptions,
  type ResumeInfo,
} from '@offline-bundle/format';
import { LayoutStore, type Catalog } from '@offline-bundle/registry';
import { formatBytes } from '@offline-bundle/cli';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import type { PipelineContext } from './pipeline-context.js';
import { partialBytes } from './space-credit.js';
import type { SpaceCredit } from './space.js';

const PARTIAL = '.partial';

async function partials(upgradeDir: string): Promise<string[]> {
  try {
    return (await readdir(upgradeDir)).filter((n) => n.endsWith(PARTIAL));
  } catch {
    return [];
  }
}

/**
 * Partial staging that names no bundle is never trusted: one from before resume existed, or
 * one cut short before its bundle.json was verified. The next run drops it. One whose marker
 * names its bundle stays until that bundle returns (resumed, its entries re-hashed) or another
 * bundle is staged (dropOtherPartials).
 */
export async function removeStalePartials(upgradeDir: string): Promise<string[]> {
  const gone: string[] = [];
  for (const n of await partials(upgradeDir)) {
    if (await partialBundle(join(upgradeDir, n))) continue;
    await rm(join(upgradeDir, n), { recursive: true, force: true });
    gone.push(n);
  }
  return gone;
}

/**
 * Before staging the bundle whose identity is `bundle` into `partialDir`: every other partial
 * staging goes (a different bundle arrived: its pieces would only hold disk), and so does
 * `partialDir` itself when it holds another bundle's pieces.
 */
export async function dropOtherPartials(
  upgradeDir: string,
  partialDir: string,
  bundle: string,
): Promise<string[]> {
  const gone: string[] = [];
  for (const n of await partials(upgradeDir)) {
    const dir = join(upgradeDir, n);
    if (dir === partialDir && (await partialBundle(dir)) === bundle) continue;
    await rm(dir, { recursive: true, force: true });
    gone.push(n);
  }
  return gone;
}

/** Every partial staging whose marker names the bundle `bundle` (its approval withdrawn: nothing of it stays). */
export async function dropPartialsOf(upgradeDir: string, bundle: string): Promise<string[]> {
  const gone: string[] = [];
  for (const n of await partials(upgradeDir)) {
    const dir = join(upgradeDir, n);
    if ((await partialBundle(dir)) !== bundle) continue;
    await rm(dir, { recursive: true, force: true });
    gone.push(n);
  }
  return gone;
}

/**
 * What the agent's own partial staging is worth to the space check: this bundle's pieces in
 * `partialDir` are layout not written again; every other partial is removed before staging.
 */
export async function partialCredit(
  upgradeDir: string,
  partialDir: string,
  bundle: string,
): Promise<SpaceCredit> {
  const credit = { reclaimableBytes: 0, alreadyStagedBytes: 0 };
  for (const n of await partials(upgradeDir)) {
    const dir = join(upgradeDir, n);
    const bytes = await partialBytes(dir);
    if (dir === partialDir && (await partialBundle(dir)) === bundle)
      credit.alreadyStagedBytes += bytes;
    else credit.reclaimableBytes += bytes;
  }
  return credit;
}

/** "resuming: 15.0 GB of 20.0 GB already staged": said before the rest is read. */
function resumeMessage(info: ResumeInfo): string {
  return `resuming: ${formatBytes(info.keptBytes)} of ${formatBytes(info.totalBytes)} already staged (${info.keptEntries} of ${info.totalEntries} files, each hashed again while the rest is read)`;
}

/** What the re-check of a resume dropped, if anything: those files are read again from the bundle. */
function recheckMessage(info: ResumeInfo): string | undefined {
  if (!info.dropped) return undefined;
  const one = info.dropped === 1;
  return `${info.dropped} kept file${one ? '' : 's'} no longer matched ${one ? 'its' : 'their'} signed digest (damaged on this node's disk) and ${one ? 'is' : 'are'} read again from the bundle`;
}

/**
 * Before a bundle's staging: every partial staging but this bundle's own goes (`partialDir`
 * holding pieces of the bundle whose identity is `bundle`); all of them when it is served from
 * the media (`partialDir` undefined), whose images need the room they hold.
 */
export async function clearPartialsFor(
  upgradeDir: string,
  partialDir: string | undefined,
  bundle: string,
  log: Logger,
): Promise<void> {
  const dropped = await dropOtherPartials(upgradeDir, partialDir ?? '', bundle);
  if (dropped.length)
    log.info(
      'staging',
      `removed unfinished staging of ${partialDir ? 'another bundle' : 'a bundle, to serve this one from the media'}: ${dropped.join(', ')}`,
    );
}

/** A staged layout is reused (after a restart, or fetched from peers) only if it holds exactly this bundle's signed description. */
export async function alreadyStaged(dir: string, manifestBytes: Buffer): Promise<boolean> {
  return readLayoutDescription(dir).then(
    (d) => d.manifestBytes.equals(manifestBytes),
    () => false,
  );
}

/**
 * A layout staged by an earlier load, hashed again in full before use; one that no longer
 * matches is removed and staged afresh from the bundle at hand (undefined), not failed.
 */
export async function reopenKeptLayout(
  target: string,
  catalog: Catalog,
  log: Logger,
): Promise<LayoutStore | undefined> {
  log.info('staging', `reusing the layout staged earlier in ${target}; checking it`);
  try {
    return await LayoutStore.open(target, catalog, { verified: false });
  } catch (err) {
    log.warn(
      'staging',
      `the layout staged earlier in ${target} is damaged (${oneLine(err)}): staging it again from the bundle`,
    );
    await rm(target, { recursive: true, force: true });
    return undefined;
  }
}

/**
 * How the layout is written: synced only when it outlives the load; under a signature (`signed`:
 * the head admit read and verified) a staging cut short keeps what it verified, and the same
 * bundle's return goes on from there, said in the log and the Staged condition.
 */
export function stagingOptions(
  ctx: PipelineContext,
  signed: { manifest: BundleManifest; manifestBytes: Buffer; signature: Buffer } | undefined,
): Pick<ExtractOptions, 'fsync' | 'resume' | 'onResume' | 'onRechecked' | 'head'> {
  // A copy deleted at Ready needs no sync: a crash before then leaves pieces a resume hashes
  // again (and a kept layout is hashed again before any reuse); syncing only costs the load.
  const fsync = { fsync: ctx.config.staging.keep !== false };
  if (!signed) return fsync;
  return {
    ...fsync,
    resume: true,
    // what admit read: checked again against the trusted keys, not read again from the stick
    head: signed,
    onResume: (info) => {
      const message = resumeMessage(info);
      ctx.tracker.condition('Staged', 'False', 'Resuming', message);
      ctx.log.info('staging', message, { keptBytes: info.keptBytes, totalBytes: info.totalBytes });
    },
    onRechecked: (info) => {
      const message = recheckMessage(info);
      if (message) ctx.log.warn('staging', message, { dropped: info.dropped });
    },
  };
}

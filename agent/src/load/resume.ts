// Partial staging kept across a pulled stick, a stop or a reboot, so the same bundle's return
// resumes it (packages/format/src/extract-resume.ts does the resuming; this decides which
// partial directories stay).
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { partialBundle, type ResumeInfo } from '@offline-bundle/format';
import { formatBytes } from '@offline-bundle/status';

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
export async function dropOtherPartials(upgradeDir: string, partialDir: string, bundle: string): Promise<string[]> {
  const gone: string[] = [];
  for (const n of await partials(upgradeDir)) {
    const dir = join(upgradeDir, n);
    if (dir === partialDir && (await partialBundle(dir)) === bundle) continue;
    await rm(dir, { recursive: true, force: true });
    gone.push(n);
  }
  return gone;
}

/** "resuming: 15.0 GB of 20.0 GB already staged": said before the rest is read. */
export function resumeMessage(info: ResumeInfo): string {
  return `resuming: ${formatBytes(info.keptBytes)} of ${formatBytes(info.totalBytes)} already staged (${info.keptEntries} of ${info.totalEntries} files, each hashed again while the rest is read)`;
}

/** What the re-check of a resume dropped, if anything: those files are read again from the bundle. */
export function recheckMessage(info: ResumeInfo): string | undefined {
  if (!info.dropped) return undefined;
  const one = info.dropped === 1;
  return `${info.dropped} kept file${one ? '' : 's'} no longer matched ${one ? 'its' : 'their'} signed digest (damaged on this node's disk) and ${one ? 'is' : 'are'} read again from the bundle`;
}

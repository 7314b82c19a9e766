// What became of each bundle file the agent saw, kept across restarts: a daemon that starts
// again (reboot, upgrade of the agent, crash) must not load again what is already loaded, nor
// retry forever a file that failed.
import { mkdir, stat } from 'node:fs/promises';
import { readStateJson } from './state-json.js';
import { join } from 'node:path';
import { writeFileAtomic } from '@offline-bundle/oci';

export interface BundleRecord {
  /** path:size:mtime, the fast identity of one copy of a file (a changed file is a new bundle). */
  key: string;
  file: string;
  /** loading: a load began and has not ended (killed mid-way): tried again. */
  outcome: 'loading' | 'ready' | 'failed';
  version?: string;
  arch?: string;
  digest?: string;
  reason?: string;
  at: string;
}

/** Oldest records go beyond this many: a node sees a handful of bundles a year. */
const MAX_RECORDS = 100;

/** The identity MediaWatcher gives a file, from its stat. */
export function bundleKey(file: string, st: { size: number; mtimeMs: number }): string {
  return `${file}:${st.size}:${st.mtimeMs}`;
}

export async function keyOf(file: string): Promise<string | undefined> {
  return stat(file).then((st) => bundleKey(file, st), () => undefined);
}

const recordsFile = (stateDir: string) => join(stateDir, 'bundles.json');

export async function readBundleRecords(stateDir: string): Promise<BundleRecord[]> {
  // missing or damaged: at worst a bundle is loaded once more
  const doc = (await readStateJson(recordsFile(stateDir))) as { bundles?: unknown } | undefined;
  return Array.isArray(doc?.bundles) ? doc.bundles.filter((b): b is BundleRecord => typeof b?.key === 'string') : [];
}

async function writeBundleRecords(stateDir: string, all: BundleRecord[]): Promise<void> {
  await mkdir(stateDir, { recursive: true });
  await writeFileAtomic(recordsFile(stateDir), JSON.stringify({ bundles: all.slice(-MAX_RECORDS) }, null, 2) + '\n');
}

export async function recordBundle(stateDir: string, rec: BundleRecord): Promise<void> {
  const all = (await readBundleRecords(stateDir)).filter((b) => b.key !== rec.key);
  all.push(rec);
  await writeBundleRecords(stateDir, all);
}

/** Drops what was recorded of the files of one release: a stick holding it is loaded again. */
export async function forgetBundles(stateDir: string, version: string, arch: string): Promise<void> {
  const all = await readBundleRecords(stateDir);
  const rest = all.filter((b) => !(b.version === version && (b.arch === undefined || b.arch === arch)));
  if (rest.length !== all.length) await writeBundleRecords(stateDir, rest);
}

/** Reasons that are a verdict on the file itself: trying the same bytes again cannot help. */
const FILE_VERDICTS = new Set(['BadSignature', 'UntrustedKey', 'DigestMismatch', 'Corrupt', 'Truncated', 'WrongArch', 'Downgrade', 'NotAnUpgradeSource', 'UnsupportedVersion']);

/**
 * Whether a daemon that just started should leave this copy alone: it was loaded (and its
 * images are all still in the runtime, which `imagesPresent` tells), or it failed for a reason
 * the same bytes will fail for again. A failure for any other reason (stopped, runtime down,
 * disk full) is tried again.
 */
export async function alreadyDone(rec: BundleRecord | undefined, imagesPresent: (version: string, arch: string) => Promise<boolean>): Promise<'loaded' | 'failed' | undefined> {
  if (!rec || rec.outcome === 'loading') return undefined;
  if (rec.outcome === 'failed') return rec.reason && FILE_VERDICTS.has(rec.reason) ? 'failed' : undefined;
  if (rec.version && rec.arch && !(await imagesPresent(rec.version, rec.arch))) return undefined;
  return 'loaded';
}

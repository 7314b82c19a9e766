// What became of each bundle file the agent saw, kept across restarts: a daemon that starts
// again (reboot, upgrade of the agent, crash) must not load again what is already loaded, nor
// retry forever a file that failed.
import { createHash } from 'node:crypto';
import { mkdir, stat } from 'node:fs/promises';
import {
  isPartName,
  parsePartName,
  partNamesIn,
  readHeader,
  withBundle,
} from '@offline-bundle/format';
import { readStateJson } from './state-json.js';
import { basename, dirname, join } from 'node:path';
import { writeFileAtomic } from '@offline-bundle/host';

export interface BundleRecord {
  /** dev:inode:size:mtime, the identity of one copy of a file whatever its name (a changed file is a new bundle). */
  key: string;
  /** sha256 of its signed bundle.json and its size: the same bundle after a remount (new device and inode numbers). */
  content?: string;
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

/**
 * The identity MediaWatcher gives a file, from its stat (symlinks followed). Not its name: a
 * loaded bundle renamed, or reached through a symlink, is the same copy and is not loaded again;
 * any write changes the size or mtime and makes a new one. (The ctime is left out: a rename
 * changes it.)
 */
export function bundleKey(st: { dev: number; ino: number; size: number; mtimeMs: number }): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
}

export async function keyOf(file: string): Promise<string | undefined> {
  if (isPartName(file)) return partsKey(file);
  // NAME.bundle given while only its parts are there (bundle-agent load NAME.bundle)
  return stat(file).then(
    (st) => bundleKey(st),
    () => partsKey(file),
  );
}

/** The identity of a split bundle: every part's, so a change to any part is a new bundle. */
export function partsKeyOf(keys: readonly string[]): string {
  return `parts:${createHash('sha256').update(keys.join(',')).digest('hex').slice(0, 32)}:${keys.length}`;
}

async function partsKey(file: string): Promise<string | undefined> {
  const dir = dirname(file);
  try {
    const names = await partNamesIn(dir, parsePartName(file)?.base ?? basename(file));
    if (names.length === 0) return undefined;
    return partsKeyOf(
      await Promise.all(names.map(async (n) => bundleKey(await stat(join(dir, n.name))))),
    );
  } catch {
    return undefined;
  }
}

/**
 * What survives a remount: a stick enumerated in another order has another device number, and
 * FAT assigns inode numbers anew at each mount. Used only for "loaded, images present": a
 * failure verdict stays with the stat identity (a fresh copy of a damaged file is tried).
 */
export async function contentOf(file: string): Promise<string | undefined> {
  try {
    const [manifestBytes, size] = await withBundle(
      file,
      async (source) => [(await readHeader(source)).manifestBytes, source.size] as const,
    );
    return `sha256:${createHash('sha256').update(manifestBytes).digest('hex')}:${size}`;
  } catch {
    return undefined;
  }
}

/** The loaded record of the same content, when the stat identity does not match (see contentOf). */
export function loadedByContent(
  records: Iterable<BundleRecord>,
  content: string | undefined,
): BundleRecord | undefined {
  if (!content) return undefined;
  let found: BundleRecord | undefined;
  for (const r of records) if (r.outcome === 'ready' && r.content === content) found = r;
  return found;
}

const recordsFile = (stateDir: string) => join(stateDir, 'bundles.json');

export async function readBundleRecords(stateDir: string): Promise<BundleRecord[]> {
  // missing or damaged: at worst a bundle is loaded once more
  const doc = (await readStateJson(recordsFile(stateDir))) as { bundles?: unknown } | undefined;
  return Array.isArray(doc?.bundles)
    ? doc.bundles.filter((b): b is BundleRecord => typeof b?.key === 'string')
    : [];
}

async function writeBundleRecords(stateDir: string, all: BundleRecord[]): Promise<void> {
  await mkdir(stateDir, { recursive: true });
  await writeFileAtomic(
    recordsFile(stateDir),
    JSON.stringify({ bundles: all.slice(-MAX_RECORDS) }, null, 2) + '\n',
  );
}

export async function recordBundle(stateDir: string, rec: BundleRecord): Promise<void> {
  const all = (await readBundleRecords(stateDir)).filter((b) => b.key !== rec.key);
  all.push(rec);
  await writeBundleRecords(stateDir, all);
}

/** Drops what was recorded of the files of one release: a stick holding it is loaded again. */
export async function forgetBundles(
  stateDir: string,
  version: string,
  arch: string,
): Promise<void> {
  const all = await readBundleRecords(stateDir);
  const rest = all.filter(
    (b) => !(b.version === version && (b.arch === undefined || b.arch === arch)),
  );
  if (rest.length !== all.length) await writeBundleRecords(stateDir, rest);
}

/** Reasons that are a verdict on the file itself: trying the same bytes again cannot help. */
const FILE_VERDICTS = new Set([
  'BadSignature',
  'UntrustedKey',
  'DigestMismatch',
  'Corrupt',
  'Truncated',
  'WrongArch',
  'Downgrade',
  'NotAnUpgradeSource',
  'UnsupportedVersion',
]);

/**
 * Whether a daemon that just started should leave this copy alone: it was loaded (and its
 * images are all still in the runtime, which `imagesPresent` tells), or it failed for a reason
 * the same bytes will fail for again. A failure for any other reason (stopped, runtime down,
 * disk full) is tried again.
 */
export async function alreadyDone(
  rec: BundleRecord | undefined,
  imagesPresent: (version: string, arch: string, digest?: string) => Promise<boolean>,
): Promise<'loaded' | 'failed' | undefined> {
  if (!rec || rec.outcome === 'loading') return undefined;
  if (rec.outcome === 'failed')
    return rec.reason && FILE_VERDICTS.has(rec.reason) ? 'failed' : undefined;
  if (rec.version && rec.arch && !(await imagesPresent(rec.version, rec.arch, rec.digest)))
    return undefined;
  return 'loaded';
}

/**
 * Releases an admin let go of (`releases forget`): the daemon does not load a bundle of one
 * again, from a stick left in or plugged in later, until `releases unforget` or a by-hand
 * `bundle-agent load` of it. By version and arch, not by file: any copy of that release.
 */
export interface ForgottenRelease {
  version: string;
  arch: string;
  at: string;
}

const forgottenFile = (stateDir: string) => join(stateDir, 'forgotten-releases.json');
/** The shape of a version or arch the agent wrote itself; anything else in the file is skipped as damaged. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;

export async function readForgotten(stateDir: string): Promise<ForgottenRelease[]> {
  const doc = (await readStateJson(forgottenFile(stateDir))) as { releases?: unknown } | undefined;
  if (!Array.isArray(doc?.releases)) return [];
  return doc.releases.filter(
    (r): r is ForgottenRelease =>
      typeof r?.version === 'string' &&
      NAME.test(r.version) &&
      typeof r.arch === 'string' &&
      NAME.test(r.arch) &&
      typeof r.at === 'string',
  );
}

async function writeForgotten(stateDir: string, all: ForgottenRelease[]): Promise<void> {
  await mkdir(stateDir, { recursive: true });
  await writeFileAtomic(
    forgottenFile(stateDir),
    JSON.stringify({ releases: all.slice(-MAX_RECORDS) }, null, 2) + '\n',
  );
}

export async function addForgotten(stateDir: string, version: string, arch: string): Promise<void> {
  const all = (await readForgotten(stateDir)).filter(
    (r) => !(r.version === version && r.arch === arch),
  );
  all.push({ version, arch, at: new Date().toISOString() });
  await writeForgotten(stateDir, all);
}

/** Clears `version` (every arch, or only `arch`); returns what was cleared. */
export async function clearForgotten(
  stateDir: string,
  version: string,
  arch?: string,
): Promise<ForgottenRelease[]> {
  const all = await readForgotten(stateDir);
  const match = (r: ForgottenRelease) => r.version === version && (!arch || r.arch === arch);
  const cleared = all.filter(match);
  if (cleared.length)
    await writeForgotten(
      stateDir,
      all.filter((r) => !match(r)),
    );
  return cleared;
}

export function isForgotten(
  list: readonly ForgottenRelease[],
  release: { version: string; arch: string },
): ForgottenRelease | undefined {
  return list.find((r) => r.version === release.version && r.arch === release.arch);
}

import { readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import {
  compareVersions,
  isReleaseArch,
  isReleaseVersion,
  MAX_RELEASE_PATH_HOPS,
} from '@offline-bundle/format';
import { readStateJson } from './state-json.js';

/** What the agent remembers of each release it loaded: enough to keep the running one pinned. */
export interface ReleaseRecord {
  version: string;
  arch: string;
  digest?: string;
  refs: string[];
  loadedAt: string;
  /** The verified layout kept on disk (staging.keep), to restore images that vanish from the runtime. */
  layout?: string;
  /** 'node': the release running before the first bundle, its images found on the node. */
  source?: 'bundle' | 'node';
  /** sha256 of the signed bundle.json loaded (bundleIdentity): what the kept layout must still hold to be served or restored. */
  identity?: string;
  /**
   * The versions of the update path (#43) this record's bundle carries, in order, the final one
   * last: each release of the path has a record of the same bundle (identity), and an earlier
   * one stays pinned until the node runs the final one (heldForPath). Absent for one release.
   */
  path?: string[];
  /**
   * Set by readReleases, never written: 'legacy' when the record of a bundle with a digest was
   * read from VERSION-ARCH.json, the one name per release older agents wrote.
   */
  file?: 'legacy';
}

const isString = (v: unknown): v is string => typeof v === 'string';

/** The shape every reader of a record relies on; a record of another shape is skipped as damaged. */
function isReleaseRecord(v: unknown): v is ReleaseRecord {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const r = v as Record<string, unknown>;
  // version and arch name the record's own file and the layout directory: the bundle.json rule
  return (
    isReleaseVersion(r.version) &&
    isReleaseArch(r.arch) &&
    isString(r.loadedAt) &&
    Array.isArray(r.refs) &&
    r.refs.every(isString) &&
    (r.digest === undefined || isString(r.digest)) &&
    (r.layout === undefined || isString(r.layout)) &&
    (r.source === undefined || r.source === 'bundle' || r.source === 'node') &&
    (r.identity === undefined || isString(r.identity)) &&
    (r.path === undefined || isPath(r.path, r.version))
  );
}

/** A recorded path: 2 to MAX_RELEASE_PATH_HOPS release versions that name the record's own. */
function isPath(v: unknown, version: string): boolean {
  return (
    Array.isArray(v) &&
    v.length >= 2 &&
    v.length <= MAX_RELEASE_PATH_HOPS &&
    v.every(isReleaseVersion) &&
    v.includes(version)
  );
}

/** The release a record's path ends with: its own version for a record of one release. */
export const pathFinal = (r: Pick<ReleaseRecord, 'version' | 'path'>): string =>
  r.path?.at(-1) ?? r.version;

/**
 * Whether the node went past `r`, an earlier release of an update path: it runs a later one
 * (a path goes forward: bundle.json holds each release later than the one before). Its images
 * are then not brought back when they vanish, from a kept layout or a stick (they may be pruned).
 */
export function passedOnPath(
  r: Pick<ReleaseRecord, 'version' | 'path'>,
  running: readonly string[],
): boolean {
  return pathFinal(r) !== r.version && running.some((v) => compareVersions(v, r.version) > 0);
}

/**
 * Whether `r` is an earlier release of an update path kept for the final one: the final's record
 * of the same bundle is there and the node has not gone past `r` (passedOnPath: one rule, so a
 * release is never held pinned yet not restored, as for a node on 4.15.45 of 4.15.40 → 4.16.2).
 * Until then neither pins nor prune nor forget take it; after, it is an ordinary old release.
 */
export function heldForPath(
  r: ReleaseRecord,
  records: readonly ReleaseRecord[],
  running: readonly string[],
): boolean {
  const final = pathFinal(r);
  if (final === r.version) return false;
  const finalKept = records.some(
    (o) => o.version === final && o.arch === r.arch && o.identity === r.identity,
  );
  return finalKept && !passedOnPath(r, running);
}

/**
 * The records whose images a node needs of the bundle `rec` records: `rec`, and for an update
 * path every release of it the node has not gone past (the running one and those after it),
 * each as the same bundle (identity) recorded it. A stick of that bundle is loaded again
 * when any of them lost an image.
 */
export function neededOfBundle(
  rec: ReleaseRecord,
  records: readonly ReleaseRecord[],
  running: readonly string[],
): ReleaseRecord[] {
  if (!rec.path || rec.identity === undefined) return [rec];
  const others = records.filter(
    (o) =>
      o !== rec &&
      o.arch === rec.arch &&
      o.identity === rec.identity &&
      rec.path!.includes(o.version) &&
      !passedOnPath(o, running),
  );
  return [rec, ...others];
}

function releasesDir(stateDir: string): string {
  return join(stateDir, 'releases');
}

const BUNDLE_DIGEST = /^sha256:([0-9a-f]{64})$/;

/**
 * A record is one bundle of a release: two bundles of one version (a release and an add-on
 * bundle, or the same release made twice) each keep theirs, so the second never hides the
 * first's images (nor lets its pins go). VERSION-ARCH@sha256-HEX.json by the bundle file's
 * digest; VERSION-ARCH.json for a record with none (found on the node, loaded from peers), as
 * every record was named before.
 */
function recordName(r: { version: string; arch: string; digest?: string }): string {
  const hex = r.digest !== undefined ? BUNDLE_DIGEST.exec(r.digest)?.[1] : undefined;
  return hex ? `${r.version}-${r.arch}@sha256-${hex}.json` : `${r.version}-${r.arch}.json`;
}

/** The record's file: only ever built from a version and arch that pass bundle.json's rule. */
function recordFile(
  stateDir: string,
  r: { version: string; arch: string; digest?: string },
): string {
  if (!isReleaseVersion(r.version) || !isReleaseArch(r.arch))
    throw new Error(
      `not a release version and arch: ${JSON.stringify(`${r.version}-${r.arch}`).slice(0, 200)}`,
    );
  return join(releasesDir(stateDir), recordName(r));
}

/** The file of a record as read: a digest's record written before records were kept per bundle is still under VERSION-ARCH.json. */
const fileOf = (stateDir: string, r: ReleaseRecord) =>
  recordFile(stateDir, r.file === 'legacy' ? { version: r.version, arch: r.arch } : r);

/**
 * Writes the record of one bundle of a release. A VERSION-ARCH.json an older agent wrote for a
 * bundle with a digest is moved to that bundle's own name first (so a record without a digest
 * cannot overwrite it), or dropped when it is this same bundle's; one with no digest (found on
 * the node, loaded from peers) is replaced by a bundle's record, as it always was.
 */
export async function recordRelease(stateDir: string, rec: ReleaseRecord): Promise<void> {
  await makeDirs(releasesDir(stateDir));
  const { file: _, ...plain } = rec;
  const target = recordFile(stateDir, plain);
  const legacy = recordFile(stateDir, { version: rec.version, arch: rec.arch });
  const old = await readStateJson(legacy);
  const oldName =
    isReleaseRecord(old) && old.version === rec.version && old.arch === rec.arch
      ? recordFile(stateDir, old)
      : undefined;
  if (oldName && oldName !== legacy && oldName !== target)
    await rename(legacy, oldName).catch(() => undefined);
  await writeFileAtomic(target, JSON.stringify(plain, null, 2) + '\n');
  if (target !== legacy && (oldName === target || oldName === legacy))
    await rm(legacy, { force: true });
  if (plain.layout !== undefined)
    await dropOverwrittenLayout(stateDir, plain.layout, plain.identity);
}

/**
 * Another bundle's records that name `layout` lose it: a load of one release stages in the same
 * <version>-<arch> directory, so the copy they recorded is gone (a restore would find another
 * bundle.json there and try no further).
 */
async function dropOverwrittenLayout(
  stateDir: string,
  layout: string,
  identity: string | undefined,
): Promise<void> {
  for (const r of await readReleases(stateDir)) {
    if (r.layout !== layout || r.identity === identity) continue;
    const { layout: _, file: __, ...rest } = r;
    await writeFileAtomic(fileOf(stateDir, r), JSON.stringify(rest, null, 2) + '\n');
  }
}

/** Removes the one record `rec` was read from. */
export async function forgetReleaseRecord(stateDir: string, rec: ReleaseRecord): Promise<void> {
  await rm(fileOf(stateDir, rec), { force: true });
}

/**
 * Every release record of the state directory. A file that is not a record, or that records
 * another release than its name says (so forgetting that release would not remove it), is
 * ignored and left on disk; `onIgnored` says which and why.
 */
export async function readReleases(
  stateDir: string,
  onIgnored?: (why: string) => void,
): Promise<ReleaseRecord[]> {
  let names: string[];
  try {
    names = (await readdir(releasesDir(stateDir))).filter((n) => n.endsWith('.json'));
  } catch {
    return [];
  }
  const out: ReleaseRecord[] = [];
  for (const n of names) {
    // a damaged record only loses the pins of an old release; the new one is still pinned
    const file = join(releasesDir(stateDir), n);
    const rec = await readStateJson(file);
    if (isReleaseRecord(rec)) delete rec.file;
    if (!isReleaseRecord(rec))
      onIgnored?.(
        `${file} is not a release record (damaged, or a version or arch that is not letters, digits and . _ + -): ignored, left on disk`,
      );
    else if (recordName(rec) === n) out.push(rec);
    // written by an agent that kept one record per release: read as it is, renamed at its next write
    else if (recordName({ version: rec.version, arch: rec.arch }) === n)
      out.push({ ...rec, file: 'legacy' });
    else
      onIgnored?.(
        `${file} records ${rec.version} (${rec.arch}), not what its name says: ignored, left on disk`,
      );
  }
  return out;
}

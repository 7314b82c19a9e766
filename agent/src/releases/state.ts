import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { isReleaseArch, isReleaseVersion } from '@offline-bundle/format';
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
}

const isString = (v: unknown): v is string => typeof v === 'string';

/** The shape every reader of a record relies on; a record of another shape is skipped as damaged. */
function isReleaseRecord(v: unknown): v is ReleaseRecord {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const r = v as Record<string, unknown>;
  // version and arch name the record's own file and the layout directory: the bundle.json rule
  return isReleaseVersion(r.version) && isReleaseArch(r.arch) && isString(r.loadedAt) && Array.isArray(r.refs) && r.refs.every(isString)
    && (r.digest === undefined || isString(r.digest)) && (r.layout === undefined || isString(r.layout))
    && (r.source === undefined || r.source === 'bundle' || r.source === 'node');
}

function releasesDir(stateDir: string): string {
  return join(stateDir, 'releases');
}

const recordName = (version: string, arch: string) => `${version}-${arch}.json`;

/** The record's file: only ever built from a version and arch that pass bundle.json's rule. */
function recordFile(stateDir: string, version: string, arch: string): string {
  if (!isReleaseVersion(version) || !isReleaseArch(arch)) throw new Error(`not a release version and arch: ${JSON.stringify(`${version}-${arch}`).slice(0, 200)}`);
  return join(releasesDir(stateDir), recordName(version, arch));
}

export async function recordRelease(stateDir: string, rec: ReleaseRecord): Promise<void> {
  await makeDirs(releasesDir(stateDir));
  await writeFileAtomic(recordFile(stateDir, rec.version, rec.arch), JSON.stringify(rec, null, 2) + '\n');
}

export async function forgetReleaseRecord(stateDir: string, version: string, arch: string): Promise<void> {
  await rm(recordFile(stateDir, version, arch), { force: true });
}

/**
 * Every release record of the state directory. A file that is not a record, or that records
 * another release than its name says (so forgetting that release would not remove it), is
 * ignored and left on disk; `onIgnored` says which and why.
 */
export async function readReleases(stateDir: string, onIgnored?: (why: string) => void): Promise<ReleaseRecord[]> {
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
    if (!isReleaseRecord(rec)) onIgnored?.(`${file} is not a release record (damaged, or a version or arch that is not letters, digits and . _ + -): ignored, left on disk`);
    else if (recordName(rec.version, rec.arch) !== n) onIgnored?.(`${file} records ${rec.version} (${rec.arch}), not what its name says: ignored, left on disk`);
    else out.push(rec);
  }
  return out;
}

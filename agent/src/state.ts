import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/oci';
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
  return isString(r.version) && isString(r.arch) && isString(r.loadedAt) && Array.isArray(r.refs) && r.refs.every(isString)
    && (r.digest === undefined || isString(r.digest)) && (r.layout === undefined || isString(r.layout))
    && (r.source === undefined || r.source === 'bundle' || r.source === 'node');
}

function releasesDir(stateDir: string): string {
  return join(stateDir, 'releases');
}

const recordFile = (stateDir: string, version: string, arch: string) => join(releasesDir(stateDir), `${version}-${arch}.json`);

export async function recordRelease(stateDir: string, rec: ReleaseRecord): Promise<void> {
  await makeDirs(releasesDir(stateDir));
  await writeFileAtomic(recordFile(stateDir, rec.version, rec.arch), JSON.stringify(rec, null, 2) + '\n');
}

export async function forgetReleaseRecord(stateDir: string, version: string, arch: string): Promise<void> {
  await rm(recordFile(stateDir, version, arch), { force: true });
}

export async function readReleases(stateDir: string): Promise<ReleaseRecord[]> {
  let names: string[];
  try {
    names = (await readdir(releasesDir(stateDir))).filter((n) => n.endsWith('.json'));
  } catch {
    return [];
  }
  const out: ReleaseRecord[] = [];
  for (const n of names) {
    // a damaged record only loses the pins of an old release; the new one is still pinned
    const rec = await readStateJson(join(releasesDir(stateDir), n));
    if (isReleaseRecord(rec)) out.push(rec);
  }
  return out;
}

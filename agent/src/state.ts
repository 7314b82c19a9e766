import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/oci';

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
    try {
      out.push(JSON.parse(await readFile(join(releasesDir(stateDir), n), 'utf8')) as ReleaseRecord);
    } catch {
      // a damaged record only loses the pins of an old release; the new one is still pinned
    }
  }
  return out;
}

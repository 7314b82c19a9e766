// A layout fetched whole from peers whose load has not ended yet (the agent stopped between the
// fetch and the load, or the load was refused as busy): the start-up and pre-load cleanup
// (removeLeftovers) keep it, so a restart does not fetch a whole bundle again. The record goes
// when its load ends, or when the approval it was fetched under is withdrawn.
import { readdir, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { readStateJson } from './state-json.js';

export interface FetchedLayoutRecord {
  /** UPGRADE/<version>-<arch>, as the fetch left it. */
  layout: string;
  /** sha256 of its signed bundle.json: the approval it was fetched under. */
  manifestDigest: string;
  at: string;
  /** 'retry': the tries made so far (kept across restarts, so a copy that fails at every start ends). */
  tries?: number;
}

/**
 * 'fetched': whole from peers, under an approval that may be withdrawn (peer-service.ts).
 * 'retry': a stick's verified copy whose load failed after it was whole: loaded again from it
 * with no stick (daemon/retry-kept.ts).
 */
export type PendingLayoutKind = 'fetched' | 'retry';

const dirOf = (stateDir: string, kind: PendingLayoutKind) => join(stateDir, kind);
const fileOf = (stateDir: string, layout: string, kind: PendingLayoutKind) => join(dirOf(stateDir, kind), `${basename(layout)}.json`);

function isRecord(v: unknown): v is FetchedLayoutRecord {
  const r = v as Record<string, unknown> | null;
  return typeof r === 'object' && r !== null && typeof r.layout === 'string' && typeof r.manifestDigest === 'string' && typeof r.at === 'string'
    && (r.tries === undefined || (Number.isSafeInteger(r.tries) && (r.tries as number) >= 0));
}

export async function recordFetched(stateDir: string, rec: FetchedLayoutRecord, kind: PendingLayoutKind = 'fetched'): Promise<void> {
  await makeDirs(dirOf(stateDir, kind));
  await writeFileAtomic(fileOf(stateDir, rec.layout, kind), JSON.stringify(rec, null, 2) + '\n');
}

export async function forgetFetched(stateDir: string, layout: string, kind: PendingLayoutKind = 'fetched'): Promise<void> {
  await rm(fileOf(stateDir, layout, kind), { force: true });
}

/** Every record; a damaged one is skipped (its layout is then cleaned up as any unclaimed one). */
export async function readFetched(stateDir: string, kind: PendingLayoutKind = 'fetched'): Promise<FetchedLayoutRecord[]> {
  const names = await readdir(dirOf(stateDir, kind)).catch(() => [] as string[]);
  const out: FetchedLayoutRecord[] = [];
  for (const n of names.filter((x) => x.endsWith('.json'))) {
    const rec = await readStateJson(join(dirOf(stateDir, kind), n)).catch(() => undefined);
    // a record names its own file: one naming another layout is not trusted to keep it
    if (isRecord(rec) && `${basename(rec.layout)}.json` === n) out.push(rec);
  }
  return out;
}

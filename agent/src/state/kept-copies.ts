// A stick's verified copy whose load failed in the runtime after the copy was whole
// (load/keep-for-retry.ts): kept, and loaded again from it with no stick
// (daemon/retry-kept.ts). The start-up and pre-load cleanup (removeLeftovers) keep what a record
// names. A layout fetched from peers needs no record: until its load puts it in place it is a
// partial staging under its resume marker, kept and resumed as a stick's is.
import { readdir, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { readStateJson } from './state-json.js';

export interface KeptCopyRecord {
  /** UPGRADE/<version>-<arch>, as the failed load left it. */
  layout: string;
  /** sha256 of its signed bundle.json: the load again is bound to it. */
  manifestDigest: string;
  at: string;
  /** The tries made so far (kept across restarts, so a copy that fails at every start ends). */
  tries?: number;
}

/** The records' directory: its name is what agents before #41 wrote, so their records still count. */
const dirOf = (stateDir: string) => join(stateDir, 'retry');
const fileOf = (stateDir: string, layout: string) =>
  join(dirOf(stateDir), `${basename(layout)}.json`);

function isRecord(v: unknown): v is KeptCopyRecord {
  const r = v as Record<string, unknown> | null;
  return (
    typeof r === 'object' &&
    r !== null &&
    typeof r.layout === 'string' &&
    typeof r.manifestDigest === 'string' &&
    typeof r.at === 'string' &&
    (r.tries === undefined || (Number.isSafeInteger(r.tries) && (r.tries as number) >= 0))
  );
}

export async function recordKeptCopy(stateDir: string, rec: KeptCopyRecord): Promise<void> {
  await makeDirs(dirOf(stateDir));
  await writeFileAtomic(fileOf(stateDir, rec.layout), JSON.stringify(rec, null, 2) + '\n');
}

export async function forgetKeptCopy(stateDir: string, layout: string): Promise<void> {
  await rm(fileOf(stateDir, layout), { force: true });
}

/** Every record; a damaged one is skipped (its layout is then cleaned up as any unclaimed one). */
export async function readKeptCopies(stateDir: string): Promise<KeptCopyRecord[]> {
  const names = await readdir(dirOf(stateDir)).catch(() => [] as string[]);
  const out: KeptCopyRecord[] = [];
  for (const n of names.filter((x) => x.endsWith('.json'))) {
    const rec = await readStateJson(join(dirOf(stateDir), n)).catch(() => undefined);
    // a record names its own file: one naming another layout is not trusted to keep it
    if (isRecord(rec) && `${basename(rec.layout)}.json` === n) out.push(rec);
  }
  return out;
}

// What the daemon serves until the upgrade is over (daemon/kept-serving.ts), kept across
// restarts: the layout is kept for it (removeLeftovers), and the node's MachineConfig when the
// release was loaded tells when this node applied the release's OS update.
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { readStateJson } from './state-json.js';

interface ServingRecord {
  version: string;
  layout: string;
  /** The MCD's currentConfig on this Node when serving began (before the upgrade): the node is updated once it moved on. */
  configAtLoad?: string;
}

const FILE = 'serving.json';

export async function readServing(stateDir: string): Promise<ServingRecord | undefined> {
  const v = (await readStateJson(join(stateDir, FILE)).catch(() => undefined)) as
    Record<string, unknown> | undefined;
  if (
    typeof v !== 'object' ||
    v === null ||
    typeof v.version !== 'string' ||
    typeof v.layout !== 'string'
  )
    return undefined;
  return {
    version: v.version,
    layout: v.layout,
    ...(typeof v.configAtLoad === 'string' ? { configAtLoad: v.configAtLoad } : {}),
  };
}

export async function writeServing(stateDir: string, rec: ServingRecord): Promise<void> {
  await makeDirs(stateDir);
  await writeFileAtomic(join(stateDir, FILE), JSON.stringify(rec, null, 2) + '\n');
}

export async function forgetServing(stateDir: string): Promise<void> {
  await rm(join(stateDir, FILE), { force: true });
}

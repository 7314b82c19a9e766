import { readFile } from 'node:fs/promises';
import { makeDirs, writeFileAtomic } from '@offline-bundle/oci';
import { dirname } from 'node:path';
import type { NodeStatus } from './model.js';

export async function writeStatusFile(path: string, status: NodeStatus): Promise<void> {
  await makeDirs(dirname(path));
  await writeFileAtomic(path, JSON.stringify(status, null, 2) + '\n');
}

export async function readStatusFile(path: string): Promise<NodeStatus | undefined> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as NodeStatus;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { NodeStatus } from './model.js';

/** Writes `data` to `path` atomically: a temp file in the same directory, fsync, rename. */
export async function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o644): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  const fh = await open(tmp, 'w', mode);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } catch (err) {
    await fh.close();
    await rm(tmp, { force: true });
    throw err;
  }
  await fh.close();
  try {
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

export async function writeStatusFile(path: string, status: NodeStatus): Promise<void> {
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

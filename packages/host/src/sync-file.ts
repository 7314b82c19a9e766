import { open } from 'node:fs/promises';
import { createExclusive } from './exclusive-file.js';

/** fsync of a file or a directory (a directory: so a rename in it survives a power cut). */
export async function syncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** fsync of a directory where some filesystems refuse it: the rename is still atomic there. */
export function syncDirBestEffort(dir: string): Promise<void> {
  return syncPath(dir).catch(() => undefined);
}

/** Writes `text` to the temp file `file` (created anew: see createExclusive) and fsyncs it, for a rename into place after. */
export async function writeSynced(file: string, text: string, mode = 0o644): Promise<void> {
  const fh = await createExclusive(file, mode);
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

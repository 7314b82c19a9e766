import { randomBytes } from 'node:crypto';
import { rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { createExclusive } from './exclusive-file.js';
import { syncDirBestEffort } from './sync-file.js';

/**
 * Writes a file so that readers see the old content or the new, never a mix: a hidden temp
 * file in the same directory, fsync, rename, then fsync of the directory so the rename
 * survives a power cut. The directory must exist. Errors are the system's (callers map them).
 * `tmpDir` puts the temp file elsewhere on the same filesystem, for a directory whose reader
 * takes every file in it, a temp one too (CRI-O's crio.conf.d).
 */
export async function writeFileAtomic(
  file: string,
  content: string | Uint8Array,
  mode = 0o644,
  tmpDir?: string,
): Promise<void> {
  await renameIntoPlace(file, content, mode, tmpDir ?? path.dirname(file), true);
  await syncDirBestEffort(path.dirname(file));
}

/**
 * writeFileAtomic without waiting for the disk (no fsync), for a cache whose every reader checks
 * what it reads against what the entry is for (a digest, a check line): while the machine runs,
 * readers see the old content or the new; after a power cut the name may hold nothing, zeros,
 * or on some filesystems another file's old bytes, which such a reader takes for no entry.
 */
export function replaceFile(
  file: string,
  content: string | Uint8Array,
  mode = 0o644,
): Promise<void> {
  return renameIntoPlace(file, content, mode, path.dirname(file), false);
}

async function renameIntoPlace(
  file: string,
  content: string | Uint8Array,
  mode: number,
  tmpDir: string,
  sync: boolean,
): Promise<void> {
  const tmp = path.join(
    tmpDir,
    `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`,
  );
  try {
    const fh = await createExclusive(tmp, mode);
    try {
      await fh.writeFile(content);
      if (sync) await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, file);
  } catch (e) {
    await rm(tmp, { force: true }).catch(() => {});
    throw e;
  }
}

import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

/** Why a path that must be a plain file could not be opened as one. */
export class NotRegularFileError extends Error {
  readonly code = 'ENOTREG';
}

/**
 * Opens `path` for reading only if it is a regular file reached without a symlink. O_NONBLOCK:
 * a FIFO put where a blob was expected would otherwise hold one of libuv's four pool threads
 * until a writer came, and with four of them every file read and the shutdown stall.
 */
export async function openRegularFile(path: string): Promise<FileHandle> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    if (!(await fh.stat()).isFile()) throw new NotRegularFileError(`${path} is not a regular file`);
    return fh;
  } catch (err) {
    await fh.close();
    throw err;
  }
}

import { constants } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';

// O_EXCL refuses any entry at the name, a symlink included (dangling or not); O_NOFOLLOW says so
// again for filesystems that might not.
const CREATE = constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/**
 * Creates `file` anew for writing (`read`: and reading), never through what is at its name. A
 * temp name beside an output is predictable, and the directory may be writable by others (a
 * shared /tmp, a stick): a symlink planted there would carry the write, and the rename after it,
 * to a file of someone else's choosing. What is at the name is unlinked first (a stale temp of an
 * earlier run, or a planted link: the link goes, never what it points at), then the file is
 * created exclusively; an entry put back in between is refused (EEXIST), never written through.
 */
export async function createExclusive(
  file: string,
  mode = 0o644,
  o: { read?: boolean } = {},
): Promise<FileHandle> {
  const flags = CREATE | (o.read ? constants.O_RDWR : constants.O_WRONLY);
  try {
    return await open(file, flags, mode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  await unlink(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
  return open(file, flags, mode);
}

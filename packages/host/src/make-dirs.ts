import { mkdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { HostError } from './errors.js';

const code = (err: unknown) => (err as NodeJS.ErrnoException).code;
const isDir = (path: string) =>
  stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );

/**
 * `mkdir -p`, without Node's `recursive: true`: Node 20 retries that forever, at full CPU,
 * when a directory cannot be made with ENOENT although its parent exists (any path under
 * /proc or another pseudo filesystem). Here the second ENOENT is final: CANNOT_CREATE_DIR, naming
 * the directory and the fix. Other system errors pass through with their codes.
 */
export async function makeDirs(dir: string, mode?: number): Promise<void> {
  const target = resolve(dir);
  try {
    await mkdir(target, mode);
    return;
  } catch (err) {
    if (code(err) === 'EEXIST' && (await isDir(target))) return;
    if (code(err) !== 'ENOENT' || dirname(target) === target) throw err;
  }
  await makeDirs(dirname(target), mode);
  try {
    await mkdir(target, mode);
  } catch (err) {
    if (code(err) === 'EEXIST' && (await isDir(target))) return;
    if (code(err) !== 'ENOENT') throw err;
    throw new HostError(
      'CANNOT_CREATE_DIR',
      `cannot create directory ${target}: the filesystem of ${dirname(target)} does not allow it; choose a directory on a writable disk`,
      { cause: err },
    );
  }
}

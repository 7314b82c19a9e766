// Temporary directories for node-tap tests.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * Create a fresh temporary directory that is removed (recursively) when the
 * node-tap test `t` tears down.
 *
 * @param {{ teardown: (fn: () => unknown) => void }} t node-tap test object
 * @param {string} [prefix] directory name prefix
 * @returns {Promise<string>} absolute path of the new directory
 */
export async function tmpdir(t, prefix = 'ob-test-') {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

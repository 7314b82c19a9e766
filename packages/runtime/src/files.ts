import { readFile, unlink } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic as atomicWrite } from '@offline-bundle/host';
import { RuntimeError } from './errors.js';

/**
 * First line of every file this package writes. Removers (and writers about to replace a
 * file) check for it, so a file that an installer, the MCO or an administrator put at the
 * same path is never touched.
 */
export const MANAGED_MARKER =
  '# Managed by offline-bundle: written by bundle-agent, removed when the upgrade completes. Do not edit.';

function errno(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | undefined)?.code;
}

function writeError(action: string, file: string, e: unknown): RuntimeError {
  const code = errno(e);
  const why = e instanceof Error ? e.message : String(e);
  if (code === 'ENOSPC' || code === 'EDQUOT') {
    return new RuntimeError('NO_SPACE', `cannot ${action} ${file}: no space left on device`, {
      cause: e,
    });
  }
  return new RuntimeError('WRITE_FAILED', `cannot ${action} ${file}: ${why}`, { cause: e });
}

/** The file's text, or undefined when it does not exist. */
export async function readIfExists(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    if (errno(e) === 'ENOENT') return undefined;
    throw new RuntimeError(
      'READ_FAILED',
      `cannot read ${file}: ${e instanceof Error ? e.message : String(e)}`,
      { cause: e },
    );
  }
}

function isManaged(text: string): boolean {
  return text.split('\n', 1)[0] === MANAGED_MARKER;
}

/** Throws FOREIGN_FILE when `file` exists and was not written by this package. */
export async function assertNotForeign(file: string): Promise<void> {
  const existing = await readIfExists(file);
  if (existing !== undefined && !isManaged(existing)) {
    throw new RuntimeError(
      'FOREIGN_FILE',
      `${file} exists and was not written by offline-bundle; leaving it alone`,
    );
  }
}

/**
 * Replace `file` with `content` atomically: a temp file in the same directory, written
 * and fsync'd, then renamed over the target, then the directory fsync'd. Readers see the
 * old file or the new one, never a partial one; no temp file survives a failure.
 */
export async function writeFileAtomic(file: string, content: string, mode = 0o644): Promise<void> {
  try {
    await atomicWrite(file, content, mode);
  } catch (e) {
    throw writeError('write', file, e);
  }
}

/**
 * Remove `file` if it carries the offline-bundle marker. Missing: nothing to do.
 * Present but foreign: FOREIGN_FILE, the file is kept. Returns whether a file was removed.
 */
export async function removeManagedFile(file: string): Promise<boolean> {
  const existing = await readIfExists(file);
  if (existing === undefined) return false;
  if (!isManaged(existing)) {
    throw new RuntimeError(
      'FOREIGN_FILE',
      `${file} was not written by offline-bundle; leaving it alone`,
    );
  }
  try {
    await unlink(file);
    return true;
  } catch (e) {
    if (errno(e) === 'ENOENT') return false;
    throw writeError('remove', file, e);
  }
}

/** A plain file name (no directory part, not hidden, not . or ..). */
export function assertFileName(name: string): void {
  if (!name || name !== path.basename(name) || name.startsWith('.') || name.includes('\0')) {
    throw new RuntimeError('INVALID_SPEC', `invalid drop-in file name ${JSON.stringify(name)}`);
  }
}

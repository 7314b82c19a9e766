import { assertRegularFile } from '@offline-bundle/oci';
import { AgentError } from './errors.js';

/**
 * The bundle path must be a regular file before anything reads it: a FIFO (or a device)
 * would block the first read forever, and with it the thread pool, so that even SIGTERM
 * could not finish the load. The media watcher only offers regular files; this covers
 * `bundle-agent load FILE` and a file swapped after the scan.
 */
export async function assertBundleFile(file: string): Promise<void> {
  await assertRegularFile(file);
}

// The file itself vanishing (its stick pulled, or deleted) while the load reads it
const GONE = new Set(['ENOENT', 'ESTALE', 'ENODEV', 'ENXIO', 'EIO']);

/**
 * A system error about the bundle file itself, raised by whatever step read it last, is the
 * media going away, not an internal fault: reported as MediaRemoved with what to do.
 */
export function mediaGone(err: unknown, file: string): unknown {
  // the format library wraps what the system said as IO_ERROR, keeping it as the cause
  let e = err as NodeJS.ErrnoException | undefined;
  for (let depth = 0; e && typeof e.syscall !== 'string' && depth < 3; depth++) e = e.cause as NodeJS.ErrnoException | undefined;
  if (typeof e?.syscall !== 'string' || e.path !== file || !GONE.has(e.code ?? '')) return err;
  return new AgentError('MediaRemoved', `${file} disappeared or cannot be read (${e.code}): was the USB stick removed or the file deleted? Plug it in again, check the path and retry`, { cause: err });
}

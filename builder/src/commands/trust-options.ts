// What verify and extract share: the trust flags, the warning about a key others could change,
// and the progress of reading the whole file.
import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { collect, digestArg } from '../args.js';
import type { Progress } from '../progress.js';

// At the factory a key others could change is worth a warning; the agent refuses one.
export const warnUnsafeKey = (message: string) =>
  process.stderr.write(`bundle: warning: ${escapeControls(message)}\n`);

export const trustOptions = (cmd: Command) =>
  cmd
    .option('--key <pub>', 'trusted public key (repeatable)', collect)
    .option(
      '--digest <sha256>',
      'expected sha256 of the whole file (from NAME.bundle.sha256)',
      digestArg,
    )
    .option('--json', 'print the result as JSON');

/** A progress callback for reading a file: the phase starts at the first call (when the total is known), "finishing" once all is read. */
export function fileProgress(
  progress: Progress,
  phase: string,
): (done: number, total: number) => void {
  let started = false;
  return (done, total) => {
    if (!started) progress.start(phase, total);
    started = true;
    progress.update(done);
    if (done >= total) progress.phaseNote('finishing');
  };
}

// `bundle split` and the bundle paths the reading commands accept: a file, one of its parts,
// or NAME.bundle when only its parts are there.
import { stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { Command } from 'commander';
import { FormatError, isPartName, partNamesIn } from '@offline-bundle/format';
import { assertRegularFile, escapeControls } from '@offline-bundle/host';
import { OciError } from '@offline-bundle/oci';
import { formatBytes, plural } from '@offline-bundle/cli';
import { SPLIT_SIZE_HELP, parseSize, splitBundle } from '../split.js';

/**
 * The check the reading commands make before opening: a regular file, unless the path names a
 * part, or NAME.bundle exists only as parts (then opening them checks each part).
 */
export async function assertBundlePath(file: string): Promise<void> {
  if (isPartName(file)) return;
  const exists = await stat(file).then(
    () => true,
    (err: NodeJS.ErrnoException) =>
      err.code === 'ENOENT' || err.code === 'ENOTDIR' ? false : undefined,
  );
  if (
    !exists &&
    (await partNamesIn(dirname(file) || '.', basename(file)).catch(() => [])).length > 0
  )
    return;
  // the agent's line for a path that names nothing, not the system's "ENOENT ... stat"
  if (exists === false)
    throw new FormatError(
      'IO_ERROR',
      `${file} does not exist: give the path of a NAME.bundle file`,
    );
  await assertRegularFile(file);
}

/** `create --split-size` without --force: parts of the same name already there are not replaced. */
export async function assertNoParts(output: string): Promise<void> {
  const there = await partNamesIn(dirname(output) || '.', basename(output)).catch(() => []);
  if (there.length > 0)
    throw new OciError(
      'OUTPUT_EXISTS',
      `${output} exists as parts (${there[0]!.name}, ...): pass --force to replace them`,
    );
}

export function addSplitCommand(program: Command): void {
  program
    .command('split')
    .description(
      'Split a bundle into NAME.bundle.part-001-of-NNN files whose concatenation is the bundle (for FAT32 sticks), with NAME.bundle.sha256 of the whole. The bundle stays.',
    )
    .argument('<bundle>')
    .requiredOption('--size <size>', SPLIT_SIZE_HELP, parseSize)
    .option('--out <dir>', "directory to write the parts to (default: the bundle's)")
    .option('--json', 'print the result as JSON')
    .addHelpText(
      'after',
      `
Every part but the last is --size bytes. verify, inspect, extract and bundle-agent read the parts
from the path of any one of them (or NAME.bundle, when only the parts are there); the whole-file
digest (--digest, NAME.bundle.sha256) is that of the concatenation, the same as the bundle's.

Example:
  bundle split 4.14.38.bundle --size 4G --out /media/usb`,
    )
    .action(async (bundle: string, o: { size: number; out?: string; json?: boolean }) => {
      const r = await splitBundle(bundle, o.size, o.out);
      if (o.json)
        process.stdout.write(
          JSON.stringify({ parts: r.parts, digest: r.digest, size: r.size }) + '\n',
        );
      else
        process.stdout.write(
          escapeControls(
            `wrote ${partsLine(r.parts.length, o.size, r.size)} (${r.parts.map((p) => basename(p)).join(', ')}), ${r.digest}`,
          ) + '\n',
        );
    });
}

/** --size is read in binary units (20M = 20 MiB, 4G = FAT32's 4 GiB - 1): the line says it in the same, and the one part as what it is. */
export function partsLine(parts: number, size: number, total: number): string {
  if (parts === 1)
    return `1 part, the whole bundle (${formatBytes(total)}: under --size, nothing to split)`;
  const mib = size / 2 ** 20;
  const binary =
    mib >= 1024
      ? `${(mib / 1024).toFixed(mib % 1024 === 0 ? 0 : 1)} GiB`
      : mib >= 1
        ? `${mib.toFixed(Number.isInteger(mib) ? 0 : 1)} MiB`
        : `${size} bytes`;
  return `${plural(parts, 'part')} of ${binary} (${size} bytes; the last ${formatBytes(total - size * (parts - 1))})`;
}

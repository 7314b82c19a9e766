// `bundle write-media BUNDLE /mount/point`: the definition, its help and its one last line.
import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { formatBytes, plural } from '@offline-bundle/cli';
import { Progress } from '../progress.js';
import { parseSize } from '../split.js';
import { ROOM_MARGIN_BYTES, writeMedia } from '../write-media.js';
import { SIGNAL_EXIT } from './signal-exit.js';

interface WriteMediaFlags {
  partSize?: number;
  force?: boolean;
  anyDirectory?: boolean;
  agentImage?: string | boolean;
  quiet?: boolean;
  json?: boolean;
}

const WRITE_MEDIA_HELP = `
Before writing anything it refuses, in one line: a directory that is not a mount point (or is a
system filesystem), a read-only mount, files of the same bundle already there (without --force),
and a stick without room for the bundle, its .sha256 and ${formatBytes(ROOM_MARGIN_BYTES)} plus a cluster per file.
The filesystem comes from /proc/self/mountinfo (FUSE mounts included: fuse.fusefat, fuseblk
by the first sectors of their device); one it cannot tell is split as FAT32.

A split bundle is read from its parts in turn (all of them must be there; a missing or cut part
is refused before anything is written): no joined copy is made, and the stick gets it as its
filesystem needs (one file on exFAT or ext4).

A bundle made with --agent-image brings its agent image along when bundle-agent-VERSION-ARCH.oci.tar
and its .sig ("bundle create --agent-image" and "bundle agent-image export" write them) are beside
it: both are written, counted in the room needed, checked (the archive's sha256 against its .sig,
as read and as read back) and renamed into place before the bundle. The same pair already on the
stick (a second bundle of that agent) is only read back; another pair of that name needs --force.

Files are written under dot names and renamed into place only once all are written and synced,
so bundle-agent never sees half a part; NAME.bundle.sha256 holds the whole bundle's digest (the
concatenation of the parts). Then the files' cached pages are dropped, every file is read back and
checked against what was read from the bundle, and it ends "Done: N file(s) on DIR; safe to remove
the stick." A failure (stick full, stick pulled: EIO, ENOTCONN, ECONNABORTED, ENODEV), a bundle that changes
while being read (SOURCE_CHANGED), or Ctrl-C (exit 130; a second one ends it at once) removes what
was written. Giving the copy already on the stick as the bundle is refused (SAME_FILE).

Examples:
  bundle write-media 4.14.38.bundle /run/media/$USER/STICK
  bundle write-media 4.14.38.bundle /mnt/usb --force --json`;

export function addWriteMediaCommand(program: Command): void {
  program
    .command('write-media')
    .description(
      'Write a bundle onto a mounted USB stick: split as its filesystem needs (FAT32: parts of 4 GiB - 1 byte; exFAT, ext4 and others: one file), synced, read back and checked, ending "safe to remove the stick".',
    )
    .argument(
      '<bundle>',
      'the bundle file (NAME.bundle), or a split one: any of its parts (NAME.bundle.part-001-of-005), or NAME.bundle when only its parts are there',
    )
    .argument('<mountpoint>', 'where the stick is mounted (findmnt -l, lsblk -f)')
    .option(
      '--part-size <size>',
      'split into parts of at most this size even where the filesystem would take more (binary units: 2G, 500M, bytes)',
      parseSize,
    )
    .option(
      '--force',
      'replace files of the same bundle already on the stick (NAME.bundle, its parts, NAME.bundle.sha256): kept until the new copy is in place when there is room for both, else removed first (said before writing)',
    )
    .option(
      '--any-directory',
      "write into a directory that is not a stick's mount point (a subdirectory, a local disk); the checks of the filesystem still apply",
    )
    .option(
      '--agent-image <file>',
      "the agent image to take along for nodes with no agent yet: bundle-agent-VERSION-ARCH.oci.tar or its .sig (both are written); default: the pair the bundle's agent names, when it is beside the bundle",
    )
    .option('--no-agent-image', 'write the bundle alone, even when its agent image is beside it')
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', WRITE_MEDIA_HELP)
    .action(runWriteMedia);
}

async function runWriteMedia(
  bundle: string,
  mountpoint: string,
  o: WriteMediaFlags,
): Promise<void> {
  const progress = new Progress({ quiet: o.quiet });
  const ac = new AbortController();
  const signals = Object.keys(SIGNAL_EXIT) as Array<keyof typeof SIGNAL_EXIT>;
  const stop = (signal: keyof typeof SIGNAL_EXIT) => {
    // a second signal ends the process at once: a write hung on a dead FUSE daemon cannot clean up
    for (const s of signals) process.removeListener(s, stop);
    ac.abort(
      Object.assign(
        new Error(
          `interrupted: what was written to ${mountpoint} is removed; rerun to write the bundle`,
        ),
        { name: 'AbortError', code: 'INTERRUPTED', exitCode: SIGNAL_EXIT[signal] },
      ),
    );
  };
  for (const s of signals) process.on(s, stop);
  const r = await writeMedia({
    bundle,
    target: mountpoint,
    partSize: o.partSize,
    force: o.force,
    anyDirectory: o.anyDirectory,
    agentImage: o.agentImage,
    progress,
    signal: ac.signal,
  });
  const done = `Done: ${plural(r.files.length, 'file')} on ${r.target}; safe to remove the stick.`;
  if (o.json) {
    process.stdout.write(JSON.stringify(r) + '\n');
    if (!o.quiet) process.stderr.write(escapeControls(done) + '\n');
    return;
  }
  const a = r.agentImage;
  const wrote = r.files
    .filter((f) => !a?.alreadyThere || (f !== a.archive && f !== a.statement))
    .map((f) => f.slice(r.target.length + 1));
  const agent = a
    ? `; agent image ${a.version} (${a.arch}, ${formatBytes(a.size)})${a.alreadyThere ? ' was there already' : ''}`
    : '';
  if (!o.quiet)
    process.stderr.write(
      escapeControls(
        `${r.filesystem} at ${r.mountPoint}: wrote ${wrote.join(', ')} (${formatBytes(r.size)}, ${r.digest})${agent}; read back${r.cacheDropped ? ' from the stick' : ''}: matches`,
      ) + '\n',
    );
  process.stdout.write(escapeControls(done) + '\n');
}

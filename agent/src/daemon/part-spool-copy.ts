// One part from a stick into the spool: streamed a chunk at a time (a part is up to 4 GiB),
// hashed on the way, written under a hidden temporary name, fsynced and renamed into place, so
// the spool holds whole parts or none of a part.
import { createHash } from 'node:crypto';
import { rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { FileHandle } from 'node:fs/promises';
import { createExclusive, openRegularFile, syncDirBestEffort } from '@offline-bundle/host';
import { AgentError, oneLine } from '../errors.js';

/** One read from a stick: large reads matter on USB media; all the memory a copy holds. */
const READ_CHUNK_BYTES = 1024 * 1024;

/** The hidden name a part is written under until it is whole: never taken for a part. */
export const tempNameOf = (dest: string): string =>
  join(dirname(dest), `.${basename(dest)}.copying`);

export interface PartRead {
  /** The part on the stick. */
  src: string;
  /** Its size when the stick was looked at: the bytes read must be exactly these. */
  size: number;
  /** "part 2 of 5": for the messages. */
  label: string;
  signal?: AbortSignal;
  progress?: (bytes: number) => void;
}

/** The stick went away (or the file changed) under the read: the technician plugs it in again. */
function stickGone(p: PartRead, why: string): AgentError {
  return new AgentError(
    'MediaRemoved',
    `${p.src} could not be read to the end (${why}) while ${p.label} was copied: was the USB stick removed? Plug it in again and leave it in until the node says you may remove it`,
  );
}

/** Reads the part through, feeding `write` each chunk; returns its sha256. */
async function readThrough(
  p: PartRead,
  write?: (buf: Buffer, n: number) => Promise<void>,
): Promise<string> {
  const fh: FileHandle = await openRegularFile(p.src).catch((err: Error) => {
    throw stickGone(p, oneLine(err));
  });
  const hash = createHash('sha256');
  const buf = Buffer.allocUnsafe(READ_CHUNK_BYTES);
  let done = 0;
  try {
    for (;;) {
      if (p.signal?.aborted)
        throw new AgentError(
          'Interrupted',
          `the agent stopped while ${p.label} was copied from ${p.src}; the parts copied before are kept`,
        );
      const { bytesRead } = await fh.read(buf, 0, buf.length, done).catch((err: Error) => {
        throw stickGone(p, oneLine(err));
      });
      if (bytesRead === 0) break;
      hash.update(buf.subarray(0, bytesRead));
      if (write) await write(buf, bytesRead);
      done += bytesRead;
      if (done > p.size) break;
      p.progress?.(done);
    }
  } finally {
    await fh.close();
  }
  if (done !== p.size) throw stickGone(p, `${done} bytes read of ${p.size}`);
  return hash.digest('hex');
}

/** The part's sha256, read from the stick: to compare with the one copied before. */
export function hashPart(p: PartRead): Promise<string> {
  return readThrough(p);
}

/** Copies the part to `dest` (temp, fsync, rename, directory fsync); returns its sha256. Leaves no temp file on any failure. */
export async function copyPart(p: PartRead, dest: string): Promise<string> {
  const tmp = tempNameOf(dest);
  const out = await createExclusive(tmp, 0o600).catch((err: NodeJS.ErrnoException) => {
    const why =
      err.code === 'ENAMETOOLONG'
        ? "the name is too long for this node's filesystem: rename the bundle to a shorter name, split it again"
        : `${oneLine(err)}: free space on this node or ask the administrator to check its disk`;
    throw new AgentError(
      err.code === 'ENOSPC' || err.code === 'EDQUOT' ? 'InsufficientSpace' : 'StagingFailed',
      `cannot create ${tmp} to copy ${p.label} into: ${why}, then plug the stick in again`,
      { cause: err },
    );
  });
  let sha: string;
  try {
    sha = await readThrough(p, async (buf, n) => {
      await out.write(buf, 0, n).catch((err: NodeJS.ErrnoException) => {
        throw new AgentError(
          err.code === 'ENOSPC' || err.code === 'EDQUOT' ? 'InsufficientSpace' : 'StagingFailed',
          `cannot write ${tmp} while ${p.label} was copied: ${oneLine(err)}; free space on this node, then plug the stick in again`,
          { cause: err },
        );
      });
    });
    await out.sync();
  } catch (err) {
    await out.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw err;
  }
  await out.close();
  await rename(tmp, dest);
  await syncDirBestEffort(dirname(dest));
  return sha;
}

// Splitting a bundle into NAME.bundle.part-001-of-005 files whose concatenation is the bundle,
// for media that cannot hold it in one file (FAT32: 4 GiB - 1 byte per file). Streamed: no part
// is held in memory. Atomic: parts are written under temp names and renamed into place only once
// all are on disk; on failure the temp names go and nothing else changed.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, rename, rm, stat, truncate, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { InvalidArgumentError } from 'commander';
import {
  MAX_PARTS,
  FormatError,
  digestLine,
  partName,
  partNamesIn,
  writeFailure,
  type BundleSource,
} from '@offline-bundle/format';
import { assertRegularFile, createExclusive, syncPath, writeSynced } from '@offline-bundle/host';

/** FAT32's largest file: 4 GiB - 1 byte. A size of exactly 4 GiB is taken as this, so `4G` fits a FAT32 stick. */
export const FAT32_MAX_FILE = 4 * 1024 ** 3 - 1;
const UNITS: Record<string, number> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 };

/** `4GiB`, `4G`, `3999M`, `4294967295`: binary units, K to T, an optional `iB` or `B`. */
export function parseSize(value: string): number {
  const m = /^(\d+)\s*([KMGT]?)(i?B)?$/i.exec(value.trim());
  const unit = m ? UNITS[m[2]!.toUpperCase()] : undefined;
  if (!m || unit === undefined || (m[3] && !m[2] && m[3].toLowerCase() !== 'b'))
    throw new InvalidArgumentError('must be a size such as 4GiB, 4G, 3999M or a number of bytes');
  const n = Number(m[1]) * unit;
  if (!Number.isSafeInteger(n) || n < 1)
    throw new InvalidArgumentError('must be a size of at least 1 byte');
  return n === 4 * 1024 ** 3 ? FAT32_MAX_FILE : n;
}

export const SPLIT_SIZE_HELP =
  'size of each part (4GiB, 4G, 3999M or bytes; binary units). FAT32 holds at most 4 GiB - 1 byte per file: 4G/4GiB is taken as that';

/** How many parts `fileSize` bytes make at `size` each, refused past MAX_PARTS. */
export function partCount(fileSize: number, size: number, what: string): number {
  const count = Math.max(1, Math.ceil(fileSize / size));
  if (count > MAX_PARTS)
    throw new FormatError(
      'BAD_PARTS',
      `${what} is ${fileSize} bytes: at ${size} bytes a part that makes ${count} parts, more than the ${MAX_PARTS} a bundle may be split into; give a larger size`,
    );
  return count;
}

interface Plan {
  dir: string;
  base: string;
  count: number;
  size: number;
  fileSize: number;
  /** Where each part is written first, beside its final name (a dot name no watcher takes for a part). */
  temps: string[];
  finals: string[];
}

function plan(dir: string, base: string, fileSize: number, size: number): Plan {
  const count = partCount(fileSize, size, base);
  const finals = Array.from({ length: count }, (_, i) => join(dir, partName(base, i + 1, count)));
  return {
    dir,
    base,
    count,
    size,
    fileSize,
    finals,
    temps: finals.map((f) => join(dir, `.${basename(f)}.${process.pid}.tmp`)),
  };
}

const CHUNK = 1024 * 1024;

/**
 * Bytes [start, end) of an open file, read at their positions: a read stream made on the handle
 * (or its number) would close it when destroyed by a failed write, and it serves further parts.
 */
async function* rangeOf(fh: FileHandle, start: number, end: number): AsyncGenerator<Buffer> {
  for (let pos = start; pos < end;) {
    const want = Math.min(CHUNK, end - pos);
    const { bytesRead, buffer } = await fh.read(Buffer.allocUnsafe(want), 0, want, pos);
    if (bytesRead === 0) return;
    pos += bytesRead;
    yield buffer.subarray(0, bytesRead);
  }
}

const isSource = (src: FileHandle | BundleSource): src is BundleSource => 'identity' in src;

/**
 * Bytes [start, end) of `src` (a path, a handle kept open across parts so every part comes
 * from the same file, or a bundle source: a file or the parts of one) into `dest`, streamed
 * and synced; each chunk also to `seen`. A source that ends before `end` (cut or replaced
 * while being read) is an error, never a short part.
 */
export async function copyRange(
  src: string | FileHandle | BundleSource,
  dest: string,
  start: number,
  end: number,
  seen?: (chunk: Buffer) => void,
  signal?: AbortSignal,
): Promise<void> {
  // a temp name: created anew, never written through a link planted at it
  const out = await createExclusive(dest);
  try {
    const read =
      typeof src === 'string'
        ? createReadStream(src, { start, end: end - 1, highWaterMark: CHUNK })
        : isSource(src)
          ? src.stream(start, end)
          : rangeOf(src, start, end);
    let got = 0;
    // written through the handle, not a stream of it: a stream would close it, and it is synced after
    await pipeline(
      read,
      async (chunks: AsyncIterable<Buffer>) => {
        for await (const c of chunks) {
          seen?.(c);
          for (let off = 0; off < c.length;)
            off += (await out.write(c, off, c.length - off, got + off)).bytesWritten;
          got += c.length;
        }
      },
      ...(signal ? [{ signal }] : []),
    );
    if (got !== end - start) {
      const name = typeof src === 'string' ? src : isSource(src) ? src.identity : 'the bundle';
      throw new FormatError(
        'TRUNCATED',
        `${name} ended ${got} bytes into bytes ${start}-${end} while being read: it was cut or changed meanwhile; nothing was written: rerun once it is whole`,
      );
    }
    await out.sync();
  } finally {
    await out.close();
  }
}

/** The temp parts renamed into place, the sidecar beside them; parts of another split of the same name removed (they would not fit this set). */
async function commit(p: Plan, digest: string): Promise<void> {
  const sidecar = join(p.dir, `${p.base}.sha256`);
  const sidecarTmp = `${sidecar}.${process.pid}.tmp`;
  await writeSynced(sidecarTmp, digestLine(digest, p.base));
  const stale = (await partNamesIn(p.dir, p.base)).filter((f) => f.count !== p.count);
  let moved = 0;
  try {
    for (; moved < p.count; moved++) await rename(p.temps[moved]!, p.finals[moved]!);
    await rename(sidecarTmp, sidecar);
  } catch (err) {
    // a part set that is not whole is no output: the ones already moved go too
    for (const f of p.finals.slice(0, moved)) await rm(f, { force: true });
    throw err;
  }
  for (const s of stale) await rm(join(p.dir, s.name), { force: true });
}

/** The temp names unlinked, best effort: the error that stopped the split is the one to report (a directory at one is left). */
async function discard(p: Plan): Promise<void> {
  for (const t of [...p.temps, join(p.dir, `${p.base}.sha256.${process.pid}.tmp`)])
    await unlink(t).catch(() => undefined);
}

export interface SplitResult {
  parts: string[];
  digest: string;
  size: number;
}

/**
 * Copies `bundle` into parts of `size` bytes in `outDir` (default: its directory), with
 * NAME.bundle.sha256 of the whole beside them; the bundle itself stays.
 */
export async function splitBundle(
  bundle: string,
  size: number,
  outDir = dirname(bundle),
): Promise<SplitResult> {
  await assertRegularFile(bundle);
  const st = await stat(bundle).catch((cause: unknown) => {
    throw new FormatError('IO_ERROR', `cannot read ${bundle}: ${(cause as Error).message}`, {
      cause,
    });
  });
  const p = plan(outDir, basename(bundle), st.size, size);
  const hash = createHash('sha256');
  try {
    await mkdir(outDir, { recursive: true });
    for (let i = 0; i < p.count; i++)
      await copyRange(bundle, p.temps[i]!, i * size, Math.min(st.size, (i + 1) * size), (c) =>
        hash.update(c),
      );
    const digest = `sha256:${hash.digest('hex')}`;
    await commit(p, digest);
    return { parts: p.finals, digest, size: st.size };
  } catch (err) {
    await discard(p);
    throw err instanceof FormatError ? err : writeFailure(outDir, err);
  }
}

/**
 * Turns the bundle just written at `bundle` into its parts, in place: the last part is copied
 * out and the file cut before it, and so on back to the first, which is the file itself renamed.
 * So the disk needs room for one part more than the bundle, not twice the bundle. The bundle
 * moves to a temp name first: a failure leaves neither it nor any part, only what was there before.
 */
export async function splitInPlace(
  bundle: string,
  size: number,
  digest: string,
  signal?: AbortSignal,
): Promise<SplitResult> {
  const fileSize = (await stat(bundle)).size;
  let p: Plan;
  try {
    p = plan(dirname(bundle), basename(bundle), fileSize, size);
  } catch (err) {
    throw new FormatError(
      'BAD_PARTS',
      `${(err as Error).message}; ${bundle} is left whole (split it with "bundle split")`,
    );
  }
  const work = join(p.dir, `.${p.base}.${process.pid}.splitting`);
  await rename(bundle, work);
  try {
    for (let i = p.count - 1; i >= 1; i--) {
      await copyRange(
        work,
        p.temps[i]!,
        i * size,
        Math.min(fileSize, (i + 1) * size),
        undefined,
        signal,
      );
      await truncate(work, i * size);
    }
    await syncPath(work);
    await rename(work, p.temps[0]!);
    await commit(p, digest);
    return { parts: p.finals, digest, size: fileSize };
  } catch (err) {
    await rm(work, { force: true });
    await rm(`${bundle}.sha256`, { force: true });
    await discard(p);
    if (signal?.aborted) throw signal.reason;
    throw err instanceof FormatError ? err : writeFailure(bundle, err);
  }
}

import type { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { FormatError } from './errors.js';
import {
  BUNDLE_JSON,
  FRAME_BYTES,
  MAX_BUNDLE_JSON_BYTES,
  MAX_SIGNATURE_BYTES,
  SIGNATURE,
  tarStreamBytes,
} from './layout.js';
import { parseManifestBytes, type BundleManifest } from './manifest.js';
import {
  decodeSeekTable,
  FOOTER_BYTES,
  SEEKABLE_MAGIC,
  seekTableLength,
  type SeekIndex,
} from './seekable.js';
import type { BundleSource } from './source.js';
import { BoundedDecompress } from './zstd-bounded.js';

// The two ends of a bundle, read without the full pass: bundle.json and its signature at the
// head, the seek index at the tail.

export async function readAll(data: Readable, limit: number, name: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of data) {
    n += (c as Buffer).length;
    if (n > limit)
      throw new FormatError('OVERSIZED_ENTRY', `${name} is larger than ${limit} bytes`);
    parts.push(c as Buffer);
  }
  return Buffer.concat(parts);
}

/**
 * Most archive bytes that may come before bundle.json has told the archive's length: its
 * entry and the signature's at their limits, plus room for what the streams read ahead.
 */
export const HEADER_BYTES_MAX =
  tarStreamBytes([MAX_BUNDLE_JSON_BYTES, MAX_SIGNATURE_BYTES]) + 2 * FRAME_BYTES;

export const headerOverrun = () =>
  new FormatError(
    'CORRUPT',
    `the archive does not start with ${BUNDLE_JSON} and its signature within ${HEADER_BYTES_MAX} bytes: not a bundle`,
  );

export const isSystemError = (err: unknown): err is NodeJS.ErrnoException =>
  typeof (err as NodeJS.ErrnoException)?.syscall === 'string';

/** `length` bytes at `offset`; where the source comes short the rest stays zero, which no footer matches. */
async function readPadded(source: BundleSource, offset: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  (await source.read(offset, length)).copy(buf);
  return buf;
}

/** Reads and checks the trailing seek index against the bundle's size. */
export async function readSeekIndex(source: BundleSource): Promise<SeekIndex> {
  const { size } = source;
  if (size < FOOTER_BYTES)
    throw new FormatError(
      'TRUNCATED',
      `${source.identity} is ${size} bytes: too short to be a bundle`,
    );
  const { tableBytes } = seekTableLength(
    await readPadded(source, size - FOOTER_BYTES, FOOTER_BYTES),
  );
  if (tableBytes > size)
    throw new FormatError('BAD_SEEK_TABLE', 'the seek index claims more bytes than the file has');
  return decodeSeekTable(await readPadded(source, size - tableBytes, tableBytes), size);
}

/** Whether the bundle ends with a seek table's footer: a whole bundle does, a cut or growing copy does not. */
export async function endsWithSeekTable(source: BundleSource): Promise<boolean> {
  if (source.size < FOOTER_BYTES) return false;
  const footer = await readPadded(source, source.size - FOOTER_BYTES, FOOTER_BYTES);
  return footer.readUInt32LE(5) === SEEKABLE_MAGIC;
}

/** A zstd frame's magic number as it lies in the file. */
const FRAME_MAGIC = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
/** One read's span: many frame starts checked per read, a few MiB read for a 20 GB bundle's ten thousand frames. */
const FRAME_WINDOW_BYTES = 16 * 1024;

/**
 * The first offset the seek table lists as a frame start that holds no zstd frame, or undefined
 * when every one does: pieces of two bundles of one name (parts of two splits, a cut copy
 * completed from another) are told apart here without the full pass. Reads the table and, per
 * frame start, a 16 KiB window unless the last one holds it. Rejects when the table does not read.
 */
export async function misplacedFrame(source: BundleSource): Promise<number | undefined> {
  const index = await readSeekIndex(source);
  // small frames (tar headers, small blobs) lie close together: one read serves many
  let window: { start: number; bytes: Buffer } = { start: 0, bytes: Buffer.alloc(0) };
  for (const f of index.frames) {
    const at = f.compressedOffset - window.start;
    if (at < 0 || at + FRAME_MAGIC.length > window.bytes.length)
      window = {
        start: f.compressedOffset,
        bytes: await source.read(f.compressedOffset, FRAME_WINDOW_BYTES),
      };
    const o = f.compressedOffset - window.start;
    if (!window.bytes.subarray(o, o + FRAME_MAGIC.length).equals(FRAME_MAGIC))
      return f.compressedOffset;
  }
  return undefined;
}

/** What to do about a damaged copy: NAME.bundle.sha256 sits beside every bundle create writes (sha256sum's format). */
function recopy(identity: string): string {
  const name = identity.replace(/ \(\d+ parts\)$/, '');
  // sha256sum -c looks for NAME.bundle itself, which a part set lacks
  const check =
    name === identity
      ? 'sha256sum -c, in its directory'
      : `cat ${name}.part-* | sha256sum gives the digest it holds`;
  return `copy it again from the original and check the copy against ${name}.sha256 (${check})`;
}

/**
 * Why bytes that zstd would not decode fail a read, in our words: zstd's own ("Unknown frame
 * descriptor", "Restored data doesn't match checksum") name no file and no way out, and stay the
 * cause. A file that does not start with a zstd frame is no bundle at all, as the agent says it.
 */
export async function undecodable(source: BundleSource, cause: unknown): Promise<FormatError> {
  if (/middle of compressed data frame/.test((cause as Error)?.message ?? '')) {
    return new FormatError(
      'CORRUPT',
      `${source.identity} ends inside a zstd frame: the copy is incomplete (was the media removed early?); ${recopy(source.identity)}`,
      { cause },
    );
  }
  const head = await source.read(0, FRAME_MAGIC.length).catch(() => undefined);
  if (head && !head.equals(FRAME_MAGIC))
    return new FormatError(
      'CORRUPT',
      `${source.identity} is not a bundle (it does not start with a zstd frame): give the path of a NAME.bundle file`,
      { cause },
    );
  return new FormatError(
    'CORRUPT',
    `${source.identity} is damaged: its compressed data does not decode (changed in copying, or on the media): ${recopy(source.identity)}`,
    { cause },
  );
}

/** bundle.json and its signature only, from the first frames: for `inspect`, no trust implied. */
export async function readHeader(
  source: BundleSource,
): Promise<{ manifest: BundleManifest; manifestBytes: Buffer; signature: Buffer }> {
  const path = source.identity;
  const extract = tar.extract();
  const src = source.stream(0, source.size);
  // Tolerant: what decodes before damage reaches tar whatever the chunking, so bytes after a
  // whole head (appended data, a cut) never decide the verdict by a race with tar's entries.
  const decompress = new BoundedDecompress({ tolerant: true });
  decompress.stopAfter(HEADER_BYTES_MAX);
  let failed: unknown;
  const piping = pipeline(src, decompress, extract as unknown as Writable).catch((err: unknown) => {
    failed = err;
  });
  let manifestBytes: Buffer | undefined;
  let signature: Buffer | undefined;
  try {
    for await (const entry of extract) {
      if (!manifestBytes) {
        if (entry.header.name !== BUNDLE_JSON)
          throw new FormatError(
            'BAD_ORDER',
            `${path} does not start with ${BUNDLE_JSON}: not a bundle`,
          );
        manifestBytes = await readAll(
          entry as unknown as Readable,
          MAX_BUNDLE_JSON_BYTES,
          BUNDLE_JSON,
        );
      } else {
        if (entry.header.name !== SIGNATURE)
          throw new FormatError('BAD_ORDER', `${BUNDLE_JSON} is not followed by ${SIGNATURE}`);
        signature = await readAll(entry as unknown as Readable, MAX_SIGNATURE_BYTES, SIGNATURE);
        break;
      }
    }
  } catch (err) {
    if (err instanceof FormatError) throw err;
    // a file that cannot be read (missing, media removed) says nothing about its contents
    if (isSystemError(err))
      throw new FormatError('IO_ERROR', `cannot read ${path}: ${err.message}`, { cause: err });
    // tar's complaint about a stream cut short by undecodable bytes: the bytes are the cause
    if (decompress.failed && !(decompress.failed instanceof FormatError))
      throw await undecodable(source, decompress.failed);
    const cause = decompress.failed ?? err;
    throw new FormatError('CORRUPT', `${path} is not a bundle: ${(cause as Error).message}`, {
      cause,
    });
  } finally {
    src.destroy();
    extract.destroy();
    await piping;
  }
  if (!manifestBytes || !signature) {
    if (failed instanceof FormatError) throw failed;
    if (decompress.failed instanceof FormatError) throw decompress.failed;
    if (decompress.failed) throw await undecodable(source, decompress.failed);
    if (decompress.overLimit) throw headerOverrun();
    throw new FormatError('TRUNCATED', `${path} ends before bundle.json and its signature`);
  }
  return { manifest: parseManifestBytes(manifestBytes), manifestBytes, signature };
}

import { createReadStream } from 'node:fs';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { basename } from 'node:path';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { KeyObject } from 'node:crypto';
import tar from 'tar-stream';
import { newSha256, sha256, writeFileAtomic } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { FrameWriter } from './frame-writer.js';
import { algorithmOf, fingerprint, signBytes } from './keys.js';
import {
  BUNDLE_JSON, ENTRY_MTIME, FORMAT_MEDIA_TYPE, INDEX_JSON, OCI_LAYOUT, OCI_LAYOUT_CONTENT, SCHEMA_VERSION, SIGNATURE,
  TAR_BLOCK, blobPath, paddedSize, READ_CHUNK } from './layout.js';
import { serializeManifest, validateManifest, type BundleBlob, type BundleImage, type BundleManifest, type BundleRelease } from './manifest.js';
import { encodeSeekTable, type FrameEntry } from './seekable.js';

export interface WriteBundleInput {
  release: BundleRelease;
  images: BundleImage[];
  /** The layout's index.json bytes. */
  index: Buffer;
  /** Every blob with the file that holds it (checked against its digest as it is packed). */
  blobs: (BundleBlob & { path: string })[];
  imageStoreBytes: number;
  key: KeyObject;
  output: string;
  createdAt: string;
  tool: { name: string; version: string };
  level?: number;
  /** Uncompressed bytes packed so far, of `total`. */
  onProgress?: (done: number, total: number) => void;
  /** Stops the write (Ctrl-C): the temp files go, nothing is renamed into place. */
  signal?: AbortSignal;
}

export interface WrittenBundle {
  manifest: BundleManifest;
  fileDigest: string;
  fileSize: number;
  frames: number;
}

interface PackEntry { name: string; size: number; open: () => NodeJS.ReadableStream | Buffer; digest?: string }

/** Frame cut points: each header and each data start, then the trailer. */
function cutPoints(entries: PackEntry[]): number[] {
  const cuts: number[] = [];
  let pos = 0;
  for (const e of entries) {
    cuts.push(pos);
    if (e.size > 0) cuts.push(pos + TAR_BLOCK);
    pos += TAR_BLOCK + paddedSize(e.size);
  }
  cuts.push(pos);
  return cuts;
}

function verifying(e: PackEntry): Transform {
  const hash = newSha256();
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      cb(null, chunk);
    },
    flush(cb) {
      const actual = 'sha256:' + hash.digest('hex');
      cb(actual === e.digest ? null : new FormatError('BLOB_DIGEST_MISMATCH', `${e.name} hashes to ${actual}, expected ${e.digest}: the cache entry is corrupt; delete it and run again`));
    },
  });
}

/** Packs entries as a tar stream (no trailer unless `finish`) cut into zstd frames handed to `sink`. */
async function packFrames(entries: PackEntry[], sink: (frame: Buffer) => Promise<unknown>, finish: boolean, level: number, onBytes?: (n: number) => void, signal?: AbortSignal): Promise<{ frames: FrameEntry[]; bytes: number }> {
  let bytes = 0;
  const framer = new FrameWriter(async (frame) => {
    await sink(frame);
    bytes += frame.length;
  }, cutPoints(entries), level);
  const pack = tar.pack();
  const counted = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      onBytes?.(chunk.length);
      cb(null, chunk);
    },
  });
  const piping = pipeline(pack as unknown as Readable, counted, framer);
  try {
    for (const e of entries) {
      signal?.throwIfAborted();
      const header = { name: e.name, size: e.size, mode: 0o644, mtime: ENTRY_MTIME, uid: 0, gid: 0, uname: '', gname: '', type: 'file' as const };
      const src = e.open();
      if (Buffer.isBuffer(src)) {
        await new Promise<void>((resolve, reject) => pack.entry(header, src, (err) => (err ? reject(err) : resolve())));
      } else {
        const sink = pack.entry(header) as unknown as Writable;
        const o = signal ? { signal } : {};
        if (e.digest) await pipeline(src as Readable, verifying(e), sink, o);
        else await pipeline(src as Readable, sink, o);
      }
    }
    if (finish) pack.finalize();
    else pack.push(null);
    await piping;
  } catch (err) {
    pack.destroy(err as Error);
    await piping.catch(() => undefined);
    throw err;
  }
  return { frames: framer.frames, bytes };
}

/** Image-store need: layers unpack to about three times their gzip size; uncompressed ones to their size. */
export function estimateImageStoreBytes(blobs: BundleBlob[]): number {
  let total = 0;
  for (const b of blobs) total += /gzip|zstd/.test(b.mediaType) ? b.size * 3 : b.size;
  return total;
}

/**
 * Writes a signed bundle atomically: the layout's frames go to a temp file first (their
 * compressed size is recorded in the signed bundle.json, which must come first), then the
 * final temp file gets bundle.json, its signature, the layout frames and the seek index, and
 * is renamed into place. A `NAME.sha256` file in `sha256sum -c` format is written beside it.
 */
export async function writeBundle(input: WriteBundleInput): Promise<WrittenBundle> {
  const level = input.level ?? 3;
  const tmpBody = `${input.output}.${process.pid}.body.tmp`;
  const tmpOut = `${input.output}.${process.pid}.tmp`;
  const blobs = [...input.blobs].sort((a, b) => (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : 0));
  // Checked before hours of packing, not after: readers refuse an image without its manifest.
  const packed = new Set(blobs.map((b) => b.digest));
  const unpacked = input.images.find((im) => !packed.has(im.digest));
  if (unpacked) throw new FormatError('INVALID_MANIFEST', `image ${unpacked.repository} (${unpacked.digest}) is not among the blobs to pack: a builder bug; report it`);
  const layoutEntries: PackEntry[] = [
    { name: OCI_LAYOUT, size: OCI_LAYOUT_CONTENT.length, open: () => Buffer.from(OCI_LAYOUT_CONTENT) },
    { name: INDEX_JSON, size: input.index.length, open: () => input.index },
    ...blobs.map((b) => ({ name: blobPath(b.digest), size: b.size, digest: b.digest, open: () => createReadStream(b.path, { highWaterMark: READ_CHUNK }) })),
  ];
  const layoutBytes = layoutEntries.reduce((s, e) => s + e.size, 0);
  let done = 0;
  const onBytes = (n: number) => {
    done += n;
    // n counts tar headers and padding too: without the cap, progress would end past 100 %
    input.onProgress?.(Math.min(done, layoutBytes), layoutBytes);
  };
  let body: FileHandle | undefined;
  let out: FileHandle | undefined;
  try {
    body = await open(tmpBody, 'w+');
    const bodyFile = body;
    const layout = await packFrames(layoutEntries, (f) => bodyFile.write(f), true, level, onBytes, input.signal);

    const manifest: BundleManifest = {
      schemaVersion: SCHEMA_VERSION,
      mediaType: FORMAT_MEDIA_TYPE,
      release: input.release,
      images: input.images,
      blobs: blobs.map(({ digest, size, mediaType }) => ({ digest, size, mediaType })),
      index: { digest: sha256(input.index), size: input.index.length },
      totals: { layoutBytes, archiveBytes: layout.bytes, imageStoreBytes: input.imageStoreBytes },
      creator: { tool: input.tool.name, version: input.tool.version, createdAt: input.createdAt },
      signer: { algorithm: algorithmOf(input.key), fingerprint: fingerprint(input.key) },
    };
    // Never sign what a reader refuses: the reader's own schema check, on what goes out.
    validateManifest(manifest);
    const manifestBytes = serializeManifest(manifest);
    const signature = signBytes(manifestBytes, input.key);

    out = await open(tmpOut, 'w');
    const fileHash = newSha256();
    let fileSize = 0;
    const append = async (buf: Buffer) => {
      fileHash.update(buf);
      fileSize += buf.length;
      await out!.write(buf);
    };
    const headEntries: PackEntry[] = [
      { name: BUNDLE_JSON, size: manifestBytes.length, open: () => manifestBytes },
      { name: SIGNATURE, size: signature.length, open: () => signature },
    ];
    const head = await packFrames(headEntries, append, false, level);
    const copyBuf = Buffer.allocUnsafe(1024 * 1024);
    for (let pos = 0; pos < layout.bytes; ) {
      const { bytesRead } = await body.read(copyBuf, 0, Math.min(copyBuf.length, layout.bytes - pos), pos);
      if (bytesRead === 0) throw new FormatError('IO_ERROR', `${tmpBody} ended early`);
      await append(copyBuf.subarray(0, bytesRead));
      pos += bytesRead;
    }
    await append(encodeSeekTable([...head.frames, ...layout.frames]));
    await out.sync();
    await out.close();
    out = undefined;
    await body.close();
    body = undefined;
    await rm(tmpBody, { force: true });
    await rename(tmpOut, input.output);
    const fileDigest = 'sha256:' + fileHash.digest('hex');
    await writeFileAtomic(`${input.output}.sha256`, `${fileDigest.slice(7)}  ${basename(input.output)}\n`);
    return { manifest, fileDigest, fileSize, frames: head.frames.length + layout.frames.length };
  } catch (err) {
    await out?.close().catch(() => undefined);
    await body?.close().catch(() => undefined);
    await rm(tmpBody, { force: true });
    await rm(tmpOut, { force: true });
    // callers report a code; a missing cache file or a full disk must not surface as a bare errno
    // stopped: the caller's reason, not whichever stream noticed first
    if (input.signal?.aborted) throw input.signal.reason;
    throw err instanceof FormatError ? err : new FormatError('IO_ERROR', `cannot write ${input.output}: ${(err as Error).message}`, { cause: err });
  }
}

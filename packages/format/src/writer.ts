import { rename, rm, type FileHandle } from 'node:fs/promises';
import { createExclusive, readBuffers, writeSynced } from '@offline-bundle/host';
import { basename } from 'node:path';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { KeyObject } from 'node:crypto';
import tar from 'tar-stream';
import { addPhase, newSha256, sha256, timedAsync, timedSync } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import { FrameWriter, frameWritten } from './frame-writer.js';
import { pooledFileStream } from './pooled-read.js';
import { algorithmOf, fingerprint, signBytes } from './keys.js';
import {
  BUNDLE_JSON,
  ENTRY_MTIME,
  FORMAT_VERSIONS,
  INDEX_JSON,
  OCI_LAYOUT,
  OCI_LAYOUT_CONTENT,
  SIGNATURE,
  TAR_BLOCK,
  FRAME_BYTES,
  MAX_BUNDLE_JSON_BYTES,
  blobPath,
  defaultVersionFor,
  featureNeedsVersion,
  paddedSize,
  READ_CHUNK,
  unwritableVersion,
  type VersionedFeature,
} from './layout.js';
import {
  serializeManifest,
  validateManifest,
  type BundleAgent,
  type BundleBase,
  type BundleBlob,
  type BundleImage,
  type BundleManifest,
  type BundleRelease,
} from './manifest.js';
import { encodeSeekTable, type FrameEntry } from './seekable.js';
import { rawFrameSize } from './raw-frame.js';
import { FileHasher } from './file-hasher.js';
import { hasPieces, listChars, pieceCount, type BundlePieces } from './pieces.js';
import { PieceHashThread } from './piece-hash-thread.js';

export interface WriteBundleInput {
  release: BundleRelease;
  images: BundleImage[];
  /** Helm charts (OCI artifacts) the node serves but never pulls: bundle.json's charts. */
  charts?: BundleImage[];
  /** The layout's index.json bytes. */
  index: Buffer;
  /**
   * Every blob with the file that holds it, checked against its digest as it is packed unless
   * `verified` (the caller hashed that very file in this run: a cold build would hash it twice).
   */
  blobs: (BundleBlob &
    (
      | { path: string; verified?: boolean }
      | { /** May be called more than once: the same arrival. */ ready: () => Promise<ReadyBlob> }
    ))[];
  /**
   * A number, or a function called once every blob was packed (a one-pass build measures the
   * layers while it packs them): bundle.json then goes into the head reserved for it.
   */
  imageStoreBytes: number | (() => Promise<number>);
  key: KeyObject;
  output: string;
  createdAt: string;
  tool: { name: string; version: string };
  /** The bundle-agent image among `images`, for the agent's self-upgrade. */
  agent?: BundleAgent;
  /** bundle.json's schemaVersion, one of WRITABLE_VERSIONS; by default the oldest that carries what is asked (defaultVersionFor). */
  schemaVersion?: number;
  /**
   * `digest` (default): the blobs sorted by digest, as every version reads them. `listed`: in
   * the order `blobs` gives (pull order), which version 3 and later allow.
   */
  blobOrder?: 'digest' | 'listed';
  /**
   * Bytes per piece of the per-piece digests bundle.json carries (`pieces`, docs/FORMAT.md
   * "Pieces"; bundle create passes PIECE_BYTES): each blob's list as its ReadyBlob gives it, else
   * hashed from its file on a thread once it is there. None without it.
   */
  pieceSize?: number;
  /**
   * A delta: bundle.json still lists every blob of `blobs`, names `ref` as its base, and marks
   * the blobs in `digests` fromBase; those are not packed (the node fills them from its base).
   */
  base?: { ref: BundleBase; digests: ReadonlySet<string> };
  level?: number;
  /** Uncompressed bytes packed so far, of `total`. */
  onProgress?: (done: number, total: number) => void;
  /** Every byte is written; the file is being synced and renamed (slow on USB sticks). */
  onFinishing?: () => void;
  /** Stops the write (Ctrl-C): the temp file goes, nothing is renamed into place. */
  signal?: AbortSignal;
}

/**
 * A blob's file once it is there, and whether this run hashed it already (no second hash when
 * packed); `pieces`: its list for the input's pieceSize when the caller can give it (worked out
 * as it fetched the blob; asked only of blobs the head lists), else the writer hashes the file.
 */
export interface ReadyBlob {
  path: string;
  verified: boolean;
  pieces?: (() => Promise<string | undefined>) | undefined;
}

export interface WrittenBundle {
  manifest: BundleManifest;
  fileDigest: string;
  fileSize: number;
  frames: number;
}

interface PackEntry {
  name: string;
  size: number;
  open: () => Buffer | Promise<{ stream: Readable; check: boolean }>;
  digest?: string;
}

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

/** The lists bundle.json's `pieces` carries, each known once its blob is there; the thread hashes the files of those the caller gave none for. */
interface PieceWork {
  lists: Map<string, Promise<string>>;
  thread?: PieceHashThread;
}

function verifying(e: PackEntry): Transform {
  const hash = newSha256();
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      timedSync('writing: re-check of cached blobs', () => hash.update(chunk), chunk.length);
      cb(null, chunk);
    },
    flush(cb) {
      const actual = 'sha256:' + hash.digest('hex');
      cb(
        actual === e.digest
          ? null
          : new FormatError(
              'BLOB_DIGEST_MISMATCH',
              `${e.name} hashes to ${actual}, expected ${e.digest}: the cache entry is corrupt; delete it and run again`,
            ),
      );
    },
  });
}

/** Packs entries as a tar stream (no trailer unless `finish`) cut into zstd frames handed to `sink`. */
async function packFrames(
  entries: PackEntry[],
  sink: (frame: Buffer) => Promise<unknown>,
  finish: boolean,
  level: number,
  onBytes?: (n: number) => void,
  signal?: AbortSignal,
  raw = false,
): Promise<{ frames: FrameEntry[]; bytes: number }> {
  let bytes = 0;
  const framer = new FrameWriter(
    async (frame) => {
      await sink(frame);
      bytes += frame.length;
    },
    cutPoints(entries),
    level,
    raw,
    (chunk) => blobReads.give(chunk),
  );
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
      const header = {
        name: e.name,
        size: e.size,
        mode: 0o644,
        mtime: ENTRY_MTIME,
        uid: 0,
        gid: 0,
        uname: '',
        gname: '',
        type: 'file' as const,
      };
      const src = e.open();
      if (Buffer.isBuffer(src)) {
        await new Promise<void>((resolve, reject) =>
          pack.entry(header, src, (err) => (err ? reject(err) : resolve())),
        );
      } else {
        // a blob still being fetched: the frames so far are written meanwhile
        const { stream, check } = await src;
        signal?.throwIfAborted();
        const sink = pack.entry(header) as unknown as Writable;
        const o = signal ? { signal } : {};
        if (check) await pipeline(stream, verifying(e), sink, o);
        else await pipeline(stream, sink, o);
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

/**
 * Image-store need: what each compressed layer unpacks to, as measured while it was fetched
 * (`unpackedSize`); a layer without a measurement counts three times its compressed size. Other
 * blobs (uncompressed layers, configs, manifests) count their size.
 */
export function estimateImageStoreBytes(
  blobs: (BundleBlob & { unpackedSize?: number | undefined })[],
): number {
  let total = 0;
  for (const b of blobs)
    total += /gzip|zstd/.test(b.mediaType) ? (b.unpackedSize ?? b.size * 3) : b.size;
  return total;
}

/**
 * The size of a bundle packing blobs of these sizes (plus bundle.json, its signature,
 * oci-layout and index.json among them), before it is written: a header frame per entry, the
 * data as stored zstd blocks (layers are compressed already and pass through; anything else only
 * shrinks) and the seek table. An upper bound, within a fraction of a percent for compressed layers.
 */
export function estimateBundleBytes(sizes: number[]): number {
  // a frame header, a 3-byte header per 128 KiB block, the 4-byte content checksum
  const frameOverhead = (n: number) => 18 + 3 * Math.ceil(n / (128 * 1024));
  let total = 0;
  let frames = 0;
  for (const size of sizes) {
    total += 64; // a tar header, mostly zeros and octal digits, compresses to some 40 bytes
    frames++;
    for (let rest = paddedSize(size); rest > 0; rest -= FRAME_BYTES) {
      const part = Math.min(rest, FRAME_BYTES);
      total += part + frameOverhead(part);
      frames++;
    }
  }
  total += 64; // the two zero blocks that end the archive
  frames++;
  return total + 8 * frames + 17;
}

/**
 * Gathers small frames (a tar header compresses to some 30 bytes) into large writes, and keeps
 * up to WRITE_AHEAD bytes of writes in flight (positional, so their order does not matter):
 * reading, hashing and compressing the next frames go on while the disk takes these.
 */
class Appender {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private readonly inflight = new Set<Promise<void>>();
  /** Where each write in flight starts: below the lowest, every byte from `start` is written. */
  private readonly inflightStarts = new Set<number>();
  private inflightBytes = 0;
  /** Told how far the file is written without a gap from the layout's start, as writes complete. */
  onWritten: ((contiguous: number) => void) | undefined;
  private failure: { err: unknown } | undefined;
  /** Where the next byte goes: past the head reserved for bundle.json and its signature. */
  private written: number;

  constructor(
    private readonly file: FileHandle,
    start: number,
    private readonly batch = READ_CHUNK,
  ) {
    this.written = start;
  }

  /** The file's size once everything appended is written. */
  get size(): number {
    return this.written + this.pendingBytes;
  }

  async append(buf: Buffer): Promise<void> {
    if (buf.length >= this.batch / 4) {
      // a data frame is large already: copying it into a batch only makes garbage
      await this.flushPending();
      await this.write(buf);
      return;
    }
    this.pending.push(buf);
    this.pendingBytes += buf.length;
    if (this.pendingBytes >= this.batch) await this.flushPending();
  }

  private async flushPending(): Promise<void> {
    if (this.pendingBytes === 0) return;
    const parts = this.pending;
    const data = parts.length === 1 ? parts[0]! : Buffer.concat(parts, this.pendingBytes);
    // copied: their buffers may take the next frames
    if (parts.length > 1) for (const p of parts) frameWritten(p);
    this.pending = [];
    this.pendingBytes = 0;
    await this.write(data);
  }

  /** Starts writing `data` at its place; waits only while too much is in flight. */
  private async write(data: Buffer): Promise<void> {
    this.rethrow();
    const position = this.written;
    this.written += data.length;
    this.inflightBytes += data.length;
    this.inflightStarts.add(position);
    const p: Promise<void> = this.writeAll(data, position)
      .catch((err: unknown) => {
        this.failure ??= { err };
      })
      .finally(() => {
        // a pooled frame's buffer (the write is over, whatever its outcome) takes the next frame
        frameWritten(data);
        this.inflight.delete(p);
        this.inflightStarts.delete(position);
        this.inflightBytes -= data.length;
        if (!this.failure)
          this.onWritten?.(
            this.inflightStarts.size ? Math.min(...this.inflightStarts) : this.written,
          );
      });
    this.inflight.add(p);
    if (this.inflightBytes > WRITE_AHEAD)
      await timedAsync('writing: waits on the disk', () => this.drainTo(WRITE_AHEAD));
    this.rethrow();
  }

  private async drainTo(bytes: number): Promise<void> {
    while (this.inflightBytes > bytes && !this.failure) await Promise.race(this.inflight);
  }

  private rethrow(): void {
    if (this.failure) throw this.failure.err;
  }

  /** A positional write may be short (a full disk, a signal): the rest goes after it. */
  async writeAll(data: Buffer, position: number): Promise<void> {
    let off = 0;
    while (off < data.length) {
      const { bytesWritten } = await this.file.write(data, off, data.length - off, position + off);
      if (bytesWritten === 0)
        throw Object.assign(new Error('write returned 0 bytes'), { code: 'EIO' });
      off += bytesWritten;
    }
  }

  /** Everything appended is written (or the first write error is thrown). */
  async flush(): Promise<void> {
    await this.flushPending();
    await Promise.all(this.inflight);
    this.rethrow();
  }

  /** Waits for the writes in flight, whatever their outcome (before the file is closed and removed). */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.inflight]);
  }
}

/** Writes in flight at once: four frames' worth. */
const WRITE_AHEAD = 4 * FRAME_BYTES;

/** The one-line message for a write that failed: a full disk names its remedy. */
export function writeFailure(path: string, err: unknown): FormatError {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') {
    return new FormatError(
      'NO_SPACE',
      `no space left on the filesystem of ${path}: free some space there or write to a larger disk (-o)`,
      { cause: err },
    );
  }
  return new FormatError(
    'IO_ERROR',
    `cannot write ${path}: ${(err as Error)?.message ?? String(err)}`,
    { cause: err },
  );
}

/** A small file written and synced (not renamed): the caller renames it into place. */
/** The largest imageStoreBytes bundle.json can carry: its head is reserved for this many digits. */
const WIDEST_TOTAL = Number.MAX_SAFE_INTEGER;

/** bundle.json padded with spaces (JSON ignores them; the signature covers them) to `length` bytes. */
function paddedManifest(m: BundleManifest, length: number): Buffer {
  const text = serializeManifest(m);
  if (text.length > length)
    throw new FormatError(
      'INVALID_MANIFEST',
      `bundle.json grew past the ${length} bytes reserved for it: a writer bug; report it`,
    );
  // spaces before the final newline: the file still ends with one
  return Buffer.concat([
    text.subarray(0, text.length - 1),
    Buffer.alloc(length - text.length, 0x20),
    text.subarray(text.length - 1),
  ]);
}

/** The head's entries: bundle.json then its signature. */
function headEntries(manifestBytes: Buffer, signature: Buffer): PackEntry[] {
  return [
    { name: BUNDLE_JSON, size: manifestBytes.length, open: () => manifestBytes },
    { name: SIGNATURE, size: signature.length, open: () => signature },
  ];
}

/** The head's frames, raw blocks at cut points the same as packFrames makes: their sizes depend on the lengths alone. */
function headFrameSizes(manifestLength: number, signatureLength: number): FrameEntry[] {
  const cuts = cutPoints(headEntries(Buffer.alloc(manifestLength), Buffer.alloc(signatureLength)));
  const frames: FrameEntry[] = [];
  for (let i = 0; i + 1 < cuts.length; i++) {
    for (let at = cuts[i]!; at < cuts[i + 1]!; at += FRAME_BYTES) {
      const n = Math.min(FRAME_BYTES, cuts[i + 1]! - at);
      frames.push({ compressedSize: rawFrameSize(n), decompressedSize: n });
    }
  }
  return frames;
}

/** `p`, or the signal's reason as soon as it aborts. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** What writeBundle settles before it writes a byte: the entries, the manifest and the head's reserved size. */
interface BundlePlan {
  level: number;
  tmpOut: string;
  sidecarTmp: string;
  blobs: WriteBundleInput['blobs'];
  layoutEntries: PackEntry[];
  /** Every listed entry's bytes, a delta's base blobs too: what staging writes. */
  layoutBytes: number;
  /** What is packed: layoutBytes less a delta's base blobs. */
  packedBytes: number;
  manifestWith: (imageStoreBytes: number, pieces: BundlePieces | undefined) => BundleManifest;
  /** The blobs bundle.json lists in `pieces`, by digest, in their order: none when no pieces are asked. */
  pieceBlobs: { size: number; digests: string[] } | undefined;
  manifestLength: number;
  signatureLength: number;
  headFrames: FrameEntry[];
  headBytes: number;
}

/** What a write holds open, for the clean-up when it fails. */
interface WriteState {
  out?: FileHandle | undefined;
  file?: Appender;
  hasher?: FileHasher;
  headWrite?: Promise<BundleManifest>;
  pieces?: PieceWork;
  failed: boolean;
}

function readyBlob(b: WriteBundleInput['blobs'][number]): Promise<ReadyBlob> {
  return 'ready' in b
    ? b.ready()
    : Promise.resolve({ path: b.path, verified: b.verified === true });
}

/**
 * Blob files are read into these, each given back by the frame writer once it has compressed
 * the chunk's last byte: nothing else on the way (the check, tar-stream) keeps a chunk.
 */
const blobReads = readBuffers(READ_CHUNK);

/** The layout's entries: oci-layout, index.json, then every blob in the plan's order. */
function layoutEntriesOf(index: Buffer, blobs: WriteBundleInput['blobs']): PackEntry[] {
  return [
    {
      name: OCI_LAYOUT,
      size: OCI_LAYOUT_CONTENT.length,
      open: () => Buffer.from(OCI_LAYOUT_CONTENT),
    },
    { name: INDEX_JSON, size: index.length, open: () => index },
    ...blobs.map((b) => ({
      name: blobPath(b.digest),
      size: b.size,
      digest: b.digest,
      open: async () => {
        const r = await readyBlob(b);
        return {
          stream: pooledFileStream(r.path, blobReads),
          check: !r.verified,
        };
      },
    })),
  ];
}

/** The version to write, refused before any work when it cannot be, or cannot carry what is asked. */
function versionToWrite(input: WriteBundleInput): number {
  const features: VersionedFeature[] = [
    ...(input.blobOrder === 'listed' ? ['blobs in pull order' as const] : []),
    ...(input.base ? ['a delta against a base bundle' as const] : []),
  ];
  const version = input.schemaVersion ?? defaultVersionFor(features);
  const problem =
    unwritableVersion(version) ??
    features.map((f) => featureNeedsVersion(f, version)).find((p) => p !== undefined);
  if (problem) throw new FormatError('UNSUPPORTED_VERSION', problem);
  return version;
}

/** bundle.json's `pieces`, each listed blob's list from `listOf`. */
function piecesOf(
  p: { size: number; digests: string[] },
  listOf: (digest: string) => string,
): BundlePieces {
  return { size: p.size, blobs: Object.fromEntries(p.digests.map((d) => [d, listOf(d)])) };
}

/**
 * Every reader refuses a bundle.json past MAX_BUNDLE_JSON_BYTES: refused before hours of packing.
 * Checked first with the lists' characters counted (so a huge build never allocates them), then
 * on the head as serialized. `pieceChars`: what the lists take; undefined without pieces.
 */
function refuseLargeHead(total: number, pieceChars: number | undefined): void {
  if (total <= MAX_BUNDLE_JSON_BYTES) return;
  const mib = (n: number) => `${(n / (1 << 20)).toFixed(1)} MiB`;
  const fix =
    pieceChars === undefined
      ? 'split the images over several bundles'
      : `build with --pieces none (its per-piece digests take ${mib(pieceChars)}; agents then check each blob only whole) or split the images over several bundles`;
  throw new FormatError(
    'OVERSIZED_ENTRY',
    `bundle.json would be ${mib(total)}, past the ${mib(MAX_BUNDLE_JSON_BYTES)} every reader accepts: ${fix}`,
  );
}

/** The blobs in the order they are packed; every image's manifest among them (readers refuse one without). */
function blobsToPack(input: WriteBundleInput): WriteBundleInput['blobs'] {
  const blobs =
    input.blobOrder === 'listed'
      ? [...input.blobs]
      : [...input.blobs].sort((a, b) => (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : 0));
  // Checked before hours of packing, not after: readers refuse an image without its manifest.
  const packed = new Set(blobs.map((b) => b.digest));
  const unpacked = [...input.images, ...(input.charts ?? [])].find((im) => !packed.has(im.digest));
  if (unpacked)
    throw new FormatError(
      'INVALID_MANIFEST',
      `image ${unpacked.repository} (${unpacked.digest}) is not among the blobs to pack: a builder bug; report it`,
    );
  return blobs;
}

/** bundle.json for a figure and piece lists, everything else settled before packing. */
function manifestMaker(
  input: WriteBundleInput,
  version: number,
  blobs: WriteBundleInput['blobs'],
  layoutBytes: number,
): BundlePlan['manifestWith'] {
  const fromBase = (b: { digest: string }) => input.base?.digests.has(b.digest) === true;
  return (imageStoreBytes, pieces) => ({
    schemaVersion: version,
    mediaType: FORMAT_VERSIONS[version]!.mediaType,
    release: input.release,
    images: input.images,
    ...(input.charts?.length ? { charts: input.charts } : {}),
    blobs: blobs.map(({ digest, size, mediaType }) => ({
      digest,
      size,
      mediaType,
      ...(fromBase({ digest }) ? { fromBase: true as const } : {}),
    })),
    index: { digest: sha256(input.index), size: input.index.length },
    totals: { layoutBytes, imageStoreBytes },
    creator: { tool: input.tool.name, version: input.tool.version, createdAt: input.createdAt },
    ...(input.agent ? { agent: input.agent } : {}),
    ...(input.base ? { base: input.base.ref } : {}),
    ...(pieces ? { pieces } : {}),
    signer: { algorithm: algorithmOf(input.key), fingerprint: fingerprint(input.key) },
  });
}

/**
 * The head's length: bundle.json with the widest figure and zeros for every piece list (each
 * list's length follows from its blob's size alone), held to what readers accept and to the
 * reader's own schema check. Never sign what a reader refuses.
 */
function widestHead(
  input: WriteBundleInput,
  blobs: WriteBundleInput['blobs'],
  manifestWith: BundlePlan['manifestWith'],
  pieceBlobs: BundlePlan['pieceBlobs'],
): { manifestLength: number; signatureLength: number } {
  const sizes = new Map(blobs.map((b) => [b.digest, b.size]));
  const pieceChars =
    pieceBlobs &&
    pieceBlobs.digests.reduce(
      (n, d) => n + listChars(pieceCount(sizes.get(d)!, pieceBlobs.size)),
      0,
    );
  refuseLargeHead(
    serializeManifest(manifestWith(WIDEST_TOTAL, undefined)).length + (pieceChars ?? 0),
    pieceChars,
  );
  const widest = manifestWith(
    WIDEST_TOTAL,
    pieceBlobs &&
      piecesOf(pieceBlobs, (d) =>
        Buffer.alloc(pieceCount(sizes.get(d)!, pieceBlobs.size) * 32).toString('base64'),
      ),
  );
  validateManifest(widest);
  const manifestLength = serializeManifest(widest).length;
  refuseLargeHead(manifestLength, pieceChars);
  // every supported algorithm's signature fits one tar block whatever it signs (Ed25519: 64
  // bytes, ECDSA DER: at most 139), so this one's padded length is the final one's
  const signatureLength = timedSync('signing', () =>
    signBytes(serializeManifest(widest), input.key),
  ).length;
  return { manifestLength, signatureLength };
}

function planBundle(input: WriteBundleInput): BundlePlan {
  const version = versionToWrite(input);
  const blobs = blobsToPack(input);
  const fromBase = (b: { digest: string }) => input.base?.digests.has(b.digest) === true;
  const layoutEntries = layoutEntriesOf(
    input.index,
    blobs.filter((b) => !fromBase(b)),
  );
  const packedBytes = layoutEntries.reduce((s, e) => s + e.size, 0);
  const layoutBytes = packedBytes + blobs.filter(fromBase).reduce((s, b) => s + b.size, 0);
  const manifestWith = manifestMaker(input, version, blobs, layoutBytes);
  const pieceBlobs =
    input.pieceSize === undefined
      ? undefined
      : {
          size: input.pieceSize,
          digests: blobs
            .filter((b) => !fromBase(b) && hasPieces(b, input.pieceSize!))
            .map((b) => b.digest),
        };
  const { manifestLength, signatureLength } = widestHead(input, blobs, manifestWith, pieceBlobs);
  const headFrames = headFrameSizes(manifestLength, signatureLength);
  return {
    level: input.level ?? 3,
    tmpOut: `${input.output}.${process.pid}.tmp`,
    sidecarTmp: `${input.output}.sha256.${process.pid}.tmp`,
    blobs,
    layoutEntries,
    layoutBytes,
    packedBytes,
    manifestWith,
    pieceBlobs,
    manifestLength,
    signatureLength,
    headFrames,
    headBytes: headFrames.reduce((s, f) => s + f.compressedSize, 0),
  };
}

/**
 * The head, once every blob has arrived (the figure is known then, while the last ones are
 * still being packed); from then on the file is hashed as it is written.
 */
async function writeHead(
  input: WriteBundleInput,
  plan: BundlePlan,
  appender: Appender,
  state: WriteState,
): Promise<BundleManifest> {
  await Promise.all(plan.blobs.map(readyBlob));
  const imageStoreBytes =
    typeof input.imageStoreBytes === 'number'
      ? input.imageStoreBytes
      : await input.imageStoreBytes();
  const pieces = await listedPieces(plan, state);
  input.signal?.throwIfAborted();
  const manifest = plan.manifestWith(imageStoreBytes, pieces);
  validateManifest(manifest);
  const manifestBytes = paddedManifest(manifest, plan.manifestLength);
  const signature = timedSync('signing', () => signBytes(manifestBytes, input.key));
  if (paddedSize(signature.length) !== paddedSize(plan.signatureLength)) {
    throw new FormatError(
      'INVALID_MANIFEST',
      `the signature is ${signature.length} bytes, past the ${paddedSize(plan.signatureLength)} reserved for it: a writer bug; report it`,
    );
  }
  const head: Buffer[] = [];
  const packedHead = await packFrames(
    headEntries(manifestBytes, signature),
    async (f) => {
      head.push(f);
    },
    false,
    plan.level,
    undefined,
    undefined,
    true,
  );
  const headBuf = Buffer.concat(head);
  if (headBuf.length !== plan.headBytes || packedHead.frames.length !== plan.headFrames.length) {
    throw new FormatError(
      'INVALID_MANIFEST',
      `the head came to ${headBuf.length} bytes, not the ${plan.headBytes} reserved: a writer bug; report it`,
    );
  }
  await appender.writeAll(headBuf, 0);
  // the write failed meanwhile and its file is going: no thread to hash it
  if (state.failed) throw new Error('stopped');
  const hasher = new FileHasher(plan.tmpOut);
  state.hasher = hasher;
  appender.onWritten = (n) => hasher.upTo(n);
  return manifest;
}

/**
 * Each listed blob's list as soon as the blob is there: the caller's, or its file hashed on a
 * thread started for those alone. Known when every blob is, so the head goes out as early as
 * without pieces (the whole-file hash runs beside the packing from then on).
 */
function pieceLists(plan: BundlePlan, p: { size: number; digests: string[] }): PieceWork {
  const work: PieceWork = { lists: new Map() };
  const blobs = new Map(plan.blobs.map((b) => [b.digest, b]));
  for (const d of p.digests) {
    const list = readyBlob(blobs.get(d)!).then(
      async (r) =>
        (await r.pieces?.()) ?? (work.thread ??= new PieceHashThread()).hashFile(r.path, p.size),
    );
    // a list lost with its blob fails the head write, which a failed write ignores
    list.catch(() => undefined);
    work.lists.set(d, list);
  }
  return work;
}

/** bundle.json's `pieces`, once every listed blob's list is known; the thread (if any) is done then. */
async function listedPieces(
  plan: BundlePlan,
  state: WriteState,
): Promise<BundlePieces | undefined> {
  if (!plan.pieceBlobs) return undefined;
  const lists = new Map<string, string>();
  for (const [digest, list] of state.pieces?.lists ?? []) lists.set(digest, await list);
  await state.pieces?.thread?.stop();
  return piecesOf(plan.pieceBlobs, (d) => lists.get(d)!);
}

/** Progress in layout bytes; the packed stream counts tar headers and padding too. */
function progressOf(input: WriteBundleInput, layoutBytes: number): (n: number) => void {
  let done = 0;
  return (n) => {
    done += n;
    // without the cap, progress would end past 100 %
    input.onProgress?.(Math.min(done, layoutBytes), layoutBytes);
  };
}

/** Hashes, syncs and renames the written file, its sidecar beside it; returns its digest. */
async function finishFile(
  input: WriteBundleInput,
  plan: BundlePlan,
  state: WriteState,
  fileSize: number,
): Promise<string> {
  // Ctrl-C while finishing (the hash catching up, a slow stick's sync) still leaves the output
  // untouched: checked before each step, and the wait for the hash gives way to it
  const stopped = () => input.signal?.throwIfAborted();
  stopped();
  const fileDigest = await timedAsync('whole-file hash: wait after packing', () =>
    untilAborted(state.hasher!.digest(fileSize), input.signal),
  );
  stopped();
  const synced = process.hrtime.bigint();
  await state.out!.sync();
  await state.out!.close();
  state.out = undefined;
  stopped();
  // the sidecar is on disk before the bundle moves into place and follows it at once: a
  // failure to write it leaves no new bundle behind, and an old sidecar is replaced only with its bundle
  await writeSynced(plan.sidecarTmp, digestLine(fileDigest, basename(input.output)));
  stopped();
  await rename(plan.tmpOut, input.output);
  await rename(plan.sidecarTmp, `${input.output}.sha256`);
  addPhase('finishing: fsync, sidecar, rename', Number(process.hrtime.bigint() - synced) / 1e9);
  return fileDigest;
}

/** NAME.bundle.sha256's one line, in `sha256sum -c` format. */
export function digestLine(digest: string, fileName: string): string {
  return `${digest.replace(/^sha256:/, '')}  ${fileName}\n`;
}

/** Removes what a failed write left and returns the error to throw. */
async function abandon(
  input: WriteBundleInput,
  plan: BundlePlan,
  state: WriteState,
  err: unknown,
): Promise<unknown> {
  state.failed = true;
  await state.file?.settle();
  // not awaited: it may be waiting for blobs that will never come
  state.headWrite?.catch(() => undefined);
  await state.hasher?.stop();
  await state.pieces?.thread?.stop();
  await state.out?.close().catch(() => undefined);
  await rm(plan.tmpOut, { force: true });
  await rm(plan.sidecarTmp, { force: true });
  // stopped: the caller's reason, not whichever stream noticed first
  if (input.signal?.aborted) return input.signal.reason;
  // callers report a code; a missing cache file or a full disk must not surface as a bundle error
  return err instanceof FormatError ? err : writeFailure(input.output, err);
}

/**
 * Writes a signed bundle in one pass, straight into a temp file beside `output` that is renamed
 * into place once synced. The head (bundle.json and its signature, first in the archive) is
 * reserved and written last, as raw zstd blocks whose size depends on the length alone, with
 * bundle.json padded to the length it has with the widest imageStoreBytes: so the layout's
 * frames can be packed while its blobs are still arriving, before that figure is known. Then
 * the seek index. A `NAME.sha256` file in `sha256sum -c` format goes beside it.
 */
export async function writeBundle(input: WriteBundleInput): Promise<WrittenBundle> {
  const plan = planBundle(input);
  const state: WriteState = { failed: false };
  try {
    // read too: the file's digest is taken by reading it back; created anew, never through a link at the temp name
    state.out = await createExclusive(plan.tmpOut, 0o666, { read: true });
    const file = new Appender(state.out, plan.headBytes);
    state.file = file;
    if (plan.pieceBlobs) state.pieces = pieceLists(plan, plan.pieceBlobs);
    state.headWrite = writeHead(input, plan, file, state);
    state.headWrite.catch(() => undefined);
    const layout = await packFrames(
      plan.layoutEntries,
      (f) => file.append(f),
      true,
      plan.level,
      progressOf(input, plan.packedBytes),
      input.signal,
    );
    await file.append(encodeSeekTable([...plan.headFrames, ...layout.frames]));
    const manifest = await state.headWrite;
    await file.flush();
    input.onFinishing?.();
    const fileSize = file.size;
    const fileDigest = await finishFile(input, plan, state, fileSize);
    return {
      manifest,
      fileDigest,
      fileSize,
      frames: plan.headFrames.length + layout.frames.length,
    };
  } catch (err) {
    throw await abandon(input, plan, state, err);
  }
}

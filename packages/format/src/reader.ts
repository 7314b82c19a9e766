import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { newSha256 } from '@offline-bundle/oci';
import { assertRegularFile } from '@offline-bundle/host';
import { FormatError } from './errors.js';
import {
  BUNDLE_JSON, MAX_BUNDLE_JSON_BYTES, MAX_INDEX_JSON_BYTES, MAX_SIGNATURE_BYTES, SIGNATURE, tarStreamBytes, READ_CHUNK,
  FRAME_BYTES } from './layout.js';
import { headerMessage } from './entry-header.js';
import { FrameInspector, type WalkedFrame } from './frame-inspector.js';
import { ListedEntries } from './listing.js';
import { parseManifestBytes, type BundleManifest } from './manifest.js';
import { decodeSeekTable, FOOTER_BYTES, SEEKABLE_MAGIC, seekTableLength, type SeekIndex } from './seekable.js';
import { TarWalker, type RawHeaderFacts } from './tar-walker.js';
import { assertTrust, checkSignature, checkSigner, type Trust } from './trust.js';
import { BoundedDecompress } from './zstd-bounded.js';
import type { TrustedKey } from './keys.js';

export interface LayoutEntry {
  /** Path inside the layout: "oci-layout", "index.json" or "blobs/sha256/<hex>". */
  path: string;
  digest: string;
  size: number;
}

export interface VerifyOptions {
  trust: Trust;
  /**
   * Receives each layout entry's bytes as they stream by; the entry is only known good
   * when the whole pass resolves, so a consumer writes to a staging place it can drop.
   * Without it, the bytes are hashed and discarded.
   */
  onEntry?: (entry: LayoutEntry, data: Readable) => Promise<void>;
  /**
   * Called once an entry (after onEntry resolved) hashes to the digest bundle.json lists. Under
   * a signature that is the entry known good; under digest-only trust nothing is before the
   * pass resolves.
   */
  onVerified?: (entry: LayoutEntry) => void;
  /** Called after bundle.json is trusted, before any layout entry. */
  onManifest?: (manifest: BundleManifest, manifestBytes: Buffer, signature: Buffer) => Promise<void> | void;
  /** Compressed bytes read so far, of the file's size. */
  onProgress?: (done: number, total: number) => void;
  /** Stops the pass (the agent shutting down); it then rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Also hash each zstd frame's compressed bytes as they pass, for reading the same file
   * again later through the seek index (serving from the media) with every frame held to
   * what this pass verified, instead of hashing each blob a second time.
   */
  frameDigests?: boolean;
}

export interface VerifiedBundle {
  manifest: BundleManifest;
  manifestBytes: Buffer;
  signature: Buffer;
  /** The trusted key that verified the signature (undefined under digest-only trust). */
  signer?: TrustedKey;
  fileDigest: string;
  fileSize: number;
  /** Proven to describe the file's frames exactly (offsets and sizes) as this pass read them. */
  seekIndex: SeekIndex;
  /** sha256 of each frame's compressed bytes, by seek-index position (with `frameDigests`). */
  frameDigests?: Buffer[];
}

async function readAll(data: Readable, limit: number, name: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of data) {
    n += (c as Buffer).length;
    if (n > limit) throw new FormatError('OVERSIZED_ENTRY', `${name} is larger than ${limit} bytes`);
    parts.push(c as Buffer);
  }
  return Buffer.concat(parts);
}

/**
 * A FIFO or a device as the bundle would block the first read forever (a FIFO with no
 * writer) or never end: refused before any read. A path that cannot be opened at all is
 * IO_ERROR too, with the system's reason.
 */
async function openableRegularFile(path: string): Promise<void> {
  const st = await assertRegularFile(path).catch((cause: unknown) => {
    throw new FormatError('IO_ERROR', `cannot read ${path}: ${(cause as Error).message}`, { cause });
  });
  if (!st) await stat(path).catch((cause: unknown) => { throw new FormatError('IO_ERROR', `cannot read ${path}: ${(cause as Error).message}`, { cause }); });
}

/** Reads and checks the trailing seek index against the file's size. */
export async function readSeekIndex(path: string): Promise<SeekIndex> {
  await openableRegularFile(path);
  const fh = await open(path, 'r').catch((cause: unknown) => {
    throw new FormatError('IO_ERROR', `cannot read ${path}: ${(cause as Error).message}`, { cause });
  });
  try {
    const { size } = await fh.stat();
    if (size < FOOTER_BYTES) throw new FormatError('TRUNCATED', `${path} is ${size} bytes: too short to be a bundle`);
    const footer = Buffer.alloc(FOOTER_BYTES);
    await fh.read(footer, 0, FOOTER_BYTES, size - FOOTER_BYTES);
    const { tableBytes } = seekTableLength(footer);
    if (tableBytes > size) throw new FormatError('BAD_SEEK_TABLE', 'the seek index claims more bytes than the file has');
    const table = Buffer.alloc(tableBytes);
    await fh.read(table, 0, tableBytes, size - tableBytes);
    return decodeSeekTable(table, size);
  } finally {
    await fh.close();
  }
}

function badEntry(header: tar.Header, raw: RawHeaderFacts): FormatError | undefined {
  const name = header.name;
  if (header.type !== 'file') return new FormatError('NOT_A_FILE', `entry "${name}" is a ${header.type ?? 'special entry'}; a bundle holds regular files only`);
  if ((header.pax && Object.keys(header.pax).length > 0) || raw.extended) {
    return new FormatError('UNEXPECTED_ENTRY', `entry "${name}" carries pax or GNU extension headers, which bundles never use`);
  }
  if (name.startsWith('/') || name.split('/').some((p: string) => p === '..' || p === '.' || p === '')) {
    return new FormatError('UNEXPECTED_ENTRY', `entry "${name}" points outside the layout`);
  }
  if (raw.mismatch) return new FormatError('UNEXPECTED_ENTRY', headerMessage(name, raw.mismatch));
  return undefined;
}

/**
 * One streaming pass over a bundle: bundle.json and its signature must be the first two
 * entries and are checked before anything else is trusted (the signer it names must be the
 * key that verified it); then every entry must be one bundle.json lists, a regular file of
 * exactly the listed size and digest, each once, in the writer's order, under the writer's
 * exact header (listing.ts, tar-walker.ts); the archive must end exactly where the listed
 * entries end, with two zero blocks; every zstd frame must carry its checksum and the only
 * skippable frame must be the seek table ending the file (frame-inspector.ts); the seek index
 * must account for the file; and the whole file's sha256 must match when a digest is trusted.
 * So a bundle that verifies always unpacks with plain `zstd -dc FILE | tar -x` to the same files.
 */
export async function verifyBundle(path: string, opts: VerifyOptions): Promise<VerifiedBundle> {
  assertTrust(opts.trust);
  await openableRegularFile(path);
  let fileSize: number;
  try {
    fileSize = (await stat(path)).size;
  } catch (cause) {
    throw new FormatError('IO_ERROR', `cannot read ${path}: ${(cause as Error).message}`, { cause });
  }
  const fileHash = newSha256();
  let rawRead = 0;
  let expectedTar = Infinity;
  let tarBytes = 0;
  // Not a flag set as bytes pass: a small archive passes in one chunk before bundle.json has
  // told how long it should be.
  const complete = () => tarBytes >= expectedTar;
  let failure: unknown;
  const fail = (err: unknown) => {
    failure ??= err;
  };

  const rawTap = new Transform({
    transform(chunk: Buffer, _e, cb) {
      fileHash.update(chunk);
      rawRead += chunk.length;
      opts.onProgress?.(rawRead, fileSize);
      cb(null, chunk);
    },
  });
  // Frames the decoder accepts but the format forbids (no checksum, a skippable frame inside).
  const inspector = new FrameInspector(fileSize, { hashFrames: opts.frameDigests === true });
  const walker = new TarWalker();
  // Bytes past the listed entries' end never reach tar: its input ends there, and they are
  // reported once tar has judged what came before them. Failing at once would let the chunk
  // that crosses the end hide an unlisted, duplicate or special entry in it (the better
  // reason), depending on chunk sizes and on onEntry's speed.
  const tarLimit = new Transform({
    transform(chunk: Buffer, _e, cb) {
      if (tarBytes > expectedTar) return cb();
      const room = expectedTar - tarBytes;
      tarBytes += chunk.length;
      if (chunk.length <= room) {
        walker.feed(chunk);
        return cb(null, chunk);
      }
      const pass = chunk.subarray(0, Math.max(0, room));
      walker.feed(pass);
      if (pass.length > 0) this.push(pass);
      this.push(null);
      cb();
    },
  });
  const decompress = new BoundedDecompress({ tolerant: true });
  // Until bundle.json has said how long the archive is, only its first two entries may come.
  decompress.stopAfter(HEADER_BYTES_MAX);
  // Headers of unknown formats reach the entry checks, which name the field (not "corrupt").
  const extract = tar.extract({ allowUnknownFormat: true } as Parameters<typeof tar.extract>[0]);

  let manifest: BundleManifest | undefined;
  let manifestBytes: Buffer | undefined;
  let signature: Buffer | undefined;
  let signer: TrustedKey | undefined;
  let listed: ListedEntries | undefined;

  const consume = async () => {
    let n = 0;
    for await (const entry of extract) {
      const h = entry.header;
      // tar reads on past zero blocks; standard tools stop there, so whatever follows is not
      // part of the archive (bytes past the expected end are cut above, but a small archive
      // passes before that end is known)
      const raw = walker.nextEntry();
      if (raw.followsEnd) {
        throw n < 2
          ? new FormatError('BAD_ORDER', `the archive starts with end-of-archive blocks; a bundle starts with ${BUNDLE_JSON}`)
          : new FormatError('TRAILING_DATA', `entry "${h.name}" follows the end of the archive: the file was altered`);
      }
      const problem = badEntry(h, raw);
      if (problem) throw problem;
      const size = h.size ?? 0;
      if (n === 0 || n === 1) {
        const want = n === 0 ? BUNDLE_JSON : SIGNATURE;
        if (h.name !== want) throw new FormatError('BAD_ORDER', `the archive starts with "${h.name}"; a bundle starts with ${BUNDLE_JSON} then ${SIGNATURE}`);
        const buf = await readAll(entry as unknown as Readable, n === 0 ? MAX_BUNDLE_JSON_BYTES : MAX_SIGNATURE_BYTES, want);
        if (n === 0) {
          manifestBytes = buf;
        } else {
          signature = buf;
          let claimed: string | undefined;
          try {
            claimed = (JSON.parse(manifestBytes!.toString('utf8')) as { signer?: { fingerprint?: string } }).signer?.fingerprint;
          } catch {
            // the signature check decides; an unparsable manifest cannot verify against anything
          }
          signer = checkSignature(manifestBytes!, signature, claimed, opts.trust);
          manifest = parseManifestBytes(manifestBytes!);
          if (signer) checkSigner(manifest, signer);
          listed = new ListedEntries(manifest);
          expectedTar = tarStreamBytes([manifestBytes!.length, signature.length, ...listed.sizes]);
          // Whatever decodes past the archive's end is judged without being decoded in full.
          decompress.stopAfter(expectedTar);
          if (manifest.index.size > MAX_INDEX_JSON_BYTES) throw new FormatError('OVERSIZED_ENTRY', `index.json is listed at ${manifest.index.size} bytes, over the ${MAX_INDEX_JSON_BYTES} limit`);
          await opts.onManifest?.(manifest, manifestBytes!, signature);
        }
        n++;
        continue;
      }
      n++;
      const want = listed!.accept(h.name, size);
      const hash = newSha256();
      const hashed = (entry as unknown as Readable).pipe(new Transform({
        transform(chunk: Buffer, _e, cb) {
          hash.update(chunk);
          cb(null, chunk);
        },
      }));
      if (opts.onEntry) await opts.onEntry({ path: h.name, ...want }, hashed).catch((err: unknown) => { throw new ConsumerFailure(err); });
      else for await (const _ of hashed) { /* hashing only */ }
      const actual = 'sha256:' + hash.digest('hex');
      if (actual !== want.digest) throw new FormatError('BLOB_DIGEST_MISMATCH', `entry "${h.name}" hashes to ${actual}; bundle.json lists ${want.digest}: the bundle is damaged or was altered`);
      opts.onVerified?.({ path: h.name, ...want });
    }
    // damage ends the tar stream early: name the damage, not what is missing because of it
    if (decompress.failed) throw decompress.failed;
    if (!manifest && decompress.overLimit) throw headerOverrun();
    if (!manifest) throw new FormatError('TRUNCATED', 'the archive ends before bundle.json and its signature');
    // tar ends quietly when the file is cut at an entry boundary; a file cut short has lost
    // its seek table too, while one that merely lacks an entry still ends with it
    if (!complete() && !(await endsWithSeekTable(path))) throw truncated();
    const missing = listed!.missing();
    if (missing) throw new FormatError('MISSING_ENTRY', `entry "${missing}" listed in bundle.json is missing from the archive`);
    if (!complete()) throw new FormatError('TRUNCATED', 'the archive ends without its two end-of-archive blocks: the file is incomplete or was altered');
    if (tarBytes > expectedTar) throw new FormatError('TRAILING_DATA', 'data follows the end of the archive: the file was altered');
    const trailer = walker.trailerProblem(expectedTar);
    if (trailer) throw trailer;
  };

  opts.signal?.throwIfAborted();
  const source = createReadStream(path, { highWaterMark: READ_CHUNK });
  const onAbort = () => source.destroy(opts.signal!.reason as Error);
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  const piping = pipeline(source, rawTap, inspector, decompress, tarLimit, extract as unknown as Writable).catch((err) => {
    fail(err);
    extract.destroy(err as Error);
  });
  try {
    await consume();
  } catch (err) {
    fail(err);
  }
  if (failure) {
    decompress.destroy();
    extract.destroy();
  }
  await piping;
  opts.signal?.removeEventListener('abort', onAbort);
  if (failure && opts.signal?.aborted) throw opts.signal.reason;
  if (failure) {
    // A file that shrank while we read it is media going away, whatever the decoder made of the cut.
    const sizeNow = await stat(path).then((st) => st.size, () => 0);
    if (sizeNow < fileSize) {
      throw new FormatError('TRUNCATED', `${path} shrank from ${fileSize} to ${sizeNow} bytes while being read: the media was removed or changed; plug it in again`, { cause: failure });
    }
    throw await classify(failure, decompress.failed, complete(), rawRead >= fileSize, path);
  }

  // Judged only now: the inspector sees the whole file, after the entries' own checks.
  if (inspector.problem) throw inspector.problem;
  // Anything but zstd frames after the archive failed the pass above, so a table that is
  // missing or does not account for the file is the table's own fault (BAD_SEEK_TABLE), not
  // data appended to the archive.
  const seekIndex = await readSeekIndex(path);
  if (seekIndex.decompressedBytes !== tarBytes) {
    throw new FormatError('BAD_SEEK_TABLE', `the seek index covers ${seekIndex.decompressedBytes} bytes of archive, but it has ${tarBytes}`);
  }
  const unlike = indexMismatch(seekIndex, inspector.frames);
  if (unlike) throw new FormatError('BAD_SEEK_TABLE', `the seek index does not describe the file's frames (${unlike}): the file was altered; get a fresh copy`);
  const fileDigest = 'sha256:' + fileHash.digest('hex');
  if (opts.trust.digest && opts.trust.digest !== fileDigest) {
    throw new FormatError('FILE_DIGEST_MISMATCH', `the file's sha256 is ${fileDigest}, not the expected ${opts.trust.digest}: wrong file, or damaged in copying; copy it again`);
  }
  return { manifest: manifest!, manifestBytes: manifestBytes!, signature: signature!, ...(signer ? { signer } : {}), fileDigest, fileSize, seekIndex, ...(opts.frameDigests ? { frameDigests: inspector.frames.map((f) => f.digest!) } : {}) };
}

/**
 * Where the index and the frames walked differ, if they do. Random reads map entries through
 * the index, so it must be the file's true frame list, not merely one that sums right.
 */
function indexMismatch(index: SeekIndex, walked: readonly WalkedFrame[]): string | undefined {
  if (index.frames.length !== walked.length) return `${index.frames.length} frames listed, ${walked.length} in the file`;
  for (let i = 0; i < walked.length; i++) {
    const a = index.frames[i]!;
    const b = walked[i]!;
    if (a.compressedOffset !== b.compressedOffset || a.compressedSize !== b.compressedSize || a.decompressedSize !== b.decompressedSize) {
      return `frame ${i} is listed at byte ${a.compressedOffset}, ${a.compressedSize} bytes holding ${a.decompressedSize}; the file has it at byte ${b.compressedOffset}, ${b.compressedSize} bytes holding ${b.decompressedSize}`;
    }
  }
  return undefined;
}

/**
 * Most archive bytes that may come before bundle.json has told the archive's length: its
 * entry and the signature's at their limits, plus room for what the streams read ahead.
 */
const HEADER_BYTES_MAX = tarStreamBytes([MAX_BUNDLE_JSON_BYTES, MAX_SIGNATURE_BYTES]) + 2 * FRAME_BYTES;

const headerOverrun = () =>
  new FormatError('CORRUPT', `the archive does not start with ${BUNDLE_JSON} and its signature within ${HEADER_BYTES_MAX} bytes: not a bundle`);

const truncated = (cause?: unknown) =>
  new FormatError('TRUNCATED', 'the file ends before the archive does: the copy is incomplete (was the media removed early?); copy it again', { cause });

/** Whether the file ends with a seek table's footer: a whole bundle does, a cut or growing copy does not. */
export async function endsWithSeekTable(path: string): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const { size } = await fh.stat();
    if (size < FOOTER_BYTES) return false;
    const footer = Buffer.alloc(FOOTER_BYTES);
    await fh.read(footer, 0, FOOTER_BYTES, size - FOOTER_BYTES);
    return footer.readUInt32LE(5) === SEEKABLE_MAGIC;
  } finally {
    await fh.close();
  }
}

/** Marks what onEntry threw, so its own failures are not blamed on the bundle. */
class ConsumerFailure {
  constructor(readonly error: unknown) {}
}

const isSystemError = (err: unknown): err is NodeJS.ErrnoException => typeof (err as NodeJS.ErrnoException)?.syscall === 'string';

/** Turns whatever failed first into the error that names the cause. */
async function classify(err: unknown, upstream: Error | undefined, complete: boolean, readAllInput: boolean, path: string): Promise<unknown> {
  if (err instanceof ConsumerFailure) {
    // The consumer's own I/O failing (a full disk while staging) is not a damaged bundle:
    // pass it on with its errno code. Anything else reached it through the entry's stream.
    if (isSystemError(err.error)) return err.error;
    err = err.error;
  }
  if (err instanceof FormatError) return err;
  // tar's complaint about an archive cut short by undecodable bytes: the bytes are the cause
  if (upstream && !isSystemError(err)) err = upstream;
  const msg = (err as Error)?.message ?? String(err);
  // reading the file failed (media removed, I/O error): not a verdict on its contents
  if (isSystemError(err)) return new FormatError('IO_ERROR', `cannot read ${path}: ${msg}`, { cause: err });
  const cutShort = readAllInput && /middle of compressed data frame|Unexpected end of data|premature close/i.test(msg);
  if (complete) {
    // The archive is whole, so what failed to decompress comes after it: the seek table or
    // something appended. A file cut inside the table must not read as "altered", nor a
    // table whose header lies about its length as appended data.
    if (await endsWithSeekTable(path)) {
      const bad = await readSeekIndex(path).then(() => undefined, (e: unknown) => e);
      if (bad) return bad instanceof FormatError ? bad : new FormatError('BAD_SEEK_TABLE', `the seek index cannot be read: ${(bad as Error).message}`, { cause: bad });
    } else if (cutShort) {
      return truncated(err);
    }
    return new FormatError('TRAILING_DATA', `data follows the end of the archive (${msg}): the file was altered`, { cause: err });
  }
  if (cutShort) return truncated(err);
  return new FormatError('CORRUPT', `the file is damaged or not a bundle: ${msg}`, { cause: err });
}

/** bundle.json and its signature only, from the first frames: for `inspect`, no trust implied. */
export async function readHeader(path: string): Promise<{ manifest: BundleManifest; manifestBytes: Buffer; signature: Buffer }> {
  await openableRegularFile(path);
  const extract = tar.extract();
  const src = createReadStream(path);
  const decompress = new BoundedDecompress();
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
        if (entry.header.name !== BUNDLE_JSON) throw new FormatError('BAD_ORDER', `${path} does not start with ${BUNDLE_JSON}: not a bundle`);
        manifestBytes = await readAll(entry as unknown as Readable, MAX_BUNDLE_JSON_BYTES, BUNDLE_JSON);
      } else {
        if (entry.header.name !== SIGNATURE) throw new FormatError('BAD_ORDER', `${BUNDLE_JSON} is not followed by ${SIGNATURE}`);
        signature = await readAll(entry as unknown as Readable, MAX_SIGNATURE_BYTES, SIGNATURE);
        break;
      }
    }
  } catch (err) {
    if (err instanceof FormatError) throw err;
    // a file that cannot be read (missing, media removed) says nothing about its contents
    if (isSystemError(err)) throw new FormatError('IO_ERROR', `cannot read ${path}: ${err.message}`, { cause: err });
    throw new FormatError('CORRUPT', `${path} is not a bundle: ${(err as Error).message}`, { cause: err });
  } finally {
    src.destroy();
    extract.destroy();
    await piping;
  }
  if (!manifestBytes || !signature) {
    if (failed instanceof FormatError) throw failed;
    if (decompress.overLimit) throw headerOverrun();
    throw new FormatError('TRUNCATED', `${path} ends before bundle.json and its signature`);
  }
  return { manifest: parseManifestBytes(manifestBytes), manifestBytes, signature };
}


import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { DecompressStream } from 'zstd-napi';
import { newSha256, sha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import {
  BLOB_DIR, BUNDLE_JSON, INDEX_JSON, MAX_BUNDLE_JSON_BYTES, MAX_INDEX_JSON_BYTES, MAX_SIGNATURE_BYTES, OCI_LAYOUT,
  OCI_LAYOUT_CONTENT, SIGNATURE, blobPath, tarStreamBytes,
} from './layout.js';
import { parseManifestBytes, type BundleManifest } from './manifest.js';
import { decodeSeekTable, FOOTER_BYTES, seekTableLength, type SeekIndex } from './seekable.js';
import { assertTrust, checkSignature, type Trust } from './trust.js';
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
  /** Called after bundle.json is trusted, before any layout entry. */
  onManifest?: (manifest: BundleManifest, manifestBytes: Buffer, signature: Buffer) => Promise<void> | void;
  /** Compressed bytes read so far, of the file's size. */
  onProgress?: (done: number, total: number) => void;
}

export interface VerifiedBundle {
  manifest: BundleManifest;
  manifestBytes: Buffer;
  signature: Buffer;
  /** The trusted key that verified the signature (undefined under digest-only trust). */
  signer?: TrustedKey;
  fileDigest: string;
  fileSize: number;
  seekIndex: SeekIndex;
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

/** Reads and checks the trailing seek index against the file's size. */
export async function readSeekIndex(path: string): Promise<SeekIndex> {
  const fh = await open(path, 'r');
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

function badEntry(header: tar.Header): FormatError | undefined {
  const name = header.name;
  if (header.type !== 'file') return new FormatError('NOT_A_FILE', `entry "${name}" is a ${header.type ?? 'special entry'}; a bundle holds regular files only`);
  if (header.pax && Object.keys(header.pax).length > 0) return new FormatError('UNEXPECTED_ENTRY', `entry "${name}" carries pax extended headers, which bundles never use`);
  if (name.startsWith('/') || name.split('/').some((p: string) => p === '..' || p === '.' || p === '')) {
    return new FormatError('UNEXPECTED_ENTRY', `entry "${name}" points outside the layout`);
  }
  return undefined;
}

/**
 * One streaming pass over a bundle: bundle.json and its signature must be the first two
 * entries and are checked before anything else is trusted; then every entry must be one
 * bundle.json lists, a regular file of exactly the listed size and digest, each once; the
 * archive must end exactly where the listed entries end; the seek index must account for
 * the file; and the whole file's sha256 must match when a digest is trusted.
 */
export async function verifyBundle(path: string, opts: VerifyOptions): Promise<VerifiedBundle> {
  assertTrust(opts.trust);
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
  let complete = false;
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
  // Bytes past the listed entries' end are refused here, before tar sees them.
  const tarLimit = new Transform({
    transform(chunk: Buffer, _e, cb) {
      tarBytes += chunk.length;
      if (tarBytes > expectedTar) {
        return cb(new FormatError('TRAILING_DATA', `${tarBytes - expectedTar}+ bytes follow the end of the archive: the file was altered`));
      }
      if (tarBytes === expectedTar) complete = true;
      cb(null, chunk);
    },
  });
  const decompress = new DecompressStream();
  const extract = tar.extract();

  let manifest: BundleManifest | undefined;
  let manifestBytes: Buffer | undefined;
  let signature: Buffer | undefined;
  let signer: TrustedKey | undefined;
  const expected = new Map<string, { digest: string; size: number }>();
  const seen = new Set<string>();

  const consume = async () => {
    let n = 0;
    for await (const entry of extract) {
      const h = entry.header;
      const problem = badEntry(h);
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
          expected.set(OCI_LAYOUT, { digest: sha256(OCI_LAYOUT_CONTENT), size: OCI_LAYOUT_CONTENT.length });
          expected.set(INDEX_JSON, manifest.index);
          for (const b of manifest.blobs) expected.set(blobPath(b.digest), b);
          expectedTar = tarStreamBytes([manifestBytes!.length, signature.length, ...[...expected.values()].map((e) => e.size)]);
          if (manifest.index.size > MAX_INDEX_JSON_BYTES) throw new FormatError('OVERSIZED_ENTRY', `index.json is listed at ${manifest.index.size} bytes, over the ${MAX_INDEX_JSON_BYTES} limit`);
          await opts.onManifest?.(manifest, manifestBytes!, signature);
        }
        n++;
        continue;
      }
      n++;
      const want = expected.get(h.name);
      if (!want) {
        const where = h.name.startsWith(BLOB_DIR) ? 'a blob bundle.json does not list' : 'outside the layout';
        throw new FormatError(h.name === BUNDLE_JSON || h.name === SIGNATURE ? 'DUPLICATE_ENTRY' : 'UNEXPECTED_ENTRY', `entry "${h.name}" is ${h.name === BUNDLE_JSON || h.name === SIGNATURE ? 'a second copy' : where}`);
      }
      if (seen.has(h.name)) throw new FormatError('DUPLICATE_ENTRY', `entry "${h.name}" appears twice`);
      seen.add(h.name);
      if (size > want.size) throw new FormatError('OVERSIZED_ENTRY', `entry "${h.name}" is ${size} bytes; bundle.json lists ${want.size}`);
      if (size < want.size) throw new FormatError('SIZE_MISMATCH', `entry "${h.name}" is ${size} bytes; bundle.json lists ${want.size}`);
      const hash = newSha256();
      const hashed = (entry as unknown as Readable).pipe(new Transform({
        transform(chunk: Buffer, _e, cb) {
          hash.update(chunk);
          cb(null, chunk);
        },
      }));
      if (opts.onEntry) await opts.onEntry({ path: h.name, ...want }, hashed);
      else for await (const _ of hashed) { /* hashing only */ }
      const actual = 'sha256:' + hash.digest('hex');
      if (actual !== want.digest) throw new FormatError('BLOB_DIGEST_MISMATCH', `entry "${h.name}" hashes to ${actual}; bundle.json lists ${want.digest}: the bundle is damaged or was altered`);
    }
    if (!manifest) throw new FormatError('TRUNCATED', 'the archive ends before bundle.json and its signature');
    for (const name of expected.keys()) {
      if (!seen.has(name)) throw new FormatError('MISSING_ENTRY', `entry "${name}" listed in bundle.json is missing from the archive`);
    }
  };

  const piping = pipeline(createReadStream(path), rawTap, decompress, tarLimit, extract as unknown as Writable).catch((err) => {
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
  if (failure) throw classify(failure, complete, rawRead >= fileSize);

  const seekIndex = await readSeekIndex(path).catch((err) => {
    throw err instanceof FormatError && err.code === 'BAD_SEEK_TABLE' && complete
      ? new FormatError('TRAILING_DATA', `${err.message}`)
      : err;
  });
  if (seekIndex.decompressedBytes !== tarBytes) {
    throw new FormatError('BAD_SEEK_TABLE', `the seek index covers ${seekIndex.decompressedBytes} bytes of archive, but it has ${tarBytes}`);
  }
  const fileDigest = 'sha256:' + fileHash.digest('hex');
  if (opts.trust.digest && opts.trust.digest !== fileDigest) {
    throw new FormatError('FILE_DIGEST_MISMATCH', `the file's sha256 is ${fileDigest}, not the expected ${opts.trust.digest}: wrong file, or damaged in copying; copy it again`);
  }
  return { manifest: manifest!, manifestBytes: manifestBytes!, signature: signature!, ...(signer ? { signer } : {}), fileDigest, fileSize, seekIndex };
}

/** Turns whatever failed first into the error that names the cause. */
function classify(err: unknown, complete: boolean, readAllInput: boolean): FormatError {
  if (err instanceof FormatError) return err;
  const msg = (err as Error)?.message ?? String(err);
  if (complete) return new FormatError('TRAILING_DATA', `data follows the end of the archive (${msg}): the file was altered`, { cause: err });
  if (readAllInput && /middle of compressed data frame|Unexpected end of data|premature close/i.test(msg)) {
    return new FormatError('TRUNCATED', 'the file ends before the archive does: the copy is incomplete (was the media removed early?); copy it again', { cause: err });
  }
  return new FormatError('CORRUPT', `the file is damaged or not a bundle: ${msg}`, { cause: err });
}

/** bundle.json and its signature only, from the first frames: for `inspect`, no trust implied. */
export async function readHeader(path: string): Promise<{ manifest: BundleManifest; manifestBytes: Buffer; signature: Buffer }> {
  const extract = tar.extract();
  const src = createReadStream(path);
  const piping = pipeline(src, new DecompressStream(), extract as unknown as Writable).catch(() => undefined);
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
    throw new FormatError('CORRUPT', `${path} is not a bundle: ${(err as Error).message}`, { cause: err });
  } finally {
    src.destroy();
    extract.destroy();
    await piping;
  }
  if (!manifestBytes || !signature) throw new FormatError('TRUNCATED', `${path} ends before bundle.json and its signature`);
  return { manifest: parseManifestBytes(manifestBytes), manifestBytes, signature };
}


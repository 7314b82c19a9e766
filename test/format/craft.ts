// Test fixtures for @offline-bundle/format: real bundles made with writeBundle from a few
// generated blobs (no registry), and deliberately bad archives built byte by byte from a
// valid bundle's entries, so each rejection the reader promises can be provoked exactly.
//
//   const b = await makeBundle(t);                       // a valid, signed bundle
//   const entries = await readEntries(b.path);           // its tar entries, in order
//   await craft(out, [...entries, fileEntry('x', buf)]); // the same frames + one more entry
//   await assertRejected(t, out, b.trust, 'UNEXPECTED_ENTRY');
import {
  createHash,
  createPublicKey,
  createPrivateKey,
  randomBytes,
  type KeyObject,
} from 'node:crypto';
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Writable } from 'node:stream';
import type { Test } from 'tap';
import tar from 'tar-stream';
import { Compressor, decompress } from 'zstd-napi';
import {
  BUNDLE_JSON,
  FRAME_BYTES,
  FormatError,
  SIGNATURE,
  encodeSeekTable,
  extractBundle,
  fingerprint,
  generateKeyPair,
  rawFrame,
  readSeekIndex,
  signBytes,
  verifyBundle,
  writeBundle,
  type BundleBlob,
  type BundleImage,
  type FormatErrorCode,
  type FrameEntry,
  type KeyType,
  type Trust,
  type TrustedKey,
  type WrittenBundle,
  withBundleFile,
} from '@offline-bundle/format';
// @ts-expect-error: a JavaScript helper without type declarations
import { tmpdir as tmpdirJs } from '../helpers/tmp.mjs';

export const tmpdir = tmpdirJs as (t: Test, prefix?: string) => Promise<string>;

const TAR_BLOCK = 512;
const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const MT_CONFIG = 'application/vnd.oci.image.config.v1+json';
const MT_LAYER = 'application/vnd.oci.image.layer.v1.tar';
const MT_INDEX = 'application/vnd.oci.image.index.v1+json';

export const sha256 = (b: Uint8Array | string): string =>
  'sha256:' + createHash('sha256').update(b).digest('hex');

// ---------------------------------------------------------------------------------------------
// Keys

export interface TestKey {
  type: KeyType;
  privateKey: KeyObject;
  publicKey: KeyObject;
  privatePem: string;
  publicPem: string;
  /** As verifyBundle's Trust wants it. */
  trusted: TrustedKey;
}

export function makeKey(type: KeyType = 'ecdsa-p256', source = `test-${type}.pub`): TestKey {
  const { privatePem, publicPem } = generateKeyPair(type);
  const publicKey = createPublicKey(publicPem);
  return {
    type,
    privatePem,
    publicPem,
    publicKey,
    privateKey: createPrivateKey(privatePem),
    trusted: { key: publicKey, fingerprint: fingerprint(publicKey), source },
  };
}

/** Writes NAME.key (0600) and NAME.pub into dir. */
export async function writeKeyFiles(
  dir: string,
  key: TestKey,
  name = 'signer',
): Promise<{ keyPath: string; pubPath: string }> {
  const keyPath = path.join(dir, `${name}.key`);
  const pubPath = path.join(dir, `${name}.pub`);
  await writeFile(keyPath, key.privatePem, { mode: 0o600 });
  await writeFile(pubPath, key.publicPem);
  return { keyPath, pubPath };
}

// ---------------------------------------------------------------------------------------------
// Valid bundles from writeBundle

export interface SourceBlob extends BundleBlob {
  data: Buffer;
  /** The file writeBundle read it from. */
  path: string;
}

export interface MadeBundle {
  path: string;
  /** Temp directory holding the bundle, its blob files and anything a test adds. */
  dir: string;
  key: TestKey;
  /** Trust in `key` only. */
  trust: Trust;
  written: WrittenBundle;
  /** Every blob of the layout (manifest, config, layers). */
  blobs: SourceBlob[];
  index: Buffer;
  images: BundleImage[];
}

export interface MakeBundleOptions {
  key?: TestKey;
  /** Sizes of the layer blobs (random bytes); default two small ones. */
  layerSizes?: number[];
  /** Exact layer contents instead of random ones (for byte-for-byte reproducibility). */
  layers?: Buffer[];
  createdAt?: string;
  /** Directory to write into (default: a fresh temp dir removed at teardown). */
  dir?: string;
  name?: string;
}

/**
 * A signed bundle of one single-platform image: a manifest, its config and the given
 * layers, with the index.json that names it, so the extracted layout is a real OCI layout.
 */
export async function makeBundle(t: Test, opts: MakeBundleOptions = {}): Promise<MadeBundle> {
  const dir = opts.dir ?? (await tmpdir(t, 'ob-format-'));
  const key = opts.key ?? makeKey();
  const layerData = opts.layers ?? (opts.layerSizes ?? [3000, 70_000]).map((n) => randomBytes(n));
  const layers = layerData.map((data) => ({
    digest: sha256(data),
    size: data.length,
    mediaType: MT_LAYER,
    data,
  }));
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: {},
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.digest) },
    }),
  );
  const configBlob = {
    digest: sha256(config),
    size: config.length,
    mediaType: MT_CONFIG,
    data: config,
  };
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MT_MANIFEST,
      config: { mediaType: MT_CONFIG, digest: configBlob.digest, size: configBlob.size },
      layers: layers.map(({ mediaType, digest, size }) => ({ mediaType, digest, size })),
    }),
  );
  const manifestBlob = {
    digest: sha256(manifest),
    size: manifest.length,
    mediaType: MT_MANIFEST,
    data: manifest,
  };
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MT_INDEX,
      manifests: [
        {
          mediaType: MT_MANIFEST,
          digest: manifestBlob.digest,
          size: manifestBlob.size,
          platform: { os: 'linux', architecture: 'amd64' },
          annotations: { 'org.opencontainers.image.ref.name': 'example.com/test/app:v1' },
        },
      ],
    }),
  );
  const blobDir = path.join(dir, 'src-blobs');
  await mkdir(blobDir, { recursive: true });
  const blobs: SourceBlob[] = [];
  for (const b of [manifestBlob, configBlob, ...layers]) {
    if (blobs.some((x) => x.digest === b.digest)) continue;
    const p = path.join(blobDir, b.digest.slice(7));
    await writeFile(p, b.data);
    blobs.push({ ...b, path: p });
  }
  const images: BundleImage[] = [
    {
      repository: 'example.com/test/app',
      tag: 'v1',
      digest: manifestBlob.digest,
      mediaType: MT_MANIFEST,
      platforms: [{ os: 'linux', architecture: 'amd64' }],
    },
  ];
  const out = path.join(dir, opts.name ?? 'test.bundle');
  const written = await writeBundle({
    release: {
      name: 'test',
      version: '1.2.3',
      arch: 'amd64',
      image: null,
      digest: null,
      upgradeFrom: ['1.2.2'],
    },
    images,
    index,
    blobs,
    imageStoreBytes: 1000,
    key: key.privateKey,
    output: out,
    createdAt: opts.createdAt ?? '2026-01-02T03:04:05Z',
    tool: { name: 'offline-bundle-test', version: '0.0.0' },
  });
  return { path: out, dir, key, trust: { keys: [key.trusted] }, written, blobs, index, images };
}

// ---------------------------------------------------------------------------------------------
// Reading a bundle apart

/** A tar header as tar-stream packs it (what it parses has every field). */
export type EntryHeader = Partial<tar.Header> & Pick<tar.Header, 'name'>;

export interface Entry {
  header: EntryHeader;
  data: Buffer;
}

export interface RawFrame {
  /** The frame's bytes as stored in the file. */
  bytes: Buffer;
  compressedOffset: number;
  decompressedOffset: number;
  decompressedSize: number;
}

/** The bundle's zstd frames, located through its (trusted, since the test wrote it) seek table. */
export async function readFrames(file: string): Promise<RawFrame[]> {
  const index = await withBundleFile(file, readSeekIndex);
  const buf = await readFile(file);
  return index.frames.map((f) => ({
    bytes: buf.subarray(f.compressedOffset, f.compressedOffset + f.compressedSize),
    compressedOffset: f.compressedOffset,
    decompressedOffset: f.decompressedOffset,
    decompressedSize: f.decompressedSize,
  }));
}

/** The uncompressed tar stream (every frame, the seek table skipped). */
export async function readTar(file: string): Promise<Buffer> {
  return Buffer.concat((await readFrames(file)).map((f) => decompress(f.bytes)));
}

/** The tar entries in archive order, headers as tar-stream parses them. */
export async function readEntries(file: string): Promise<Entry[]> {
  return parseTar(await readTar(file));
}

export async function parseTar(tarBytes: Buffer): Promise<Entry[]> {
  const extract = tar.extract();
  const entries: Entry[] = [];
  const done = (async () => {
    for await (const e of extract) {
      const parts: Buffer[] = [];
      for await (const c of e) parts.push(c as Buffer);
      entries.push({ header: e.header, data: Buffer.concat(parts) });
    }
  })();
  extract.end(tarBytes);
  await done;
  return entries;
}

/** A regular-file entry with the header fields writeBundle uses. */
export function fileEntry(
  name: string,
  data: Buffer | string,
  header: Partial<tar.Header> = {},
): Entry {
  const buf = Buffer.from(data);
  return {
    header: {
      name,
      size: buf.length,
      mode: 0o644,
      mtime: new Date(0),
      uid: 0,
      gid: 0,
      uname: '',
      gname: '',
      type: 'file',
      ...header,
    },
    data: buf,
  };
}

/** A non-file entry (symlink, link, directory, character-device, fifo...). */
export function specialEntry(
  name: string,
  type: tar.Header['type'],
  header: Partial<tar.Header> = {},
): Entry {
  return {
    header: {
      name,
      size: 0,
      mode: 0o644,
      mtime: new Date(0),
      uid: 0,
      gid: 0,
      uname: '',
      gname: '',
      type,
      ...header,
    },
    data: Buffer.alloc(0),
  };
}

export function entryNamed(entries: Entry[], name: string): Entry {
  const e = entries.find((x) => x.header.name === name);
  if (!e) throw new Error(`no entry ${name}`);
  return e;
}

export function withData(e: Entry, data: Buffer): Entry {
  return { header: { ...e.header, size: data.length }, data };
}

// ---------------------------------------------------------------------------------------------
// Writing (bad) bundles byte by byte

/** Packs entries as a POSIX tar (with its two-zero-block trailer unless `trailer` is false). */
export async function packTar(entries: Entry[], trailer = true): Promise<Buffer> {
  const pack = tar.pack();
  const parts: Buffer[] = [];
  const collected = (async () => {
    for await (const c of pack) parts.push(c as Buffer);
  })();
  for (const e of entries) {
    await new Promise<void>((resolve, reject) => {
      const header = { ...e.header };
      if (header.type === 'file' || header.type === undefined) header.size = e.data.length;
      const cb = (err?: Error | null) => (err ? reject(err) : resolve());
      if (e.data.length > 0) pack.entry(header, e.data, cb);
      else (pack.entry(header, cb) as unknown as Writable).end();
    });
  }
  pack.finalize();
  await collected;
  const out = Buffer.concat(parts);
  return trailer ? out : out.subarray(0, out.length - 2 * TAR_BLOCK);
}

function octal(block: Buffer, start: number, len: number): number {
  const field = block.subarray(start, start + len);
  if (field[0]! & 0x80) {
    let v = 0;
    for (let i = 1; i < field.length; i++) v = v * 256 + field[i]!;
    return v;
  }
  const text = field.toString('ascii').replace(/\0.*$/s, '').trim();
  return text ? parseInt(text, 8) : 0;
}

/**
 * Where writeBundle starts frames in a tar stream: at every header, at every entry's data,
 * every FRAME_BYTES within data, and at the trailer.
 */
export function frameSegments(tarBytes: Buffer): [number, number][] {
  const cuts: number[] = [];
  let p = 0;
  while (p + TAR_BLOCK <= tarBytes.length) {
    const block = tarBytes.subarray(p, p + TAR_BLOCK);
    cuts.push(p);
    if (block.every((b) => b === 0)) break;
    const padded = Math.ceil(octal(block, 124, 12) / TAR_BLOCK) * TAR_BLOCK;
    for (let d = p + TAR_BLOCK; d < p + TAR_BLOCK + padded; d += FRAME_BYTES) cuts.push(d);
    p += TAR_BLOCK + padded;
  }
  // whatever follows the first zero block (the trailer, or test garbage) in frames of at most FRAME_BYTES
  const last = cuts[cuts.length - 1] ?? 0;
  for (let d = last + FRAME_BYTES; d < tarBytes.length; d += FRAME_BYTES) cuts.push(d);
  cuts.push(tarBytes.length);
  const segs: [number, number][] = [];
  for (let i = 0; i + 1 < cuts.length; i++)
    if (cuts[i]! < cuts[i + 1]!) segs.push([cuts[i]!, cuts[i + 1]!]);
  return segs;
}

const compressor = new Compressor();
compressor.setParameters({ compressionLevel: 3, checksumFlag: true, contentSizeFlag: true });

/** One zstd frame, compressed as writeBundle does (level 3, content size, XXH64 checksum). */
export function zstdFrame(data: Buffer): Buffer {
  return compressor.compress(data);
}

/** A zstd frame with other frame-header flags than writeBundle's (a valid frame all the same). */
export function zstdFrameWith(
  data: Buffer,
  flags: { checksum: boolean; contentSize: boolean },
): Buffer {
  const c = new Compressor();
  c.setParameters({
    compressionLevel: 3,
    checksumFlag: flags.checksum,
    contentSizeFlag: flags.contentSize,
  });
  return c.compress(data);
}

/** A zstd skippable frame (magic 0x184D2A50 + `nibble`) holding `payload`. */
export function skippableFrame(payload: Buffer, nibble = 0): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32LE(0x184d2a50 + nibble, 0);
  head.writeUInt32LE(payload.length, 4);
  return Buffer.concat([head, payload]);
}

/** Stores the ustar checksum of a 512-byte header block as tar-stream writes it ("NNNNNN \0"). */
export function setChecksum(block: Buffer): void {
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK; i++) sum += block[i]!;
  block.write(sum.toString(8).padStart(6, '0') + ' \0', 148, 'ascii');
}

/**
 * A copy of a tar stream with the header of entry `name` edited in place by `patch` (its
 * checksum recomputed afterwards), for header fields tar-stream's packer cannot express.
 */
export function patchHeader(
  tarBytes: Buffer,
  name: string,
  patch: (block: Buffer) => void,
): Buffer {
  const out = Buffer.from(tarBytes);
  let p = 0;
  while (p + TAR_BLOCK <= out.length) {
    const block = out.subarray(p, p + TAR_BLOCK);
    if (block.every((b) => b === 0)) break;
    if (block.toString('utf8', 0, 100).replace(/\0.*$/s, '') === name) {
      patch(block);
      setChecksum(block);
      return out;
    }
    p += TAR_BLOCK + Math.ceil(octal(block, 124, 12) / TAR_BLOCK) * TAR_BLOCK;
  }
  throw new Error(`no header named ${name}`);
}

/** The offset of the tar trailer (the first zero block at a header position). */
export function trailerOffset(tarBytes: Buffer): number {
  let p = 0;
  while (p + TAR_BLOCK <= tarBytes.length) {
    const block = tarBytes.subarray(p, p + TAR_BLOCK);
    if (block.every((b) => b === 0)) return p;
    p += TAR_BLOCK + Math.ceil(octal(block, 124, 12) / TAR_BLOCK) * TAR_BLOCK;
  }
  throw new Error('no trailer');
}

/** Where the tar stream's first two entries end (bundle.json and its signature in a bundle). */
function headBytesOf(tarBytes: Buffer): number {
  let p = 0;
  for (let n = 0; n < 2 && p + TAR_BLOCK <= tarBytes.length; n++) {
    const block = tarBytes.subarray(p, p + TAR_BLOCK);
    if (block.every((b) => b === 0)) break;
    p += TAR_BLOCK + Math.ceil(octal(block, 124, 12) / TAR_BLOCK) * TAR_BLOCK;
  }
  return p;
}

export interface CraftOptions {
  /** Keep the tar trailer (two zero blocks); default true. */
  trailer?: boolean;
  /** Extra uncompressed bytes compressed as their own frame(s) after the tar's frames, listed in the seek table. */
  extraTar?: Buffer;
  /** Rewrites the seek table's entries (default: the true ones); null leaves the table out. */
  seekTable?: ((frames: FrameEntry[]) => FrameEntry[]) | null;
  /** Raw bytes after the seek table. */
  append?: Buffer;
  /** Compresses each frame (default: as writeBundle does, raw blocks for the head, zstdFrame after); `i` counts frames from 0. */
  frame?: (data: Buffer, i: number) => Buffer;
  /** Raw bytes inserted after frame `i`, counted in that frame's compressed size in the seek table. */
  between?: (i: number) => Buffer | undefined;
}

export interface Crafted {
  path: string;
  /** The true frame list (before any seekTable rewrite). */
  frames: FrameEntry[];
  tar: Buffer;
  size: number;
}

/**
 * Writes `entries` as a bundle file the way writeBundle lays one out (one frame per header,
 * data frames of at most FRAME_BYTES, a seek table in a trailing skippable frame), with the
 * changes the options ask for. Entries from readEntries of a valid bundle give back its bytes.
 */
export async function craft(
  file: string,
  entries: Entry[],
  opts: CraftOptions = {},
): Promise<Crafted> {
  const tarBytes = await packTar(entries, opts.trailer ?? true);
  return craftTar(file, tarBytes, opts);
}

/** As craft, from an uncompressed tar stream the test assembled itself. */
export async function craftTar(
  file: string,
  tarBytes: Buffer,
  opts: CraftOptions = {},
): Promise<Crafted> {
  const parts: Buffer[] = [];
  const frames: FrameEntry[] = [];
  // writeBundle stores the head (bundle.json and its signature) as raw blocks
  const headEnd = headBytesOf(tarBytes);
  const raw = (data: Buffer) => (frames.length < headFrames ? rawFrame(data) : zstdFrame(data));
  const segs = frameSegments(tarBytes);
  const headFrames = segs.filter(([, b]) => b <= headEnd).length;
  const defaultFrame = opts.frame ?? raw;
  const addFrames = (bytes: Buffer, segs: [number, number][]) => {
    for (const [a, b] of segs) {
      const i = frames.length;
      const f = defaultFrame(bytes.subarray(a, b), i);
      const extra = opts.between?.(i) ?? Buffer.alloc(0);
      parts.push(f, extra);
      frames.push({ compressedSize: f.length + extra.length, decompressedSize: b - a });
    }
  };
  addFrames(tarBytes, segs);
  if (opts.extraTar) addFrames(opts.extraTar, frameSegments(opts.extraTar));
  if (opts.seekTable !== null)
    parts.push(
      encodeSeekTable(opts.seekTable ? opts.seekTable(frames.map((f) => ({ ...f }))) : frames),
    );
  if (opts.append) parts.push(opts.append);
  const out = Buffer.concat(parts);
  await writeFile(file, out);
  return { path: file, frames, tar: tarBytes, size: out.length };
}

/**
 * Replaces bundle.json (edited as parsed JSON, or as raw bytes) and signs the new bytes with
 * `key`, so a test can make the layout wrong while the signature stays good.
 */
export function resign(
  entries: Entry[],
  key: KeyObject,
  edit: { json?: (doc: any) => unknown; raw?: (bytes: Buffer) => Buffer } = {},
): Entry[] {
  const mj = entryNamed(entries, BUNDLE_JSON);
  let bytes = mj.data;
  if (edit.json)
    bytes = Buffer.from(
      JSON.stringify(edit.json(JSON.parse(bytes.toString('utf8'))), null, 2) + '\n',
    );
  if (edit.raw) bytes = edit.raw(bytes);
  const sig = signBytes(bytes, key);
  return entries.map((e) => {
    if (e.header.name === BUNDLE_JSON) return withData(e, bytes);
    if (e.header.name === SIGNATURE) return withData(e, sig);
    return e;
  });
}

/** Flips one bit of a buffer (a copy). */
export function flipByte(buf: Buffer, at: number): Buffer {
  const out = Buffer.from(buf);
  out[at] = out[at]! ^ 0x01;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Assertions

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

/** Expects `p` to reject with a FormatError of one of `codes` whose message is one line. */
export async function rejectsWith(
  t: Test,
  p: Promise<unknown>,
  codes: FormatErrorCode | FormatErrorCode[],
  what: string,
): Promise<FormatError | undefined> {
  const want = Array.isArray(codes) ? codes : [codes];
  try {
    await p;
  } catch (err) {
    t.ok(err instanceof FormatError, `${what}: a FormatError`, { found: err });
    const code = (err as FormatError).code;
    t.ok(want.includes(code), `${what}: code ${code} is ${want.join(' or ')}`, {
      message: (err as Error).message,
    });
    t.notMatch((err as Error).message, /\n/, `${what}: message is one line`);
    t.ok((err as Error).message.length > 0, `${what}: message is not empty`);
    return err as FormatError;
  }
  t.fail(`${what}: resolved, expected ${want.join(' or ')}`);
  return undefined;
}

let extractCount = 0;

/**
 * The bundle at `file` is refused with `codes` by verifyBundle, and by extractBundle, which
 * leaves neither the target directory (absent or empty) nor its `.partial` behind.
 */
export async function assertRejected(
  t: Test,
  file: string,
  trust: Trust,
  codes: FormatErrorCode | FormatErrorCode[],
): Promise<void> {
  await rejectsWith(
    t,
    withBundleFile(file, (s) => verifyBundle(s, { trust })),
    codes,
    'verifyBundle',
  );
  const target = path.join(path.dirname(file), `extracted-${++extractCount}`);
  await rejectsWith(
    t,
    withBundleFile(file, (s) => extractBundle(s, target, { trust, fsync: false })),
    codes,
    'extractBundle',
  );
  const left = (await exists(target)) ? await readdir(target) : [];
  t.same(left, [], 'extractBundle leaves no target directory content');
  t.notOk(await exists(`${target}.partial`), 'extractBundle leaves no .partial directory');
}

// The fuzz harness's base bundle and the pieces to take it apart and put it back together:
// a seeded PRNG, a deterministic Ed25519 factory key, zstd frames, tar headers, the seek table.
// Everything here is deterministic: the same constants give the same bundle, byte for byte.
import { createHash, createPrivateKey, createPublicKey } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Compressor, decompress } from 'zstd-napi';
import {
  BUNDLE_JSON,
  FRAME_BYTES,
  SIGNATURE,
  encodeSeekTable,
  fingerprint,
  readSeekIndex,
  signBytes,
  writeBundle,
  withBundleFile,
} from '@offline-bundle/format';
import { readFile } from 'node:fs/promises';

export const TAR_BLOCK = 512;
export const sha256hex = (b) => createHash('sha256').update(b).digest('hex');
export const sha256 = (b) => 'sha256:' + sha256hex(b);

// ---------------------------------------------------------------------------------------------
// Seeded PRNG (sfc32 seeded from sha256(seed:index)): case I depends on the seed and I only.

export class Rng {
  constructor(...parts) {
    const h = createHash('sha256').update(parts.map(String).join(':')).digest();
    this.a = h.readUInt32LE(0);
    this.b = h.readUInt32LE(4);
    this.c = h.readUInt32LE(8);
    this.d = h.readUInt32LE(12);
    for (let i = 0; i < 12; i++) this.u32();
  }
  u32() {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t >>> 0;
  }
  /** Float in [0, 1). */
  next() {
    return this.u32() / 4294967296;
  }
  /** Integer in [0, n). */
  int(n) {
    return n <= 0 ? 0 : Math.floor(this.next() * n);
  }
  /** Integer in [a, b]. */
  range(a, b) {
    return a + this.int(b - a + 1);
  }
  pick(arr) {
    return arr[this.int(arr.length)];
  }
  chance(p) {
    return this.next() < p;
  }
  bytes(n) {
    const b = Buffer.alloc(n);
    for (let i = 0; i < n; i += 4) {
      const v = this.u32();
      for (let k = 0; k < 4 && i + k < n; k++) b[i + k] = (v >>> (8 * k)) & 0xff;
    }
    return b;
  }
  /** Weighted choice: [[weight, value], ...]. */
  weighted(items) {
    const total = items.reduce((s, [w]) => s + w, 0);
    let r = this.next() * total;
    for (const [w, v] of items) if ((r -= w) < 0) return v;
    return items[items.length - 1][1];
  }
}

// ---------------------------------------------------------------------------------------------
// zstd frames

const compressors = new Map();
/** A zstd frame as writeBundle makes one (level 3, content size, XXH64 checksum), or with flags turned off. */
export function zstdFrame(data, { checksum = true, contentSize = true, level = 3 } = {}) {
  const k = `${checksum}:${contentSize}:${level}`;
  let c = compressors.get(k);
  if (!c) {
    c = new Compressor();
    c.setParameters({
      compressionLevel: level,
      checksumFlag: checksum,
      contentSizeFlag: contentSize,
    });
    compressors.set(k, c);
  }
  return c.compress(data);
}

export { decompress };

/**
 * A hand-made frame of RLE blocks: `total` bytes of `byte` from 4 bytes per 128 KiB block
 * (1 GiB from 32 KiB). `fcs`: the content size the header declares ('true', 'none' or a number
 * to lie); `windowLog`: the window the header asks for.
 */
export function rleFrame(total, { byte = 0, fcs = 'true', windowLog = 17 } = {}) {
  const declared = fcs === 'true' ? total : fcs === 'none' ? undefined : fcs;
  const head = Buffer.alloc(6 + (declared === undefined ? 0 : 8));
  head.writeUInt32LE(0xfd2fb528, 0);
  head[4] = declared === undefined ? 0 : 0xc0; // FCS 8 bytes, not single segment, no checksum, no dict
  head[5] = (windowLog - 10) << 3;
  if (declared !== undefined) head.writeBigUInt64LE(BigInt(declared), 6);
  const blockMax = Math.min(128 * 1024, 2 ** windowLog);
  const nBlocks = Math.max(1, Math.ceil(total / blockMax));
  const blocks = Buffer.alloc(4 * nBlocks);
  let left = total;
  for (let i = 0; i < nBlocks; i++) {
    const n = Math.min(blockMax, left);
    left -= n;
    const last = i === nBlocks - 1 ? 1 : 0;
    const h = last | (1 << 1) | (n << 3);
    blocks[4 * i] = h & 0xff;
    blocks[4 * i + 1] = (h >>> 8) & 0xff;
    blocks[4 * i + 2] = (h >>> 16) & 0xff;
    blocks[4 * i + 3] = byte;
  }
  return Buffer.concat([head, blocks]);
}

/** A skippable frame (magic 0x184D2A5n) holding `payload`. */
export function skippableFrame(payload, nibble = 0) {
  const h = Buffer.alloc(8);
  h.writeUInt32LE(0x184d2a50 + (nibble & 0xf), 0);
  h.writeUInt32LE(payload.length, 4);
  return Buffer.concat([h, payload]);
}

/** Size of a zstd frame header (magic, descriptor, window, dict id, content size). */
export function frameHeaderSize(frame) {
  if (frame.length < 6) return frame.length;
  const d = frame[4];
  const fcsFlag = d >> 6;
  const single = (d >> 5) & 1;
  const dictFlag = d & 3;
  const fcsBytes = [single ? 1 : 0, 2, 4, 8][fcsFlag];
  return Math.min(frame.length, 5 + (single ? 0 : 1) + [0, 1, 2, 4][dictFlag] + fcsBytes);
}

// ---------------------------------------------------------------------------------------------
// tar headers (ustar, as tar-stream writes them)

export function readField(block, off, len) {
  return block.toString('latin1', off, off + len).replace(/\0.*$/s, '');
}

export function readOctal(block, off, len) {
  const t = readField(block, off, len).trim();
  return t ? parseInt(t, 8) : 0;
}

export function writeString(block, off, len, s) {
  block.fill(0, off, off + len);
  Buffer.from(s, 'utf8').copy(block, off, 0, len);
}

/** Octal as tar-stream writes it: 12-byte fields 11 digits + space, 8-byte fields 6 digits + space + NUL. */
export function writeOctal(block, off, len, value) {
  const digits = len === 8 ? 6 : len - 1;
  let s = value.toString(8);
  if (s.length > digits) s = s.slice(-digits);
  writeString(block, off, len, s.padStart(digits, '0') + ' ');
}

export function headerChecksum(block) {
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : block[i];
  return sum;
}

/** Recomputes the checksum field: 6 octal digits, space, NUL. */
export function fixChecksum(block) {
  const s = headerChecksum(block).toString(8).padStart(6, '0');
  block.fill(0, 148, 156);
  block.write(s, 148, 'latin1');
  block[154] = 0x20;
  block[155] = 0;
  return block;
}

/** A regular-file header like writeBundle's, from a template header of the bundle. */
export function fileHeader(template, name, size, type = '0') {
  const h = Buffer.from(template);
  writeString(h, 0, 100, name);
  writeString(h, 345, 155, '');
  writeOctal(h, 124, 12, size);
  h[156] = type.charCodeAt(0);
  return fixChecksum(h);
}

/** Data padded to 512 and cut into frames of at most FRAME_BYTES (empty data: no frames). */
export function dataSegments(data) {
  const padded = Buffer.alloc(Math.ceil(data.length / TAR_BLOCK) * TAR_BLOCK);
  data.copy(padded);
  const segs = [];
  for (let o = 0; o < padded.length; o += FRAME_BYTES)
    segs.push({ raw: padded.subarray(o, Math.min(padded.length, o + FRAME_BYTES)) });
  return segs;
}

/** A pax extended header ('x' or 'g') entry with the given records, as segments. */
export function paxSegments(template, records, type = 'x', name = 'PaxHeader/entry') {
  const body = Buffer.concat(
    Object.entries(records).map(([k, v]) => {
      const rec = ` ${k}=${v}\n`;
      let len = Buffer.byteLength(rec) + 1;
      while (String(len).length + Buffer.byteLength(rec) !== len)
        len = String(len).length + Buffer.byteLength(rec);
      return Buffer.from(`${len}${rec}`);
    }),
  );
  return [{ raw: fileHeader(template, name, body.length, type) }, ...dataSegments(body)];
}

// ---------------------------------------------------------------------------------------------
// The base bundle

const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const MT_CONFIG = 'application/vnd.oci.image.config.v1+json';
const MT_LAYER = 'application/vnd.oci.image.layer.v1.tar';
const MT_INDEX = 'application/vnd.oci.image.index.v1+json';

/** An Ed25519 key from a 32-byte seed: signatures are deterministic, so the bundle is too. */
export function seededKey(seed) {
  const der = Buffer.concat([
    Buffer.from('302e020100300506032b657004220420', 'hex'),
    createHash('sha256').update(`fuzz-key:${seed}`).digest(),
  ]);
  const privateKey = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  const publicKey = createPublicKey(privateKey);
  return {
    privateKey,
    publicKey,
    privatePem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    trusted: { key: publicKey, fingerprint: fingerprint(publicKey), source: 'fuzz-factory.pub' },
  };
}

export const BASE_VERSION = '1.2.3';
export const BASE_FROM = '1.2.2';

/**
 * Writes the base bundle into dir: one single-platform image (manifest, config, three layers:
 * random bytes, text, and one of just over 4 MiB so an entry spans two frames).
 */
export async function makeBaseBundle(dir, { bigLayer = true } = {}) {
  await mkdir(dir, { recursive: true });
  const rng = new Rng('fuzz-base-bundle');
  const words = 'node cluster upgrade image layer registry bundle offline mirror digest ';
  const text = (n) => Buffer.from(words.repeat(Math.ceil(n / words.length)).slice(0, n));
  const layerData = [rng.bytes(3000), text(20_000), rng.bytes(70_000)];
  if (bigLayer) layerData.push(Buffer.concat([text(FRAME_BYTES - 10_000), rng.bytes(15_000)]));
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
          annotations: { 'org.opencontainers.image.ref.name': 'example.com/fuzz/app:v1' },
        },
      ],
    }),
  );
  const blobDir = path.join(dir, 'src-blobs');
  await mkdir(blobDir, { recursive: true });
  const blobs = [];
  for (const b of [manifestBlob, configBlob, ...layers]) {
    const p = path.join(blobDir, b.digest.slice(7));
    await writeFile(p, b.data);
    blobs.push({ digest: b.digest, size: b.size, mediaType: b.mediaType, path: p });
  }
  const key = seededKey('factory');
  const out = path.join(dir, 'base.bundle');
  const written = await writeBundle({
    release: {
      name: 'fuzz',
      version: BASE_VERSION,
      arch: 'amd64',
      image: null,
      digest: null,
      upgradeFrom: [BASE_FROM],
    },
    images: [
      {
        repository: 'example.com/fuzz/app',
        tag: 'v1',
        digest: manifestBlob.digest,
        mediaType: MT_MANIFEST,
        platforms: [{ os: 'linux', architecture: 'amd64' }],
      },
    ],
    index,
    blobs,
    imageStoreBytes: 1000,
    key: key.privateKey,
    output: out,
    createdAt: '2026-01-02T03:04:05Z',
    tool: { name: 'offline-bundle-fuzz', version: '0.0.0' },
  });
  return { path: out, key, written, bytes: await readFile(out) };
}

/**
 * The bundle as a list of segments, one per zstd frame: `raw` the frame's decompressed bytes,
 * `comp` its bytes in the file, `kind` what the frame holds ('header' of entry `entry`, 'data',
 * 'trailer'), so mutations can aim at a kind of frame.
 */
export async function splitBundle(file) {
  const index = await withBundleFile(file, readSeekIndex);
  const buf = await readFile(file);
  const segs = index.frames.map((f) => {
    const comp = buf.subarray(f.compressedOffset, f.compressedOffset + f.compressedSize);
    return { comp, raw: decompress(comp), decompressedOffset: f.decompressedOffset };
  });
  // label frames by walking the tar
  let p = 0;
  let entry = -1;
  const starts = new Map(segs.map((s, i) => [s.decompressedOffset, i]));
  const entries = [];
  let nextHeader = 0;
  for (const s of segs) {
    if (s.decompressedOffset === nextHeader) {
      if (s.raw.subarray(0, TAR_BLOCK).every((b) => b === 0)) {
        s.kind = 'trailer';
        continue;
      }
      entry++;
      const name = readField(s.raw, 0, 100);
      const size = readOctal(s.raw, 124, 12);
      entries.push({ name, size, header: starts.get(s.decompressedOffset) });
      s.kind = 'header';
      s.entry = entry;
      nextHeader = s.decompressedOffset + TAR_BLOCK + Math.ceil(size / TAR_BLOCK) * TAR_BLOCK;
    } else {
      s.kind = 'data';
      s.entry = entry;
    }
    p += s.raw.length;
  }
  return { segs, entries, table: buf.subarray(index.compressedBytes), tarBytes: p };
}

/**
 * Frames + seek table from segments. A segment's `comp` is used as is when present; otherwise
 * `raw` is compressed (cached by content). `table`: 'true' (sizes of the frames written),
 * a function rewriting those entries, a Buffer written as is, or null (no table).
 */
const compCache = new Map();
export function assemble(segs, { table = 'true', append } = {}) {
  const parts = [];
  const frames = [];
  for (const s of segs) {
    let comp = s.comp;
    if (!comp) {
      const k = sha256hex(s.raw);
      comp = compCache.get(k);
      if (!comp) {
        comp = zstdFrame(s.raw);
        if (compCache.size > 200) compCache.clear();
        compCache.set(k, comp);
      }
    }
    parts.push(comp);
    frames.push({ compressedSize: comp.length, decompressedSize: s.size ?? s.raw.length });
  }
  if (Buffer.isBuffer(table)) parts.push(table);
  else if (typeof table === 'function') parts.push(encodeTable(table(frames)));
  else if (table === 'true') parts.push(encodeSeekTable(frames));
  if (append) parts.push(append);
  return Buffer.concat(parts);
}

/** encodeSeekTable, but also for values it would refuse to write (out-of-range numbers wrap). */
export function encodeTable(
  frames,
  { count, descriptor = 0, magic = 0x8f92eab1, skipMagic = 0x184d2a5e, frameSize } = {},
) {
  const entryBytes = descriptor & 0x80 ? 12 : 8;
  const size = frames.length * entryBytes + 9;
  const buf = Buffer.alloc(8 + size);
  buf.writeUInt32LE(skipMagic >>> 0, 0);
  buf.writeUInt32LE((frameSize ?? size) >>> 0, 4);
  let o = 8;
  for (const f of frames) {
    buf.writeUInt32LE(f.compressedSize >>> 0, o);
    buf.writeUInt32LE(f.decompressedSize >>> 0, o + 4);
    if (entryBytes === 12) buf.writeUInt32LE((f.checksum ?? 0) >>> 0, o + 8);
    o += entryBytes;
  }
  buf.writeUInt32LE((count ?? frames.length) >>> 0, o);
  buf.writeUInt8(descriptor & 0xff, o + 4);
  buf.writeUInt32LE(magic >>> 0, o + 5);
  return buf;
}

/** Re-signs edited bundle.json bytes: the segments of bundle.json and its signature are replaced. */
export function replaceHead(base, manifestBytes, signature) {
  const template = base.segs[0].raw;
  const rest = base.segs.slice(base.entries[2].header);
  return [
    { raw: fileHeader(template, BUNDLE_JSON, manifestBytes.length) },
    ...dataSegments(manifestBytes),
    { raw: fileHeader(template, SIGNATURE, signature.length) },
    ...dataSegments(signature),
    ...rest,
  ];
}

export { signBytes };

import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import tar from 'tar-stream';
import { quoteName } from '@offline-bundle/host';
import {
  OciError,
  parseReference,
  type ImageReference,
  ZstdDecompressStream,
} from '@offline-bundle/oci';
import {
  isReleaseManifest,
  pullAlwaysWorkloads,
  type PullAlwaysWorkload,
} from './release-manifests.js';

export const IMAGE_REFERENCES_PATH = 'release-manifests/image-references';
export const RELEASE_METADATA_PATH = 'release-manifests/release-metadata';
/** Largest file read from an image's layers (a release's manifests, a catalog's FBC files). */
export const MAX_LAYER_FILE_BYTES = 16 * 1024 * 1024;

interface ReleasePayload {
  version: string;
  /** Versions this release accepts upgrades from (Cincinnati "previous"). */
  previous: string[];
  images: { name: string; reference: ImageReference }[];
  /** Workloads of release-manifests/*.yaml pulling a payload image with imagePullPolicy: Always. */
  pullAlways: PullAlwaysWorkload[];
}

interface ImageStream {
  kind?: string;
  metadata?: { name?: string };
  spec?: { tags?: { name?: string; from?: { kind?: string; name?: string } }[] };
}

interface ReleaseMetadata {
  kind?: string;
  version?: string;
  previous?: string[];
}

async function decompressed(layer: Readable): Promise<Readable> {
  // The magic may straddle chunks: gather at least 4 bytes (or the whole stream) before sniffing.
  const it = layer[Symbol.asyncIterator]();
  const parts: Buffer[] = [];
  let ended = false;
  while (parts.reduce((n, p) => n + p.length, 0) < 4) {
    const r = await it.next();
    if (r.done) {
      ended = true;
      break;
    }
    parts.push(r.value as Buffer);
  }
  const head = Buffer.concat(parts);
  const rest = Readable.from(
    (async function* () {
      if (head.length) yield head;
      if (!ended)
        for (let r = await it.next(); !r.done; r = await it.next()) yield r.value as Buffer;
    })(),
    { objectMode: false },
  );
  // zlib's default 16 KiB output chunks are a thread-pool round trip each
  if (head[0] === 0x1f && head[1] === 0x8b)
    return rest.pipe(createGunzip({ chunkSize: 256 * 1024 }));
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528)
    return rest.pipe(new ZstdDecompressStream());
  return rest;
}

/** Everything read from one image's layers together (a catalog of many 16 MiB files is not held whole). */
export const MAX_LAYER_TOTAL_BYTES = 64 * 1024 * 1024;
/**
 * Most bytes one layer may unpack to, kept or not: a release's or catalog's layer is some
 * hundreds of MiB; a 1.45 MB zstd layer can hold 40 GiB of zeros beside the files read.
 */
export const MAX_LAYER_UNPACKED_BYTES = 4 * 1024 * 1024 * 1024;

/** Passes a layer's unpacked bytes on, refusing it past MAX_LAYER_UNPACKED_BYTES. */
function unpackedBound(image: string, digest: string): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      if (seen <= MAX_LAYER_UNPACKED_BYTES) return cb(null, chunk);
      cb(
        new OciError(
          'FILE_TOO_LARGE',
          `${image}: layer ${digest} unpacks to more than ${MAX_LAYER_UNPACKED_BYTES / 2 ** 30} GiB, the most read from one layer (MAX_LAYER_UNPACKED_BYTES): an image built to exhaust memory or time, or not a release or catalog image`,
        ),
      );
    },
  });
}

interface LayerScan {
  files: Map<string, Buffer>;
  read: number;
}

/**
 * The longest entry name read (PATH_MAX): no filesystem holds a longer path, and tar-stream
 * takes PAX and GNU long names of up to 4 MiB; a longer one is streamed past like any unwanted entry.
 */
const MAX_ENTRY_NAME_CHARS = 4096;

/** The earlier layers' files by each ancestor directory (with its '/') and by their own name: what a whiteout hides, looked up once. */
function hiddenIndex(found: Map<string, Buffer>): Map<string, string[]> {
  const index = new Map<string, string[]>();
  const add = (key: string, name: string) => {
    const names = index.get(key);
    if (names) names.push(name);
    else index.set(key, [name]);
  };
  for (const name of found.keys()) {
    add(name, name);
    for (let i = name.indexOf('/'); i >= 0; i = name.indexOf('/', i + 1))
      add(name.slice(0, i + 1), name);
  }
  return index;
}

/**
 * Applies a whiteout entry to the earlier layers' files as it is met (.wh.NAME hides the path and
 * below it, .wh..wh..opq a directory's content), so no whiteout is kept: a layer of thousands of
 * long whiteout names (40 of 4 MiB grew the heap 153 MiB) costs nothing past its entry.
 */
function whiteout(name: string, found: Map<string, Buffer>, index: Map<string, string[]>): void {
  const base = name.slice(name.lastIndexOf('/') + 1);
  const dir = name.slice(0, name.length - base.length);
  if (base === '.wh..wh..opq') for (const n of index.get(dir) ?? []) found.delete(n);
  else if (base.startsWith('.wh.')) {
    const path = dir + base.slice(4);
    for (const n of [...(index.get(path) ?? []), ...(index.get(`${path}/`) ?? [])]) found.delete(n);
  }
}

/**
 * The files of one layer that `want` names, whatever its compression, each at most
 * MAX_LAYER_FILE_BYTES, and `before` + what this layer adds at most MAX_LAYER_TOTAL_BYTES; its
 * whiteouts hide what `found` (the earlier layers' files) holds, its own files not. The rest
 * is streamed past with backpressure (never held), at most MAX_LAYER_UNPACKED_BYTES in all.
 */
async function scanLayer(
  layer: Readable,
  want: (name: string) => boolean,
  image: string,
  digest: string,
  found: Map<string, Buffer>,
  before: number,
): Promise<LayerScan> {
  const scan: LayerScan = { files: new Map(), read: before };
  const index = hiddenIndex(found);
  const extract = tar.extract();
  const consume = (async () => {
    for await (const entry of extract) {
      const name =
        entry.header.name.length > MAX_ENTRY_NAME_CHARS
          ? ''
          : entry.header.name.replace(/^(\.\/)+|^\/+/, '');
      if (name.includes('/.wh.') || name.startsWith('.wh.')) whiteout(name, found, index);
      if (name && want(name) && entry.header.type === 'file') {
        const size = entry.header.size ?? 0;
        if (size > MAX_LAYER_FILE_BYTES)
          throw new OciError(
            'FILE_TOO_LARGE',
            `${image}: ${quoteName(name)} is larger than 16 MiB, the most a file read from an image may have`,
          );
        scan.read += size;
        if (scan.read > MAX_LAYER_TOTAL_BYTES)
          throw new OciError(
            'FILE_TOO_LARGE',
            `${image}: the files read from its layers exceed 64 MiB together (at ${quoteName(name)}), the most read from one image`,
          );
        const parts: Buffer[] = [];
        for await (const c of entry) parts.push(c as Buffer);
        scan.files.set(name, Buffer.concat(parts));
      } else {
        entry.resume();
      }
    }
  })();
  await Promise.all([
    pipeline(await decompressed(layer), unpackedBound(image, digest), extract),
    consume,
  ]);
  return scan;
}

/** A layer to read, by its digest (named when it does not unpack); `drop` removes a damaged copy kept of it. */
export interface LayerReader {
  digest: string;
  open: () => Promise<Readable>;
  drop?: () => Promise<void>;
}

/**
 * A layer whose bytes do not unpack (a gzip or zstd stream or a tar cut short or garbled) named
 * by image and digest: its digest was checked as it arrived, so the image is broken at its
 * source, or the cache's copy was damaged since. The error of the decoder, which names neither,
 * is kept as the cause.
 */
async function damagedLayer(err: unknown, image: string, layer: LayerReader): Promise<unknown> {
  // a refusal of ours, a stop, or the disk failing says nothing of the layer's bytes
  if (
    err instanceof OciError ||
    typeof (err as NodeJS.ErrnoException)?.syscall === 'string' ||
    (err as Error)?.name === 'AbortError'
  )
    return err;
  const dropped = await layer.drop?.().then(
    () => true,
    () => false,
  );
  const why = ((err as Error)?.message ?? String(err)).toLowerCase();
  const cached = dropped
    ? ', or its copy in the blob cache was damaged (removed now: a rerun fetches it again)'
    : '';
  return new OciError(
    'INVALID_ARCHIVE',
    `${image}: layer ${layer.digest} does not unpack (${why}): the source registry served a truncated or corrupt blob${cached}; check the image at its source (podman pull unpacks every layer) and run again`,
    { cause: err },
  );
}

/**
 * The files `want` names (paths without a leading /) in an image's layers, each at most 16 MiB
 * and 64 MiB together: later layers override earlier ones and their whiteouts hide them, as in
 * the image's filesystem.
 */
export async function readLayerFiles(
  layers: (LayerReader | (() => Promise<Readable>))[],
  want: (name: string) => boolean,
  image = 'the image',
): Promise<Map<string, Buffer>> {
  const found = new Map<string, Buffer>();
  let read = 0;
  for (const [i, l] of layers.entries()) {
    const layer = typeof l === 'function' ? { digest: `#${i + 1}`, open: l } : l;
    const scan = await scanLayer(await layer.open(), want, image, layer.digest, found, read).catch(
      async (err: unknown) => {
        throw await damagedLayer(err, image, layer);
      },
    );
    read = scan.read;
    for (const [name, bytes] of scan.files) found.set(name, bytes);
  }
  return found;
}

/**
 * An OpenShift release image lists its payload in release-manifests/image-references (an
 * ImageStream) and its version and upgrade edges in release-manifests/release-metadata.
 * Later layers override earlier ones, as in the image's filesystem.
 */
export async function readReleasePayload(
  layers: (LayerReader | (() => Promise<Readable>))[],
  image = 'the release image',
): Promise<ReleasePayload> {
  const found = await readLayerFiles(
    layers,
    (name) =>
      name === IMAGE_REFERENCES_PATH || name === RELEASE_METADATA_PATH || isReleaseManifest(name),
    image,
  );
  const refs = found.get(IMAGE_REFERENCES_PATH);
  if (!refs)
    throw new OciError(
      'INVALID_RELEASE',
      `the release image has no ${IMAGE_REFERENCES_PATH}: is it an OpenShift release image? For other clusters use --image with --version`,
    );
  let stream: ImageStream;
  let meta: ReleaseMetadata = {};
  try {
    stream = JSON.parse(refs.toString('utf8')) as ImageStream;
    const m = found.get(RELEASE_METADATA_PATH);
    if (m) meta = JSON.parse(m.toString('utf8')) as ReleaseMetadata;
  } catch (cause) {
    throw new OciError(
      'INVALID_RELEASE',
      `the release image's manifests are not valid JSON: ${(cause as Error).message}`,
      { cause },
    );
  }
  if (stream.kind !== 'ImageStream')
    throw new OciError(
      'INVALID_RELEASE',
      `${IMAGE_REFERENCES_PATH} is a ${stream.kind ?? 'document without kind'}, expected an ImageStream`,
    );
  const version = meta.version ?? stream.metadata?.name;
  if (!version)
    throw new OciError(
      'INVALID_RELEASE',
      'the release image names no version (release-metadata "version" or image-references metadata.name)',
    );
  const images = (stream.spec?.tags ?? []).map((t, i) => {
    if (!t.name || t.from?.kind !== 'DockerImage' || !t.from.name) {
      throw new OciError(
        'INVALID_RELEASE',
        `${IMAGE_REFERENCES_PATH}: tag #${i + 1} needs a name and from.kind DockerImage with from.name`,
      );
    }
    const reference = parseReference(t.from.name);
    if (!reference.digest)
      throw new OciError(
        'INVALID_RELEASE',
        `${IMAGE_REFERENCES_PATH}: ${t.name} is ${t.from.name}, not pinned by digest`,
      );
    return { name: t.name, reference };
  });
  return {
    version,
    previous: [...(meta.previous ?? [])].sort(),
    images,
    pullAlways: pullAlwaysWorkloads(
      found,
      images.map((i) => i.reference),
    ),
  };
}

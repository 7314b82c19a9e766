import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { join, normalize } from 'node:path';
import type { Readable } from 'node:stream';
import {
  sha256File,
  sha256,
  OciError,
  MediaType,
  MAX_MANIFEST_BYTES,
  type ImageManifest,
  parseReference,
  type ImageReference,
} from '@offline-bundle/oci';
import { readSmallFile } from '@offline-bundle/host';
import type { FetchedManifest, ImageSource } from './source.js';
import { unpackArchive } from './archive-unpack.js';

interface SaveManifestEntry {
  Config: string;
  RepoTags?: string[] | null;
  Layers: string[];
}

async function isGzip(path: string): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const { buffer, bytesRead } = await fh.read(Buffer.alloc(2), 0, 2, 0);
    return bytesRead === 2 && buffer[0] === 0x1f && buffer[1] === 0x8b;
  } finally {
    await fh.close();
  }
}

/** The archive's own manifest.json: which config and layer files make each image. */
async function readSaveManifest(dir: string, description: string): Promise<SaveManifestEntry[]> {
  try {
    return JSON.parse(
      (await readSmallFile(join(dir, 'manifest.json'), MAX_MANIFEST_BYTES)).bytes.toString('utf8'),
    ) as SaveManifestEntry[];
  } catch (cause) {
    throw new OciError(
      'INVALID_ARCHIVE',
      `${description}: not a docker-archive (no readable manifest.json)`,
      { cause },
    );
  }
}

/** The image tagged `ref`, or without one the archive's only image. */
function pickEntry(
  entries: SaveManifestEntry[],
  ref: string | undefined,
  description: string,
): SaveManifestEntry {
  const wanted = ref ? parseReference(ref) : undefined;
  const entry = wanted
    ? entries.find((e) =>
        (e.RepoTags ?? []).some((t) => {
          const r = parseReference(t);
          return (
            r.registry === wanted.registry &&
            r.repository === wanted.repository &&
            r.tag === wanted.tag
          );
        }),
      )
    : entries.length === 1
      ? entries[0]
      : undefined;
  if (!entry)
    throw new OciError(
      'NOT_FOUND',
      ref
        ? `${description}: no image tagged ${ref}`
        : `${description}: holds ${entries.length} images; name one as docker-archive:FILE:REPO:TAG`,
    );
  return entry;
}

/** A Docker schema 2 manifest over the entry's files, hashed as they are, and where each digest's file is. */
async function rebuildManifest(
  dir: string,
  entry: SaveManifestEntry,
): Promise<{ manifest: FetchedManifest; files: Map<string, string> }> {
  const files = new Map<string, string>();
  const add = async (rel: string) => {
    const path = join(dir, normalize(rel));
    const { digest, size } = await sha256File(path);
    files.set(digest, path);
    return { digest, size, path };
  };
  const config = await add(entry.Config);
  const layers = [];
  for (const l of entry.Layers) {
    const layer = await add(l);
    layers.push({
      mediaType: (await isGzip(layer.path)) ? MediaType.DockerLayerGzip : MediaType.DockerLayerTar,
      digest: layer.digest,
      size: layer.size,
    });
  }
  const doc: ImageManifest = {
    schemaVersion: 2,
    mediaType: MediaType.DockerManifest,
    config: { mediaType: MediaType.DockerConfig, digest: config.digest, size: config.size },
    layers,
  };
  const bytes = Buffer.from(JSON.stringify(doc));
  return { manifest: { bytes, mediaType: MediaType.DockerManifest, digest: sha256(bytes) }, files };
}

/**
 * `docker-archive:FILE[:REPO:TAG]`, the output of `docker save`: the image is rebuilt as a
 * Docker schema 2 manifest over the archive's own config and layer files, as skopeo does.
 */
export class DockerArchiveSource implements ImageSource {
  readonly local = true;
  private constructor(
    readonly description: string,
    readonly name: ImageReference,
    private readonly manifest: FetchedManifest,
    private readonly files: Map<string, string>,
    private readonly remove: () => Promise<void>,
  ) {}

  static async open(
    file: string,
    ref: string | undefined,
    description: string,
    nameOverride?: string,
  ): Promise<DockerArchiveSource> {
    const { dir, remove } = await unpackArchive(file, description);
    try {
      const entry = pickEntry(await readSaveManifest(dir, description), ref, description);
      const tagged = nameOverride ?? ref ?? entry.RepoTags?.[0];
      if (!tagged)
        throw new OciError(
          'INVALID_REFERENCE',
          `${description}: the image has no tag; append =REGISTRY/REPO:TAG to name it`,
        );
      const { manifest, files } = await rebuildManifest(dir, entry);
      return new DockerArchiveSource(description, parseReference(tagged), manifest, files, remove);
    } catch (err) {
      await remove();
      throw err;
    }
  }

  async getManifest(digest?: string): Promise<FetchedManifest> {
    if (digest && digest !== this.manifest.digest)
      throw new OciError('NOT_FOUND', `${this.description}: no manifest ${digest}`);
    return this.manifest;
  }

  async getBlob(digest: string, _size: number, offset = 0): Promise<Readable> {
    const path = this.files.get(digest);
    if (!path) throw new OciError('NOT_FOUND', `${this.description}: no blob ${digest}`);
    return createReadStream(path, { start: offset });
  }

  close(): Promise<void> {
    return this.remove();
  }
}

import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import {
  assertDigest,
  digestHex,
  sha256,
  OciError,
  MAX_MANIFEST_BYTES,
  parseManifest,
  type Descriptor,
  type ImageIndex,
  parseReference,
  type ImageReference,
} from '@offline-bundle/oci';
import { assertRegularFile, HostError, quoteName, readSmallFile } from '@offline-bundle/host';
import type { FetchedManifest, ImageSource } from './source.js';

export const REF_NAME_ANNOTATION = 'org.opencontainers.image.ref.name';

/** The bundle needs a registry name for every image; a layout's bare tag ("v1") is not one. */
export function nameFromRefAnnotation(
  refName: string | undefined,
  description: string,
  override?: string,
): ImageReference {
  const candidate = override ?? refName;
  if (candidate && /^[^/]+\.[^/]+\/|^localhost[:/]|^[^/]+:\d+\//.test(candidate))
    return parseReference(candidate);
  throw new OciError(
    'INVALID_REFERENCE',
    `${description} has no registry name${refName ? ` (its ref is "${refName}")` : ''}: append =REGISTRY/REPO:TAG to name it, e.g. "${description}=registry.example.com/app:${refName ?? 'v1'}"`,
  );
}

/**
 * An image in an OCI image layout directory (`oci:DIR[:REF]`); also the engine behind the
 * archive transports, which unpack into a layout first.
 */
export class LayoutSource implements ImageSource {
  readonly local = true;
  private constructor(
    readonly description: string,
    readonly name: ImageReference,
    private readonly dir: string,
    private readonly top: Descriptor,
    private readonly cleanup?: () => Promise<void>,
  ) {}

  static async open(
    dir: string,
    ref: string | undefined,
    description: string,
    nameOverride?: string,
    cleanup?: () => Promise<void>,
  ): Promise<LayoutSource> {
    let index: ImageIndex;
    try {
      index = JSON.parse(
        (await readSmallFile(join(dir, 'index.json'), MAX_MANIFEST_BYTES)).bytes.toString('utf8'),
      ) as ImageIndex;
    } catch (cause) {
      if (cause instanceof HostError)
        throw new OciError(cause.code, `${description}: ${cause.message}`, { cause });
      throw new OciError(
        'NOT_FOUND',
        `${description}: ${dir} is not an OCI image layout (no readable index.json)`,
        { cause },
      );
    }
    const manifests = index.manifests ?? [];
    const matches =
      ref === undefined
        ? manifests
        : manifests.filter((d) => d.annotations?.[REF_NAME_ANNOTATION] === ref);
    if (matches.length === 0)
      throw new OciError(
        'NOT_FOUND',
        `${description}: no image ${ref ? `named ${quoteName(ref)}` : ''} in ${dir}/index.json`,
      );
    if (matches.length > 1)
      throw new OciError(
        'INVALID_REFERENCE',
        `${description}: ${matches.length} images match; name one as oci:${dir}:REF`,
      );
    const top = matches[0]!;
    const name = nameFromRefAnnotation(
      top.annotations?.[REF_NAME_ANNOTATION],
      description,
      nameOverride,
    );
    return new LayoutSource(description, name, dir, top, cleanup);
  }

  blobPath(digest: string): string {
    return join(this.dir, 'blobs', 'sha256', digestHex(digest));
  }

  async getManifest(digest?: string): Promise<FetchedManifest> {
    const want = assertDigest(digest ?? this.top.digest);
    let bytes: Buffer;
    try {
      bytes = (await readSmallFile(this.blobPath(want), MAX_MANIFEST_BYTES)).bytes;
    } catch (cause) {
      if (cause instanceof HostError)
        throw new OciError(cause.code, `${this.description}: manifest ${want}: ${cause.message}`, {
          cause,
        });
      throw new OciError(
        'NOT_FOUND',
        `${this.description}: manifest ${want} is missing from the layout`,
        { cause },
      );
    }
    const actual = sha256(bytes);
    if (actual !== want)
      throw new OciError(
        'DIGEST_MISMATCH',
        `${this.description}: manifest ${want} hashes to ${actual}`,
      );
    const { mediaType } = parseManifest(bytes, digest ? undefined : this.top.mediaType);
    return { bytes, mediaType, digest: want };
  }

  async getBlob(digest: string, _size: number, offset = 0): Promise<Readable> {
    const path = this.blobPath(digest);
    try {
      await stat(path);
      await assertRegularFile(path);
    } catch (cause) {
      if (cause instanceof HostError) throw cause;
      throw new OciError(
        'NOT_FOUND',
        `${this.description}: blob ${digest} is missing from the layout`,
        { cause },
      );
    }
    return createReadStream(path, { start: offset });
  }

  async close(): Promise<void> {
    await this.cleanup?.();
  }
}

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
} from '@offline-bundle/oci';
import { nameFromRefAnnotation } from './layout-source.js';
import { assertRegularFile, HostError, readSmallFile } from '@offline-bundle/host';
import type { ImageReference } from '@offline-bundle/oci';
import type { FetchedManifest, ImageSource } from './source.js';

/** A manifest larger than this is no manifest (the registry client's limit too). */

/**
 * An image in containers/image's directory layout (`dir:PATH`, as `skopeo copy … dir:PATH`
 * writes it): `version`, the top manifest as `manifest.json`, the manifests of a multi-arch
 * copy as `HEX.manifest.json`, every other blob as `HEX`. The directory holds no name, so
 * the source needs `=REGISTRY/REPO:TAG`.
 */
export class DirSource implements ImageSource {
  readonly local = true;
  private constructor(
    readonly description: string,
    readonly name: ImageReference,
    private readonly dir: string,
  ) {}

  static async open(dir: string, description: string, nameOverride?: string): Promise<DirSource> {
    let version: string;
    try {
      version = (await readSmallFile(join(dir, 'version'), 1024)).bytes.toString('utf8');
    } catch (cause) {
      if (cause instanceof HostError)
        throw new OciError(cause.code, `${description}: ${cause.message}`, { cause });
      throw new OciError(
        'NOT_FOUND',
        `${description}: ${dir} is not a dir: image (no readable "version" file; write one with "skopeo copy SOURCE dir:${dir}")`,
        { cause },
      );
    }
    if (!/^Directory Transport Version: 1\.\d+\n?$/.test(version)) {
      throw new OciError(
        'INVALID_MANIFEST',
        `${description}: ${dir}/version is not "Directory Transport Version: 1.x"`,
      );
    }
    return new DirSource(
      description,
      nameFromRefAnnotation(undefined, description, nameOverride),
      dir,
    );
  }

  private async readManifest(file: string, expected?: string): Promise<FetchedManifest> {
    const path = join(this.dir, file);
    let bytes: Buffer;
    try {
      bytes = (await readSmallFile(path, MAX_MANIFEST_BYTES)).bytes;
    } catch (cause) {
      if (cause instanceof HostError && cause.code === 'FILE_TOO_LARGE')
        throw new OciError(
          'INVALID_MANIFEST',
          `${this.description}: ${file} is larger than 4 MiB`,
          { cause },
        );
      if (cause instanceof HostError)
        throw new OciError(cause.code, `${this.description}: ${cause.message}`, { cause });
      throw new OciError('NOT_FOUND', `${this.description}: ${file} is missing from ${this.dir}`, {
        cause,
      });
    }
    const digest = sha256(bytes);
    if (expected && digest !== expected)
      throw new OciError('DIGEST_MISMATCH', `${this.description}: ${file} hashes to ${digest}`);
    return { bytes, mediaType: parseManifest(bytes).mediaType, digest };
  }

  getManifest(digest?: string): Promise<FetchedManifest> {
    if (digest === undefined) return this.readManifest('manifest.json');
    const want = assertDigest(digest);
    return this.readManifest(`${digestHex(want)}.manifest.json`, want);
  }

  async getBlob(digest: string, _size: number, offset = 0): Promise<Readable> {
    const path = join(this.dir, digestHex(assertDigest(digest)));
    try {
      await stat(path);
      await assertRegularFile(path);
    } catch (cause) {
      if (cause instanceof HostError) throw cause;
      throw new OciError(
        'NOT_FOUND',
        `${this.description}: blob ${digest} is missing from ${this.dir}`,
        { cause },
      );
    }
    return createReadStream(path, { start: offset });
  }

  async close(): Promise<void> {}
}

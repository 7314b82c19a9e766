import type { Readable } from 'node:stream';
import type { ImageReference } from '@offline-bundle/oci';

export interface FetchedManifest {
  bytes: Buffer;
  mediaType: string;
  digest: string;
}

/**
 * One image, wherever it lives (registry, OCI layout, archive). Nothing here checks
 * digests for the caller: getManifest does (manifests are small), blob streams are
 * checked by whoever consumes them (the cache), because only it sees every byte.
 */
export interface ImageSource {
  /** What the user wrote, for messages. */
  readonly description: string;
  /** The name the image will carry in the bundle and on the cluster. */
  readonly name: ImageReference;
  /** Its bytes are files on this machine (a directory or an archive): nothing is downloaded. */
  readonly local?: boolean;
  /** The top manifest (no argument) or a child manifest by digest. */
  getManifest(digest?: string): Promise<FetchedManifest>;
  /** A blob's bytes from `offset` on (sources that cannot seek skip the first bytes themselves). */
  getBlob(digest: string, size: number, offset?: number): Promise<Readable>;
  close(): Promise<void>;
}

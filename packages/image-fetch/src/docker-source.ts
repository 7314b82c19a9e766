import type { Readable } from 'node:stream';
import { OciError, formatReference, type ImageReference } from '@offline-bundle/oci';
import type { RegistryClient, RegistryLocation } from './registry-client.js';
import type { PullSource } from './registries-conf.js';
import type { FetchedManifest, ImageSource } from './source.js';

/**
 * An image in a registry (`docker://`), reached through its mirrors first when a
 * registries.conf says so. The first location that yields the top manifest serves the
 * whole image, as containers/image does, so one image never mixes two registries' blobs.
 */
export class DockerSource implements ImageSource {
  private chosen?: RegistryLocation;

  constructor(
    readonly description: string,
    readonly name: ImageReference,
    private readonly client: RegistryClient,
    private readonly locations: PullSource[],
  ) {}

  async getManifest(digest?: string): Promise<FetchedManifest> {
    const reference = digest ?? this.name.digest ?? this.name.tag!;
    if (this.chosen) return this.client.getManifest(this.chosen, reference);
    const failures: string[] = [];
    for (const loc of this.locations) {
      try {
        const m = await this.client.getManifest(loc, reference);
        this.chosen = loc;
        return m;
      } catch (err) {
        if (!(err instanceof OciError) || this.locations.length === 1) throw err;
        failures.push(`${loc.registry}/${loc.repository}: ${err.message}`);
      }
    }
    throw new OciError(
      'NOT_FOUND',
      `${formatReference(this.name)} is not in any of its locations: ${failures.join('; ')}`,
    );
  }

  async getBlob(digest: string, _size: number, offset = 0): Promise<Readable> {
    if (!this.chosen) await this.getManifest();
    return this.client.getBlob(this.chosen!, digest, offset);
  }

  async close(): Promise<void> {}
}

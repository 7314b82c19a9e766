// The order a bundle's blobs are written in. Digest order is what every agent reads; pull order
// is what a runtime asks for, so an agent reading the stick front to back can start each
// image's pull as soon as that image is staged, instead of when the last of its blobs, spread
// over the whole file by digest, arrives.
import { featureNeedsVersion } from '@offline-bundle/format';

export const BLOB_ORDERS = ['digest', 'pull'] as const;
export type BlobOrder = (typeof BLOB_ORDERS)[number];

/** The one-line reason `order` cannot go with `formatVersion`, or undefined when it can. */
export function blobOrderProblem(
  order: BlobOrder | undefined,
  formatVersion: number | undefined,
): string | undefined {
  if (order !== 'pull' || formatVersion === undefined) return undefined;
  return featureNeedsVersion('blobs in pull order', formatVersion);
}

/**
 * Every blob once, image by image as a runtime pulls it: the manifest (and an index's chosen
 * child manifests), the config, then the layers in the manifest's order; a blob several images
 * share comes at its first use. `images` is each image's blobs in that order already.
 */
export function pullOrder<B extends { digest: string }>(images: Iterable<readonly B[]>): B[] {
  const seen = new Set<string>();
  const out: B[] = [];
  for (const blobs of images) {
    for (const b of blobs) {
      if (seen.has(b.digest)) continue;
      seen.add(b.digest);
      out.push(b);
    }
  }
  return out;
}

/** Every blob by digest: the order each version reads. */
export function digestOrder<B>(blobs: Iterable<B>, digestOf: (b: B) => string): B[] {
  return [...blobs].sort((a, b) =>
    digestOf(a) < digestOf(b) ? -1 : digestOf(a) > digestOf(b) ? 1 : 0,
  );
}

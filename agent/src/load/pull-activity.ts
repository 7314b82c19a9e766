// Which blobs a pull of each name moves, so a pull's watchdog (preload.stallSeconds) sees the
// bytes of its own image going out of the load's registry, a layer it shares with another
// pull included: the runtime fetches a shared layer once and both pulls wait on it.
import type { BundleManifest } from '@offline-bundle/format';
import { parseManifest } from '@offline-bundle/oci';
import type { BlobStore, Catalog, ServedLog } from '@offline-bundle/registry';
import type { PullActivity } from '@offline-bundle/runtime';
import { namesOf } from '../runtime/runtime-target.js';

/** Past this a manifest is not read for its blobs: any blob of the bundle moving counts for its pull. */
const MANIFEST_READ_BYTES = 4 * 1024 * 1024;

/** When bytes of a name's image last went out of the registry that logs to `served`. */
export function pullActivity(
  m: BundleManifest,
  store: BlobStore,
  catalog: Catalog,
  served: ServedLog,
): PullActivity {
  const digestOf = new Map(
    m.images.flatMap((img) => namesOf(img).map((n) => [n, img.digest] as const)),
  );
  const blobs = new Map<string, Promise<string[]>>();
  return async (ref) => {
    const digest = digestOf.get(ref);
    if (!digest) return undefined;
    let of = blobs.get(digest);
    if (!of) blobs.set(digest, (of = blobsOf(digest, store, catalog)));
    return served.lastMoved(await of);
  };
}

/** The manifest, an index's carried children, the configs and the layers. */
async function blobsOf(digest: string, store: BlobStore, catalog: Catalog): Promise<string[]> {
  const carried = (d: string) => catalog.blobs.has(d);
  try {
    const parsed = parseManifest(await readBlob(store, digest), catalog.manifests.get(digest));
    if (parsed.kind === 'manifest')
      return [
        digest,
        ...[parsed.manifest.config, ...parsed.manifest.layers].map((d) => d.digest).filter(carried),
      ];
    const children = await Promise.all(
      parsed.index.manifests
        .map((c) => c.digest)
        .filter(carried)
        .map((c) => blobsOf(c, store, catalog)),
    );
    return [digest, ...children.flat()];
  } catch {
    // a manifest not understood here (or too large to read): bytes of any blob count as its pull's
    return [...catalog.blobs.keys()];
  }
}

/** A manifest blob of the store, at most MANIFEST_READ_BYTES. */
export async function readBlob(store: BlobStore, digest: string): Promise<Buffer> {
  const size = store.size(digest) ?? 0;
  if (size > MANIFEST_READ_BYTES) throw new Error(`${digest} is ${size} bytes`);
  const parts: Buffer[] = [];
  for await (const chunk of await store.open(digest, 0, size)) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

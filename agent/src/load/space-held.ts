// Which of a bundle's layers the runtime's store holds already: those cost nothing to load.
// Asked of the store's own records, which name every layer by digest, as the CRI cannot
// (ListImages names whole images only): CRI-O's containers/storage lists its layers in
// overlay-layers/layers.json; containerd keeps each blob in its content store under its digest.
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { readSmallFile } from '@offline-bundle/host';
import type { BundleBlob } from '@offline-bundle/format';
import type { RuntimeKind } from '../config.js';

/** Largest layers.json read: some 500 bytes a layer, so room for tens of thousands of layers. */
export const MAX_LAYERS_RECORD_BYTES = 32 * 1024 * 1024;

export interface HeldLayers {
  /** Digests of the bundle's blobs the store already holds. */
  held: Set<string>;
  /** Why nothing could be counted as held (every layer then counts as new); undefined when the store was read. */
  unknown?: string;
}

/** containers/storage's record of a layer (the fields used). */
interface StorageLayer {
  'compressed-diff-digest'?: unknown;
  'diff-digest'?: unknown;
}

/**
 * CRI-O: the layers containers/storage lists, by compressed and uncompressed digest. A layer is
 * stored once per parent chain, so one held under another base is a slight over-count of what is
 * held (rare: the bundles' images share their base layers in the same order).
 */
async function crioHeld(storeDir: string, wanted: ReadonlySet<string>): Promise<HeldLayers> {
  const path = join(storeDir, 'overlay-layers', 'layers.json');
  let records: unknown;
  try {
    records = JSON.parse(
      (await readSmallFile(path, MAX_LAYERS_RECORD_BYTES)).bytes.toString('utf8'),
    );
  } catch (err) {
    // a store that has never held a layer has no record yet
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { held: new Set() };
    return { held: new Set(), unknown: `${path}: ${(err as Error).message.split('\n')[0]}` };
  }
  if (!Array.isArray(records))
    return { held: new Set(), unknown: `${path} is not a list of layers` };
  const held = new Set<string>();
  for (const r of records as StorageLayer[]) {
    for (const d of [r?.['compressed-diff-digest'], r?.['diff-digest']])
      if (typeof d === 'string' && wanted.has(d)) held.add(d);
  }
  return { held };
}

/** containerd: the content store's blobs (kept after unpacking unless discard_unpacked_layers is set). */
async function containerdHeld(storeDir: string, wanted: ReadonlySet<string>): Promise<HeldLayers> {
  const dir = join(storeDir, 'io.containerd.content.v1.content', 'blobs', 'sha256');
  const held = new Set<string>();
  for (const digest of wanted) {
    const st = await stat(join(dir, digest.slice('sha256:'.length))).catch(() => undefined);
    if (st?.isFile()) held.add(digest);
  }
  return { held };
}

/** The bundle's layer blobs (of `blobs`) the runtime's store holds. */
export function heldLayers(
  runtime: RuntimeKind,
  storeDir: string,
  layers: readonly BundleBlob[],
): Promise<HeldLayers> {
  const wanted = new Set(layers.map((b) => b.digest).filter((d) => d.startsWith('sha256:')));
  return runtime === 'crio' ? crioHeld(storeDir, wanted) : containerdHeld(storeDir, wanted);
}

// A delta's blobs that are listed but not carried: filled into the staging from what the node
// holds of the base, each held to its signed digest exactly as an entry read from the archive.
import { Transform, type Readable } from 'node:stream';
import { newSha256 } from '@offline-bundle/oci';
import type { EntryFiles } from './entry-files.js';
import { FormatError } from './errors.js';
import { baseEntries, baseLabel } from './listing.js';
import type { BundleManifest } from './manifest.js';
import type { LayoutEntry } from './verify-options.js';

/** Where a delta's base blobs come from: opens one as the node holds it (throws when it holds none). */
export interface BaseSource {
  open: (entry: LayoutEntry) => Promise<Readable>;
  /** Releases what the opens held (a base bundle's file): called once the fill is over, filled or failed. */
  close?: () => Promise<void>;
}

/** The one-line refusal of a delta nothing can fill: which release it needs, and the fix. */
export function needsBase(m: BundleManifest, fix: string): FormatError {
  const b = m.base!;
  return new FormatError(
    'BASE_MISSING',
    `this bundle is a delta against ${baseLabel(b)} (${b.bundleJson}): ${baseEntries(m).length} of its ${m.blobs.length} blobs are not in it; ${fix}`,
  );
}

/** Passes at most `limit` bytes on, hashing them: a base file longer than listed stops at the first byte past it. */
function hashedUpTo(
  limit: number,
  hash: ReturnType<typeof newSha256>,
  seen: (n: number) => void,
  path: string,
): Transform {
  let total = 0;
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      total += chunk.length;
      if (total > limit)
        return cb(
          new FormatError(
            'BASE_CORRUPT',
            `${path} of the base, as this node holds it, is longer than the ${limit} bytes bundle.json lists`,
          ),
        );
      hash.update(chunk);
      seen(chunk.length);
      cb(null, chunk);
    },
  });
}

/**
 * Copies every base blob of `m` from `source` into the staging `files`, hashing each as it is
 * copied; one that does not hash to its signed digest refuses the whole bundle (BASE_CORRUPT),
 * and nothing of it is placed.
 */
export async function fillFromBase(
  m: BundleManifest,
  files: EntryFiles,
  source: BaseSource,
  opts: { signal?: AbortSignal | undefined; onBytes?: (n: number) => void },
): Promise<void> {
  const b = m.base!;
  for (const e of baseEntries(m)) {
    opts.signal?.throwIfAborted();
    const hash = newSha256();
    let size = 0;
    const data = await source.open(e);
    const hashed = hashedUpTo(
      e.size,
      hash,
      (n) => {
        size += n;
        opts.onBytes?.(n);
      },
      e.path,
    );
    data.on('error', (err) => hashed.destroy(err));
    // pipe() leaves the source open when the write fails: destroyed, it gives back its frame budget
    await files.write(e, data.pipe(hashed)).finally(() => data.destroy());
    const actual = 'sha256:' + hash.digest('hex');
    if (size !== e.size || actual !== e.digest) {
      throw new FormatError(
        'BASE_CORRUPT',
        `this update needs ${b.version} on this node, and its copy here is damaged (${e.path} is ${size} bytes hashing to ${actual}; this bundle lists ${e.size} bytes, ${e.digest}): plug in the full bundle`,
      );
    }
    files.place(e);
  }
}

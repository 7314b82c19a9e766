// A bundle with an update path (#43) carries every release of the path: each gets a release
// record of its own, with the names of its own images, so the pins of an earlier release can go
// once the node runs the final one while the images the final one shares stay.
import { releasePath, type BundleManifest, type ReleaseHop } from '@offline-bundle/format';
import { parseManifest, platformMatches } from '@offline-bundle/oci';
import { readReleasePayload } from '@offline-bundle/openshift-release';
import type { BlobStore } from '@offline-bundle/registry';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { namesOf } from '../runtime/runtime-target.js';
import { readBlob } from './pull-activity.js';

/** One release of the path and the image names its record pins. */
export interface PathRelease {
  version: string;
  refs: string[];
}

/** The release image's layers for `arch`: the manifest itself, or the index's child of that platform. */
async function releaseLayers(store: BlobStore, digest: string, arch: string): Promise<string[]> {
  const top = parseManifest(await readBlob(store, digest));
  if (top.kind === 'manifest') return top.manifest.layers.map((l) => l.digest);
  const child = top.index.manifests.find(
    (c) =>
      platformMatches({ os: 'linux', architecture: arch }, c.platform) &&
      store.size(c.digest) !== undefined,
  );
  if (!child) throw new Error(`the release image ${digest} carries no linux/${arch} manifest`);
  const m = parseManifest(await readBlob(store, child.digest));
  if (m.kind !== 'manifest')
    throw new Error(`the release image ${digest} nests an index in an index`);
  return m.manifest.layers.map((l) => l.digest);
}

/** The digests of one release's images: its release image and the payload its image-references lists. */
async function releaseDigests(
  store: BlobStore,
  hop: ReleaseHop,
  arch: string,
): Promise<Set<string>> {
  const layers = await releaseLayers(store, hop.digest!, arch);
  const payload = await readReleasePayload(
    layers.map((d) => ({ digest: d, open: () => store.open(d, 0, store.size(d) ?? 0) })),
    `the release image of ${hop.version}`,
  );
  return new Set([hop.digest!, ...payload.images.map((i) => i.reference.digest!)]);
}

/**
 * Each release of the bundle's path with its images' names, the final one last; undefined for a
 * bundle of one release. The final release keeps whatever no release of the path lists (add-on
 * images, the agent's). A release whose payload cannot be read is given every image of the
 * bundle: it pins more, never less.
 */
export async function pathReleases(
  m: BundleManifest,
  store: BlobStore,
  log: Logger,
): Promise<PathRelease[] | undefined> {
  const path = releasePath(m);
  if (path.length < 2) return undefined;
  const all = m.images.map((img) => ({ digest: img.digest, names: namesOf(img) }));
  const everything = [...new Set(all.flatMap((i) => i.names))].sort();
  const sets: (Set<string> | undefined)[] = [];
  for (const hop of path) {
    sets.push(
      await releaseDigests(store, hop, m.release.arch).catch((err: unknown) => {
        log.warn(
          'pin',
          `cannot read which images are ${hop.version}'s (${oneLine(err)}): its record keeps every image of the bundle pinned`,
          { version: hop.version },
        );
        return undefined;
      }),
    );
  }
  const listed = new Set(sets.flatMap((s) => [...(s ?? [])]));
  return path.map((hop, i) => {
    const own = sets[i];
    if (!own) return { version: hop.version, refs: everything };
    const mine = all.filter(
      (img) => own.has(img.digest) || (i === path.length - 1 && !listed.has(img.digest)),
    );
    return { version: hop.version, refs: [...new Set(mine.flatMap((img) => img.names))].sort() };
  });
}

// The release a node runs before its first bundle was never loaded by the agent, so nothing
// recorded its images: without a record it would not stay pinned while the next one loads.
import { join } from 'node:path';
import { AGENT_REPOSITORY, type BundleManifest } from '@offline-bundle/format';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import type { ClusterRelease } from '@offline-bundle/status';
import type { ImageInspector } from '../runtime/runtime-target.js';
import { readStateJson } from '../state/state-json.js';
import { recordRelease, type ReleaseRecord } from '../state/release-records.js';

/**
 * The last running release read from the cluster's ClusterVersion, kept in the state directory
 * so a node whose API server is away (a single-node cluster rebooting, a partitioned site)
 * still checks downgrades and upgrade sources after a restart.
 */
export const CLUSTER_RELEASE_FILE = 'cluster-release.json';

interface RememberedRelease extends ClusterRelease {
  /** When the cluster last said so (ISO 8601). */
  seenAt: string;
}

// A version as ClusterVersion carries it (4.15.1, 4.16.0-rc.2, v1.30.2+k3s1); an image by digest.
const VERSION_SHAPE = /^v?[0-9][0-9A-Za-z.+_-]{0,63}$/;
const IMAGE_SHAPE = /^[^\s@]{1,255}@sha256:[0-9a-f]{64}$/;

export async function rememberClusterRelease(
  stateDir: string,
  r: ClusterRelease,
  now = new Date(),
): Promise<void> {
  if (!VERSION_SHAPE.test(r.version)) return;
  // an image by tag is not kept (it pins nothing), but the version is: a stale file would let a downgrade through
  const image = r.image !== undefined && IMAGE_SHAPE.test(r.image) ? r.image : undefined;
  const known = await rememberedClusterRelease(stateDir);
  // written only when the release changes: a read on every load is not a write on every load
  if (known && known.version === r.version && known.image === image) return;
  await makeDirs(stateDir);
  const rec: RememberedRelease = {
    version: r.version,
    ...(image ? { image } : {}),
    seenAt: now.toISOString(),
  };
  await writeFileAtomic(join(stateDir, CLUSTER_RELEASE_FILE), JSON.stringify(rec, null, 2) + '\n');
}

/** The remembered release, or undefined when none was kept or the file is not of our shape (treated as absent). */
export async function rememberedClusterRelease(
  stateDir: string,
): Promise<RememberedRelease | undefined> {
  const v = await readStateJson(join(stateDir, CLUSTER_RELEASE_FILE));
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const r = v as Record<string, unknown>;
  if (typeof r.version !== 'string' || !VERSION_SHAPE.test(r.version)) return undefined;
  if (r.image !== undefined && (typeof r.image !== 'string' || !IMAGE_SHAPE.test(r.image)))
    return undefined;
  if (typeof r.seenAt !== 'string' || Number.isNaN(Date.parse(r.seenAt))) return undefined;
  return {
    version: r.version,
    ...(typeof r.image === 'string' ? { image: r.image } : {}),
    seenAt: r.seenAt,
  };
}

/**
 * A record for the running release when none exists: its release image (from ClusterVersion),
 * when the node holds it, and every image the node holds, by digest, from the repositories the incoming release uses
 * (an OpenShift payload lives in one repository, so these are the running payload's images).
 * Taken before the pulls, so none of the incoming release's images is counted. Unpinned, as
 * any release, once a newer one is complete.
 */
export async function adoptRunningRelease(opts: {
  stateDir: string;
  arch: string;
  running: ClusterRelease;
  incoming: BundleManifest;
  releases: ReleaseRecord[];
  inspector?: ImageInspector;
}): Promise<ReleaseRecord | undefined> {
  const { running, incoming, arch } = opts;
  if (running.version === incoming.release.version) return undefined;
  if (opts.releases.some((r) => r.version === running.version && r.arch === arch)) return undefined;
  const refs = new Set<string>();
  // The release image runs where the cluster version operator runs (control plane): a worker
  // rarely holds it, and a pin of an image the node does not have fails the load.
  if (running.image && !opts.inspector) refs.add(running.image);
  if (opts.inspector) {
    // agent images are kept pinned by the agent switch, not by a release
    const repos = new Set(
      incoming.images.map((i) => i.repository).filter((r) => r !== AGENT_REPOSITORY),
    );
    // neither the incoming release's images nor those of releases the agent loaded before
    const incomingRefs = new Set([
      ...incoming.images.map((i) => `${i.repository}@${i.digest}`),
      ...opts.releases.flatMap((r) => r.refs),
    ]);
    for (const img of await opts.inspector.listImages()) {
      for (const ref of img.repoDigests) {
        if (
          ref === running.image ||
          (repos.has(ref.slice(0, ref.lastIndexOf('@'))) && !incomingRefs.has(ref))
        )
          refs.add(ref);
      }
    }
  }
  if (refs.size === 0) return undefined;
  const rec: ReleaseRecord = {
    version: running.version,
    arch,
    refs: [...refs].sort(),
    loadedAt: new Date().toISOString(),
    source: 'node',
  };
  await recordRelease(opts.stateDir, rec);
  return rec;
}

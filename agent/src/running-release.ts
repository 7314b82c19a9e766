// The release a node runs before its first bundle was never loaded by the agent, so nothing
// recorded its images: without a record it would not stay pinned while the next one loads.
import { AGENT_REPOSITORY, type BundleManifest } from '@offline-bundle/format';
import type { ClusterRelease } from '@offline-bundle/status';
import type { ImageInspector } from './runtime-target.js';
import { recordRelease, type ReleaseRecord } from './state.js';

/**
 * A record for the running release when none exists: its release image (from ClusterVersion)
 * and every image the node holds, by digest, from the repositories the incoming release uses
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
  if (running.image) refs.add(running.image);
  if (opts.inspector) {
    // agent images are kept pinned by the agent switch, not by a release
    const repos = new Set(incoming.images.map((i) => i.repository).filter((r) => r !== AGENT_REPOSITORY));
    // neither the incoming release's images nor those of releases the agent loaded before
    const incomingRefs = new Set([...incoming.images.map((i) => `${i.repository}@${i.digest}`), ...opts.releases.flatMap((r) => r.refs)]);
    for (const img of await opts.inspector.listImages()) {
      for (const ref of img.repoDigests) {
        if (repos.has(ref.slice(0, ref.lastIndexOf('@'))) && !incomingRefs.has(ref)) refs.add(ref);
      }
    }
  }
  if (refs.size === 0) return undefined;
  const rec: ReleaseRecord = { version: running.version, arch, refs: [...refs].sort(), loadedAt: new Date().toISOString(), source: 'node' };
  await recordRelease(opts.stateDir, rec);
  return rec;
}

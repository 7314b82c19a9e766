import {
  compareVersions,
  positionOnPath,
  releasePath,
  type BundleManifest,
  type ReleaseHop,
} from '@offline-bundle/format';
import { normalizeArch } from '@offline-bundle/oci';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';

// one ordering of release versions for the agent's downgrade check and the builder's delta base
export { compareVersions } from '@offline-bundle/format';

/** The policy's verdicts on a bundle against this node (arch, version): the bundle is not for it, whatever is fixed here. */
export const POLICY_REFUSALS: ReadonlySet<string> = new Set([
  'WrongArch',
  'Downgrade',
  'NotAnUpgradeSource',
]);

/** Most upgrade sources a refusal lists: the message stays one readable line. */
const MAX_SOURCES_NAMED = 4;

/**
 * The one-line refusal when the node's running release is unknown, with the fixes that apply
 * to this config (a cluster that could not be read waits instead: see running-version.ts).
 */
function unknownRunningVersion(config: AgentConfig): AgentError {
  const cause = config.version.fromCluster
    ? 'the cluster has no ClusterVersion "version" with a completed update (not OpenShift, or not installed yet) and this node never saw a running version'
    : 'the running version is not known';
  const fix = config.version.fromCluster
    ? 'set version.current to the version the cluster runs, or version.allowUnknown: true to load anyway'
    : 'set version.current (or version.fromCluster with status.kubeconfig), or version.allowUnknown: true to load anyway';
  return new AgentError(
    'UnknownRunningVersion',
    `${cause}, so downgrades and upgrade sources cannot be checked: ${fix}`,
  );
}

/** "4.14.30, 4.14.31 and 2 more": the sources a refusal names. */
function sourcesText(list: readonly string[]): string {
  const shown = list.slice(0, MAX_SOURCES_NAMED).join(', ');
  return list.length > MAX_SOURCES_NAMED
    ? `${shown} and ${list.length - MAX_SOURCES_NAMED} more`
    : shown;
}

/**
 * Where a node running `current` joins an update path: the index of the first release it takes
 * (the one after `current` when it runs a release of the path, the final one when it runs that),
 * or undefined when it joins nowhere. Read as `bundle cluster` reads it (positionOnPath).
 */
function pathEntry(path: readonly ReleaseHop[], current: string): number | undefined {
  const done = positionOnPath(path, current);
  return done === undefined ? undefined : Math.min(done + 1, path.length - 1);
}

/** The one-line NotAnUpgradeSource of a bundle with an update path: the path, the running version, what to run first. */
function notOnPath(path: readonly ReleaseHop[], current: string): AgentError {
  const first = path[0]!;
  const names = path.map((h) => h.version).join(' → ');
  return new AgentError(
    'NotAnUpgradeSource',
    `the path ${names} cannot be taken from the running ${current}: ${first.version} upgrades from ${sourcesText(first.upgradeFrom)}, so this node's cluster must run ${first.upgradeFrom.length === 1 ? first.upgradeFrom[0] : `one of ${sourcesText(first.upgradeFrom)}`} (or a release of the path) first`,
  );
}

/**
 * Arch and version policy: each refusal says what the technician or admin can do. A bundle with
 * an update path (#43) is accepted where the node joins the path (pathEntry); the downgrade
 * check is the final release's, as for a bundle of one release. Returns the index of the first
 * release of releasePath(m) the node takes (0 for a bundle of one release, or where the running
 * version is unknown and allowed, or any source is).
 */
export function checkPolicy(
  m: BundleManifest,
  config: AgentConfig,
  current: string | undefined,
): number {
  const r = m.release;
  const path = releasePath(m);
  const last = path.length - 1;
  if (normalizeArch(r.arch) !== config.arch) {
    throw new AgentError(
      'WrongArch',
      `this bundle is for ${r.arch} but this node is ${config.arch}: use the ${config.arch} bundle`,
    );
  }
  // Fail closed: without the running version neither check below can run, and a downgrade
  // (or a skipped upgrade edge) is exactly what the policy exists to stop.
  if (!current) {
    if (config.version.allowUnknown) return 0;
    throw unknownRunningVersion(config);
  }
  const cmp = compareVersions(r.version, current);
  if (cmp < 0 && !config.version.allowDowngrade) {
    throw new AgentError(
      'Downgrade',
      `this bundle holds ${r.version}, older than the running ${current}: bring the bundle for a newer version (or set version.allowDowngrade)`,
    );
  }
  if (cmp <= 0) return last;
  const entry = pathEntry(path, current);
  if (entry !== undefined) return entry;
  if (config.version.allowAnySource) return 0;
  if (last > 0) throw notOnPath(path, current);
  // Same ordering for the source list, so "v4.14.38" or "4.14.38+build" name the running 4.14.38.
  throw new AgentError(
    'NotAnUpgradeSource',
    `${r.version} cannot be installed over the running ${current} (it upgrades from ${r.upgradeFrom.join(', ')}): install an intermediate version first`,
  );
}

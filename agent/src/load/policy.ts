import { compareVersions, type BundleManifest } from '@offline-bundle/format';
import { normalizeArch } from '@offline-bundle/oci';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';

// one ordering of release versions for the agent's downgrade check and the builder's delta base
export { compareVersions } from '@offline-bundle/format';

/**
 * The one-line refusal when the node's running release is unknown, with the fixes that apply
 * to this config (a cluster that could not be read waits instead: see pipeline.ts).
 */
function unknownRunningVersion(config: AgentConfig): AgentError {
  const cause = config.version.fromCluster
    ? 'the cluster has no ClusterVersion "version" with a completed update (not OpenShift, or not installed yet) and this node never saw a running version'
    : 'the running version is not known';
  const fix = config.version.fromCluster
    ? 'set version.current to the version the cluster runs, or version.allowUnknown: true to load anyway'
    : 'set version.current (or version.fromCluster with status.kubeconfig), or version.allowUnknown: true to load anyway';
  return new AgentError('UnknownRunningVersion', `${cause}, so downgrades and upgrade sources cannot be checked: ${fix}`);
}

/** Arch and version policy: each refusal says what the technician or admin can do. */
export function checkPolicy(m: BundleManifest, config: AgentConfig, current: string | undefined): void {
  const r = m.release;
  if (normalizeArch(r.arch) !== config.arch) {
    throw new AgentError('WrongArch', `this bundle is for ${r.arch} but this node is ${config.arch}: use the ${config.arch} bundle`);
  }
  // Fail closed: without the running version neither check below can run, and a downgrade
  // (or a skipped upgrade edge) is exactly what the policy exists to stop.
  if (!current) {
    if (config.version.allowUnknown) return;
    throw unknownRunningVersion(config);
  }
  const cmp = compareVersions(r.version, current);
  if (cmp < 0 && !config.version.allowDowngrade) {
    throw new AgentError('Downgrade', `this bundle holds ${r.version}, older than the running ${current}: bring the bundle for a newer version (or set version.allowDowngrade)`);
  }
  // Same ordering for the source list, so "v4.14.38" or "4.14.38+build" name the running 4.14.38.
  const isSource = r.upgradeFrom.some((v) => compareVersions(v, current) === 0);
  if (cmp > 0 && r.upgradeFrom.length > 0 && !isSource && !config.version.allowAnySource) {
    throw new AgentError('NotAnUpgradeSource', `${r.version} cannot be installed over the running ${current} (it upgrades from ${r.upgradeFrom.join(', ')}): install an intermediate version first`);
  }
}

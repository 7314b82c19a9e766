import { compare as compareSemver, parse as parseSemver } from 'semver';
import type { BundleManifest } from '@offline-bundle/format';
import { normalizeArch } from '@offline-bundle/oci';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';

/** Compares dotted versions numerically ("4.14.38" < "4.15.0"); non-numeric parts compare as text. */
function compareDotted(a: string, b: string): number {
  const pa = a.replace(/^v/, '').split(/[.+-]/);
  const pb = b.replace(/^v/, '').split(/[.+-]/);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const x = pa[i] ?? '0';
    const y = pb[i] ?? '0';
    const nx = /^\d+$/.test(x) ? Number(x) : NaN;
    const ny = /^\d+$/.test(y) ? Number(y) : NaN;
    const c = !Number.isNaN(nx) && !Number.isNaN(ny) ? nx - ny : x.localeCompare(y);
    if (c !== 0) return c < 0 ? -1 : 1;
  }
  return 0;
}

/**
 * Orders release versions the way OpenShift does: semver 2.0 precedence, so pre-releases come
 * before their release (4.14.0-ec.1 < 4.14.0-rc.1 < 4.14.0 < 4.14.1), numeric pre-release parts
 * compare as numbers (rc.2 < rc.10), build metadata (+...) is ignored and a leading "v" is
 * tolerated. Versions that are not semver ("4.14", "1.30") keep the dotted comparison, where
 * missing parts count as 0.
 */
export function compareVersions(a: string, b: string): number {
  const sa = parseSemver(a);
  const sb = parseSemver(b);
  if (sa && sb) return compareSemver(sa, sb);
  return compareDotted(a, b);
}

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

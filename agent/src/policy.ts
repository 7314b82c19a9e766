import type { BundleManifest } from '@offline-bundle/format';
import { normalizeArch } from '@offline-bundle/oci';
import type { AgentConfig } from './config.js';
import { AgentError } from './errors.js';

/** Compares dotted versions numerically ("4.14.38" < "4.15.0"); non-numeric parts compare as text. */
export function compareVersions(a: string, b: string): number {
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

/** Arch and version policy: each refusal says what the technician or admin can do. */
export function checkPolicy(m: BundleManifest, config: AgentConfig, current: string | undefined): void {
  const r = m.release;
  if (normalizeArch(r.arch) !== config.arch) {
    throw new AgentError('WrongArch', `this bundle is for ${r.arch} but this node is ${config.arch}: use the ${config.arch} bundle`);
  }
  if (!current) return;
  const cmp = compareVersions(r.version, current);
  if (cmp < 0 && !config.version.allowDowngrade) {
    throw new AgentError('Downgrade', `this bundle holds ${r.version}, older than the running ${current}: bring the bundle for a newer version (or set version.allowDowngrade)`);
  }
  if (cmp > 0 && r.upgradeFrom.length > 0 && !r.upgradeFrom.includes(current) && !config.version.allowAnySource) {
    throw new AgentError('NotAnUpgradeSource', `${r.version} cannot be installed over the running ${current} (it upgrades from ${r.upgradeFrom.join(', ')}): install an intermediate version first`);
  }
}

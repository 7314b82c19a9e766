import { compare as compareSemver, parse as parseSemver } from 'semver';

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
 * missing parts count as 0. The agent's downgrade check and the builder's delta base check
 * share it, so "earlier release" means one thing on both ends.
 */
export function compareVersions(a: string, b: string): number {
  const sa = parseSemver(a);
  const sb = parseSemver(b);
  if (sa && sb) return compareSemver(sa, sb);
  return compareDotted(a, b);
}

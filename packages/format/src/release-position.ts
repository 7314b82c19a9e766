// Where a running version stands on an update path (#43): the one reading the node's policy
// (which release a node takes first) and `bundle cluster` (which hop comes next) both use, so
// a node never accepts a stick the admin's tool refuses, nor the other way round.
import { compareVersions } from './release-version.js';

/** What a position is read from: each release of the path (the final one last) and the versions it upgrades from. */
export interface PathStep {
  version: string;
  upgradeFrom: readonly string[];
}

// "v4.14.30" and "4.14.30+build" name 4.14.30: an agent's version.current or a builder flag may carry them
const sameVersion = (a: string, b: string) => compareVersions(a, b) === 0;

/**
 * Whether path[i] takes `running` as its source: its upgradeFrom names it; or, for the first
 * release only, an empty upgradeFrom ("any") and a running version older than it. A later
 * release is reached through the one before it (bundle.json requires it to name that one), so
 * its empty list is no licence to skip a release of the path; and "any" never means a downgrade.
 */
function takesFrom(path: readonly PathStep[], i: number, running: string): boolean {
  const step = path[i]!;
  if (step.upgradeFrom.length > 0) return step.upgradeFrom.some((v) => sameVersion(v, running));
  return i === 0 && compareVersions(step.version, running) > 0;
}

/** Whether every release after `from` upgrades from the one before it, as bundle.json's validation holds (checked again: the running version depends on it). */
function chainsAfter(path: readonly PathStep[], from: number): boolean {
  for (let i = from + 1; i < path.length; i++) {
    if (!path[i]!.upgradeFrom.some((v) => sameVersion(v, path[i - 1]!.version))) return false;
  }
  return true;
}

/**
 * The index of the last release of `path` a cluster running `running` completed: i when it runs
 * path[i] (a release of the path wins over a source a later release names: the path is taken
 * hop by hop, as planned); else i - 1 for the latest release that takes it as a source (the
 * fewest hops; -1: none of the path done yet). `running` unknown (a cluster with no completed
 * update) counts only for a path whose first release takes any source. Undefined when the path
 * cannot be taken from there: no release takes it, or the releases after its entry do not chain.
 */
export function positionOnPath(
  path: readonly PathStep[],
  running: string | undefined,
): number | undefined {
  if (path.length === 0) return undefined;
  let done: number | undefined;
  if (running === undefined) done = path[0]!.upgradeFrom.length === 0 ? -1 : undefined;
  else {
    const on = path.findIndex((s) => sameVersion(s.version, running));
    if (on >= 0) done = on;
    else {
      for (let i = path.length - 1; i >= 0 && done === undefined; i--)
        if (takesFrom(path, i, running)) done = i - 1;
    }
  }
  return done !== undefined && chainsAfter(path, done + 1) ? done : undefined;
}

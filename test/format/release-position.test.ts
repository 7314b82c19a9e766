// tier: unit
// Where a running version stands on an update path (#43): one reading for the node's policy
// (pathEntry: the first release it takes) and `bundle cluster` (pathPosition: the last release
// done). Before, each side had its own, and they differed; every row where they did says what
// each answered then (as "done": the index of the last release completed, -1 none, "-" refused;
// the agent's entry, done + 1, stopped at the final release).
import t from 'tap';
import {
  compareVersions,
  positionOnPath,
  type BundleManifest,
  type PathStep,
} from '@offline-bundle/format';
import { AgentError, checkPolicy, parseConfig } from '@offline-bundle/agent';
import { pathPosition } from '@offline-bundle/cluster';

const step = (version: string, ...upgradeFrom: string[]): PathStep => ({ version, upgradeFrom });
/** 4.14.30 (or 4.14.29) → 4.15.40 → 4.16.2, as the builder writes it. */
const EUS = [step('4.15.40', '4.14.30', '4.14.29'), step('4.16.2', '4.15.40')];
const show = (n: number | undefined) => (n === undefined ? '-' : String(n));

// [what, path, running, now, agent before, cluster before, why the rule is the one kept]
type Row = [string, PathStep[], string | undefined, number | undefined, string, string, string];
const differed: Row[] = [
  [
    'a v prefix on the running release of the path',
    EUS,
    'v4.15.40',
    0,
    '0',
    '-',
    'a version.current or a builder flag may carry a v; ClusterVersion history is plain semver, so tolerating it costs nothing',
  ],
  ["a v prefix on the path's source", EUS, 'v4.14.29', -1, '-1', '-', 'same'],
  [
    'build metadata on the final release',
    EUS,
    '4.16.2+build.7',
    1,
    '1',
    '-',
    'semver ignores build metadata: the same release',
  ],
  [
    "a v prefix in the bundle's upgradeFrom",
    [step('1.1.0', 'v1.0.0'), step('1.2.0', '1.1.0')],
    '1.0.0',
    -1,
    '-1',
    '-',
    'a bundle of apps made with --upgrade-from v1.0.0',
  ],
  [
    'a first release taking any source, the cluster newer than it',
    [step('4.15.40'), step('4.16.2', '4.15.40')],
    '4.15.45',
    undefined,
    '-',
    '-1',
    '"any" means any older: from 4.15.45 the path would begin with a downgrade',
  ],
  [
    'one release taking any source, the cluster newer',
    [step('4.15.2')],
    '4.16.0',
    undefined,
    '-',
    '-1',
    'same; the agent refused it as a Downgrade first',
  ],
  [
    'a later release with an empty upgradeFrom',
    [step('4.15.40', '4.14.30'), step('4.16.2')],
    '4.14.30',
    undefined,
    '0 (took 4.16.2 first, skipping 4.15.40)',
    '-1',
    'bundle.json requires a later release to name the one before it; an empty list there is no licence to skip a release of the path, and the path does not chain',
  ],
  [
    'a chain broken after the entry',
    [step('4.15.40', '4.14.30'), step('4.16.2', '4.15.39')],
    '4.14.30',
    undefined,
    '-',
    '-1',
    'the hops are taken one after the other: a path that does not chain cannot be taken',
  ],
  [
    'on a release of the path that a later one also names (a skip edge)',
    [step('4.15.40', '4.14.30'), step('4.16.2', '4.15.40'), step('4.17.1', '4.16.2', '4.15.40')],
    '4.15.40',
    0,
    '1 (took 4.17.1 next)',
    '0',
    'the path is taken hop by hop as planned: the gate lets each release through only after the one before completed',
  ],
];
const same: Row[] = [
  ["the path's source", EUS, '4.14.30', -1, '-1', '-1', ''],
  ['the intermediate release', EUS, '4.15.40', 0, '0', '0', ''],
  [
    'the final release (the agent takes it again: pathEntry stays on it)',
    EUS,
    '4.16.2',
    1,
    '1',
    '1',
    '',
  ],
  [
    'a source the final names beside the intermediate',
    [step('4.15.40', '4.14.30'), step('4.16.2', '4.15.40', '4.15.41')],
    '4.15.41',
    0,
    '0',
    '0',
    '',
  ],
  ['between the hops, named by neither', EUS, '4.15.45', undefined, '-', '-', ''],
  ['an unrelated older release', EUS, '4.13.9', undefined, '-', '-', ''],
  [
    'a first release taking any source, the cluster older',
    [step('4.15.40'), step('4.16.2', '4.15.40')],
    '4.13.9',
    -1,
    '-1',
    '-1',
    '',
  ],
  [
    'unknown running version, a path from any source (the agent decides unknown before: version.allowUnknown)',
    [step('4.15.40'), step('4.16.2', '4.15.40')],
    undefined,
    -1,
    'n/a',
    '-1',
    '',
  ],
  ['unknown running version, a path from named sources', EUS, undefined, undefined, 'n/a', '-', ''],
  // the fewest hops: the latest release that takes the running version wins, not the first
  [
    "the final release also names the first release's source of the same minor (4.16.2 takes 4.15.30 directly)",
    [step('4.15.40', '4.15.30'), step('4.16.2', '4.15.40', '4.15.30')],
    '4.15.30',
    0,
    '0',
    '0',
    '',
  ],
  [
    'a release newer than the final (the agent refuses it as a Downgrade first)',
    EUS,
    '4.16.5',
    undefined,
    '-',
    '-',
    '',
  ],
];

t.test('one rule where the two readings differed', async (t) => {
  for (const [what, path, running, now, agentBefore, clusterBefore, why] of differed) {
    t.equal(
      show(positionOnPath(path, running)),
      show(now),
      `${what} (before: agent ${agentBefore}, cluster ${clusterBefore}): ${why}`,
    );
  }
});

t.test('what both readings agreed on stays', async (t) => {
  for (const [what, path, running, now] of same)
    t.equal(show(positionOnPath(path, running)), show(now), what);
});

t.test('the agent and the cluster side answer from it', async (t) => {
  const config = parseConfig('arch: amd64\ntrust:\n  keys: [/k.pub]\n');
  const hop = (s: PathStep) => ({
    name: s.version,
    version: s.version,
    arch: 'amd64',
    image: null,
    digest: null,
    upgradeFrom: [...s.upgradeFrom],
  });
  const bundle = (p: PathStep[]) =>
    ({ release: { ...hop(p.at(-1)!), via: p.slice(0, -1).map(hop) } }) as unknown as BundleManifest;
  const releases = (p: PathStep[]) =>
    p.map((s) => ({
      version: s.version,
      image: null,
      digest: null,
      upgradeFrom: [...s.upgradeFrom],
      signatures: [],
    }));
  for (const [what, path, running, now] of [...differed, ...same]) {
    // the agent decides an unknown running version before the path (release-path-policy.test.ts), and a downgrade (below)
    if (running !== undefined && compareVersions(path.at(-1)!.version, running) >= 0) {
      let entry: number | undefined;
      try {
        entry = checkPolicy(bundle(path), config, running);
      } catch (err) {
        t.match((err as AgentError).reason, 'NotAnUpgradeSource', `agent refuses: ${what}`);
      }
      t.equal(
        show(entry),
        show(now === undefined ? undefined : Math.min(now + 1, path.length - 1)),
        `agent: ${what}`,
      );
    } else if (running !== undefined) {
      // a running version newer than the path's final release: no position, and a Downgrade on the node
      t.equal(now, undefined, `no position past the final: ${what}`);
      let reason: string | undefined;
      try {
        checkPolicy(bundle(path), config, running);
      } catch (err) {
        reason = (err as AgentError).reason;
      }
      t.equal(reason, 'Downgrade', `agent refuses as a Downgrade: ${what}`);
    }
    let done: number | undefined;
    try {
      done = pathPosition(releases(path), running).done;
    } catch (err) {
      t.match((err as { code?: string }).code, 'NOT_AN_UPGRADE_SOURCE', `cluster refuses: ${what}`);
      t.notMatch(
        (err as Error).message,
        /\(it (accepts|starts from) \)/,
        'the refusal names what the path starts from, "any" too',
      );
    }
    t.equal(show(done), show(now), `cluster: ${what}`);
  }
});

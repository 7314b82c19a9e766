// tier: unit
// The version policy of a bundle with an update path (#43): a node joins the path where it runs
// a source of one of its releases, or one of its releases; elsewhere it is refused in one line
// naming the path, the running version and what to run first. A bundle of one release is as before.
import t from 'tap';
import { checkPolicy, parseConfig, AgentError, type AgentConfig } from '@offline-bundle/agent';
import type { BundleManifest } from '@offline-bundle/format';

const config = parseConfig('arch: amd64\ntrust:\n  keys: [/k.pub]\n');
const withVersion = (v: Partial<AgentConfig['version']>): AgentConfig => ({
  ...config,
  version: { ...config.version, ...v },
});
const D = (c: string) => `sha256:${c.repeat(64)}`;
const hop = (version: string, upgradeFrom: string[], d: string) => ({
  name: version,
  version,
  arch: 'amd64',
  image: `q/r@${D(d)}`,
  digest: D(d),
  upgradeFrom,
  adds: { images: 1, bytes: 1 },
});
/** 4.14.30 → 4.15.40 → 4.16.2, as the builder writes it; `via` overrides the hops before the final. */
const pathBundle = (
  via = [hop('4.15.40', ['4.14.30', '4.14.29'], 'a')],
  final = hop('4.16.2', ['4.15.40'], 'b'),
) => ({ release: { ...final, via } }) as unknown as BundleManifest;

const outcome = (fn: () => number): string => {
  try {
    return `from ${fn()}`;
  } catch (err) {
    if (!(err instanceof AgentError)) throw err;
    return `${err.reason}: ${err.message}`;
  }
};

t.test('a path bundle is taken from where the node joins it', async (t) => {
  // [what, bundle, config, running, outcome: "from I" (index of releasePath) or "Reason: message" pattern]
  const table: [string, BundleManifest, AgentConfig, string | undefined, RegExp][] = [
    ["from the first release's source", pathBundle(), config, '4.14.30', /^from 0$/],
    ['from its other source, with a leading v', pathBundle(), config, 'v4.14.29', /^from 0$/],
    [
      'from the intermediate release: the rest of the path',
      pathBundle(),
      config,
      '4.15.40',
      /^from 1$/,
    ],
    [
      'from a source the final release names beside the intermediate',
      pathBundle(undefined, hop('4.16.2', ['4.15.40', '4.15.41'], 'b')),
      config,
      '4.15.41',
      /^from 1$/,
    ],
    ['the final release again', pathBundle(), config, '4.16.2', /^from 1$/],
    [
      'an unrelated older release',
      pathBundle(),
      config,
      '4.13.9',
      /^NotAnUpgradeSource: the path 4\.15\.40 → 4\.16\.2 cannot be taken from the running 4\.13\.9: 4\.15\.40 upgrades from 4\.14\.30, 4\.14\.29, so this node's cluster must run one of 4\.14\.30, 4\.14\.29 \(or a release of the path\) first$/,
    ],
    [
      'between the hops, named by neither',
      pathBundle(),
      config,
      '4.15.45',
      /^NotAnUpgradeSource: the path .* from the running 4\.15\.45/,
    ],
    [
      'any source allowed',
      pathBundle(),
      withVersion({ allowAnySource: true }),
      '4.13.9',
      /^from 0$/,
    ],
    [
      'newer than the final release',
      pathBundle(),
      config,
      '4.16.5',
      /^Downgrade: this bundle holds 4\.16\.2, older than the running 4\.16\.5/,
    ],
    [
      'newer than the final, allowDowngrade',
      pathBundle(),
      withVersion({ allowDowngrade: true }),
      '4.16.5',
      /^from 1$/,
    ],
    ['running version unknown', pathBundle(), config, undefined, /^UnknownRunningVersion: /],
    [
      'running version unknown, allowUnknown',
      pathBundle(),
      withVersion({ allowUnknown: true }),
      undefined,
      /^from 0$/,
    ],
    // bundle.json's validator refuses a broken chain; the policy holds it from the running version all the same
    [
      "a chain broken after the node's hop",
      pathBundle(undefined, hop('4.16.2', ['4.15.39'], 'b')),
      config,
      '4.14.30',
      /^NotAnUpgradeSource: /,
    ],
    [
      'a first release with no sources: any older one',
      pathBundle([hop('4.15.40', [], 'a')]),
      config,
      '4.13.9',
      /^from 0$/,
    ],
    [
      'a first release with no sources is no downgrade of a newer running one',
      pathBundle([hop('4.15.40', [], 'a')]),
      config,
      '4.15.45',
      /^NotAnUpgradeSource: /,
    ],
  ];
  for (const [what, m, c, current, want] of table) {
    const got = outcome(() => checkPolicy(m, c, current));
    t.match(got, want, what);
    t.notMatch(got, /\n/, `${what}: one line`);
  }
});

t.test('a long list of sources is cut in the refusal', async (t) => {
  const many = Array.from({ length: 9 }, (_, i) => `4.14.${i + 10}`);
  const got = outcome(() => checkPolicy(pathBundle([hop('4.15.40', many, 'a')]), config, '4.13.9'));
  t.match(got, /upgrades from 4\.14\.10, 4\.14\.11, 4\.14\.12, 4\.14\.13 and 5 more, so/);
});

t.test('a bundle of one release: as before, the first release is the only one', async (t) => {
  const one = (upgradeFrom: string[]) =>
    ({
      release: {
        name: '4.15.2',
        version: '4.15.2',
        arch: 'amd64',
        image: null,
        digest: null,
        upgradeFrom,
      },
    }) as unknown as BundleManifest;
  t.equal(checkPolicy(one(['4.14.38']), config, '4.14.38'), 0);
  t.equal(checkPolicy(one([]), config, '4.14.1'), 0);
  t.match(
    outcome(() => checkPolicy(one(['4.14.39']), config, '4.14.38')),
    /^NotAnUpgradeSource: 4\.15\.2 cannot be installed over the running 4\.14\.38 \(it upgrades from 4\.14\.39\): install an intermediate version first$/,
  );
});

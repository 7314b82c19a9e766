// tier: unit
import t from 'tap';
import {
  checkPolicy,
  compareVersions,
  parseConfig,
  AgentError,
  type AgentConfig,
} from '@offline-bundle/agent';
import type { BundleManifest } from '@offline-bundle/format';

const config = parseConfig('arch: amd64\ntrust:\n  keys: [/k.pub]\n');
const withVersion = (v: Partial<AgentConfig['version']>): AgentConfig => ({
  ...config,
  version: { ...config.version, ...v },
});
const manifest = (version: string, arch = 'amd64', upgradeFrom: string[] = []) =>
  ({
    release: { name: version, version, arch, image: null, digest: null, upgradeFrom },
  }) as unknown as BundleManifest;

t.test('compareVersions orders versions the way OpenShift does', async (t) => {
  // [a, b, sign of compare(a, b)]
  const table: [string, string, -1 | 0 | 1][] = [
    ['4.14.38', '4.14.38', 0],
    ['4.14.9', '4.14.38', -1],
    ['4.15.0', '4.14.38', 1],
    ['4.14.0-ec.1', '4.14.0-rc.1', -1],
    ['4.14.0-rc.1', '4.14.0', -1],
    ['4.14.0', '4.14.0-rc.1', 1],
    ['4.14.0', '4.14.1', -1],
    ['4.14.0-rc.2', '4.14.0-rc.10', -1],
    ['4.14.0-ec.3', '4.14.0-rc.0', -1],
    ['4.14.1-rc.0', '4.14.0', 1],
    ['4.14.0+build.5', '4.14.0+build.7', 0],
    ['4.14.0-rc.1+abc', '4.14.0-rc.1', 0],
    ['v4.14.0', '4.14.0', 0],
    ['v1.30.2', '1.30.10', -1],
    // not semver: the dotted comparison, missing parts count as 0
    ['1.30', '1.30.0', 0],
    ['4.15', '4.14.38', 1],
    ['4.14.38.1', '4.14.38', 1],
  ];
  for (const [a, b, want] of table) {
    t.equal(
      Math.sign(compareVersions(a, b)),
      want,
      `${a} ${want < 0 ? '<' : want > 0 ? '>' : '='} ${b}`,
    );
    t.equal(Math.sign(compareVersions(b, a)), -want || 0, `and the other way round (${b} vs ${a})`);
  }
  const sorted = ['4.14.1', '4.14.0', '4.14.0-rc.10', '4.14.0-ec.1', '4.14.0-rc.2', '4.13.9'].sort(
    compareVersions,
  );
  t.same(sorted, ['4.13.9', '4.14.0-ec.1', '4.14.0-rc.2', '4.14.0-rc.10', '4.14.0', '4.14.1']);
});

t.test('checkPolicy', async (t) => {
  const reason = (fn: () => void) => {
    try {
      fn();
      return 'accepted';
    } catch (err) {
      t.type(err, AgentError);
      t.notMatch((err as Error).message, /\n/, 'one line');
      return (err as AgentError).reason;
    }
  };
  // [what, bundle, config, running version, outcome]
  const table: [string, BundleManifest, AgentConfig, string | undefined, string][] = [
    ['wrong arch', manifest('4.14.39', 'arm64'), config, '4.14.38', 'WrongArch'],
    ['older version', manifest('4.14.37'), config, '4.14.38', 'Downgrade'],
    [
      'older version, allowDowngrade',
      manifest('4.14.37'),
      withVersion({ allowDowngrade: true }),
      '4.14.38',
      'accepted',
    ],
    ['release candidate over its release', manifest('4.14.0-rc.1'), config, '4.14.0', 'Downgrade'],
    ['release over its release candidate', manifest('4.14.0'), config, '4.14.0-rc.1', 'accepted'],
    ['rc.10 over rc.2', manifest('4.14.0-rc.10'), config, '4.14.0-rc.2', 'accepted'],
    ['rc.2 over rc.10', manifest('4.14.0-rc.2'), config, '4.14.0-rc.10', 'Downgrade'],
    [
      'not an upgrade source',
      manifest('4.15.2', 'amd64', ['4.14.39', '4.15.1']),
      config,
      '4.14.38',
      'NotAnUpgradeSource',
    ],
    [
      'listed upgrade source',
      manifest('4.15.2', 'amd64', ['4.14.38']),
      config,
      '4.14.38',
      'accepted',
    ],
    [
      'listed upgrade source with a leading v',
      manifest('4.15.2', 'amd64', ['v4.14.38']),
      config,
      '4.14.38',
      'accepted',
    ],
    [
      'any source allowed',
      manifest('4.15.2', 'amd64', ['4.14.39']),
      withVersion({ allowAnySource: true }),
      '4.14.38',
      'accepted',
    ],
    ['the same version again', manifest('4.14.38'), config, '4.14.38', 'accepted'],
    [
      'no running version known',
      manifest('4.15.2', 'amd64', ['4.14.39']),
      config,
      undefined,
      'UnknownRunningVersion',
    ],
    [
      'no running version known, allowUnknown',
      manifest('4.15.2', 'amd64', ['4.14.39']),
      withVersion({ allowUnknown: true }),
      undefined,
      'accepted',
    ],
    [
      'no running version known, allowUnknown, wrong arch',
      manifest('4.15.2', 'arm64'),
      withVersion({ allowUnknown: true }),
      undefined,
      'WrongArch',
    ],
  ];
  for (const [what, m, c, current, want] of table)
    t.equal(
      reason(() => checkPolicy(m, c, current)),
      want,
      what,
    );
});

t.test('the UnknownRunningVersion message names the cause and every fix', async (t) => {
  const message = (c: AgentConfig) => {
    try {
      checkPolicy(manifest('4.15.2'), c, undefined);
    } catch (err) {
      return (err as Error).message;
    }
    return '';
  };
  const plain = message(config);
  t.match(plain, /^the running version is not known, /);
  for (const fix of [
    'version.current',
    'version.fromCluster',
    'status.kubeconfig',
    'version.allowUnknown',
  ])
    t.match(plain, fix);
  const cluster = message(withVersion({ fromCluster: true }));
  t.match(
    cluster,
    /the cluster has no ClusterVersion "version" with a completed update/,
    'fromCluster: says what the cluster answered',
  );
  t.notMatch(
    cluster,
    'version.fromCluster',
    'fromCluster: does not tell the admin to set what is already set',
  );
  t.match(cluster, 'version.current');
});

t.test('version.allowUnknown is off unless the config says true', async (t) => {
  t.equal(config.version.allowUnknown, false);
  t.equal(
    parseConfig('trust:\n  keys: [/k.pub]\nversion:\n  allowUnknown: true\n').version.allowUnknown,
    true,
  );
  t.throws(
    () => parseConfig('trust:\n  keys: [/k.pub]\nversion:\n  allowUnknown: yes please\n', 'c.yaml'),
    /c\.yaml: version\.allowUnknown: must be true or false/,
  );
});

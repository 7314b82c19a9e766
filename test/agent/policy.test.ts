import t from 'tap';
import { checkPolicy, compareVersions, parseConfig, AgentError } from '@offline-bundle/agent';
import type { BundleManifest } from '@offline-bundle/format';

const config = parseConfig('arch: amd64\ntrust:\n  keys: [/k.pub]\n');
const manifest = (version: string, arch = 'amd64', upgradeFrom: string[] = []) =>
  ({ release: { name: version, version, arch, image: null, digest: null, upgradeFrom } }) as unknown as BundleManifest;

t.test('compareVersions', async (t) => {
  t.equal(compareVersions('4.14.38', '4.14.38'), 0);
  t.equal(compareVersions('4.14.9', '4.14.38'), -1);
  t.equal(compareVersions('4.15.0', '4.14.38'), 1);
  t.equal(compareVersions('v1.30.2', '1.30.10'), -1);
  t.equal(compareVersions('1.30', '1.30.0'), 0);
});

t.test('checkPolicy', async (t) => {
  const reason = (fn: () => void) => {
    try {
      fn();
      return 'accepted';
    } catch (err) {
      t.type(err, AgentError);
      return (err as AgentError).reason;
    }
  };
  t.equal(reason(() => checkPolicy(manifest('4.14.39', 'arm64'), config, '4.14.38')), 'WrongArch');
  t.equal(reason(() => checkPolicy(manifest('4.14.37'), config, '4.14.38')), 'Downgrade');
  t.equal(reason(() => checkPolicy(manifest('4.14.37'), { ...config, version: { ...config.version, allowDowngrade: true } }, '4.14.38')), 'accepted');
  t.equal(reason(() => checkPolicy(manifest('4.15.2', 'amd64', ['4.14.39', '4.15.1']), config, '4.14.38')), 'NotAnUpgradeSource');
  t.equal(reason(() => checkPolicy(manifest('4.15.2', 'amd64', ['4.14.38']), config, '4.14.38')), 'accepted');
  t.equal(reason(() => checkPolicy(manifest('4.15.2', 'amd64', ['4.14.39']), { ...config, version: { ...config.version, allowAnySource: true } }, '4.14.38')), 'accepted');
  t.equal(reason(() => checkPolicy(manifest('4.15.2', 'amd64', ['4.14.39']), config, undefined)), 'accepted', 'no running version known: only arch is checked');
  t.equal(reason(() => checkPolicy(manifest('4.14.38'), config, '4.14.38')), 'accepted', 'reloading the same version is allowed');
});

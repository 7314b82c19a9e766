// End to end (issue #38 item 1): the real agent daemon loads a bundle into real containerd and,
// with its Ready, publishes in its NodeBundleStatus what the runtime holds (status.runtime), read
// through the CRI; the API server is the RBAC-enforcing stand-in holding every status write to
// deploy/crd.yaml's schema (unknown fields refused), so what the agent writes is what the CRD takes.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { boundHoldings, heldState } from '@offline-bundle/status';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { until } from '../helpers/until.js';
import { compileSchema, crdSchema, loadCrd } from '../status/lib.js';
import { containerdNode, daemonChild, makeBundle, type AppImage } from './fixtures.js';

const APP = 'quay.io/acme/app:1.1.0';
const OS = 'quay.io/acme/os:1.1.0';
const images: AppImage[] = [
  { name: APP, files: { 'app.txt': 'app 1.1.0' } },
  { name: OS, files: { 'os.txt': 'os 1.1.0' } },
];

t.test(
  'after a load is Ready the agent publishes what containerd holds: its bundle present and pinned (where containerd reports pins), every name counted',
  async (t) => {
    const api = await startKubeStandIn();
    t.teardown(() => api.close());
    api.statusSchema = compileSchema(crdSchema(await loadCrd()), { closed: true });
    api.nodes = [
      {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'node-a', labels: {} },
        status: { conditions: [{ type: 'Ready', status: 'True' }] },
      },
    ];
    const { dir, keys, root, ctd, config } = await containerdNode(t, 'ob-holdings-', '', { api });
    await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(root, 'var/lib/bundle-agent/drop/1.1.0.bundle'),
    });
    const agent = daemonChild(t, config, join(root, 'var/lib/bundle-agent/status.json'));
    await agent.until('Ready', (x: any) => {
      if (x?.phase === 'Failed') throw new Error(JSON.stringify(x.conditions));
      return x?.phase === 'Ready';
    });
    const st = await until('the NodeBundleStatus carries status.runtime with Ready', () => {
      const s = api.statuses.find((o) => o.metadata?.name === 'node-a')?.status;
      return s?.phase === 'Ready' && s.runtime ? s : undefined;
    });
    const h = boundHoldings(st.runtime);
    t.ok(h, 'well-formed as the admin reads it');
    t.same(h, st.runtime, 'nothing of it had to be bounded away');
    t.same(h!.bundle.missing, [], 'every name of the bundle in the runtime');
    t.same(
      h!.bundle.unpinned,
      [],
      'and none said unpinned (where pins are reported, every one pinned)',
    );
    t.ok(h!.bundle.refs >= 2);
    // containerd before 1.6.22 reports no pins (the agent's Pinned condition says Unknown): then "not pinned" is not known, and says so
    const verifiable = st.conditions.find((c: any) => c.type === 'Pinned')?.status === 'True';
    t.equal(h!.pinsReported, verifiable, `pins reported by this containerd: ${verifiable}`);
    t.ok(
      h!.images >= 2 && h!.pinned >= (verifiable ? 2 : 0),
      `${h!.images} images, ${h!.pinned} pinned`,
    );
    const expected = verifiable ? 'pinned' : 'unpinned';
    t.equal(heldState(h, APP), expected, 'held under the name a pod asks by');
    t.equal(heldState(h, OS), expected);
    t.equal(heldState(h, 'quay.io/acme/other:1.0'), 'absent');
    // ctr lists the image IDs as names too; the CRI does not
    const names = execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls', '-q'], {
      encoding: 'utf8',
    })
      .trim()
      .split('\n')
      .filter((n) => n && !n.startsWith('sha256:'));
    t.equal(h!.references, new Set(names).size, 'every name containerd lists is counted');

    // an image lost while the agent was down (a crio-wipe, a prune): the next start publishes what the runtime holds then
    await agent.stop();
    execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'rm', APP]);
    const again = daemonChild(t, config, join(root, 'var/lib/bundle-agent/status.json'));
    const after = await until('a new reading after the restart', () => {
      const s = api.statuses.find((o) => o.metadata?.name === 'node-a')?.status;
      return s?.runtime && s.runtime.digest !== st.runtime.digest ? s : undefined;
    });
    t.equal(
      heldState(boundHoldings(after.runtime), APP),
      'absent',
      'the image removed meanwhile is no longer said held',
    );
    await again.stop();
  },
);

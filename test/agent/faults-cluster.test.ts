// Case 7 of the fault tests (faults.test.ts has 1-4 and the description, faults-media.test.ts 5-6;
// faults-setup.ts the set-up): its own file so each stays well inside tap's per-file limit on a loaded machine.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { node, startLoad, load, waitStatus, expectReady } from './faults-setup.js';

t.test(
  '7. the cluster API down for a whole load, with the shipped version.fromCluster config (RBAC-enforcing API stand-in)',
  async (t) => {
    // version and status.kubeconfig as deploy/openshift/config.yaml.in ships them, instead of version.current
    const shipped = parseYaml(
      readFileSync(new URL('../../deploy/openshift/config.yaml.in', import.meta.url), 'utf8'),
    );
    t.equal(shipped.version.fromCluster, true);
    const fromCluster = async (t: any) => {
      const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
      t.teardown(() => api.close());
      const n = await node(t);
      await writeFile(
        n.config,
        (await readFile(n.config, 'utf8')).replace(
          'version:\n  current: "1.0.0"\n',
          stringifyYaml({
            version: shipped.version,
            status: { kubeconfig: shipped.status.kubeconfig },
          }),
        ),
      );
      await api.writeNodeKubeconfig(n.root, 'node-a', { certPaths: 'root' });
      return { api, n };
    };
    t.test(
      'a fresh node waits for the cluster (not a failure), and loads once it answers',
      async (t) => {
        const { api, n } = await fromCluster(t);
        await api.pause();
        const a = startLoad(n);
        const waiting = await waitStatus(n, a, 'Ready False WaitingForCluster', (s) =>
          s.conditions.some((c) => c.type === 'Ready' && c.reason === 'WaitingForCluster'),
        );
        t.equal(waiting.phase, 'Verifying', 'waiting, not Failed');
        const c = waiting.conditions.find((x) => x.type === 'Ready')!;
        t.match(
          c.message,
          /the cluster's API server did not answer .*ECONNREFUSED.*this node never saw its running version, so the update waits for the cluster \(trying again for up to 30 min\); or set version\.current/,
        );
        t.notMatch(c.message, 'version.fromCluster', 'does not tell the admin to set what is set');
        t.equal(
          (await n.leftovers()).staged.length + (await n.leftovers()).partial.length,
          0,
          'nothing staged while the version is unknown',
        );
        await api.resume();
        const r = await a.exit;
        await expectReady(t, n, r, 'the load once the API server is back');
        t.match(r.stderr, /the cluster answered: it runs 1\.0\.0; the load goes on/);
        t.equal(
          (r.stderr.match(/update waits for the cluster/g) ?? []).length,
          1,
          'the wait logged once',
        );
      },
    );
    t.test('a node that saw its running version before loads without the API', async (t) => {
      const { api, n } = await fromCluster(t);
      await expectReady(t, n, await load(n), 'a first load with the API up');
      await api.pause();
      const r = await load(n);
      await expectReady(t, n, r, "a load with nothing listening on the API server's port");
      t.match(
        r.stderr,
        /cannot read the running version from the cluster \(.*ECONNREFUSED.*\); using the last one seen there, 1\.0\.0 at /,
      );
    });
  },
);

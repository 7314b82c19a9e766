// Cases 5-7 of the fault tests (faults.test.ts has 1-4 and the description; faults-setup.ts the set-up).
import t from 'tap';
import { readFileSync } from 'node:fs';
import { readFile, rm, truncate, unlink, writeFile } from 'node:fs/promises';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { STAGED, MANIFEST, REFS, node, startLoad, load, waitStatus, phase, frozenMidRead, cond, pullsDone, expectReady, expectFailed, type Status, type Node, type Agent } from './faults-setup.js';

const mediaNode = (t: any) => node(t, { upgradeFs: 64 });

async function bundleFault(t: any, n: Node, fault: () => Promise<void>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const a = await frozenMidRead(t, n);
  try {
    await fault();
  } finally {
    a.child.kill('SIGCONT');
  }
  return a.exit;
}

t.test('5. the bundle truncated or deleted while it is read', async (t) => {
  const shrink = (n: Node) => () => truncate(n.file, Math.floor(MANIFEST.totals.layoutBytes / 2));
  const remove = (n: Node) => () => unlink(n.file);

  t.test('staged mode', async (t) => {
    const n = await node(t);
    // the verified pieces stay for a resume; the next load of the same bundle leaves nothing
    const kept = [`${STAGED}.partial`];
    let r = await bundleFault(t, n, shrink(n));
    await expectFailed(t, n, r, 'Truncated', 'truncated while staged', kept);
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');

    r = await bundleFault(t, n, remove(n));
    const gone = await expectFailed(t, n, r, 'MediaRemoved', 'deleted while staged', kept);
    t.match(cond(gone, 'Failed')?.message, /disappeared .*Plug it in again/, 'the message says the media went away');
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');
  });

  t.test('media mode (too little disk to stage)', async (t) => {
    const n = await mediaNode(t);
    let r = await bundleFault(t, n, shrink(n));
    await expectFailed(t, n, r, 'Truncated', 'truncated while verified from the media');
    await n.restore();
    r = await load(n);
    await expectReady(t, n, r, 'the restored file');
    t.match(r.stdout, /"mode":"media"/, 'served from the media');

    r = await bundleFault(t, n, remove(n));
    await expectFailed(t, n, r, 'MediaRemoved', 'deleted while verified from the media');
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');
  });
});

t.test('6. SIGTERM at each phase: Failed, Interrupted, nothing left; the next load is Ready', async (t) => {
  const interrupt = async (t: any, n: Node, at: ((s: Status) => boolean) | 'reading', atWhat: string, hold?: 'reload') => {
    let a: Agent;
    if (at === 'reading') {
      // the read pass: staging in staged mode, the full verification in media mode
      a = await frozenMidRead(t, n);
      a.child.kill('SIGTERM');
      a.child.kill('SIGCONT');
    } else if (hold) {
      a = startLoad(n);
      // hold the agent inside its second reload (after the pulls, with the pins): the Pinning phase
      await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
      await writeFile(n.gate, '');
      await waitStatus(n, a, atWhat, at);
      a.child.kill('SIGTERM');
      await rm(n.gate);
    } else {
      const before = await pullsDone(n);
      a = startLoad(n);
      await waitStatus(n, a, atWhat, at);
      a.child.kill('SIGSTOP');
      t.ok((await pullsDone(n)) - before < REFS, 'frozen while pulls are still to come');
      a.child.kill('SIGTERM');
      a.child.kill('SIGCONT');
    }
    // a stop in Staging keeps the verified pieces for a resume; the next load leaves nothing
    await expectFailed(t, n, await a.exit, 'Interrupted', `SIGTERM at ${atWhat}`, atWhat === 'Staging' ? [`${STAGED}.partial`] : []);
    await expectReady(t, n, await load(n), 'the next load');
  };
  t.test('Verifying (the full verification pass, media mode)', async (t) => interrupt(t, await mediaNode(t), 'reading', 'Verifying'));
  const n = await node(t);
  t.test('Staging', async (t) => interrupt(t, n, 'reading', 'Staging'));
  t.test('Preloading (serving)', async (t) => interrupt(t, n, phase('Preloading'), 'Preloading'));
  t.test('Pinning', async (t) => interrupt(t, n, phase('Pinning'), 'Pinning', 'reload'));
});

t.test('7. the cluster API down for a whole load, with the shipped version.fromCluster config (RBAC-enforcing API stand-in)', async (t) => {
  // version and status.kubeconfig as deploy/openshift/config.yaml.in ships them, instead of version.current
  const shipped = parseYaml(readFileSync(new URL('../../deploy/openshift/config.yaml.in', import.meta.url), 'utf8'));
  t.equal(shipped.version.fromCluster, true);
  const fromCluster = async (t: any) => {
    const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
    t.teardown(() => api.close());
    const n = await node(t);
    await writeFile(n.config, (await readFile(n.config, 'utf8')).replace('version:\n  current: "1.0.0"\n', stringifyYaml({ version: shipped.version, status: { kubeconfig: shipped.status.kubeconfig } })));
    await api.writeNodeKubeconfig(n.root, 'node-a', { certPaths: 'root' });
    return { api, n };
  };
  t.test('a fresh node waits for the cluster (not a failure), and loads once it answers', async (t) => {
    const { api, n } = await fromCluster(t);
    await api.pause();
    const a = startLoad(n);
    const waiting = await waitStatus(n, a, 'Ready False WaitingForCluster', (s) => s.conditions.some((c) => c.type === 'Ready' && c.reason === 'WaitingForCluster'));
    t.equal(waiting.phase, 'Verifying', 'waiting, not Failed');
    const c = waiting.conditions.find((x) => x.type === 'Ready')!;
    t.match(c.message, /the cluster's API server did not answer .*ECONNREFUSED.*this node never saw its running version, so the update waits for the cluster \(trying again for up to 30 min\); or set version\.current/);
    t.notMatch(c.message, 'version.fromCluster', 'does not tell the admin to set what is set');
    t.equal((await n.leftovers()).staged.length + (await n.leftovers()).partial.length, 0, 'nothing staged while the version is unknown');
    await api.resume();
    const r = await a.exit;
    await expectReady(t, n, r, 'the load once the API server is back');
    t.match(r.stderr, /the cluster answered: it runs 1\.0\.0; the load goes on/);
    t.equal((r.stderr.match(/update waits for the cluster/g) ?? []).length, 1, 'the wait logged once');
  });
  t.test('a node that saw its running version before loads without the API', async (t) => {
    const { api, n } = await fromCluster(t);
    await expectReady(t, n, await load(n), 'a first load with the API up');
    await api.pause();
    const r = await load(n);
    await expectReady(t, n, r, 'a load with nothing listening on the API server\'s port');
    t.match(r.stderr, /cannot read the running version from the cluster \(.*ECONNREFUSED.*\); using the last one seen there, 1\.0\.0 at /);
  });
});

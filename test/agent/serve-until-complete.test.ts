// From Ready until ClusterVersion says the upgrade to its release completed, a node keeps
// serving the release from the layout it kept (loopback registry + containerd hosts.toml), so
// whatever pulls by itself meanwhile (a pod with imagePullPolicy Always, the kubelet after the
// runtime's storage was emptied) is answered with no registry and no stick; an agent restart
// (a reboot) serves it again; once the cluster completed, the mirror and the layout go. With
// staging.serveUntilComplete off, the same pull fails. Real containerd pulling through the CRI
// as the kubelet does; the API server is the RBAC-enforcing stand-in (none can run here).
import t from 'tap';
import { until } from '../helpers/until.js';
import { execFileSync } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CriImageClient } from '@offline-bundle/runtime';
import { clusterVersionDoc, startKubeStandIn } from '../helpers/kube-standin.js';
import { containerdNode, daemonChild, makeBundle, type AppImage } from './fixtures.js';

const IMAGE = 'quay.io/acme/app:1.1.0';
const images: AppImage[] = [
  { name: IMAGE, files: { 'app.txt': 'app 1.1.0' } },
  { name: 'quay.io/acme/os:1.1.0', files: { 'os.txt': 'os 1.1.0' } },
];

async function openshiftNode(t: any, serve: boolean) {
  const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
  t.teardown(() => api.close());
  api.nodes = [mcdNode('rendered-worker-old', 'rendered-worker-old')];
  const { dir, keys, root, ctd, config } = await containerdNode(t, 'ob-serve-until-', '', {
    api,
    settings: {
      staging: { serveUntilComplete: serve, serveCheckSeconds: 1 },
      version: { fromCluster: true },
    },
  });
  const certsDir = join(root, 'etc/containerd/certs.d');
  await makeBundle(dir, {
    key: keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(root, 'var/lib/bundle-agent/drop/1.1.0.bundle'),
  });
  const cri = new CriImageClient(ctd.socket);
  t.teardown(() => cri.close());
  // what the kubelet does for a pod with imagePullPolicy Always (or after the image was lost)
  const lose = (ref: string) =>
    execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'rm', ref], {
      encoding: 'utf8',
    });
  const pull = (ref: string) =>
    cri.pullImage(ref).then(
      () => 'pulled',
      (err: Error) => `failed: ${err.message}`,
    );
  const hostsToml = () =>
    readFile(join(certsDir, 'quay.io/hosts.toml'), 'utf8').catch(() => undefined);
  return {
    api,
    root,
    ctd,
    cri,
    config,
    lose,
    pull,
    hostsToml,
    statusFile: join(root, 'var/lib/bundle-agent/status.json'),
    upgradeDir: join(root, 'var/lib/upgrade'),
  };
}

/** Node node-a as the Machine Config Daemon annotates it. */
const mcdNode = (current: string, desired: string, state = 'Done') => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'node-a',
    labels: { 'node-role.kubernetes.io/worker': '' },
    annotations: {
      'machineconfiguration.openshift.io/state': state,
      'machineconfiguration.openshift.io/currentConfig': current,
      'machineconfiguration.openshift.io/desiredConfig': desired,
    },
  },
  status: { conditions: [{ type: 'Ready', status: 'True' }] },
});

const serving = (s: any) =>
  s?.phase === 'Ready' &&
  s.conditions?.some(
    (c: any) => c.type === 'Serving' && c.status === 'True' && c.reason === 'KeptUntilComplete',
  );

t.test(
  'a loaded release is served until the cluster completed its upgrade: lost images come back with no registry, after a restart too',
  async (t) => {
    const n = await openshiftNode(t, true);
    let agent = daemonChild(t, n.config, n.statusFile);
    const s = await agent.until('Ready and serving 1.1.0', serving);
    t.match(
      s.conditions.find((c: any) => c.type === 'Serving').message,
      /1\.1\.0 is served to this node's runtime on 127\.0\.0\.1:\d+ from the copy kept in .*1\.1\.0-amd64 \(.+ of disk\) until the upgrade to it is over on this node/,
    );
    t.match(
      await n.hostsToml(),
      /http:\/\/127\.0\.0\.1:\d+\/v2\//,
      'the mirror drop-in stays after Ready',
    );
    t.ok(
      await readFile(join(n.root, 'var/lib/bundle-agent/started'), 'utf8'),
      'the start-up marker the unit waits for is written',
    );

    n.lose(IMAGE);
    t.equal(
      await n.pull(IMAGE),
      'pulled',
      'an image pulled again while the upgrade is under way comes from the node',
    );

    // a reboot: the agent stops (the mirror goes with its registry), the runtime's storage is emptied (crio-wipe)
    const log = await agent.stop();
    t.match(log, /stopped serving 1\.1\.0: the agent stops/);
    t.equal(await n.hostsToml(), undefined, 'no drop-in names a registry that is gone');
    t.equal(
      await readFile(join(n.root, 'var/lib/bundle-agent/started'), 'utf8').catch(() => undefined),
      undefined,
      'and no start-up marker stays for the next start',
    );
    n.lose(IMAGE);
    // a single-node cluster: its API server is a pod the kubelet starts after the agent, so it cannot answer yet
    await n.api.pause();
    agent = daemonChild(t, n.config, n.statusFile);
    await agent.until(
      'serving again after the restart, the API down',
      (x: any, log: string) => serving(x) && /serving 1\.1\.0 on 127/.test(log),
    );
    await n.api.resume();
    t.ok(
      await n.cri.imageStatus(IMAGE),
      'the lost image was loaded again from the kept layout at start',
    );
    t.match(
      agent.out.log,
      /serving 1\.1\.0 on 127\S+ from \S+ until the upgrade to it is over on this node \(checked and hashed by the start-up restore, not read again\)/,
      'the layout is hashed once at start, not twice before the kubelet may start',
    );
    n.lose(IMAGE);
    t.equal(await n.pull(IMAGE), 'pulled', 'and is served again after the restart');

    // the cluster completed its upgrade to 1.1.0, but this worker's pool is paused: its MCD still runs the old config
    n.api.clusterVersion = clusterVersionDoc('1.1.0');
    await agent.until('the history says complete', (x: any) =>
      x?.history?.some((e: any) => e.version === '1.1.0' && e.state === 'complete'),
    );
    await new Promise((r) => setTimeout(r, 2_500));
    t.ok(
      serving(await agent.until('status', (x: any) => x)),
      'still served while this node has not applied the release (a paused pool)',
    );
    t.match(await n.hostsToml(), /127\.0\.0\.1/);
    // the MCD applied it: Done on a config other than the one it had when serving began
    n.api.nodes = [mcdNode('rendered-worker-new', 'rendered-worker-new')];
    const ended = await agent.until('serving ends', (x: any) =>
      x?.conditions?.some((c: any) => c.type === 'Serving' && c.reason === 'ServingEnded'),
    );
    t.match(
      ended.conditions.find((c: any) => c.type === 'Serving').message,
      /the cluster's upgrade to 1\.1\.0 completed and this node applied it/,
    );
    t.match(ended.history, [{ version: '1.1.0', state: 'complete' }]);
    // the condition is written before the drop-in and the layout go: wait for them, do not race
    t.ok(
      await until('the mirror drop-in removed', async () => (await n.hostsToml()) === undefined),
      'the mirror drop-in is removed',
    );
    t.ok(
      await until('the kept layout removed', async () =>
        (await readdir(n.upgradeDir)).every((e) => !e.startsWith('1.1.0')),
      ),
      'the layout kept only to be served is removed',
    );
    t.ok(await n.cri.imageStatus(IMAGE), 'the images stay in the runtime (pinned)');
  },
);

t.test(
  'serveUntilComplete off: after Ready nothing answers for the node, a lost image cannot be pulled again',
  async (t) => {
    const n = await openshiftNode(t, false);
    const agent = daemonChild(t, n.config, n.statusFile);
    const s = await agent.until('Ready', (x: any) => x?.phase === 'Ready');
    t.notOk(
      s.conditions.some((c: any) => c.type === 'Serving' && c.status === 'True'),
      'not served after Ready',
    );
    t.equal(await n.hostsToml(), undefined);
    n.lose(IMAGE);
    t.match(
      await n.pull(IMAGE),
      /^failed/,
      'the pull goes to quay.io, which this site cannot reach',
    );
    t.same(
      (await readdir(n.upgradeDir)).filter((e) => e.startsWith('1.1.0')),
      [],
      'no layout kept',
    );
  },
);

// A node that joins after the cluster's upgrade (added or replaced; it boots an older image)
// holds none of the running release's images and has no registry to pull them from. Loading
// the release the cluster runs from a stick is allowed (not a downgrade), pins it as the
// running release, and `bundle cluster status` shows the node as missing it until then.
// Real containerd; the API server is the RBAC-enforcing stand-in (none can run here).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { startContainerd } from '../runtime/lib.js';
import { bundle as bundleCli } from '../builder/lib.js';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';

const images = [
  {
    name: 'quay.io/openshift-release-dev/ocp-v4.0-art-dev:one',
    files: { 'one.txt': 'payload one' },
  },
  {
    name: 'quay.io/openshift-release-dev/ocp-v4.0-art-dev:two',
    files: { 'two.txt': 'payload two' },
  },
];

t.test('the running release loaded onto a node that has none of its images', async (t) => {
  const api = await startKubeStandIn({ clusterVersion: '4.15.1' }); // completed 2026-11-01T01:00:00Z
  t.teardown(() => api.close());
  const node = (name: string, created: string) => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, creationTimestamp: created, labels: {} },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  });
  api.put('nodes', node('master-0', '2026-10-01T00:00:00Z'));
  api.put('nodes', node('node-a', '2026-11-20T00:00:00Z'));
  const dir = await tmpdir(t, 'ob-join-later-');
  const admin = await api.adminKubeconfig(join(dir, 'admin.kubeconfig'));
  const clusterStatus = async () =>
    JSON.parse((await bundleCli(['cluster', 'status', '--json', '--kubeconfig', admin])).stdout);

  const before = await clusterStatus();
  t.match(
    before.nodes.find((r: any) => r.node === 'node-a'),
    { missingRunning: '4.15.1' },
    'joined after 4.15.1 completed, never loaded it: missing',
  );
  t.notOk(
    before.nodes.find((r: any) => r.node === 'master-0').missingRunning,
    'a node installed at 4.15.1 holds it',
  );
  t.match(
    before.summary,
    'node-a is missing the running release 4.15.1: load the 4.15.1 bundle on it',
  );

  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const ctd = await startContainerd(30_000, {
    certsDir: join(root, 'etc/containerd/certs.d'),
    socket: join(root, 'run/containerd/containerd.sock'),
  });
  t.teardown(() => ctd.stop());
  const ctr = () =>
    execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' });
  t.notMatch(ctr(), /ocp-v4\.0-art-dev/, "the node holds none of the release's images");
  await api.writeNodeKubeconfig(root, 'node-a', { certPaths: 'root' });
  const config = await nodeRoot(
    root,
    keys.pub,
    `runtime: containerd\nspace:\n  reserveBytes: 0\n${stringify({ version: { fromCluster: true }, status: { kubeconfig: '/var/lib/kubelet/kubeconfig' } })}`,
  );
  const file = await makeBundle(dir, {
    key: keys.key,
    version: '4.15.1',
    images,
    upgradeFrom: ['4.15.0'],
    out: join(dir, 'ocp-4.15.1.bundle'),
  });

  const r = await run(AGENT, ['load', file, '--config', config, '--json']);
  t.equal(r.code, 0, r.stderr.slice(-1500));
  t.match(
    JSON.parse(r.stdout.trim().split('\n').pop()!),
    { ready: true, version: '4.15.1' },
    'the version the cluster runs is not a downgrade',
  );
  const listed = ctr();
  for (const img of images)
    t.match(
      listed,
      new RegExp(`${img.name.replace(/[.]/g, '\\.')}\\s.*io\\.cri-containerd\\.pinned=pinned`),
      `${img.name} loaded and pinned`,
    );
  const status = JSON.parse(await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8'));
  t.match(
    status.history,
    [{ version: '4.15.1', state: 'complete', digest: /^sha256:/ }],
    'recorded as the running release this node holds',
  );
  // one record per bundle: VERSION-ARCH@sha256-HEX.json
  const recordFile = (await readdir(join(root, 'var/lib/bundle-agent/releases'))).find((f) =>
    f.startsWith('4.15.1-amd64'),
  )!;
  const rec = JSON.parse(
    await readFile(join(root, 'var/lib/bundle-agent/releases', recordFile), 'utf8'),
  );
  t.equal(
    rec.refs.length,
    images.length * 2,
    'its images recorded (by digest and tag), so they stay pinned while 4.15.1 runs',
  );

  const after = await clusterStatus();
  t.notOk(
    after.nodes.find((r: any) => r.node === 'node-a').missingRunning,
    'once loaded, no longer missing',
  );
  t.notMatch(after.summary, 'missing the running release');
});

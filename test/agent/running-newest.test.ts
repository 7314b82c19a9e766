// With the API server away, the running release is the newest the node saw: the remembered
// cluster-release.json or the status history's running/complete entries, whichever is newer.
// A file that lags (the cluster's image was by tag, so it was not rewritten) must not let a
// downgrade through nor unpin the running release. Real containerd; the API server is the
// RBAC-enforcing stand-in (none can run here).
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { clusterVersionDoc, startKubeStandIn } from '../helpers/kube-standin.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { startContainerd } from '../runtime/lib.js';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';
import { until } from '../helpers/until.js';

const images = (v: string) => [{ name: `quay.io/acme/app:${v}`, files: { 'app.txt': `app ${v}` } }];

t.test(
  'API away: the newest running release seen is used; a downgrade is refused, the running release stays pinned',
  async (t) => {
    const api = await startKubeStandIn({ clusterVersion: '1.0.0' }); // image by digest
    t.teardown(() => api.close());
    const dir = await tmpdir(t, 'ob-running-newest-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const ctd = await startContainerd(30_000, {
      certsDir: join(root, 'etc/containerd/certs.d'),
      socket: join(root, 'run/containerd/containerd.sock'),
    });
    t.teardown(() => ctd.stop());
    await api.writeNodeKubeconfig(root, 'node-a', { certPaths: 'root' });
    const config = await nodeRoot(
      root,
      keys.pub,
      `runtime: containerd\nspace:\n  reserveBytes: 0\n${stringify({ version: { fromCluster: true }, status: { kubeconfig: '/var/lib/kubelet/kubeconfig', console: false } })}`,
    );
    const b110 = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: images('1.1.0'),
      upgradeFrom: ['1.0.0'],
      out: join(dir, '1.1.0.bundle'),
    });
    const b105 = await makeBundle(dir, {
      key: keys.key,
      version: '1.0.5',
      images: images('1.0.5'),
      upgradeFrom: ['1.0.0'],
      out: join(dir, '1.0.5.bundle'),
    });
    const load = (file: string) => run(AGENT, ['load', file, '--config', config, '--json']);
    const remembered = async () =>
      JSON.parse(await readFile(join(root, 'var/lib/bundle-agent/cluster-release.json'), 'utf8'));

    let r = await load(b110);
    t.equal(r.code, 0, r.stderr.slice(-1500));
    t.match(await remembered(), { version: '1.0.0' });

    // the cluster upgraded; its ClusterVersion names the release image by tag
    api.clusterVersion = clusterVersionDoc(
      '1.1.0',
      'quay.io/openshift-release-dev/ocp-release:1.1.0',
    );
    r = await load(b110);
    t.equal(r.code, 0, r.stderr.slice(-1500));
    const file = await remembered();
    t.equal(
      file.version,
      '1.1.0',
      'the version is remembered even though the image is not by digest',
    );
    t.equal(file.image, undefined, 'an image by tag is not kept');

    api.intercept = (q) =>
      q.resource === 'clusterversions'
        ? {
            status: 503,
            body: { kind: 'Status', status: 'Failure', code: 503, message: 'unavailable' },
          }
        : undefined;
    r = await load(b105);
    t.equal(r.code === 0, false, 'the older release is not loaded');
    t.match(
      r.stderr,
      /older than the running 1\.1\.0/,
      'refused as a downgrade from the newest running release seen',
    );
    const status = JSON.parse(
      await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    t.match(
      status.conditions.find((c: any) => c.type === 'Failed'),
      { reason: 'Downgrade' },
    );
    const listed = execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], {
      encoding: 'utf8',
    });
    t.match(
      listed,
      /quay\.io\/acme\/app:1\.1\.0\s.*io\.cri-containerd\.pinned=pinned/,
      'the running release 1.1.0 stays pinned',
    );
  },
);

t.test(
  'SIGTERM while a fresh node waits for the cluster: a clear Interrupted, no failed history entry for a release never attempted',
  async (t) => {
    const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
    t.teardown(() => api.close());
    const dir = await tmpdir(t, 'ob-wait-sigterm-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    await api.writeNodeKubeconfig(root, 'node-a', { certPaths: 'root' });
    const config = await nodeRoot(
      root,
      keys.pub,
      `runtime: containerd\nspace:\n  reserveBytes: 0\n${stringify({ version: { fromCluster: true }, status: { kubeconfig: '/var/lib/kubelet/kubeconfig', console: false } })}`,
    );
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: images('1.1.0'),
      upgradeFrom: ['1.0.0'],
      out: join(dir, '1.1.0.bundle'),
    });
    const statusFile = join(root, 'var/lib/bundle-agent/status.json');
    const readStatus = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
    await api.pause();
    const child = spawn(process.execPath, [AGENT, 'load', file, '--config', config, '--json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    const exited = new Promise<number | null>((r) => child.on('close', r));
    t.teardown(() => {
      child.kill('SIGKILL');
    });
    const waiting = (s: any) =>
      s?.conditions?.some((c: any) => c.type === 'Ready' && c.reason === 'WaitingForCluster');
    await until('the load waits for the cluster', async () => waiting(await readStatus()), {
      timeoutMs: 30_000,
      stepMs: 50,
    });
    t.ok(waiting(await readStatus()), 'the load waits for the cluster');
    child.kill('SIGTERM');
    t.equal(await exited, 1);
    const err = JSON.parse(stdout.trim().split('\n').pop()!).error;
    t.equal(err.reason, 'Interrupted');
    t.notMatch(err.message, /operation was aborted/i, `not Node's raw abort text: ${err.message}`);
    t.match(err.message, /stopped while waiting for the cluster/);
    const s = await readStatus();
    t.match(
      s.conditions.find((c: any) => c.type === 'Failed'),
      { reason: 'Interrupted', message: /stopped while waiting for the cluster/ },
    );
    t.notOk(
      s.history.some((e: any) => e.version === '1.1.0'),
      `no history entry for 1.1.0, never attempted: ${JSON.stringify(s.history)}`,
    );
  },
);

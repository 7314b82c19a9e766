// A fetch from peers is a staging like a stick's (issue #42 item 3): through the daemon's own
// wiring (peerFetchBase → planSpace) it is held to the kubelet's eviction thresholds, read from
// the node's kubelet config, before a byte is fetched. The same disk and bundle with a looser
// threshold in that config is fetched whole, so the kubelet's figure is what decides. Real
// mutual-TLS peer server, a real tmpfs as the node's disk (staging, image store, kubelet dir).
import t from 'tap';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseConfig, peerFetchBase, type AgentError } from '@offline-bundle/agent';
import { nodeRoot, smallFs } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

/** The node's one disk: the bundle's layout and its images take some 13 MiB of it. */
const DISK_KIB = 64 * 1024;

const w = await peerWorld(t);
const seed = await w.server();
const fromSeed = () => new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);

/** A node whose every directory is on its own small disk, with `evictionHard` in its kubelet config (OpenShift's path). */
async function nodeWithKubelet(name: string, evictionHard: string) {
  const disk = join(w.b.dir, name);
  if (!smallFs(disk, DISK_KIB, t)) return undefined;
  const root = join(disk, 'node');
  const configFile = await nodeRoot(
    root,
    undefined,
    'trust:\n  digest: sha256:0000000000000000000000000000000000000000000000000000000000000000\nruntime: containerd\nspace:\n  reserveBytes: 0\n',
  );
  await mkdir(join(root, 'etc/kubernetes'), { recursive: true });
  await mkdir(join(root, 'var/lib/kubelet'), { recursive: true });
  await writeFile(
    join(root, 'etc/kubernetes/kubelet.conf'),
    `apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n${evictionHard}`,
  );
  return parseConfig(await readFile(configFile, 'utf8'), configFile);
}

t.test(
  "the kubelet's evictionHard threshold refuses the fetch before its first byte",
  async (t) => {
    const config = await nodeWithKubelet(
      'strict',
      '  nodefs.available: "63Mi"\n  imagefs.available: "15%"\n',
    );
    if (!config) return t.skip('cannot mount a tmpfs here');
    const served = seed.counters.bytesServed;
    const err = await w
      .fetch(config.paths.upgradeDir, fromSeed(), peerFetchBase(config, w.credentials, w.b.trust))
      .result.then(
        () => undefined,
        (e: AgentError) => e,
      );
    t.equal(err?.reason, 'InsufficientSpace', err?.message);
    t.match(
      err?.message,
      /^bundle 1\.2\.3 is not fetched from peers: not enough disk space.*under the kubelet's evictionHard threshold nodefs\.available < [\d.]+ MB \(the kubelet would evict pods\)/,
      "names the kubelet's threshold",
    );
    t.notMatch(
      err?.message ?? '',
      /plug the stick/,
      'no stick to plug in again: the fetch is tried again',
    );
    t.match(err?.message, /etc\/kubernetes\/kubelet\.conf/, 'and where it was read');
    t.notMatch(err?.message ?? '', /\n/, 'one line');
    t.equal(seed.counters.bytesServed, served, 'no blob was asked for');
    t.same(await readdir(config.paths.upgradeDir).catch(() => []), [], 'nothing staged');
  },
);

t.test('the same disk under a looser threshold: fetched whole', async (t) => {
  const config = await nodeWithKubelet(
    'loose',
    '  nodefs.available: "1Mi"\n  imagefs.available: "1Mi"\n',
  );
  if (!config) return t.skip('cannot mount a tmpfs here');
  const r = await w.fetch(
    config.paths.upgradeDir,
    fromSeed(),
    peerFetchBase(config, w.credentials, w.b.trust),
  ).result;
  t.equal(
    r.target,
    join(config.paths.upgradeDir, '1.2.3-amd64'),
    "staged where a stick's staging goes",
  );
  t.ok(seed.counters.bytesServed >= w.layoutBytes - 30, 'every blob came from the peer');
});

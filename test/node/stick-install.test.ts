// From an empty node to a loaded bundle, with no registry anywhere and nothing typed at the
// node (issue 20, "Done when"): a node root boots under its own systemd (systemd-nspawn, see
// test/helpers/node.ts) with the files the OpenShift MachineConfig puts on a node, rendered by
// the shipped generator (deploy/openshift/generate.mjs: udev rule, config.yaml, trust key,
// tmpfiles, switch guard, the Quadlet unit). A stick (a loop-mounted ext4 image) holding a
// bundle that carries the agent image is plugged in; the test then only watches: the agent ends
// up running from containers-storage by digest (Quadlet's generator wrote the unit, Pull=never),
// the bundle is loaded and pinned, and the status object is written by the node's identity
// (system:node:node-a, a client certificate under /var/lib/kubelet/pki as on RHCOS) through
// the RBAC-enforcing API stand-in on the host's bridge address.
//
// Substitutions, each because the real part cannot run here:
// - CRI-O: Debian has none. The CRI-O contract stand-in (test/helpers/crio-standin.mjs) runs
//   INSIDE the node as a real crio.service (ExecReload=kill -HUP $MAINPID, as CRI-O's unit), on
//   the Node runtime the packaged agent ships, so the shipped `systemctl reload crio` really
//   reloads it. Its image store is its own directory, not containers-storage.
// - The Kubernetes API server: the RBAC-enforcing stand-in (test/helpers/kube-standin.ts) with
//   the shipped deploy/rbac.yaml and OpenShift's node rights, on the host at the bridge address.
// - RHCOS: a Debian trixie root (systemd 257, podman 5.4 with Quadlet, skopeo, containerd).
// - udev: does not run in a container (/sys is read-only), so the stick is attached where the
//   shipped rule's systemd-mount puts it (/run/media/bundle-agent/<device>), read-only.
// - TODO(bootstrap): until the stick bootstrap lands, the agent image is loaded into the node's
//   containers-storage by the test (skopeo copy), which a technician would otherwise type.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
// @ts-expect-error: JavaScript module without type declarations
import { nodeFiles } from '../../deploy/openshift/generate.mjs';
import { BUNDLE, keygen, makeBundle, run } from '../agent/fixtures.js';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { bootNode, buildRoot, makeBridge, nodeSkipReason, packagedAgent, waitFor } from '../helpers/node.js';
import { tmpdir } from '../helpers/tmp.mjs';

const REPO = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
const ORIGIN = 'origin.offline-bundle.invalid';
const CLUSTER_VERSION = '4.15.1';
const BUNDLE_VERSION = '4.15.2';

/**
 * Directories an RHCOS node has that the Debian root does not, and that the Quadlet unit mounts
 * (podman refuses a missing Volume= source): CRI-O's (its package and its start make them) and
 * /etc/issue.d (RHCOS ships it).
 */
const RHCOS_DIRS = `d /etc/crio/crio.conf.d 0755 root root -
d /run/crio 0755 root root -
d /etc/issue.d 0755 root root -
`;

/** crio.service of the node: the CRI-O stand-in under the node's systemd, reloaded as CRI-O is. */
function crioUnit(node: string): string {
  return `[Unit]
Description=CRI-O contract stand-in (test/helpers/crio-standin.mjs; Debian has no CRI-O)
After=local-fs.target

[Service]
Type=simple
ExecStart=${node} ${REPO}/test/helpers/crio-standin.mjs --state-dir /var/lib/crio-standin --listen /var/run/crio/crio.sock --registries-conf /etc/containers/registries.conf --registries-conf-dir /etc/containers/registries.conf.d --config /etc/crio/crio.conf --config-dir /etc/crio/crio.conf.d
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure

[Install]
WantedBy=multi-user.target
`;
}

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  // root build (first run ~20-90 s), agent packaging (first run ~50 s), boot and one load
  t.setTimeout(1_500_000);
  t.test('an empty node installs the agent and loads a bundle from a stick, with no registry (real systemd, Quadlet, podman)', async (t) => {
    const began = Date.now();
    const [root, agent] = [await buildRoot(), await packagedAgent()];
    t.comment(`node root: ${root.buildMs ? `built in ${(root.buildMs / 1000).toFixed(1)} s` : 'cached'}; agent package: ${agent.buildMs ? `built in ${(agent.buildMs / 1000).toFixed(1)} s` : 'cached'}`);
    const dir = await tmpdir(t, 'ob-node-stick-');
    const bridge = await makeBridge(t);
    const api = await startKubeStandIn({ host: bridge.hostAddress, clusterVersion: CLUSTER_VERSION });
    t.teardown(() => api.close());

    const keys = await keygen(dir);
    const bundleFile = join(dir, `ocp-${BUNDLE_VERSION}.bundle`);
    await makeBundle(dir, {
      key: keys.key, version: BUNDLE_VERSION, upgradeFrom: [CLUSTER_VERSION], out: bundleFile,
      images: [{ name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } }, { name: `${ORIGIN}/acme/tool:v2`, files: { 'tool.txt': 'tool v2' } }],
      create: (args) => run(BUNDLE, [...args, '--agent-image', `oci-archive:${agent.ociTar}:${agent.version}`]),
    });
    const stick = join(dir, 'stick.img');
    const fill = join(dir, 'fill');
    mkdirSync(fill);
    execFileSync('truncate', ['-s', '512M', stick]);
    execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'UPDATE', stick]);
    execFileSync('mount', ['-o', 'loop', stick, fill]);
    try {
      execFileSync('cp', [bundleFile, `${bundleFile}.sha256`, fill]);
    } finally {
      execFileSync('umount', [fill]);
    }

    // The agent image by digest: the amd64 manifest as podman stores it.
    const index = JSON.parse(execFileSync('tar', ['-xOf', agent.ociTar, 'index.json'], { encoding: 'utf8' }));
    const amd64 = index.manifests.find((m: { platform?: { architecture: string } }) => m.platform?.architecture === 'amd64');
    const image = `localhost/offline-bundle/bundle-agent@${amd64.digest}`;
    const files: Record<string, string> = {};
    for (const f of nodeFiles({ image, key: keys.pub }) as { path: string; contents: string; mode: number }[]) files[f.path] = f.contents;
    const node = await bootNode(t, {
      root: root.dir, bridge, hostname: 'node-a', readOnlyBinds: [REPO, agent.prefix, dirname(agent.ociTar)],
      files: {
        ...files,
        '/etc/bundle-agent/switch-guard.sh': [files['/etc/bundle-agent/switch-guard.sh'], 0o755],
        '/etc/systemd/system/crio.service': crioUnit(agent.node),
        '/etc/crio/crio.conf': '[crio]\n[crio.image]\n',
        '/etc/tmpfiles.d/rhcos-like.conf': RHCOS_DIRS,
      },
      links: { '/etc/systemd/system/multi-user.target.wants/crio.service': '../crio.service' },
      prepare: (merged) => api.writeNodeKubeconfig(merged, 'node-a'),
    });
    t.comment(`node booted in ${(node.bootMs / 1000).toFixed(1)} s`);
    const diag = async () => `--- bundle-agent journal ---\n${(await node.journal('bundle-agent.service')).slice(-4000)}\n--- crio ---\n${(await node.journal('crio.service')).slice(-1500)}\n--- api requests ---\n${api.requests.map((r) => `${r.method} ${r.path} ${r.user} -> ${r.status}`).join('\n')}`;

    t.match(await node.must(['systemctl', 'cat', 'bundle-agent.service']), /SourcePath=\/etc\/containers\/systemd\/bundle-agent\.container/, "bundle-agent.service is the Quadlet generator's output");
    t.notMatch(await node.must(['ip', 'route']), /default/, 'the node has no route beyond the bridge: no registry is reachable');

    // TODO(bootstrap): the stick bootstrap does this from the stick.
    await node.must(['skopeo', 'copy', '--quiet', `oci-archive:${agent.ociTar}:${agent.version}-amd64`, `containers-storage:localhost/offline-bundle/bundle-agent:${agent.version}`]);

    await node.plugStick(stick);
    const status = await waitFor('the status object reports Ready', async () => {
      const s = api.get('nodebundlestatuses', 'node-a');
      return s?.status?.phase === 'Ready' ? s : undefined;
    }, 240_000, diag);
    const cond = (type: string) => status.status.conditions.find((c: { type: string }) => c.type === type);
    t.equal(status.status.bundle?.version, BUNDLE_VERSION, 'the bundle from the stick is loaded');
    t.equal(cond('Pinned')?.status, 'True', 'its images are pinned');
    const writes = api.requests.filter((r) => r.path.includes('/nodebundlestatuses/node-a') && r.method !== 'GET');
    t.ok(writes.length > 0 && writes.every((r) => r.user === 'system:node:node-a' && r.status < 300), 'every status write was the node identity, and allowed');
    t.same(api.requests.filter((r) => r.status >= 400).map((r) => `${r.method} ${r.path} ${r.status}`), [], 'no API call of the agent was refused');

    const ps = await node.must(['podman', 'ps', '--format', '{{.Names}} {{.ImageID}} {{.Image}}']);
    t.match(ps, /^bundle-agent /m, 'the agent runs in the node');
    t.match(await node.must(['podman', 'inspect', 'bundle-agent', '--format', '{{.ImageName}}']), new RegExp(`@${amd64.digest}`), 'from containers-storage, by digest');
    const events = await node.must(['cat', '/var/lib/crio-standin/events.jsonl']);
    t.match(events, /"event":"reload"/, "the agent's `systemctl reload crio` reloaded crio.service");
    t.comment(`whole test ${((Date.now() - began) / 1000).toFixed(1)} s`);
  });
}


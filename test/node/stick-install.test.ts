// From an empty node to a loaded bundle, with no registry anywhere and nothing typed at the
// node (issue 20, "Done when"): a node root boots under its own systemd (systemd-nspawn, see
// test/helpers/node.ts) with the files and units the OpenShift MachineConfig puts on a node,
// rendered by the shipped generator (deploy/openshift/generate.mjs nodeFiles: udev rule,
// config.yaml, trust key, tmpfiles, switch guard, the Quadlet unit, the bootstrap script and its
// .service/.path units). A stick (a loop-mounted ext4 image) holding a bundle and the signed agent
// image `bundle create --agent-image` writes beside it is plugged in; the test then only watches:
// the bootstrap (started by its .path unit) verifies and loads the agent image, the agent runs
// from containers-storage by digest (Quadlet's generator wrote the unit, Pull=never), the bundle
// is loaded and pinned, and the status object is written by the node's identity
// (system:node:node-a, a client certificate under /var/lib/kubelet/pki as on RHCOS) through
// the RBAC-enforcing API stand-in on the host's bridge address.
//
// Substitutions, each because the real part cannot run here:
// - CRI-O: Debian has none. The CRI-O contract stand-in (test/helpers/crio-standin.mjs) runs
//   INSIDE the node as a real crio.service (ExecReload=kill -HUP $MAINPID, as CRI-O's unit), on
//   the Node runtime the packaged agent ships, so the shipped `systemctl reload crio` really
//   reloads it. Its image store is its own directory, not containers-storage. The directories
//   CRI-O's package makes (/etc/crio/crio.conf.d, /run/crio) and RHCOS's /etc/issue.d come
//   from a tmpfiles.d file of the test (podman refuses a Volume= whose source is missing).
// - The Kubernetes API server: the RBAC-enforcing stand-in (test/helpers/kube-standin.ts) with
//   the shipped deploy/rbac.yaml and OpenShift's node rights, on the host at the bridge address.
// - RHCOS: a Debian trixie root (systemd 257, podman 5.4 with Quadlet, skopeo, containerd).
// - Ignition: the generator's files are written into the root before boot, and its units with
//   `enabled: true` are enabled with `systemctl --root` (Ignition does it with a preset file).
// - udev: does not run in a container (/sys is read-only), so the stick is attached where the
//   shipped rule's systemd-mount puts it (/run/media/bundle-agent/<device>), read-only, with
//   open_tree/move_mount into the running node.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
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
      // the per-architecture tag: at the index tag VERSION (as README shows) create refuses the
      // sidecar ("not a single-platform image manifest"), reported on branch node-harness
      create: (args) => run(BUNDLE, [...args, '--agent-image', `oci-archive:${agent.ociTar}:${agent.version}-amd64`]),
    });
    const beside = readdirSync(dir).filter((n) => /^bundle-agent-.*\.oci\.tar(\.sig)?$/.test(n));
    t.equal(beside.length, 2, `bundle create --agent-image wrote the agent image and its statement beside the bundle (${beside.join(', ')})`);
    const stick = join(dir, 'stick.img');
    const fill = join(dir, 'fill');
    mkdirSync(fill);
    execFileSync('truncate', ['-s', '512M', stick]);
    execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'UPDATE', stick]);
    execFileSync('mount', ['-o', 'loop', stick, fill]);
    try {
      execFileSync('cp', [bundleFile, `${bundleFile}.sha256`, ...beside.map((n) => join(dir, n)), fill]);
    } finally {
      execFileSync('umount', [fill]);
    }

    // The agent image's digest: the amd64 manifest of what `pnpm package` built.
    const index = JSON.parse(execFileSync('tar', ['-xOf', agent.ociTar, 'index.json'], { encoding: 'utf8' }));
    const agentDigest: string = index.manifests.find((m: { platform?: { architecture: string } }) => m.platform?.architecture === 'amd64').digest;
    const rendered = nodeFiles({ key: keys.pub }) as { files: { path: string; contents: string; mode: number }[]; units: { name: string; enabled: boolean; contents: string }[] };
    const files: Record<string, [string, number]> = {};
    for (const f of rendered.files) files[f.path] = [f.contents, f.mode];
    for (const u of rendered.units) files[`/etc/systemd/system/${u.name}`] = [u.contents, 0o644];
    const enable = [...rendered.units.filter((u) => u.enabled).map((u) => u.name), 'crio.service'];
    const node = await bootNode(t, {
      root: root.dir, bridge, hostname: 'node-a', readOnlyBinds: [REPO, agent.prefix, dirname(agent.ociTar)],
      files: {
        ...files,
        '/etc/systemd/system/crio.service': crioUnit(agent.node),
        '/etc/crio/crio.conf': '[crio]\n[crio.image]\n',
        '/etc/tmpfiles.d/rhcos-like.conf': RHCOS_DIRS,
      },
      prepare: async (merged) => {
        await api.writeNodeKubeconfig(merged, 'node-a');
        execFileSync('systemctl', [`--root=${merged}`, 'enable', '--quiet', ...enable]);
      },
    });
    t.comment(`node booted in ${(node.bootMs / 1000).toFixed(1)} s`);
    const diag = async () => `--- bootstrap ---\n${(await node.journal('bundle-agent-bootstrap.service')).slice(-2000)}\n--- bundle-agent journal ---\n${(await node.journal('bundle-agent.service')).slice(-4000)}\n--- crio ---\n${(await node.journal('crio.service')).slice(-1500)}\n--- api requests ---\n${api.requests.map((r) => `${r.method} ${r.path} ${r.user} -> ${r.status}`).join('\n')}`;

    t.match(await node.must(['systemctl', 'cat', 'bundle-agent.service']), /SourcePath=\/etc\/containers\/systemd\/bundle-agent\.container/, "bundle-agent.service is the Quadlet generator's output");
    t.notMatch(await node.must(['ip', 'route']), /default/, 'the node has no route beyond the bridge: no registry is reachable');

    t.equal((await node.systemctl('is-active', 'bundle-agent.service')).stdout.trim(), 'inactive', 'before the stick: no agent image, the agent is not started (ExecCondition)');
    t.equal((await node.run(['podman', 'image', 'exists', `localhost/offline-bundle/bundle-agent@${agentDigest}`])).code, 1, 'before the stick: no agent image in storage');

    await node.plugStick(stick);
    const status = await waitFor('the status object reports Ready or Failed', async () => {
      const s = api.get('nodebundlestatuses', 'node-a');
      return s?.status?.phase === 'Ready' || s?.status?.phase === 'Failed' ? s : undefined;
    }, 600_000, diag);
    const failed = status.status.conditions?.find((c: { type: string; status: string }) => c.type === 'Failed' && c.status === 'True');
    t.equal(status.status.phase, 'Ready', `the load ends Ready${failed ? ` (it failed: ${failed.reason}: ${failed.message})` : ''}`);
    const cond = (type: string) => status.status.conditions.find((c: { type: string }) => c.type === type);
    t.equal(status.status.bundle?.version, BUNDLE_VERSION, 'the bundle from the stick is loaded');
    t.equal(cond('Pinned')?.status, 'True', 'its images are pinned');
    const writes = api.requests.filter((r) => r.path.includes('/nodebundlestatuses/node-a') && r.method !== 'GET');
    t.ok(writes.length > 0 && writes.every((r) => r.user === 'system:node:node-a' && r.status < 300), 'every status write was the node identity, and allowed');
    t.same(api.requests.filter((r) => r.status >= 400).map((r) => `${r.method} ${r.path} ${r.status}`), [], 'no API call of the agent was refused');

    const ps = await node.must(['podman', 'ps', '--format', '{{.Names}} {{.ImageID}} {{.Image}}']);
    t.match(ps, /^bundle-agent /m, 'the agent runs in the node');
    t.equal((await node.must(['podman', 'inspect', 'bundle-agent', '--format', '{{.ImageName}}'])).trim(), `localhost/offline-bundle/bundle-agent@${agentDigest}`, 'from containers-storage, by the digest of the packaged image');
    t.match(await node.must(['cat', '/etc/containers/systemd/bundle-agent.container.d/image.conf']), new RegExp(`^Image=localhost/offline-bundle/bundle-agent@${agentDigest}$`, 'm'), "the bootstrap's drop-in names it by digest");
    t.match(await node.must(['systemctl', 'show', '-P', 'ExecStart', 'bundle-agent.service']), /--pull never|--pull=never/, 'Pull=never in the generated unit');
    const events = await node.must(['cat', '/var/lib/crio-standin/events.jsonl']);
    t.match(events, /"event":"reload"/, "the agent's `systemctl reload crio` reloaded crio.service");
    t.comment(`whole test ${((Date.now() - began) / 1000).toFixed(1)} s`);
  });
}


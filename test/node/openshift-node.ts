// The OpenShift node of the booted-node tests (test/helpers/node.ts): the files and units the
// MachineConfig puts on a node, rendered by the shipped generator, booted with the CRI-O
// stand-in as its crio.service and an RBAC-enforcing API stand-in on the host's bridge address,
// with a stick holding a bundle and the agent image beside it ready to plug. The substitutions
// are listed in stick-install.test.ts.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
// @ts-expect-error: JavaScript module without type declarations
import { nodeFiles } from '../../deploy/openshift/generate.mjs';
import { BUNDLE, keygen, makeBundle, run } from '../agent/fixtures.js';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import {
  bootNode,
  buildRoot,
  makeBridge,
  packagedAgent,
  type PackagedAgent,
} from '../helpers/node.js';
import { tmpdir } from '../helpers/tmp.mjs';

export interface NodeSetup {
  rbacFiles?: string[];
  signedByAnotherKey?: boolean;
  console?: 'pipe' | 'read-only';
  clusterVersion?: string;
  stick?: (dir: string, agentImageArg: string) => Promise<{ pub: string; files: string[] }>;
  /** more node files; a function gets the packaged agent (its Node runtime runs a stand-in in the node) */
  files?:
    | Record<string, string | [string, number]>
    | ((agent: PackagedAgent) => Record<string, string | [string, number]>);
  enable?: string[];
  config?: (yaml: string) => string;
}

type T = Parameters<typeof tmpdir>[0] & {
  comment(...m: unknown[]): void;
  match(...a: unknown[]): void;
  equal(...a: unknown[]): void;
};

const REPO = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
export const ORIGIN = 'origin.offline-bundle.invalid';
export const CLUSTER_VERSION = '4.15.1';
export const BUNDLE_VERSION = '4.15.2';

/**
 * Directories an RHCOS node has that the Debian root does not, and that the Quadlet unit mounts
 * (podman refuses a missing Volume= source): CRI-O's (its package and its start make them) and
 * /etc/issue.d (RHCOS ships it).
 */
export const RHCOS_DIRS = `d /etc/crio/crio.conf.d 0755 root root -
d /run/crio 0755 root root -
d /etc/issue.d 0755 root root -
`;

/** crio.service of the node: the CRI-O stand-in under the node's systemd, reloaded as CRI-O is. */
export function crioUnit(node: string): string {
  return `[Unit]
Description=CRI-O contract stand-in (test/helpers/crio-standin.mjs; Debian has no CRI-O)
After=local-fs.target

[Service]
Type=simple
ExecStart=${node} ${REPO}/test/helpers/crio-standin.mjs --state-dir /var/lib/crio-standin --listen /var/run/crio/crio.sock --registries-conf /etc/containers/registries.conf --registries-conf-dir /etc/containers/registries.conf.d --config /etc/crio/crio.conf --config-dir /etc/crio/crio.conf.d --containers-storage
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure

[Install]
WantedBy=multi-user.target
`;
}

/** An ext4 image holding `files` at its top, as a technician's stick. */
export function makeStick(dir: string, name: string, files: string[]): string {
  const img = join(dir, `${name}.img`);
  const fill = join(dir, `${name}-fill`);
  mkdirSync(fill);
  execFileSync('truncate', ['-s', '512M', img]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'UPDATE', img]);
  execFileSync('mount', ['-o', 'loop', img, fill]);
  try {
    execFileSync('cp', [...files, fill]);
  } finally {
    execFileSync('umount', [fill]);
  }
  return img;
}

/**
 * A "newer agent" that never reports: the packaged image (amd64) with its version label set to
 * `version` and an entrypoint running only `script` under the shipped Node (the unit's
 * `run --config ...` become unused arguments), written into an OCI layout at `layout` under the
 * tag VERSION-amd64.
 */
export function unconfirmingAgentImage(
  ociTar: string,
  layout: string,
  version: string,
  script: string,
): string {
  mkdirSync(layout, { recursive: true });
  execFileSync('tar', ['-xf', ociTar, '-C', layout]);
  const blob = (d: string) => join(layout, 'blobs', 'sha256', d.slice('sha256:'.length));
  const put = (bytes: Buffer) => {
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    writeFileSync(blob(digest), bytes);
    return { digest, size: bytes.length };
  };
  const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'));
  const entry = index.manifests.find(
    (m: { platform?: { architecture: string } }) => m.platform?.architecture === 'amd64',
  );
  const manifest = JSON.parse(readFileSync(blob(entry.digest), 'utf8'));
  const config = JSON.parse(readFileSync(blob(manifest.config.digest), 'utf8'));
  config.config.Entrypoint = ['/usr/local/lib/bundle-agent/node', '-e', script];
  config.config.Labels = { ...config.config.Labels, 'org.opencontainers.image.version': version };
  manifest.config = { ...manifest.config, ...put(Buffer.from(JSON.stringify(config))) };
  if (manifest.annotations) manifest.annotations['org.opencontainers.image.version'] = version;
  const m = put(Buffer.from(JSON.stringify(manifest)));
  const tag = `${version}-amd64`;
  index.manifests.push({
    mediaType: entry.mediaType,
    ...m,
    platform: entry.platform,
    annotations: { 'org.opencontainers.image.ref.name': tag },
  });
  writeFileSync(join(layout, 'index.json'), JSON.stringify(index));
  return tag;
}

/** stick-1's files: bundle BUNDLE_VERSION (two small images) with the agent image beside it. */
export async function defaultStick(
  dir: string,
  keys: { key: string; pub: string },
  agentImageArg: string,
  signedByAnotherKey?: boolean,
): Promise<{ pub: string; files: string[] }> {
  const signer = signedByAnotherKey ? await keygen(dir, 'other') : keys;
  const bundleFile = join(dir, `ocp-${BUNDLE_VERSION}.bundle`);
  await makeBundle(dir, {
    key: signer.key,
    version: BUNDLE_VERSION,
    upgradeFrom: [CLUSTER_VERSION],
    out: bundleFile,
    images: [
      { name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } },
      { name: `${ORIGIN}/acme/tool:v2`, files: { 'tool.txt': 'tool v2' } },
    ],
    // the per-architecture tag: at the index tag VERSION (as README shows) create refuses the
    // sidecar ("not a single-platform image manifest"), reported on branch node-harness
    create: (args) => run(BUNDLE, [...args, '--agent-image', agentImageArg]),
  });
  return { pub: keys.pub, files: [bundleFile, `${bundleFile}.sha256`, ...agentImageBeside(dir)] };
}

/** The agent image and its statement `bundle create --agent-image` wrote into `dir`. */
export function agentImageBeside(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => /^bundle-agent-.*\.oci\.tar(\.sig)?$/.test(n))
    .map((n) => join(dir, n));
}

/**
 * Boots node-a with the rendered MachineConfig files (config.yaml with confirmMinutes 1), its
 * kubeconfig for system:node:node-a, and makes stick-1 (bundle BUNDLE_VERSION with the agent
 * image beside it). `rbacFiles`: the API stand-in's RBAC (default: the shipped files);
 * `signedByAnotherKey`: the stick's bundle and agent image signed by a key the node does not trust.
 * `stick`: makes the stick's files instead (given the `--agent-image` argument of `bundle
 * create`), and names the factory key the node trusts; `files`, `enable`: more node files and
 * units to enable; `config`: edits config.yaml; `clusterVersion`: ClusterVersion's (default
 * CLUSTER_VERSION).
 */
export async function openshiftNode(t: T, opts: NodeSetup = {}) {
  const began = Date.now();
  const [root, agent] = [await buildRoot(), await packagedAgent()];
  t.comment(
    `node root: ${root.buildMs ? `built in ${(root.buildMs / 1000).toFixed(1)} s` : 'cached'}; agent package: ${agent.buildMs ? `built in ${(agent.buildMs / 1000).toFixed(1)} s` : 'cached'}`,
  );
  const dir = await tmpdir(t, 'ob-node-stick-');
  const bridge = await makeBridge(t);
  const api = await startKubeStandIn({
    host: bridge.hostAddress,
    clusterVersion: opts.clusterVersion ?? CLUSTER_VERSION,
    rbacFiles: opts.rbacFiles,
  });
  t.teardown(() => api.close());
  // the node's own Node, as a cluster has it (the agent reads its MCD state while it serves a release)
  api.nodes = [
    {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'node-a', labels: { 'node-role.kubernetes.io/worker': '' } },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    },
  ];

  const keys = await keygen(dir);
  const agentImageArg = `oci-archive:${agent.ociTar}:${agent.version}-amd64`;
  const { pub, files: stickFiles } = opts.stick
    ? await opts.stick(dir, agentImageArg)
    : await defaultStick(dir, keys, agentImageArg, opts.signedByAnotherKey);
  const beside = stickFiles.filter((f) => /\/bundle-agent-[^/]*\.oci\.tar(\.sig)?$/.test(f));
  t.equal(
    beside.length,
    2,
    `bundle create --agent-image wrote the agent image and its statement beside the bundle (${beside.join(', ')})`,
  );
  const stick = makeStick(dir, 'stick-1', stickFiles);

  // The agent image's digest: the amd64 manifest of what `pnpm package` built.
  const index = JSON.parse(
    execFileSync('tar', ['-xOf', agent.ociTar, 'index.json'], { encoding: 'utf8' }),
  );
  const agentDigest: string = index.manifests.find(
    (m: { platform?: { architecture: string } }) => m.platform?.architecture === 'amd64',
  ).digest;
  const rendered = nodeFiles({ key: pub }) as {
    files: { path: string; contents: string; mode: number }[];
    units: { name: string; enabled: boolean; contents: string }[];
  };
  const files: Record<string, [string, number]> = {};
  for (const f of rendered.files) files[f.path] = [f.contents, f.mode];
  // the one edit to a shipped file: a 1-minute confirmation window instead of 10, so the
  // rollback below fires within the test (switch-guard.sh's floor is 60 s)
  const config = files['/etc/bundle-agent/config.yaml']!;
  config[0] = config[0].replace(/^ {2}confirmMinutes: 10$/m, '  confirmMinutes: 1');
  t.match(config[0], /^ {2}confirmMinutes: 1$/m, 'config.yaml: confirmMinutes 1 for this test');
  if (opts.config) config[0] = opts.config(config[0]);
  for (const u of rendered.units) files[`/etc/systemd/system/${u.name}`] = [u.contents, 0o644];
  const enable = [
    ...rendered.units.filter((u) => u.enabled).map((u) => u.name),
    'crio.service',
    ...(opts.enable ?? []),
  ];
  const node = await bootNode(t, {
    root: root.dir,
    bridge,
    hostname: 'node-a',
    console: opts.console,
    readOnlyBinds: [REPO, agent.prefix, dirname(agent.ociTar)],
    files: {
      ...files,
      '/etc/systemd/system/crio.service': crioUnit(agent.node),
      '/etc/crio/crio.conf': '[crio]\n[crio.image]\n',
      '/etc/tmpfiles.d/rhcos-like.conf': RHCOS_DIRS,
      ...(typeof opts.files === 'function' ? opts.files(agent) : opts.files),
    },
    prepare: async (merged) => {
      await api.writeNodeKubeconfig(merged, 'node-a');
      execFileSync('systemctl', [`--root=${merged}`, 'enable', '--quiet', ...enable]);
    },
  });
  t.comment(`node booted in ${(node.bootMs / 1000).toFixed(1)} s`);
  const diag = async () =>
    `--- bootstrap ---\n${(await node.journal('bundle-agent-bootstrap.service')).slice(-2000)}\n--- bundle-agent journal ---\n${(await node.journal('bundle-agent.service')).slice(-4000)}\n--- crio ---\n${(await node.journal('crio.service')).slice(-1500)}\n--- api requests ---\n${api.requests.map((r) => `${r.method} ${r.path} ${r.user} -> ${r.status}`).join('\n')}`;
  return { began, agent, dir, bridge, api, keys, stick, agentDigest, node, diag };
}

// docs/install.md's OpenShift (Quadlet + CRI-O) commands, copied as written (issue #39): the blocks
// marked `run=quadlet` (test/helpers/docs.ts, runBlocks) run in page order, each as
// `bash -euo pipefail FILE`, starting where the one before ended on the same machine.
//
// - The admin's blocks (`on=workstation`) run on the host in a directory holding what the docs
//   say it holds: bundle-deploy-VERSION.tar.gz as `pnpm package` builds it (scripts/package.mjs
//   --only deploy) and the factory's public key. `openshift/generate` runs for real (the shipped
//   launcher, with node from PATH as the docs allow). `oc` is a stand-in: no API server runs here
//   (ENVIRONMENT.md), so it only checks that each `-f` path exists, as oc does before sending
//   anything, records it, and answers `oc get mcp` as after the rollout. What it cannot prove:
//   that the cluster accepts the objects (the admission policies need OpenShift 4.17; the page
//   says what to do before it) and the MCO's own rollout.
// - The MCO's part: the worker MachineConfig `oc apply` was given (the YAML the docs' generate
//   wrote, not the generator's functions) is written onto the node as the MCO writes it: each
//   Ignition file decoded (data URL, gzip) with its mode, each unit written and, when `enabled`,
//   enabled. The API stand-in (RBAC-enforcing, on the host's bridge address) enforces the RBAC
//   and admission policies of the files `oc apply` was given, nothing else.
// - The node: a Debian trixie root booted under its own systemd (test/helpers/node.ts), with the
//   CRI-O contract stand-in as crio.service (test/node/openshift-node.ts) under CRI-O's defaults:
//   CRI-O's own paths, no crio.conf written by the test (CRI-O with no file runs on its built-in
//   defaults, which a packaged crio.conf only restates in comments), crio.conf.d empty. The stick
//   (bundle + the agent image and statement `bundle create --agent-image` writes beside it) is
//   plugged before the first `after=stick` block, where the shipped udev rule mounts it (no udev
//   in a container). The status block is read again, as a technician would, until it says
//   "Done … You may remove the USB stick"; the pins are then read from CRI-O's ListImages (what
//   `crictl images` asks), and the NodeBundleStatus from the API stand-in.
// The one change made to a block: none (this path has no placeholder). A broken block fails the
// test: the admin's block with a path typo is run too and must fail on that path.
import t from 'tap';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { parseAllDocuments } from 'yaml';
import { CriImageClient } from '@offline-bundle/runtime';
import { keygen } from '../agent/fixtures.js';
import { markedBlocks, runBlocks, type RunBlock } from '../helpers/docs.js';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import {
  bootNode,
  buildRoot,
  makeBridge,
  nodeSkipReason,
  packagedAgent,
  type Node,
} from '../helpers/node.js';
import { runCaptured } from '../helpers/run-captured.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import {
  BUNDLE_VERSION,
  CLUSTER_VERSION,
  ORIGIN,
  RHCOS_DIRS,
  crioUnit,
  defaultStick,
  makeStick,
} from './openshift-node.js';

const DOC = 'docs/install.md';
const GROUP = 'quadlet';
const REPO = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
const NODE_NAME = 'node-a';
const IMAGES = [`${ORIGIN}/acme/app:v1`, `${ORIGIN}/acme/tool:v2`];
const DONE = /^Done: update .* is loaded on this node\. You may remove the USB stick\.$/m;
/** The host directory of node block scripts, bound read-only into the node here. */
const BLOCKS_DIR = '/opt/docs-blocks';
/** Where a node block starts: root's home, as after `oc debug node/NAME` and `chroot /host`. */
const NODE_HOME = '/root';
const TYPO: [string, string] = ['-f 99-worker-bundle-agent.yaml', '-f 99-worker-bundle-agnet.yaml'];

/** `oc` stand-in: `apply -f FILE ...` (each FILE must exist, as oc checks before sending) and `get mcp`. */
const ocStandIn = (record: string) => `#!/bin/bash
# oc stand-in (test/node/quadlet-docs.test.ts): no API server here. Records what "oc apply -f" is given.
set -euo pipefail
case "\${1:-} \${2:-}" in
  "apply -f")
    shift; files=()
    while [ $# -gt 0 ]; do
      [ "$1" = -f ] && [ $# -ge 2 ] || { echo "oc stand-in: only 'oc apply -f FILE [-f FILE]...' is modelled, not: $*" >&2; exit 2; }
      [ -e "$2" ] || { echo "error: the path \\"$2\\" does not exist" >&2; exit 1; }
      files+=("$(readlink -f -- "$2")"); shift 2
    done
    printf '%s\\n' "\${files[@]}" >> '${record}'
    for f in "\${files[@]}"; do echo "applied $f (stand-in)"; done ;;
  "get mcp")
    printf 'NAME     CONFIG            UPDATED   UPDATING   DEGRADED\\nmaster   rendered-master   True      False      False\\nworker   rendered-worker   True      False      False\\n' ;;
  *) echo "oc stand-in: not modelled: oc $*" >&2; exit 2 ;;
esac
`;

/** Runs the admin's blocks on the host in `site`, with the oc stand-in first on PATH; returns the files applied, in order. */
async function runOnWorkstation(dir: string, site: string, blocks: RunBlock[]) {
  const bin = join(dir, `${basename(site)}-bin`);
  const record = join(dir, `${basename(site)}-applied`);
  mkdirSync(bin);
  writeFileSync(join(bin, 'oc'), ocStandIn(record), { mode: 0o755 });
  writeFileSync(record, '');
  const script = join(dir, `${basename(site)}-blocks.sh`);
  writeFileSync(script, blocks.map((b) => b.code).join(''));
  const env = { ...process.env, PATH: `${bin}:${dirname(process.execPath)}:${process.env.PATH}` };
  const r = await runCaptured('bash', ['-euo', 'pipefail', script], { cwd: site, env });
  return { ...r, applied: readFileSync(record, 'utf8').split('\n').filter(Boolean) };
}

/** An Ignition contents.source (RFC 2397 data URL) as bytes, gunzipped when `compression` says gzip. */
function ignitionContents(c: { source?: string; compression?: string }, path: string): Buffer {
  const m = /^data:([^,]*),(.*)$/s.exec(c.source ?? '');
  if (!m)
    throw new Error(
      `${path}: contents.source is not a data URL (the MCO stand-in reads data URLs only)`,
    );
  const raw = m[1]!.endsWith(';base64')
    ? Buffer.from(m[2]!, 'base64')
    : Buffer.from(decodeURIComponent(m[2]!), 'utf8');
  if (c.compression && c.compression !== 'gzip')
    throw new Error(`${path}: compression "${c.compression}" is not modelled`);
  return c.compression === 'gzip' ? gunzipSync(raw) : raw;
}

/** What the MCO writes on a node of `role` from the MachineConfigs in `files`: node files and the units to enable. */
function machineConfigForRole(files: string[], role: string) {
  const configs = files
    .flatMap((f) => parseAllDocuments(readFileSync(f, 'utf8')).map((d) => d.toJS()))
    .filter(
      (d) =>
        d?.kind === 'MachineConfig' &&
        d.metadata?.labels?.['machineconfiguration.openshift.io/role'] === role,
    );
  if (configs.length !== 1)
    throw new Error(
      `${configs.length} MachineConfigs for role ${role} were applied; the test models one`,
    );
  const ign = configs[0].spec.config;
  for (const k of ['directories', 'links'])
    if (ign.storage?.[k]?.length)
      throw new Error(`storage.${k} is not modelled by the MCO stand-in`);
  const out: Record<string, [Buffer, number]> = {};
  for (const f of ign.storage?.files ?? [])
    out[f.path] = [ignitionContents(f.contents ?? {}, f.path), f.mode ?? 0o644];
  const enable: string[] = [];
  for (const u of ign.systemd?.units ?? []) {
    if (u.dropins?.length || u.mask)
      throw new Error(`${u.name}: dropins and mask are not modelled by the MCO stand-in`);
    if (u.contents !== undefined)
      out[`/etc/systemd/system/${u.name}`] = [Buffer.from(u.contents), 0o644];
    if (u.enabled) enable.push(u.name);
  }
  return { name: configs[0].metadata.name as string, files: out, enable };
}

t.test(
  `${DOC}: the Quadlet blocks are marked: the admin's on a workstation, then the node's once the stick is in`,
  async (t) => {
    const blocks = runBlocks(DOC, GROUP);
    const admin = blocks.filter((b) => b.on === 'workstation');
    t.ok(
      admin.length >= 1 && blocks.indexOf(admin.at(-1)!) < blocks.findIndex((b) => !b.on),
      "the admin's blocks come before the node's",
    );
    t.match(
      admin[0]!.code,
      /^tar -xzf bundle-deploy-\S+\.tar\.gz && cd bundle-deploy-\S+$/m,
      'the first unpacks the deploy tarball',
    );
    t.match(
      admin.map((b) => b.code).join(''),
      /^openshift\/generate --key \S+ --out \.(?:\s|$)/m,
      'and generates the MachineConfigs with the factory key',
    );
    t.ok(
      admin.some((b) => b.code.includes(TYPO[0])),
      `one applies the worker MachineConfig (${TYPO[0]})`,
    );
    t.equal(blocks.at(-1)!.after, 'stick', 'the last runs once the stick is in');
    t.match(blocks.at(-1)!.code, /bundle-agent status\b/, 'and reads the status');
    t.throws(
      () => markedBlocks('p.md', '# p\n\n```sh run=g on=laptop\necho\n```\n'),
      /p\.md:3: "on=laptop" in the fence/,
      'on= takes workstation only',
    );
  },
);

const skip = nodeSkipReason();
if (skip)
  t.test('booted node', async (t) => {
    t.plan(0, skip);
  });
else {
  // the agent packaging (shared with test/node/*: 70-100 s when the sources changed), then one boot and load
  t.setTimeout(1_500_000);
  t.test(
    'docs/install.md OpenShift (Quadlet) as written: generate and oc apply (oc a stand-in), the MachineConfig onto a booted RHCOS-like node, CRI-O stand-in as shipped',
    async (t) => {
      const began = Date.now();
      const [root, agent] = [await buildRoot(), await packagedAgent()];
      t.comment(
        `node root: ${root.buildMs ? `built in ${(root.buildMs / 1000).toFixed(1)} s` : 'cached'}; agent package: ${agent.buildMs ? `built in ${(agent.buildMs / 1000).toFixed(1)} s` : 'cached'}`,
      );
      const packaged = Date.now();
      const dir = await tmpdir(t, 'ob-node-quadlet-docs-');
      const deployOut = join(dir, 'dist');
      const built = await runCaptured(process.execPath, [
        join(REPO, 'scripts/package.mjs'),
        '--only',
        'deploy',
        '--out',
        deployOut,
      ]);
      t.equal(
        built.code,
        0,
        `pnpm package's deploy tarball built${built.code ? `: ${built.stderr.trim()}` : ''}`,
      );
      const deployTgz = join(deployOut, `bundle-deploy-${agent.version}.tar.gz`);
      const keys = await keygen(dir);
      const blocks = runBlocks(DOC, GROUP);
      const admin = blocks.filter((b) => b.on === 'workstation');
      const onNode = blocks.filter((b) => !b.on);

      /** A fresh workstation directory: the deploy tarball under its shipped name, and factory.pub. */
      const site = (name: string) => {
        const s = join(dir, name);
        mkdirSync(s);
        copyFileSync(deployTgz, join(s, basename(deployTgz)));
        copyFileSync(keys.pub, join(s, 'factory.pub'));
        return s;
      };
      const typo = admin.map((b) => ({ ...b, code: b.code.replace(TYPO[0], TYPO[1]) }));
      const broken = await runOnWorkstation(dir, site('typo'), typo);
      t.not(broken.code, 0, `with a path typo (${TYPO[1]}) the admin's block fails`);
      t.match(
        broken.stderr,
        /error: the path "99-worker-bundle-agnet\.yaml" does not exist/,
        `on that path: ${broken.stderr.trim().split('\n').at(-1)}`,
      );

      const ws = await runOnWorkstation(dir, site('workstation'), admin);
      t.equal(
        ws.code,
        0,
        `the admin's block ran as written${ws.code ? `: exit ${ws.code}: ${(ws.stderr || ws.stdout).trim().slice(-1500)}` : ''}`,
      );
      if (ws.code) return;
      t.same(
        ws.applied.map((f) => basename(f)),
        [
          'crd.yaml',
          'rbac.yaml',
          'upgrade-gate.yaml',
          '99-master-bundle-agent.yaml',
          '99-worker-bundle-agent.yaml',
        ],
        'oc apply was given the CRDs, RBAC, upgrade gate and both MachineConfigs',
      );
      const mc = machineConfigForRole(ws.applied, 'worker');
      t.match(
        mc.files['/etc/bundle-agent/keys/factory.pub']?.[0].toString(),
        readFileSync(keys.pub, 'utf8').trim(),
        `${mc.name} carries the factory key given to generate`,
      );

      const bridge = await makeBridge(t);
      const api = await startKubeStandIn({
        host: bridge.hostAddress,
        clusterVersion: CLUSTER_VERSION,
        rbacFiles: ws.applied.filter((f) => !/99-.*-bundle-agent\.yaml$/.test(f)),
      });
      t.teardown(() => api.close());
      // the node's Node as a cluster has it: Ready, with the InternalIP the agent serves metrics (and peers) on
      api.nodes = [
        {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name: NODE_NAME, labels: { 'node-role.kubernetes.io/worker': '' } },
          status: {
            conditions: [{ type: 'Ready', status: 'True' }],
            addresses: [{ type: 'InternalIP', address: bridge.nodeAddress(0) }],
          },
        },
      ];
      const { files: stickFiles } = await defaultStick(
        dir,
        keys,
        `oci-archive:${agent.ociTar}:${agent.version}-amd64`,
      );
      const stick = makeStick(dir, 'stick-1', stickFiles);
      const hostBlocks = join(dir, 'node-blocks');
      mkdirSync(hostBlocks);

      const node = await bootNode(t, {
        root: root.dir,
        bridge,
        hostname: NODE_NAME,
        readOnlyBinds: [REPO, agent.prefix, `${hostBlocks}:${BLOCKS_DIR}`],
        files: {
          ...mc.files,
          '/etc/systemd/system/crio.service': crioUnit(agent.node),
          '/etc/tmpfiles.d/rhcos-like.conf': RHCOS_DIRS,
        },
        prepare: async (merged) => {
          await api.writeNodeKubeconfig(merged, NODE_NAME);
          const r = await runCaptured('systemctl', [
            `--root=${merged}`,
            'enable',
            '--quiet',
            ...mc.enable,
            'crio.service',
          ]);
          if (r.code) throw new Error(`systemctl --root enable: ${r.stderr}`);
        },
      });
      t.comment(`node booted in ${(node.bootMs / 1000).toFixed(1)} s`);
      const diag = async () =>
        `--- bootstrap ---\n${(await node.journal('bundle-agent-bootstrap.service')).slice(-2000)}\n--- bundle-agent ---\n${(await node.journal('bundle-agent.service')).slice(-4000)}\n--- crio ---\n${(await node.journal('crio.service')).slice(-1500)}`;
      t.equal(
        (await node.run(['test', '-e', '/etc/crio/crio.conf'])).code,
        1,
        'CRI-O as shipped: no crio.conf written for it',
      );
      t.match(
        await node.journal('crio.service'),
        /started; read (?!.*crio\.conf)/,
        "the CRI-O stand-in started on CRI-O's defaults",
      );

      const status = await runOnNode(
        t,
        node,
        hostBlocks,
        onNode,
        () => node.plugStick(stick),
        diag,
      );
      t.equal(status.code, 0, 'the status block exits 0');
      t.match(
        status.stdout,
        DONE,
        `the status block ends "Done … You may remove the USB stick": ${status.stdout.trim()}`,
      );
      if (status.failed) t.comment(await diag());

      // CRI-O's socket from the host, through the node's root (its /var/run is a link to /run: absolute, so named here by /run)
      const cri = new CriImageClient(`/proc/${node.leader}/root/run/crio/crio.sock`);
      t.teardown(() => cri.close());
      const images = await cri.listImages();
      for (const ref of IMAGES)
        t.ok(
          images.some((i) => i.pinned && i.repoTags.includes(ref)),
          `${ref} is in CRI-O's store, pinned (ListImages)`,
        );
      const nbs = api.get('nodebundlestatuses', NODE_NAME);
      t.equal(
        nbs?.status?.phase,
        'Ready',
        `oc get nodebundlestatuses would show ${NODE_NAME} Ready`,
      );
      t.equal(nbs?.status?.bundle?.version, BUNDLE_VERSION, 'with the bundle from the stick');
      t.same(
        api.requests
          .filter((r) => r.status >= 400)
          .map((r) => `${r.method} ${r.path} ${r.user} ${r.status}`),
        [],
        'under the RBAC the docs applied, no API call of the agent was refused',
      );
      t.comment(
        `whole test ${((Date.now() - began) / 1000).toFixed(1)} s, ${((Date.now() - packaged) / 1000).toFixed(1)} s of it after the shared root and agent package`,
      );
    },
  );
}

/**
 * Runs the node's blocks as written from NODE_HOME, each where the one before ended; plugs the stick
 * before the first `after=stick` block, and reads that (last) block until it says Done or the load failed.
 */
async function runOnNode(
  t: { equal(...a: unknown[]): void },
  node: Node,
  hostBlocks: string,
  blocks: RunBlock[],
  plug: () => Promise<unknown>,
  diag: () => Promise<string>,
) {
  let cwd = NODE_HOME;
  for (const [i, b] of blocks.entries()) {
    if (b.after === 'stick' && blocks.findIndex((x) => x.after === 'stick') === i) await plug();
    // a file, not an argument: systemd-run would expand $VAR in a command line
    writeFileSync(join(hostBlocks, `${i}.sh`), `cd '${cwd}'\n${b.code}pwd > /run/docs-cwd\n`);
    const runIt = () =>
      node.run(['bash', '-euo', 'pipefail', `${BLOCKS_DIR}/${i}.sh`], { timeoutMs: 240_000 });
    if (i === blocks.length - 1) {
      let last = '';
      return until(
        'the status block says Done, or the load failed',
        async () => {
          const r = await runIt();
          last = `exit ${r.code}: ${r.stdout}${r.stderr}`;
          if (DONE.test(r.stdout)) return { ...r, failed: false };
          const s = await node.run(['cat', '/var/lib/bundle-agent/status.json']);
          return s.code === 0 && JSON.parse(s.stdout).phase === 'Failed'
            ? { ...r, failed: true }
            : undefined;
        },
        {
          timeoutMs: 240_000,
          stepMs: 1000,
          detail: async () =>
            `--- the status block last printed (${last.trim()}) ---\n${await diag()}`,
        },
      );
    }
    const r = await runIt();
    t.equal(
      r.code,
      0,
      `${b.file}:${b.line} ran as written${r.code ? `: exit ${r.code}: ${(r.stderr || r.stdout).trim().slice(-1500)}` : ''}`,
    );
    if (r.code) throw new Error(`${b.file}:${b.line} failed`);
    cwd = (await node.must(['cat', '/run/docs-cwd'])).trim();
  }
  throw new Error(`${DOC}: no node block marked run=${GROUP}`);
}

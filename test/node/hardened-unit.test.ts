// The tarball install (non-OpenShift nodes) under real systemd: the packaged agent installed in a
// booted node by its own install.sh (--runtime containerd), so bundle-agent.service runs with
// every hardening line of systemd/bundle-agent.service (capability bounding set, seccomp
// @system-service, ProtectSystem=strict, PrivateDevices...) as systemd 257 applies them, and still
// loads a bundle from a plugged stick into the node's real containerd (its CRI, overlayfs
// snapshotter on ext4), pins it, and shows the technician's line on the console, where a real
// agetty (console-getty.service on nspawn's read-only console) redraws it on the agent's reload.
// `systemd-analyze security` rates the running unit inside the node, not --offline.
//
// Substitutions: a Debian trixie root for the node (systemd 257, containerd 1.7); udev does not
// run in a container, so the stick is attached where the shipped rule's systemd-mount would put
// it (/run/media/bundle-agent/<device>), read-only.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { keygen, makeBundle } from '../agent/fixtures.js';
import { bootNode, buildRoot, makeBridge, nodeSkipReason, packagedAgent } from '../helpers/node.js';
import { until } from '../helpers/until.js';
import { tmpdir } from '../helpers/tmp.mjs';

const ORIGIN = 'origin.offline-bundle.invalid';

const CONFIG = `root: /
runtime: containerd
criSocket: /run/containerd/containerd.sock
trust:
  keys: [/etc/bundle-agent/keys/factory.pub]
version:
  current: "4.15.1"
media:
  roots: [/run/media]
  pollSeconds: 1
space:
  reserveBytes: 64MiB
preload:
  method: cri
status:
  console: true
`;

// Debian's config plus the hosts directory the agent writes its mirror into (as k8s distributions set it)
const CONTAINERD = `version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.invalid/pause:unused"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
`;

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  t.setTimeout(1_500_000);
  t.test(
    'bundle-agent.service from the tarball, hardened, loads a stick into the real containerd of a booted node',
    async (t) => {
      const [root, agent] = [await buildRoot(), await packagedAgent()];
      const dir = await tmpdir(t, 'ob-node-hardened-');
      const keys = await keygen(dir);
      const bundleFile = join(dir, 'ocp-4.15.2.bundle');
      await makeBundle(dir, {
        key: keys.key,
        version: '4.15.2',
        upgradeFrom: ['4.15.1'],
        out: bundleFile,
        images: [{ name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } }],
      });
      const stick = join(dir, 'stick.img');
      const fill = join(dir, 'fill');
      mkdirSync(fill);
      execFileSync('truncate', ['-s', '128M', stick]);
      execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'UPDATE', stick]);
      execFileSync('mount', ['-o', 'loop', stick, fill]);
      try {
        execFileSync('cp', [bundleFile, `${bundleFile}.sha256`, fill]);
      } finally {
        execFileSync('umount', [fill]);
      }

      const bridge = await makeBridge(t);
      const node = await bootNode(t, {
        root: root.dir,
        bridge,
        hostname: 'node-b',
        console: 'read-only',
        readOnlyBinds: [agent.prefix],
        files: {
          '/etc/bundle-agent/config.yaml': CONFIG,
          '/etc/bundle-agent/keys/factory.pub': readFileSync(keys.pub, 'utf8'),
          '/etc/containerd/config.toml': CONTAINERD,
        },
      });
      const installed = await node.run([
        'sh',
        join(agent.prefix, 'install.sh'),
        '--prefix',
        '/usr/local',
        '--runtime',
        'containerd',
      ]);
      t.equal(
        installed.code,
        0,
        `install.sh --runtime containerd in the node${installed.code ? `: ${installed.stderr}` : ''}`,
      );
      await node.must(['systemctl', 'start', 'containerd.service', 'bundle-agent.service']);
      const diag = async () =>
        `--- bundle-agent ---\n${(await node.journal('bundle-agent.service')).slice(-4000)}\n--- containerd ---\n${(await node.journal('containerd.service')).split('panic:')[1]?.slice(0, 2500)}`;

      const pid = (
        await node.must(['systemctl', 'show', '-P', 'MainPID', 'bundle-agent.service'])
      ).trim();
      const proc = await node.must(['cat', `/proc/${pid}/status`]);
      t.match(
        proc,
        /^CapBnd:\s+0000000000000004$/m,
        'capability bounding set: CAP_DAC_READ_SEARCH only',
      );
      t.match(proc, /^NoNewPrivs:\s+1$/m, 'NoNewPrivileges');
      t.match(proc, /^Seccomp:\s+2$/m, 'a seccomp filter (@system-service)');
      const security = await node.run([
        'systemd-analyze',
        'security',
        '--no-pager',
        'bundle-agent.service',
      ]);
      const score = Number(
        /Overall exposure level for bundle-agent\.service: ([\d.]+)/.exec(security.stdout)?.[1],
      );
      t.ok(
        score <= 4.0,
        `systemd-analyze security in the node rates the running unit ${score} (<= 4.0)`,
      );

      await node.plugStick(stick);
      const status = await until(
        'the agent reports Ready or Failed',
        async () => {
          const r = await node.run(['cat', '/var/lib/bundle-agent/status.json']);
          if (r.code !== 0) return undefined;
          const s = JSON.parse(r.stdout);
          return s.phase === 'Ready' || s.phase === 'Failed' ? s : undefined;
        },
        { timeoutMs: 600_000, stepMs: 250, detail: diag },
      );
      const failed = status.conditions?.find(
        (c: { type: string; status: string }) => c.type === 'Failed' && c.status === 'True',
      );
      t.equal(
        status.phase,
        'Ready',
        `the load ends Ready${failed ? ` (it failed: ${failed.reason}: ${failed.message})` : ''}`,
      );
      if (status.phase !== 'Ready') t.comment(await diag());
      const images = await node.must(['ctr', '-n', 'k8s.io', 'images', 'ls']);
      t.match(
        images,
        new RegExp(`${ORIGIN}/acme/app:v1 .*io\\.cri-containerd\\.pinned=pinned`),
        "the image is in the node's containerd, pinned",
      );
      t.match(
        await node.must(['cat', '/run/issue.d/bundle-agent.issue']),
        /4\.15\.2/,
        'the console line names the loaded release',
      );
      await until(
        'agetty shows the line',
        async () =>
          /4\.15\.2[^\n]*\r?\n(?:.*\r?\n)*?node-b login:/.test(node.console()) ? true : undefined,
        {
          timeoutMs: 30_000,
          stepMs: 250,
          detail: async () => JSON.stringify(node.console().slice(-1500)),
        },
      );
      t.pass("a real agetty on the node's console printed the agent's line above the login prompt");
    },
  );
}

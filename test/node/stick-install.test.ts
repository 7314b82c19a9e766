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
// Then the self-upgrade's safety nets, on the same node: a second stick's bundle brings a newer
// agent that never reports (the agent's own systemd-run timer rolls it back after the window),
// a third one that crashes at once (switch-guard.sh, the unit's ExecStartPre, rolls it back on
// the sixth start).
//
// Substitutions, each because the real part cannot run here:
// - CRI-O: Debian has none. The CRI-O contract stand-in (test/helpers/crio-standin.mjs) runs
//   INSIDE the node as a real crio.service (ExecReload=kill -HUP $MAINPID, as CRI-O's unit), on
//   the Node runtime the packaged agent ships, so the shipped `systemctl reload crio` really
//   reloads it. With --containers-storage it also stores what it pulls in the node's
//   containers-storage, which CRI-O shares with podman (the agent's self-upgrade relies on
//   that: podman runs the new agent image the CRI pull brought). The directories
//   CRI-O's package makes (/etc/crio/crio.conf.d, /run/crio) and RHCOS's /etc/issue.d come
//   from a tmpfiles.d file of the test (podman refuses a Volume= whose source is missing).
// - The Kubernetes API server: the RBAC-enforcing stand-in (test/helpers/kube-standin.ts) with
//   the shipped deploy/rbac.yaml and OpenShift's node rights, on the host at the bridge address.
// - RHCOS: a Debian trixie root (systemd 257, podman 5.4 with Quadlet, skopeo, containerd).
// - Ignition: the generator's files are written into the root before boot, and its units with
//   `enabled: true` are enabled with `systemctl --root` (Ignition does it with a preset file).
// - selfUpgrade.confirmMinutes is 1 instead of the shipped 10 (switch-guard.sh's floor is 60 s),
//   then 6 for the crash loop (the guard's count, not the window, must decide): the only edits
//   to a rendered file.
// - udev: does not run in a container (/sys is read-only), so the stick is attached where the
//   shipped rule's systemd-mount puts it (/run/media/bundle-agent/<device>), read-only, with
//   open_tree/move_mount into the running node.
import t from 'tap';
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { BUNDLE, makeBundle, run } from '../agent/fixtures.js';
import { nodeSkipReason } from '../helpers/node.js';
import { until } from '../helpers/until.js';
import {
  BUNDLE_VERSION,
  CLUSTER_VERSION,
  ORIGIN,
  makeStick,
  openshiftNode,
  unconfirmingAgentImage,
} from './openshift-node.js';

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  // root build (first run ~20-90 s), agent packaging (first run ~50 s), boot and one load
  t.setTimeout(2_400_000);
  t.test(
    'an empty node installs the agent and loads a bundle from a stick, with no registry (real systemd, Quadlet, podman)',
    async (t) => {
      const { began, agent, dir, api, keys, stick, agentDigest, node, diag } =
        await openshiftNode(t);

      t.match(
        await node.must(['systemctl', 'cat', 'bundle-agent.service']),
        /SourcePath=\/etc\/containers\/systemd\/bundle-agent\.container/,
        "bundle-agent.service is the Quadlet generator's output",
      );
      t.notMatch(
        await node.must(['ip', 'route']),
        /default/,
        'the node has no route beyond the bridge: no registry is reachable',
      );

      t.equal(
        (await node.systemctl('is-active', 'bundle-agent.service')).stdout.trim(),
        'inactive',
        'before the stick: no agent image, the agent is not started (ExecCondition)',
      );
      t.equal(
        (
          await node.run([
            'podman',
            'image',
            'exists',
            `localhost/offline-bundle/bundle-agent@${agentDigest}`,
          ])
        ).code,
        1,
        'before the stick: no agent image in storage',
      );

      await node.plugStick(stick);
      const status = await until(
        'the status object reports Ready or Failed',
        async () => {
          const s = api.get('nodebundlestatuses', 'node-a');
          return s?.status?.phase === 'Ready' || s?.status?.phase === 'Failed' ? s : undefined;
        },
        { timeoutMs: 600_000, stepMs: 250, detail: diag },
      );
      const failed = status.status.conditions?.find(
        (c: { type: string; status: string }) => c.type === 'Failed' && c.status === 'True',
      );
      t.equal(
        status.status.phase,
        'Ready',
        `the load ends Ready${failed ? ` (it failed: ${failed.reason}: ${failed.message})` : ''}`,
      );
      const cond = (type: string) =>
        status.status.conditions.find((c: { type: string }) => c.type === type);
      t.equal(status.status.bundle?.version, BUNDLE_VERSION, 'the bundle from the stick is loaded');
      t.equal(cond('Pinned')?.status, 'True', 'its images are pinned');
      const writes = api.requests.filter(
        (r) => r.path.includes('/nodebundlestatuses/node-a') && r.method !== 'GET',
      );
      t.ok(
        writes.length > 0 && writes.every((r) => r.user === 'system:node:node-a' && r.status < 300),
        'every status write was the node identity, and allowed',
      );
      t.same(
        api.requests.filter((r) => r.status >= 400).map((r) => `${r.method} ${r.path} ${r.status}`),
        [],
        'no API call of the agent was refused',
      );

      const ps = await node.must([
        'podman',
        'ps',
        '--format',
        '{{.Names}} {{.ImageID}} {{.Image}}',
      ]);
      t.match(ps, /^bundle-agent /m, 'the agent runs in the node');
      t.equal(
        (
          await node.must(['podman', 'inspect', 'bundle-agent', '--format', '{{.ImageName}}'])
        ).trim(),
        `localhost/offline-bundle/bundle-agent@${agentDigest}`,
        'from containers-storage, by the digest of the packaged image',
      );
      t.match(
        await node.must(['cat', '/etc/containers/systemd/bundle-agent.container.d/image.conf']),
        new RegExp(`^Image=localhost/offline-bundle/bundle-agent@${agentDigest}$`, 'm'),
        "the bootstrap's drop-in names it by digest",
      );
      t.match(
        await node.must(['systemctl', 'show', '-P', 'ExecStart', 'bundle-agent.service']),
        /--pull never|--pull=never/,
        'Pull=never in the generated unit',
      );
      const events = await node.must(['cat', '/var/lib/crio-standin/events.jsonl']);
      t.match(
        events,
        /"event":"reload"/,
        "the agent's `systemctl reload crio` reloaded crio.service",
      );
      t.comment(`stick to Ready: whole test so far ${((Date.now() - began) / 1000).toFixed(1)} s`);

      // A later bundle brings a newer agent that never reports. The agent switches to it (drop-in
      // by digest, marker, a systemd-run timer on the node, restart); the new image starts and
      // stays silent; the timer fires switch-guard.sh, which puts the previous drop-in back and
      // restarts the unit: the first agent runs again. Still nothing typed at the node.
      const layout = join(dir, 'silent-agent');
      const silentTag = unconfirmingAgentImage(
        agent.ociTar,
        layout,
        '0.3.0',
        'setInterval(() => {}, 1 << 30)',
      );
      const out2 = join(dir, 'second');
      mkdirSync(out2);
      await makeBundle(dir, {
        key: keys.key,
        version: '4.15.3',
        upgradeFrom: [CLUSTER_VERSION],
        out: join(out2, 'ocp-4.15.3.bundle'),
        images: [{ name: `${ORIGIN}/acme/app:v2`, files: { 'app.txt': 'app v2' } }],
        create: (args) => run(BUNDLE, [...args, '--agent-image', `oci:${layout}:${silentTag}`]),
      });
      const silentDigest = JSON.parse(
        readFileSync(join(layout, 'index.json'), 'utf8'),
      ).manifests.find(
        (m: { annotations?: Record<string, string> }) =>
          m.annotations?.['org.opencontainers.image.ref.name'] === silentTag,
      ).digest as string;
      const dropIn = () =>
        node
          .run(['cat', '/etc/containers/systemd/bundle-agent.container.d/image.conf'])
          .then((r) => r.stdout);
      const running = async () =>
        (
          await node.run([
            'podman',
            'inspect',
            'bundle-agent',
            '--format',
            '{{.ImageName}} {{.State.Status}}',
          ])
        ).stdout.trim();
      await node.plugStick(
        makeStick(
          dir,
          'stick-2',
          readdirSync(out2).map((n) => join(out2, n)),
        ),
      );
      await until(
        'the agent switches to the newer agent',
        async () =>
          (await running()).startsWith(
            `localhost/offline-bundle/bundle-agent@${silentDigest} running`,
          )
            ? true
            : undefined,
        { timeoutMs: 180_000, stepMs: 250, detail: diag },
      );
      t.match(
        await dropIn(),
        new RegExp(`^Image=localhost/offline-bundle/bundle-agent@${silentDigest}$`, 'm'),
        'switched: the drop-in names the new agent by digest, and it runs',
      );
      t.equal(
        (await node.run(['test', '-f', '/var/lib/bundle-agent/agent-switch.pending'])).code,
        0,
        'the switch is unconfirmed (marker present)',
      );
      const timers = await node.must([
        'systemctl',
        'list-timers',
        '--all',
        '--no-legend',
        'bundle-agent-rollback-*',
      ]);
      t.match(
        timers,
        /bundle-agent-rollback-[0-9a-f]{12}\.timer/,
        'a rollback timer waits on the node',
      );

      await until(
        'switch-guard rolls back to the first agent',
        async () =>
          (await running()).startsWith(
            `localhost/offline-bundle/bundle-agent@${agentDigest} running`,
          )
            ? true
            : undefined,
        { timeoutMs: 240_000, stepMs: 250, detail: diag },
      );
      t.match(
        await dropIn(),
        new RegExp(`^Image=localhost/offline-bundle/bundle-agent@${agentDigest}$`, 'm'),
        "rolled back: the drop-in names the first agent again (the bootstrap's)",
      );
      t.not(
        (await node.run(['test', '-f', '/var/lib/bundle-agent/agent-switch.pending'])).code,
        0,
        'the marker is gone',
      );
      const journal = await node.journal();
      t.match(
        journal,
        /bundle-agent-rollback-[0-9a-f]{12}\.service: Deactivated successfully/,
        "the agent's rollback timer fired on the node",
      );

      // A newer agent that crashes at once: switch-guard.sh, as ExecStartPre, counts its starts
      // and on the sixth puts the previous image back itself, before the window's timer. Six
      // starts 5 s apart (RestartSec) took over 60 s on a loaded CI machine, and the agent's own
      // timer rolled back first (a rollback, but not the guard's): the window is 6 minutes for this
      // phase (a minute per start), so the count decides.
      await node.must([
        'sed',
        '-i',
        's/^  confirmMinutes: 1$/  confirmMinutes: 6/',
        '/etc/bundle-agent/config.yaml',
      ]);
      t.match(
        await node.must(['cat', '/etc/bundle-agent/config.yaml']),
        /^ {2}confirmMinutes: 6$/m,
        'config.yaml: confirmMinutes 6 for the crash loop',
      );
      await node.must(['systemctl', 'restart', 'bundle-agent.service']);
      await until(
        'the first agent runs with the longer window',
        async () =>
          (await running()).startsWith(
            `localhost/offline-bundle/bundle-agent@${agentDigest} running`,
          )
            ? true
            : undefined,
        { timeoutMs: 120_000, stepMs: 250, detail: diag },
      );
      const crashLayout = join(dir, 'crashing-agent');
      const crashTag = unconfirmingAgentImage(
        agent.ociTar,
        crashLayout,
        '0.4.0',
        'process.exit(1)',
      );
      const out3 = join(dir, 'third');
      mkdirSync(out3);
      await makeBundle(dir, {
        key: keys.key,
        version: '4.15.4',
        upgradeFrom: [CLUSTER_VERSION],
        out: join(out3, 'ocp-4.15.4.bundle'),
        images: [{ name: `${ORIGIN}/acme/app:v3`, files: { 'app.txt': 'app v3' } }],
        create: (args) => run(BUNDLE, [...args, '--agent-image', `oci:${crashLayout}:${crashTag}`]),
      });
      const crashDigest = JSON.parse(
        readFileSync(join(crashLayout, 'index.json'), 'utf8'),
      ).manifests.find(
        (m: { annotations?: Record<string, string> }) =>
          m.annotations?.['org.opencontainers.image.ref.name'] === crashTag,
      ).digest as string;
      await node.plugStick(
        makeStick(
          dir,
          'stick-3',
          readdirSync(out3).map((n) => join(out3, n)),
        ),
      );
      await until(
        'the agent switches to the crashing agent',
        async () => (new RegExp(`@${crashDigest}$`, 'm').test(await dropIn()) ? true : undefined),
        { timeoutMs: 180_000, stepMs: 250, detail: diag },
      );
      const guardLine = await until(
        'switch-guard.sh rolls the crash loop back',
        async () => {
          const m = new RegExp(
            `switch-guard: the switch to ${crashDigest} was not confirmed \\(start (\\d+)[^\n]*`,
          ).exec(await node.journal('bundle-agent.service'));
          return m ? m[0] : undefined;
        },
        { timeoutMs: 420_000, stepMs: 250, detail: diag },
      );
      t.match(
        guardLine,
        /\(start 6, .*window 360s\)/,
        `switch-guard.sh as ExecStartPre rolled back on the sixth start, in the restarted agent's window: "${guardLine}"`,
      );
      await until(
        'the first agent runs again',
        async () =>
          (await running()).startsWith(
            `localhost/offline-bundle/bundle-agent@${agentDigest} running`,
          )
            ? true
            : undefined,
        { timeoutMs: 120_000, stepMs: 250, detail: diag },
      );
      t.match(
        await dropIn(),
        new RegExp(`^Image=localhost/offline-bundle/bundle-agent@${agentDigest}$`, 'm'),
        'rolled back by the guard: the first agent runs again',
      );
      t.comment(`whole test ${((Date.now() - began) / 1000).toFixed(1)} s`);
    },
  );
}

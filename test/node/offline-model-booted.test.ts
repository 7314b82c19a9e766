// The offline cluster model (issue 38, item 5) on a booted node with no route out: what the
// host-root model (test/cluster/offline-model*.test.ts) cannot show, because there no systemd
// orders anything. One OpenShift-like node (test/node/openshift-node.ts: the shipped
// MachineConfig files, the agent as the shipped Quadlet unit from its stick, the CRI-O contract
// stand-in as crio.service, the RBAC-enforcing API stand-in on the host's bridge address) loads
// release 4.15.1 of the model (test/cluster/offline-model-release.ts) with
// staging.serveUntilComplete on (the shipped default). With ClusterVersion saying the upgrade is
// under way (Partial) and the Node's MCD Working, the node reboots (see below), and:
// - crio-wipe.service empties the CRI-O stand-in's image store and the whole containers-storage
//   image store (/var/lib/containers/storage, which podman shares with CRI-O on RHCOS) before
//   crio.service starts, as CRI-O's crio-wipe does after an unclean shutdown (CRI-O writes
//   clean.shutdown at a clean stop; the stand-in never does, so every boot counts as after an
//   unclean one). The agent's own image goes with it: the Quadlet unit's ExecCondition
//   (bundle-agent-bootstrap.sh --installed) loads it again from the archive the bootstrap kept
//   in /var/lib/bundle-agent/agent-image when it installed the agent from the stick, checked as
//   from a stick, before the agent starts; a tampered kept archive is refused, named in the journal;
// - the shipped unit ordering (bundle-agent.container: After=crio.service, Before=kubelet.service,
//   ExecStartPost waiting for the agent's `started` marker) puts the images back and serves the
//   release again, with its mirror drop-in, before kubelet.service starts: a "kubelet" stand-in
//   (test/helpers/kubelet-standin.mjs, the model's kubelet logic) that pulls every pod of the
//   recorded cluster through the CRI with each pod's pull policy; every pull succeeds;
// - the "MCD" applies the OS image by digest: no PinnedImageSet of its pool lists it, so it pulls
//   through the node's registries.conf (skopeo in the node: containers/image, as rpm-ostree's
//   ostree-unverified-registry: reads it); only the kept loopback mirror can answer.
// Then the same reboot with serving off (the one edit: staging.serveUntilComplete false) fails at
// the named steps (the kubelet's Always pod, the MCD pull); on again, it serves again. Once
// ClusterVersion's history says Completed (scripted in the API stand-in) serving goes on while the
// Node's MCD is still Working, and stops once its annotations say Done: drop-in gone, port closed.
//
// Reboot: the node's services are stopped as in a reboot's first phase and started again in boot
// order (Node.restartServices, test/helpers/node.ts: shutdown.target pulled in irreversibly,
// reset-failed, isolate default.target), so the boot transaction's dependencies and ordering
// (crio-wipe → crio → bundle-agent → kubelet) are what run, which is what is under test; 1-4 s.
// Not a full reboot: /run, the kernel and the mounts stay (the re-spawned nspawn a full reboot
// needs is not in the harness). Not `systemctl soft-reboot` (systemd 257 here has it): it
// unmounted the node's container storage, whose mount unit systemd loads before the drop-in that
// could keep it (Quadlet's RequiresMountsFor= names it), so no agent image was left to start.
//
// Substitutions beyond stick-install's (see stick-install.test.ts): kubelet.service and
// crio-wipe.service are stand-ins. The real crio-wipe removes the whole image store after an
// unclean shutdown (cri-o/cri-o#7177), which on RHCOS is /var/lib/containers/storage, shared with
// podman; the stand-in removes that and the CRI-O stand-in's own store, and podman's run state
// (/run/containers/storage, /run/libpod), which a real reboot's empty /run would not have.
// serveCheckSeconds is 2 (default 60) so the end of serving shows within the test.
import t from 'tap';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { nodeSkipReason, type Node } from '../helpers/node.js';
import { until } from '../helpers/until.js';
import {
  buildReleases,
  podsOf,
  WEB,
  type ModelRelease,
  type ModelReleases,
} from '../cluster/offline-model-release.js';
import { clusterVersionSays, POOL } from '../cluster/offline-model-flow.js';
import { pinningSets } from '../cluster/offline-model-standins.js';
import { agentImageBeside, openshiftNode } from './openshift-node.js';

const KUBELET_STANDIN = fileURLToPath(new URL('../helpers/kubelet-standin.mjs', import.meta.url));
const STARTS = '/var/lib/kubelet-standin/starts.json';
const MCD = 'machineconfiguration.openshift.io';
const CONFIG = '/etc/bundle-agent/config.yaml';

/** The kubelet stand-in as the node's kubelet.service: every pod of the recorded cluster, once per boot. */
function kubeletUnit(node: string): string {
  return `[Unit]
Description=kubelet stand-in (test/helpers/kubelet-standin.mjs): starts every recorded pod with its pull policy
After=crio.service
Wants=crio.service

[Service]
Type=oneshot
RemainAfterExit=yes
StateDirectory=kubelet-standin
ExecStart=${node} ${KUBELET_STANDIN} --socket /var/run/crio/crio.sock --pods /etc/kubelet-standin/pods.json --out ${STARTS}

[Install]
WantedBy=multi-user.target
`;
}

/**
 * crio-wipe.service's stand-in: before crio.service starts, after an unclean shutdown, the image
 * stores emptied: the CRI-O stand-in's and the containers-storage one podman shares on RHCOS
 * (with podman's run state, which a real reboot's empty /run would not hold).
 */
const CRIO_WIPE_UNIT = `[Unit]
Description=crio-wipe stand-in: empties the image stores (CRI-O stand-in's, containers-storage) after an unclean shutdown
Before=crio.service bundle-agent.service
ConditionPathExists=!/var/lib/crio-standin/clean.shutdown

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/rm -rf /var/lib/crio-standin/storage /var/lib/crio-standin/images.json
ExecStart=/bin/rm -rf /var/lib/containers/storage /run/containers/storage /run/libpod

[Install]
WantedBy=crio.service
`;

/** Node node-a as the MCD annotates it: its current and desired rendered config, and its state (Working while it moves to the desired one). */
function nodeSays(state: 'Done' | 'Working', current: string, desired: string) {
  return [
    {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: 'node-a',
        labels: { 'node-role.kubernetes.io/worker': '' },
        annotations: {
          [`${MCD}/state`]: state,
          [`${MCD}/currentConfig`]: current,
          [`${MCD}/desiredConfig`]: desired,
        },
      },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    },
  ];
}

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  // first run: root build (~90 s); agent packaging 50-120 s whenever agent/ or packages/ changed; cached: 50-60 s
  t.setTimeout(900_000);
  t.test(
    'a booted node serves its release across a reboot with crio-wipe until the upgrade is over; with serving off the named steps fail (stand-ins: kubelet, MCD, crio-wipe, CRI-O, API)',
    async (t) => {
      let built: ModelReleases | undefined;
      const s = await openshiftNode(t, {
        clusterVersion: '4.15.0',
        stick: async (dir, agentImageArg) => {
          const work = join(dir, 'model');
          mkdirSync(work);
          const began = Date.now();
          built = await buildReleases(
            work,
            [{ version: '4.15.1', previous: '4.15.0' }],
            ['--agent-image', agentImageArg],
          );
          t.comment(
            `release 4.15.1 of the model built in ${((Date.now() - began) / 1000).toFixed(1)} s`,
          );
          const file = built.releases[0]!.file;
          return {
            pub: built.factory.pub,
            files: [
              file,
              ...[`${file}.sha256`].filter((f) => existsSync(f)),
              ...agentImageBeside(work),
            ],
          };
        },
        // under the shipped staging: section, or one of its own
        config: (yaml) =>
          /^staging:$/m.test(yaml)
            ? yaml.replace(/^staging:$/m, 'staging:\n  serveCheckSeconds: 2')
            : `${yaml}staging:\n  serveCheckSeconds: 2\n`,
        files: (agent) => ({
          '/etc/systemd/system/kubelet.service': kubeletUnit(agent.node),
          '/etc/systemd/system/crio-wipe.service': CRIO_WIPE_UNIT,
        }),
        enable: ['crio-wipe.service'],
      });
      const { api, node } = s;
      const r = built!.releases[0]!;
      api.nodes = nodeSays('Done', 'rendered-worker-old', 'rendered-worker-old');
      await node.must([
        'sh',
        '-c',
        `mkdir -p /etc/kubelet-standin && cat > /etc/kubelet-standin/pods.json <<'EOF'\n${JSON.stringify(podsOf(r))}\nEOF`,
      ]);
      t.notMatch(
        await node.must(['ip', 'route']),
        /default/,
        'the node has no route beyond the bridge: no registry is reachable',
      );

      const at = await node.plugStick(s.stick);
      const port = await readyAndServing(t, s, r);
      await node.unplugStick(at);
      // the upgrade under way: ClusterVersion Partial, the MCD on its way to the new config
      clusterVersionSays({ api }, r, 'Partial');
      api.nodes = nodeSays('Working', 'rendered-worker-old', 'rendered-worker-new');
      await node.must(['systemctl', 'enable', 'kubelet.service']);

      await t.test(
        'reboot with crio-wipe, serving on: served again before the kubelet, every pull answered on the node',
        (t) => rebootServed(t, s, r, port),
      );
      await t.test('the same reboot with serving off: the Always pod and the MCD pull fail', (t) =>
        rebootNotServed(t, s, r),
      );
      await t.test(
        'serving on again: ClusterVersion Completed is not enough while the MCD works; Done ends serving',
        (t) => endOfServing(t, s, r),
      );
      await t.test(
        'a tampered kept agent archive: refused at the next wipe, named in the journal, storage left without it',
        (t) => keptTampered(t, s),
      );
    },
  );
}

type Setup = Awaited<ReturnType<typeof openshiftNode>>;

const serving = (api: Setup['api']) =>
  api
    .get('nodebundlestatuses', 'node-a')
    ?.status?.conditions?.find((c: { type: string }) => c.type === 'Serving');

/** The stick's release is loaded, Ready, and served on loopback; returns the registry's port. */
async function readyAndServing(t: any, s: Setup, r: ModelRelease): Promise<number> {
  const status = await until(
    'node-a Ready for 4.15.1 and serving it',
    () => {
      const st = s.api.get('nodebundlestatuses', 'node-a')?.status;
      return st?.phase === 'Failed' ||
        (st?.phase === 'Ready' && serving(s.api)?.reason === 'KeptUntilComplete')
        ? st
        : undefined;
    },
    { timeoutMs: 600_000, stepMs: 250, detail: s.diag },
  );
  t.equal(
    status.phase,
    'Ready',
    `the load ends Ready${status.phase === 'Ready' ? '' : ` (${JSON.stringify(status.conditions?.find((c: { type: string }) => c.type === 'Failed'))})`}`,
  );
  t.equal(status.bundle?.version, r.version, 'release 4.15.1 of the model is loaded');
  const m = /on 127\.0\.0\.1:(\d+)/.exec(serving(s.api).message);
  t.ok(m, `served on loopback: ${serving(s.api).message}`);
  return Number(m![1]);
}

/** The kubelet stand-in's record of this boot. */
async function kubeletRecord(node: Node): Promise<{
  startedAt: string;
  registriesDropIns: string[];
  starts: {
    pod: string;
    policy: string;
    ok: boolean;
    action: string;
    image: string;
    error?: string;
  }[];
}> {
  const r = await node.run(['cat', STARTS]);
  if (r.code !== 0)
    throw new Error(
      `the kubelet stand-in left no record (${r.stderr.trim()}):\n${(await node.journal('kubelet.service')).slice(-3000)}`,
    );
  return JSON.parse(r.stdout);
}

/** "MCD": the OS image by digest, through the node's registries.conf (no PinnedImageSet of the pool lists it). */
async function mcdApply(node: Node, r: ModelRelease): Promise<{ ok: boolean; out: string }> {
  const res = await node.run(
    [
      'skopeo',
      'copy',
      '--quiet',
      '--retry-times',
      '0',
      `docker://${r.os}`,
      'oci:/var/tmp/mcd-os:os',
    ],
    { timeoutMs: 120_000 },
  );
  await node.run(['rm', '-rf', '/var/tmp/mcd-os']);
  return { ok: res.code === 0, out: (res.stderr || res.stdout).trim() };
}

/** The bootstrap's lines in bundle-agent.service's journal (its ExecCondition) matching `re`, with their monotonic time (µs). */
async function agentUnitLines(node: Node, re: RegExp): Promise<{ at: number; text: string }[]> {
  const out = await node.must([
    'journalctl',
    '--no-pager',
    '-o',
    'json',
    '-u',
    'bundle-agent.service',
  ]);
  return out
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => typeof e.MESSAGE === 'string' && re.test(e.MESSAGE))
    .map((e) => ({ at: Number(e.__MONOTONIC_TIMESTAMP), text: e.MESSAGE as string }));
}

const KEPT = '/var/lib/bundle-agent/agent-image';
const keptFiles = async (node: Node) =>
  (await node.must(['ls', '-A', KEPT])).split('\n').filter(Boolean);

async function rebootServed(t: any, s: Setup, r: ModelRelease, port: number) {
  const { node, diag } = s;
  const kept = await keptFiles(node);
  t.same(
    kept,
    [
      `bundle-agent-${s.agent.version}-amd64.oci.tar`,
      `bundle-agent-${s.agent.version}-amd64.oci.tar.sig`,
    ],
    `the bootstrap kept the agent archive it installed from the stick, and its statement (${KEPT})`,
  );
  const ms = await node.restartServices();
  t.comment(`services stopped and started again in boot order: ${(ms / 1000).toFixed(1)} s`);
  const at = async (unit: string, prop: string) =>
    Number((await node.systemctl('show', '-P', prop, unit)).stdout.trim());
  const wiped = await at('crio-wipe.service', 'ActiveEnterTimestampMonotonic');
  const crioUp = await at('crio.service', 'ExecMainStartTimestampMonotonic');
  const agentUp = await at('bundle-agent.service', 'ActiveEnterTimestampMonotonic');
  const kubeletStart = await at('kubelet.service', 'ExecMainStartTimestampMonotonic');
  t.ok(
    wiped > 0 && wiped <= crioUp,
    `crio-wipe emptied the CRI-O stand-in's store before crio.service started (${wiped} ≤ ${crioUp} µs)`,
  );
  t.ok(
    crioUp < agentUp && agentUp <= kubeletStart,
    `the agent finished starting (images restored, release served) after crio.service and before kubelet.service started (${agentUp} ≤ ${kubeletStart} µs)`,
  );
  // the wipe took the agent's own image (podman's store): loaded again from the kept archive before the agent's process started
  const agentMain = await at('bundle-agent.service', 'ExecMainStartTimestampMonotonic');
  const missing = (
    await agentUnitLines(node, /is not in storage \(after an unclean shutdown/)
  ).filter((l) => l.at > wiped);
  const loaded = (
    await agentUnitLines(
      node,
      /again from \/var\/lib\/bundle-agent\/agent-image\/bundle-agent-.*\.oci\.tar, signed by/,
    )
  ).filter((l) => l.at > wiped);
  t.equal(
    missing.length,
    1,
    `after the wipe the agent image was gone: ${missing[0]?.text ?? 'no such line'}`,
  );
  if (!loaded.length) t.comment(await diag());
  t.ok(
    loaded.length === 1 && wiped < loaded[0]!.at && loaded[0]!.at < agentMain,
    `loaded again from the kept archive after the wipe and before the agent's process started (${wiped} < ${loaded[0]?.at} < ${agentMain} µs): ${loaded[0]?.text}`,
  );
  t.match(
    await node.must([
      'skopeo',
      'inspect',
      '--format',
      '{{.Digest}}',
      `containers-storage:localhost/offline-bundle/bundle-agent@${s.agentDigest}`,
    ]),
    s.agentDigest,
    'the image the unit names by digest is in storage again',
  );
  const rec = await kubeletRecord(node);
  if (!rec.starts.every((x) => x.ok)) t.comment(await diag());
  t.ok(
    rec.registriesDropIns.some((f) => /^offline-bundle.*\.conf$/.test(f)),
    `the mirror drop-in was in place when the kubelet started (${rec.registriesDropIns.join(', ')})`,
  );
  t.same(
    rec.starts.filter((x) => !x.ok).map((x) => `${x.pod}: ${x.error}`),
    [],
    'every pod starts',
  );
  t.same(
    rec.starts.filter((x) => x.policy === 'Always').map((x) => [x.image, x.action]),
    [[WEB, 'pulled']],
    'the Always pod pulled, answered by the node',
  );
  t.equal(
    (await node.systemctl('is-active', 'kubelet.service')).stdout.trim(),
    'active',
    'kubelet.service succeeded',
  );
  t.same(
    pinningSets(s.api, POOL, r.os),
    [],
    'no PinnedImageSet of the worker pool lists the OS image: the MCD pulls it',
  );
  const mcd = await mcdApply(node, r);
  t.ok(
    mcd.ok,
    `MCD: apply the OS image through registries.conf succeeds on the node (${mcd.out || 'ok'})`,
  );
  if (!mcd.ok) t.comment(await diag());
  t.match(
    await node.must(['sh', '-c', 'cat /etc/containers/registries.conf.d/offline-bundle*.conf']),
    /127\.0\.0\.1:\d+/,
    `the mirror it went through is the node's loopback registry (before the reboot: port ${port})`,
  );
}

async function rebootNotServed(t: any, s: Setup, r: ModelRelease) {
  const { node, diag } = s;
  // the one edit: whatever the shipped config says (or not) about it, false
  await node.must([
    'sed',
    '-i',
    '-e',
    '/^  serveUntilComplete:/d',
    '-e',
    's/^staging:$/staging:\\n  serveUntilComplete: false/',
    CONFIG,
  ]);
  t.match(
    await node.must(['cat', CONFIG]),
    /^ {2}serveUntilComplete: false$/m,
    'config.yaml: serving off',
  );
  await node.restartServices();
  const rec = await kubeletRecord(node);
  t.same(
    rec.registriesDropIns.filter((f) => f.startsWith('offline-bundle')),
    [],
    'no mirror drop-in when the kubelet started',
  );
  t.same(
    rec.starts.filter((x) => !x.ok).map((x) => `${x.pod} (${x.policy})`),
    ['shop/web-7b9d-4hj (Always)'],
    'kubelet: the Always pod is the one that fails (the others were restored into the wiped store)',
  );
  const mcd = await mcdApply(node, r);
  t.notOk(mcd.ok, `MCD: apply the OS image fails: ${mcd.out.split('\n').at(-1)}`);
  t.match(mcd.out, /quay\.io/, 'its pull went to quay.io, which this site cannot reach');
  if (mcd.ok) t.comment(await diag());
}

async function endOfServing(t: any, s: Setup, r: ModelRelease) {
  const { node, api, diag } = s;
  await node.must(['sed', '-i', '/^  serveUntilComplete: false$/d', CONFIG]);
  t.notMatch(
    await node.must(['cat', CONFIG]),
    /serveUntilComplete/,
    'config.yaml: serving on again (the shipped default)',
  );
  await node.restartServices();
  const rec = await kubeletRecord(node);
  t.same(
    rec.starts.filter((x) => !x.ok).map((x) => `${x.pod}: ${x.error}`),
    [],
    `serving on again: every pod starts after the reboot (drop-ins then: ${rec.registriesDropIns.join(', ')})`,
  );
  if (!rec.starts.every((x) => x.ok)) t.comment(await diag());
  await until(
    'the agent reports serving again',
    () => serving(api)?.reason === 'KeptUntilComplete',
    { timeoutMs: 60_000, stepMs: 250, detail: diag },
  );
  clusterVersionSays({ api }, r, 'Completed');
  await new Promise((res) => setTimeout(res, 6_000)); // three of the agent's checks (serveCheckSeconds 2)
  t.equal(
    serving(api)?.reason,
    'KeptUntilComplete',
    'ClusterVersion Completed but the MCD still Working on this node: still served',
  );
  t.equal(
    (await node.run(['sh', '-c', 'ls /etc/containers/registries.conf.d/offline-bundle*.conf']))
      .code,
    0,
    'the mirror drop-in is still there',
  );
  api.nodes = nodeSays('Done', 'rendered-worker-new', 'rendered-worker-new');
  const ended = await until(
    'serving ends',
    () =>
      serving(api)?.reason === 'ServingEnded' && /completed/.test(serving(api).message)
        ? serving(api)
        : undefined,
    { timeoutMs: 60_000, stepMs: 250, detail: diag },
  );
  t.match(
    ended.message,
    /the cluster's upgrade to 4\.15\.1 completed and this node applied it/,
    `once the MCD says Done the node stops serving: ${ended.message}`,
  );
  t.not(
    (await node.run(['sh', '-c', 'ls /etc/containers/registries.conf.d/offline-bundle*.conf']))
      .code,
    0,
    'the mirror drop-in is gone',
  );
  const port = /on 127\.0\.0\.1:(\d+)/.exec(ended.message)?.[1];
  t.ok(port, 'the message names the port it served on');
  t.not(
    (await node.run(['bash', '-c', `exec 3<>/dev/tcp/127.0.0.1/${port}`])).code,
    0,
    `the registry's port ${port} is closed`,
  );
  const mcd = await mcdApply(node, r);
  t.notOk(
    mcd.ok,
    'after serving ended the same MCD pull fails: the kept loopback mirror was what answered it',
  );
}

async function keptTampered(t: any, s: Setup) {
  const { node } = s;
  const archive = `${KEPT}/bundle-agent-${s.agent.version}-amd64.oci.tar`;
  // one byte changed in the middle: same size, another sha256
  await node.must([
    'sh',
    '-c',
    `size=$(stat -c %s ${archive}); printf X | dd of=${archive} bs=1 seek=$((size / 2)) conv=notrunc status=none`,
  ]);
  await node.restartServices();
  const wiped = Number(
    (
      await node.systemctl('show', '-P', 'ActiveEnterTimestampMonotonic', 'crio-wipe.service')
    ).stdout.trim(),
  );
  const refused = (
    await agentUnitLines(
      node,
      /agent-image\/bundle-agent-.*\.oci\.tar: does not hash to the statement's sha256/,
    )
  ).filter((l) => l.at > wiped);
  t.equal(
    refused.length,
    1,
    `the tampered kept archive is refused in one journal line: ${refused[0]?.text ?? 'none'}`,
  );
  t.equal(
    (await agentUnitLines(node, /again from \/var\/lib\/bundle-agent\/agent-image/)).filter(
      (l) => l.at > wiped,
    ).length,
    0,
    'nothing was loaded from it',
  );
  t.equal(
    (await node.systemctl('show', '-P', 'ActiveState', 'bundle-agent.service')).stdout.trim(),
    'inactive',
    'the agent did not start (ExecCondition: no image, skipped)',
  );
  t.equal(
    (
      await node.run([
        'skopeo',
        'inspect',
        `containers-storage:localhost/offline-bundle/bundle-agent@${s.agentDigest}`,
      ])
    ).code === 0,
    false,
    'storage holds no agent image: as the wipe left it',
  );
  t.equal(
    (
      await node.must([
        'sh',
        '-c',
        'podman images --format "{{.Repository}}" | grep -c bundle-agent || true',
      ])
    ).trim(),
    '0',
    'no half-loaded agent image left in storage either',
  );
  t.match(
    await node.must(['cat', '/run/issue.d/bundle-agent.issue']),
    /copy of the agent kept on this node was refused/,
    'the console says the kept copy was refused',
  );
}

/**
 * `bundle cluster status|prepare|upgrade`: the admin's side, from "loaded on every node" to an
 * upgrading cluster. Thin: flags → packages/cluster (cluster-rollup, release-configmap,
 * cluster-upgrade) and packages/format (the bundle's trusted release signatures).
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Option, type Command } from 'commander';
import { stringify as stringifyYaml } from 'yaml';
import { sha256File } from '@offline-bundle/oci';
import { loadReleaseKeyring, verifyReleaseSignature } from '@offline-bundle/openshift-release';
import { escapeControls } from '@offline-bundle/host';
import { loadTrust, readReleaseSignatures, releasePath, withBundle } from '@offline-bundle/format';
import {
  API_DEADLINE_MS,
  COMMAND_DEADLINE_MS,
  ClusterError,
  commandDeadline,
  adminApis,
  type AdminApis,
} from '@offline-bundle/kube';
import { formatBytes, timeAgo } from '@offline-bundle/cli';
import {
  gateLine,
  holdingsLine,
  nextSteps,
  pathWords,
  readPathStatus,
  nodeRbacObjects,
  pinnedSetsLine,
  publishGate,
  SIGNATURE_CONFIGMAP,
  SIGNATURE_NAMESPACE,
  prepareCluster,
  readRollup,
  signatureFieldManager,
  upgradeCluster,
  type AdminBundle,
  type NodeIdentity,
  type NodeRow,
  type Rollup,
  type Warning,
} from '@offline-bundle/cluster';
import { collect, digestArg, secondsArg } from './args.js';
import { addDashboardCommand } from './dashboard/command.js';
import { addApprovalCommands } from './cluster-approve.js';
import { addCheckCommand } from './cluster-check.js';
import { runPathUpgrade } from './cluster-upgrade-path.js';

interface KubeOpts {
  kubeconfig?: string;
  context?: string;
  json?: boolean;
  requestTimeout?: number;
  deadline?: number;
}
interface TrustOpts {
  key?: string[];
  digest?: string;
  releaseKeyring?: string;
}

const defaultKubeconfig = (env = process.env) =>
  env.KUBECONFIG?.split(':')[0] || join(homedir(), '.kube', 'config');

async function apis(o: KubeOpts): Promise<AdminApis> {
  const file = o.kubeconfig ?? defaultKubeconfig();
  try {
    // the whole command's deadline starts with its first API call (after the bundle was read)
    const command = commandDeadline((o.deadline ?? COMMAND_DEADLINE_MS / 1000) * 1000);
    return await adminApis(file, o.context, {
      command,
      ...(o.requestTimeout ? { deadlineMs: o.requestTimeout * 1000 } : {}),
    });
  } catch (cause) {
    throw new ClusterError(
      'KUBECONFIG',
      `cannot use kubeconfig ${file}${o.context ? ` (context ${o.context})` : ''}: ${(cause as Error).message}: pass --kubeconfig FILE`,
      { cause },
    );
  }
}

/** The bundle as the cluster commands need it: trusted first, release signatures checked. */
async function loadBundle(
  file: string,
  o: TrustOpts,
  withFileDigest: boolean,
): Promise<AdminBundle> {
  const trust = await loadTrust(o.key ?? [], o.digest);
  const {
    manifest: m,
    signatures,
    path,
  } = await withBundle(file, (source) => readReleaseSignatures(source, trust));
  const keyring = o.releaseKeyring ? await loadReleaseKeyring(o.releaseKeyring) : undefined;
  // every release of an update path with its own signatures, each checked against its own digest
  for (const r of path) {
    if (!r.digest) continue;
    for (const [i, s] of r.signatures.entries()) {
      await verifyReleaseSignature(s.bytes, r.digest, {
        where: `release signature ${i + 1}${path.length > 1 ? ` of ${r.version}` : ''} of ${file}`,
        ...(keyring ? { keyring } : {}),
      });
    }
  }
  const hops = releasePath(m);
  return {
    fileDigest: withFileDigest ? (o.digest ?? (await sha256File(file)).digest) : '',
    version: m.release.version,
    image: m.release.image,
    digest: m.release.digest,
    upgradeFrom: m.release.upgradeFrom,
    images: m.images.map((i) => ({
      repository: i.repository,
      tag: i.tag,
      digest: i.digest,
      ...(i.component ? { component: i.component } : {}),
    })),
    signatures: signatures.map((s) => s.bytes),
    ...(hops.length > 1
      ? {
          path: hops.map((h, i) => ({
            version: h.version,
            image: h.image,
            digest: h.digest,
            upgradeFrom: h.upgradeFrom,
            signatures: path[i]!.signatures.map((s) => s.bytes),
            ...(h.payload ? { payload: h.payload } : {}),
          })),
        }
      : {}),
  };
}

function table(rows: NodeRow[]): string {
  const head = [
    'NODE',
    'NODE READY',
    'PHASE',
    'VERSION',
    'DIGEST',
    'PINNED',
    'LAST HEARTBEAT',
    'READY FOR BUNDLE',
  ];
  const cells = rows.map((r) => [
    r.node,
    r.nodeReady ? 'True' : 'False',
    r.phase + (r.reason ? ` (${r.reason})` : ''),
    r.version ?? '-',
    r.digest ? r.digest.slice(0, 19) : '-',
    r.pinned ?? '-',
    heartbeatCell(r),
    r.ready ? 'yes' : 'no',
  ]);
  // the columns of bundles between nodes (issue #22), once any node has a source or serves
  if (rows.some((r) => r.source || r.serving)) {
    head.push('SOURCE', 'RATE', 'SERVES');
    rows.forEach((r, i) => cells[i]!.push(r.source ?? '-', rateCell(r), servesCell(r)));
  }
  for (const c of cells)
    c.forEach((x, i) => {
      c[i] = escapeControls(x);
    });
  const w = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  return (
    [head, ...cells]
      .map((c) =>
        c
          .map((x, i) => x.padEnd(w[i]!))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

/** "40 s ago", "6 min ago (stale)": how old the agent's last report is, and whether it still counts. */
const heartbeatCell = (r: NodeRow) =>
  r.heartbeat === undefined
    ? 'never'
    : `${r.heartbeatAge === undefined ? r.heartbeat : `${timeAgo(r.heartbeatAge)} ago`}${r.stale ? ' (stale)' : ''}`;

/** "12.5 MiB/s, 1.2 GiB of 4.0 GiB" while it copies or fetches; "-" otherwise. */
const rateCell = (r: NodeRow) =>
  r.rate !== undefined
    ? `${formatBytes(r.rate)}/s, ${formatBytes(r.bytesDone ?? 0)} of ${formatBytes(r.bytesTotal ?? 0)}`
    : '-';

const servesCell = (r: NodeRow) =>
  r.serving
    ? `${r.serving.complete ? 'complete' : `${r.serving.verifiedBlobs} blobs`} on ${r.serving.address.includes(':') ? `[${r.serving.address}]` : r.serving.address}:${r.serving.port}`
    : '-';

const warningLines = (ws: Warning[]) =>
  ws.map((w) => `${escapeControls(`warning: ${w.kind}: ${w.object}: ${w.message}`)}\n`).join('');

function notReady(r: Rollup, reported: boolean): ClusterError {
  return Object.assign(
    new ClusterError('NODES_NOT_READY', `${r.summary}: ${nextSteps(r)}, then run this again`),
    { reported },
  );
}

const kubeOptions = (cmd: Command) =>
  cmd
    .option(
      '--kubeconfig <file>',
      'kubeconfig of an admin user (default: $KUBECONFIG or ~/.kube/config)',
    )
    .option('--context <name>', 'kubeconfig context (default: the current one)')
    .option(
      '--request-timeout <seconds>',
      `the most one API request may take, from connecting to its answer's last byte (default: ${API_DEADLINE_MS / 1000})`,
      secondsArg,
    )
    .option(
      '--deadline <seconds>',
      `the most all of the command's API requests may take together, every page of every list included (default: ${COMMAND_DEADLINE_MS / 1000})`,
      secondsArg,
    )
    .option('--json', 'print the result as JSON');

const trustOptions = (cmd: Command) =>
  cmd
    .option(
      '--key <pub>',
      "the factory's public key the bundle must be signed with (repeatable)",
      collect,
    )
    .option(
      '--digest <sha256>',
      'expected sha256 of the whole file (from NAME.bundle.sha256)',
      digestArg,
    )
    .option(
      '--release-keyring <file>',
      "OpenPGP keys the bundle's release signatures must verify with (the cluster checks them with its own keys in any case)",
    );

/** `bundle cluster status`: the roll-up as a table or JSON, exit 0 only when every node is ready. */
function addStatusCommand(cluster: Command): void {
  kubeOptions(
    cluster
      .command('status')
      .description(
        'One row per Node (a node whose agent never reported shows as NotReported): bundle phase, version, digest, pinned, last heartbeat; once any node has them, SOURCE (stick, spool, file, or peer NAME when fetched from other nodes), RATE (while it copies or fetches) and SERVES (what it offers its peers). Exit 0 only when every node (of --selector) is Ready for the same bundle: its Node Ready, its agent heard within three heartbeats. With --update-gate it also writes the upgrade gate (UpgradeGate "cluster", which deploy/upgrade-gate.yaml\'s admission policy reads; prepare and upgrade write it too): the cluster then refuses a desiredUpdate to any release but the one every node holds.',
      )
      .option(
        '-l, --selector <labels>',
        'only nodes with these labels (e.g. node-role.kubernetes.io/worker=)',
      )
      .option(
        '--bundle-digest <sha256>',
        'the bundle file every node must be Ready for (default: the one most Ready nodes report)',
        digestArg,
      )
      .addOption(
        new Option(
          '--update-gate',
          'also write what it found to the upgrade gate (UpgradeGate "cluster", read by deploy/upgrade-gate.yaml\'s admission policy), so "oc adm upgrade" by hand is let through once every node is ready',
        ).conflicts('selector'),
      ),
  ).action(
    async (o: KubeOpts & { selector?: string; bundleDigest?: string; updateGate?: boolean }) => {
      const api = await apis(o);
      const r = await readRollup(api, {
        ...(o.selector ? { selector: o.selector } : {}),
        ...(o.bundleDigest ? { digest: o.bundleDigest } : {}),
      });
      // a selection of nodes says nothing of the others (--selector conflicts): only a look at every node moves the gate
      const gate = o.updateGate
        ? await publishGate(api, r, { by: 'bundle cluster status' })
        : undefined;
      // an update path (EUS to EUS) as prepare or upgrade wrote it into the gate: which hop the cluster is on
      const path = await readPathStatus(api, { clusterVersion: r.clusterVersion });
      if (o.json)
        process.stdout.write(
          JSON.stringify(
            {
              ready: r.ready,
              digest: r.digest ?? null,
              summary: r.summary,
              nodes: r.rows,
              gate: gate ?? null,
              path: path ?? null,
            },
            null,
            2,
          ) + '\n',
        );
      // node names, reasons and messages come from the cluster: control characters are escaped
      // not ready: the summary is said once, in the error line beside what to do
      else
        process.stdout.write(
          `${table(r.rows)}\n${r.ready ? `${escapeControls(r.summary)}\n` : ''}${gate ? `${escapeControls(gateLine(gate))}\n` : ''}${path ? `${escapeControls(path.line)}\n` : ''}`,
        );
      if (!r.ready) throw notReady(r, o.json === true);
    },
  );
}

/** `bundle cluster prepare BUNDLE`: the release signatures and the gate applied, what the upgrade will meet said. */
function addPrepareCommand(cluster: Command): void {
  trustOptions(
    kubeOptions(
      cluster
        .command('prepare')
        .description(
          `Make the cluster ready to accept the bundle's release: server-side apply of the release signatures as the ConfigMap ${SIGNATURE_NAMESPACE}/${SIGNATURE_CONFIGMAP} (as oc-mirror writes it), check that the running version is one the release upgrades from, and warn about autoscaling and pods pulling the bundle's images with imagePullPolicy: Always.`,
        )
        .argument('<bundle>')
        .option('--dry-run', 'change nothing; print what would be applied'),
    ),
  ).action(async (file: string, o: KubeOpts & TrustOpts & { dryRun?: boolean }) => {
    const b = await loadBundle(file, o, false);
    const r = await prepareCluster(await apis(o), b, { dryRun: o.dryRun === true });
    if (o.json) {
      process.stdout.write(
        JSON.stringify(
          {
            dryRun: r.dryRun,
            configMap: r.configMap,
            changed: r.changed,
            fieldManager: signatureFieldManager(b.digest!),
            path: b.path?.map((x) => x.version) ?? null,
            runningVersion: r.runningVersion ?? null,
            warnings: r.warnings,
            gate: r.gate ?? null,
            pinnedImageSets: r.pinned ?? null,
            holdings: r.holdings,
          },
          null,
          2,
        ) + '\n',
      );
      return;
    }
    const where = `ConfigMap ${SIGNATURE_NAMESPACE}/${SIGNATURE_CONFIGMAP}`;
    const keys = Object.keys(r.configMap.binaryData).join(', ');
    process.stdout.write(
      (r.changed.length === 0
        ? `${where} already holds ${keys}\n`
        : `${r.dryRun ? 'would apply' : 'applied'} ${where}: ${keys} (field manager ${signatureFieldManager(b.digest!)})\n`) +
        (b.path && b.path.length > 1
          ? `update path: ${pathWords(b.path, b.path.some((x) => x.version === r.runningVersion) ? undefined : r.runningVersion)} (${b.path.length} releases, each with its own signatures in the ConfigMap); the cluster runs ${r.runningVersion ?? 'an unknown version'}\n`
          : `version graph: the cluster runs ${r.runningVersion ?? 'an unknown version'}; ${b.version} ${b.upgradeFrom.length ? `accepts ${b.upgradeFrom.join(', ')}` : 'accepts any version'}\n`) +
        warningLines(r.warnings) +
        (r.gate ? `${escapeControls(gateLine(r.gate))}\n` : '') +
        (r.pinned ? `${escapeControls(pinnedSetsLine(r.pinned))}\n` : '') +
        r.holdings
          .map((h) => `holdings: ${escapeControls(holdingsLine(h, b.version))}\n`)
          .join('') +
        `next: "bundle cluster status" until it exits 0, then "bundle cluster upgrade ${file}"\n`,
    );
  });
}

/** `bundle cluster upgrade BUNDLE`: ClusterVersion's desiredUpdate set, or an update path's next step. */
function addUpgradeCommand(cluster: Command): void {
  trustOptions(
    kubeOptions(
      cluster
        .command('upgrade')
        .description(
          'Start the upgrade: refuses unless every node is Ready for this bundle (as "status" exits 0) and "prepare" is done; then sets ClusterVersion spec.desiredUpdate to the release image by digest (never force) and prints the equivalent oc command. A bundle of an update path (EUS to EUS) takes one step per run, each shown in the whole plan before anything changes: pause every pool but master, hop one, (run again once ClusterVersion\'s history says Completed) the admin acknowledgements the running release asks for, hop two, (again) unpause the pools. Safe to run again at any time: it reads where the cluster is.',
        )
        .argument('<bundle>')
        .option('-l, --selector <labels>', 'only these nodes must be Ready (default: every node)')
        .option(
          '--ack <gate>',
          'an update path: acknowledge this admin gate (a key of openshift-config-managed/admin-gates) in openshift-config/admin-acks before the hop that waits on it (repeatable)',
          collect,
        )
        .option(
          '--dry-run',
          'change nothing; print the change (an update path: the whole plan) and the oc commands',
        ),
    ),
  ).action(
    async (
      file: string,
      o: KubeOpts & TrustOpts & { dryRun?: boolean; selector?: string; ack?: string[] },
    ) => {
      const b = await loadBundle(file, o, true);
      if (b.path && b.path.length > 1) return runPathUpgrade(await apis(o), b, file, o);
      const r = await upgradeCluster(await apis(o), b, {
        dryRun: o.dryRun === true,
        ...(o.selector ? { selector: o.selector } : {}),
      });
      if (o.json) {
        process.stdout.write(
          JSON.stringify(
            {
              dryRun: r.dryRun,
              changed: r.changed,
              image: r.image,
              patch: r.patch,
              ocCommand: r.ocCommand,
              summary: r.rollup.summary,
              gate: r.gate ?? null,
              pinnedImageSets: r.pinned ?? null,
            },
            null,
            2,
          ) + '\n',
        );
        return;
      }
      process.stdout.write(
        `${r.rollup.summary}\n` +
          (r.gate ? `${escapeControls(gateLine(r.gate))}\n` : '') +
          (r.pinned ? `${escapeControls(pinnedSetsLine(r.pinned))}\n` : '') +
          (!r.changed
            ? `ClusterVersion/version already asks for ${r.image}\n`
            : `${r.dryRun ? 'would set' : 'set'} ClusterVersion/version spec.desiredUpdate = ${JSON.stringify(r.patch.spec.desiredUpdate)}\n`) +
          `equivalent: ${r.ocCommand}\n` +
          (r.dryRun ? '' : 'follow it with: oc adm upgrade (or oc get clusterversion)\n'),
      );
    },
  );
}

/** `bundle cluster rbac`: per-node RBAC as YAML, for clusters without ValidatingAdmissionPolicy. */
function addRbacCommand(cluster: Command): void {
  kubeOptions(
    cluster
      .command('rbac')
      .description(
        'For clusters without ValidatingAdmissionPolicy (before Kubernetes 1.30 / OpenShift 4.17): print, as YAML for "oc apply -f -", each node\'s empty NodeBundleStatus and a ClusterRole + binding for that node\'s identity limited to its own object (get, patch; no create). Use it instead of the writer binding of deploy/rbac.yaml.',
      )
      .option(
        '--nodes <names>',
        'comma-separated node names (default: every Node of the cluster, or of --selector)',
      )
      .option('-l, --selector <labels>', 'with the Node list: only nodes with these labels')
      .addOption(
        new Option(
          '--identity <kind>',
          "who the agent writes as: the node (system:node:NAME, the kubelet's kubeconfig) or a ServiceAccount offline-bundle/bundle-agent-NAME",
        )
          .choices(['node', 'serviceaccount'])
          .default('node'),
      ),
  ).action(async (o: KubeOpts & { nodes?: string; selector?: string; identity: NodeIdentity }) => {
    const names = o.nodes
      ? o.nodes
          .split(',')
          .map((n) => n.trim())
          .filter(Boolean)
      : (await readRollup(await apis(o), o.selector ? { selector: o.selector } : {})).rows.map(
          (r) => r.node,
        );
    const objects = nodeRbacObjects(names, o.identity);
    if (o.json)
      process.stdout.write(
        JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }, null, 2) + '\n',
      );
    else
      process.stdout.write(
        `# bundle cluster rbac: ${names.length} nodes, identity ${o.identity}; apply with deploy/crd.yaml, without deploy/rbac.yaml's writer binding\n` +
          objects.map((x) => stringifyYaml(x)).join('---\n'),
      );
  });
}

const CLUSTER_HELP = `
The admin flow, once the technician has plugged the stick into every node:
  bundle cluster status                                     # every node Ready for one bundle? exit 0 when so
  bundle cluster prepare 4.15.1.bundle --key factory.pub    # signature ConfigMap, version graph, warnings
  bundle cluster upgrade 4.15.1.bundle --key factory.pub    # ClusterVersion spec.desiredUpdate, by digest
  bundle cluster dashboard 4.15.1.bundle --key factory.pub  # the same, live in a browser (read-only)
With one stick for many nodes (agents with peers.enabled), before the technician starts:
  bundle cluster approve 4.15.1.bundle --key factory.pub    # nodes may fetch it from each other (signature checked)
The kubeconfig's user needs deploy/admin-rbac.yaml's offline-bundle-admin role (or cluster-admin).`;

export function addClusterCommands(program: Command): void {
  const cluster = program
    .command('cluster')
    .description(
      "The cluster admin's side: is every node loaded (status), hand the release signatures to the cluster (prepare), start the upgrade (upgrade), let nodes fetch a bundle from each other (approve, approvals, revoke).",
    )
    .addHelpText('after', CLUSTER_HELP);

  addStatusCommand(cluster);

  addPrepareCommand(cluster);
  addUpgradeCommand(cluster);
  addRbacCommand(cluster);

  addDashboardCommand(cluster, { defaultKubeconfig, loadBundle, trustOptions });
  addApprovalCommands(cluster, { apis, kubeOptions });
  addCheckCommand(cluster, { apis, loadBundle, kubeOptions, trustOptions, escape: escapeControls });

  // runCli overrides exits of the program and its direct commands only: usage errors here exit 2 too
  for (const c of cluster.commands) c.exitOverride();
}

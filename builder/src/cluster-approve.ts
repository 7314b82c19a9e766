/**
 * `bundle cluster approve|approvals|revoke`: which bundles nodes may fetch from each other
 * (issue #22). Approving from the bundle file checks bundle.json's signature against the
 * admin's key first, so the approval names a digest that key really signed; the nodes check it
 * again against their own pinned keys before using a byte. Registered by cluster.ts, which hands
 * over its kubeconfig handling so every cluster command reads a kubeconfig the same way.
 */
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import {
  bundleIdentity,
  checkSignature,
  FormatError,
  loadTrust,
  readHeader,
  withBundle,
} from '@offline-bundle/format';
import { type Approval, type ApprovalSpec } from '@offline-bundle/status';
import { ClusterError, type AdminApis } from '@offline-bundle/kube';
import { approveBundle, listApprovals, revokeApproval } from '@offline-bundle/cluster';
import { collect, digestArg } from './args.js';

interface KubeOpts {
  kubeconfig?: string;
  context?: string;
  json?: boolean;
  requestTimeout?: number;
  deadline?: number;
}
interface ApproveOpts extends KubeOpts {
  key?: string[];
  version?: string;
  releaseName?: string;
}

interface ApprovalDeps {
  apis: (o: KubeOpts) => Promise<AdminApis>;
  kubeOptions: (cmd: Command) => Command;
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** bundle.json of FILE, its signature checked against `keys`: the approval's spec. */
async function approvalFromFile(file: string, keys: string[]): Promise<ApprovalSpec> {
  if (keys.length === 0)
    throw new FormatError(
      'NO_TRUST',
      `approving ${file} needs the factory's public key: pass --key factory.pub (its signature is checked before anything is approved)`,
    );
  const trust = await loadTrust(keys, undefined, {
    onUnsafeKey: (m) => process.stderr.write(`bundle: warning: ${m}\n`),
  });
  const { manifest, manifestBytes, signature } = await withBundle(file, readHeader);
  const signer = checkSignature(manifestBytes, signature, manifest.signer.fingerprint, trust)!;
  if (manifest.signer.fingerprint !== signer.fingerprint) {
    throw new FormatError(
      'BAD_SIGNATURE',
      `bundle.json of ${file} names signer ${manifest.signer.fingerprint} but was signed by ${signer.source} (${signer.fingerprint}): the bundle was built or altered wrongly; rebuild it with bundle create`,
    );
  }
  return {
    // the name the transfer and the resume marker give the bundle too
    manifestDigest: bundleIdentity(manifestBytes),
    version: manifest.release.version,
    releaseName: manifest.release.name,
    signer: signer.fingerprint,
    checked: 'file',
    approvedAt: new Date().toISOString(),
  };
}

/** A digest given by hand: nothing can be checked here, so the version and the one key are the admin's word. */
async function approvalFromDigest(digest: string, o: ApproveOpts): Promise<ApprovalSpec> {
  if (!o.version || (o.key ?? []).length !== 1) {
    throw new ClusterError(
      'APPROVAL_NEEDS_VERSION',
      `approving a bare digest needs --version V and exactly one --key (the release it is and the factory key it must be signed with); better: give the bundle file, whose signature is then checked here`,
    );
  }
  const trust = await loadTrust(o.key!, undefined, {
    onUnsafeKey: (m) => process.stderr.write(`bundle: warning: ${m}\n`),
  });
  return {
    manifestDigest: digest,
    version: o.version,
    ...(o.releaseName ? { releaseName: o.releaseName } : {}),
    signer: trust.keys![0]!.fingerprint,
    checked: 'digest',
    approvedAt: new Date().toISOString(),
  };
}

/** FILE or sha256:HEX: an existing file wins (a file may be named like a digest). */
function asDigest(arg: string): string | undefined {
  if (existsSync(arg)) return undefined;
  const d = arg.startsWith('sha256:')
    ? arg
    : /^[0-9a-f]{64}$/.test(arg)
      ? `sha256:${arg}`
      : undefined;
  if (d === undefined) return undefined;
  if (!DIGEST.test(d))
    throw new ClusterError(
      'INVALID_DIGEST',
      `${JSON.stringify(arg)} is neither a bundle file nor a digest (sha256: and 64 lowercase hex digits)`,
    );
  return d;
}

function approvalsTable(list: Approval[]): string {
  const head = ['DIGEST', 'VERSION', 'RELEASE', 'SIGNER', 'CHECKED', 'APPROVED'];
  const cells = list.map((a) =>
    [
      a.manifestDigest,
      a.version || '-',
      a.releaseName ?? '-',
      a.signer.slice(0, 19),
      a.checked,
      a.created ?? a.approvedAt ?? '-',
    ].map(escapeControls),
  );
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

const APPROVE_HELP = `
Who may fetch what: a node without a stick fetches only a bundle whose signed bundle.json has an
approved digest, uses it only when that bundle.json verifies with one of the node's own pinned
keys (trust.keys), and only over mutual TLS from the other nodes. A stick needs no approval.
Approvals are not edited: revoke one and approve again.

  bundle cluster approve 4.15.1.bundle --key factory.pub
  bundle cluster approve sha256:3f…9a --version 4.15.1 --key factory.pub
  bundle cluster approvals
  bundle cluster revoke sha256:3f…9a`;

export function addApprovalCommands(cluster: Command, deps: ApprovalDeps): void {
  addApproveCommand(cluster, deps);
  addApprovalsCommand(cluster, deps);
  addRevokeCommand(cluster, deps);
}

/** `bundle cluster approve FILE|DIGEST`: a BundleApproval, from a bundle whose signature is checked here or a bare digest. */
function addApproveCommand(cluster: Command, deps: ApprovalDeps): void {
  deps
    .kubeOptions(
      cluster
        .command('approve')
        .description(
          "Let nodes fetch a bundle from each other (BundleApproval): from the bundle FILE, bundle.json's signature is checked against --key first and the approval names the sha256 of that signed bundle.json; a bare DIGEST (sha256:HEX) needs --version and one --key and is checked only by the nodes.",
        )
        .argument(
          '<file|digest>',
          'the bundle file (checked here) or sha256:HEX of its signed bundle.json',
        )
        .option(
          '--key <pub>',
          "the factory's public key the bundle must be signed with (repeatable with a file; exactly one with a digest)",
          collect,
        )
        .option(
          '--version <v>',
          'with a digest: the release version it is (shown to people; the signed bundle.json decides)',
        )
        .option('--release-name <name>', "with a digest: the release's human name")
        .addHelpText('after', APPROVE_HELP),
    )
    .action(async (arg: string, o: ApproveOpts) => {
      const digest = asDigest(arg);
      const spec = digest
        ? await approvalFromDigest(digest, o)
        : await approvalFromFile(arg, o.key ?? []);
      const r = await approveBundle(await deps.apis(o), spec);
      if (o.json) {
        process.stdout.write(
          JSON.stringify({ created: r.created, approval: r.approval }, null, 2) + '\n',
        );
        return;
      }
      const what = `${spec.manifestDigest} (${escapeControls(spec.version)}${spec.releaseName ? `, ${escapeControls(spec.releaseName)}` : ''}), signer ${spec.signer}`;
      process.stdout.write(
        `${r.created ? 'approved' : 'already approved'} ${what}\n` +
          (spec.checked === 'file'
            ? `signature checked with ${(o.key ?? []).join(', ')}\n`
            : 'signature not checked here (no bundle file given): every node checks it against its own pinned keys before using a byte\n') +
          'nodes with peers.enabled may now fetch it from a node that has it ("bundle cluster status" shows who serves it)\n',
      );
    });
}

/** `bundle cluster approvals`: the BundleApprovals, oldest first. */
function addApprovalsCommand(cluster: Command, deps: ApprovalDeps): void {
  deps
    .kubeOptions(
      cluster
        .command('approvals')
        .description(
          'List the bundles nodes may fetch from each other (BundleApprovals), oldest first.',
        ),
    )
    .action(async (o: KubeOpts) => {
      const list = await listApprovals(await deps.apis(o));
      if (o.json) process.stdout.write(JSON.stringify({ approvals: list }, null, 2) + '\n');
      else
        process.stdout.write(
          list.length
            ? approvalsTable(list)
            : 'no approvals: nodes fetch nothing from each other ("bundle cluster approve FILE --key factory.pub")\n',
        );
    });
}

/** `bundle cluster revoke DIGEST`: the approval deleted; fetches of it stop. */
function addRevokeCommand(cluster: Command, deps: ApprovalDeps): void {
  deps
    .kubeOptions(
      cluster
        .command('revoke')
        .description(
          'Delete the approval of a bundle: nodes start no new fetch of it from each other, and a fetch under way stops. What nodes already loaded stays.',
        )
        .argument(
          '<digest>',
          'sha256:HEX of the signed bundle.json, as "bundle cluster approvals" lists it',
          digestArg,
        ),
    )
    .action(async (digest: string, o: KubeOpts) => {
      await revokeApproval(await deps.apis(o), digest);
      if (o.json) process.stdout.write(JSON.stringify({ revoked: digest }, null, 2) + '\n');
      else
        process.stdout.write(`revoked ${digest}: nodes start no new fetch of it from each other\n`);
    });
}

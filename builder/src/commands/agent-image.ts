import type { Command } from 'commander';
import { dirname, resolve } from 'node:path';
import { assertRegularFile, escapeControls } from '@offline-bundle/host';
import { PASSPHRASE_ENV, loadPrivateKey, readPassphrase } from '@offline-bundle/format';
import { exportAgentSidecar, type AgentSidecar } from '../agent-sidecar.js';

/** What `create --agent-image` and `agent-image export` print about the two files. */
export function reportSidecar(s: AgentSidecar, json: boolean): void {
  if (json) return;
  process.stdout.write(
    escapeControls(
      `wrote ${s.archive} (bundle-agent ${s.version}, ${s.arch}, ${s.manifest}) and its signed statement ${s.statement}: copy both onto the stick beside the bundle, for nodes that have no agent yet ("bundle write-media BUNDLE /mount/point" takes them along, checked)`,
    ) + '\n',
  );
}

/** Loads the signing key (its passphrase from --passphrase-file or the environment) and writes the sidecar. */
export async function writeSidecar(
  bundle: string,
  o: {
    key: string;
    passphraseFile?: string;
    output?: string;
    force?: boolean;
    signal?: AbortSignal;
  },
): Promise<AgentSidecar> {
  const passphrase = await readPassphrase(o.passphraseFile, process.env, o.signal);
  const key = await loadPrivateKey(o.key, passphrase !== undefined ? { passphrase } : {});
  return exportAgentSidecar(bundle, key, resolve(o.output ?? dirname(bundle)), {
    ...(o.force !== undefined ? { force: o.force } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
  });
}

/** `bundle agent-image export`: the agent image beside the bundle, for the node bootstrap. */
export function addAgentImageCommands(program: Command): void {
  const cmd = program
    .command('agent-image')
    .description(
      'The agent image beside a bundle, for nodes where no agent runs yet (their bootstrap loads it with skopeo).',
    );
  cmd
    .command('export')
    .description(
      'Write the agent image a bundle carries as bundle-agent-VERSION-ARCH.oci.tar and a signed statement (….oci.tar.sig: its size, sha256, manifest digest, name, version, arch), signed with the bundle\'s key. "bundle create --agent-image" writes them too.',
    )
    .argument('<bundle>', 'a bundle made with --agent-image')
    .requiredOption('--key <file>', 'the private key (PEM) that signed the bundle')
    .option(
      '--passphrase-file <file>',
      `the encrypted key's passphrase, on the file's first line (or set ${PASSPHRASE_ENV})`,
    )
    .option('-o, --output <dir>', "directory to write both files to (default: the bundle's)")
    .option('--force', 'replace existing files')
    .option('--json', 'print the result as JSON')
    .addHelpText(
      'after',
      `
The node side (deploy/openshift/bundle-agent-bootstrap.sh) checks the statement with openssl
against /etc/bundle-agent/keys/*.pub, the archive's size and sha256, the architecture, then runs
  skopeo copy oci-archive:bundle-agent-VERSION-ARCH.oci.tar containers-storage:localhost/offline-bundle/bundle-agent:VERSION
By hand, with the factory's public key:
  head -n -1 F.oci.tar.sig > statement; tail -n 1 F.oci.tar.sig | cut -d' ' -f2 | base64 -d > sig
  openssl dgst -sha256 -verify factory.pub -signature sig statement               (ECDSA P-256)
  openssl pkeyutl -verify -pubin -inkey factory.pub -rawin -in statement -sigfile sig   (Ed25519)
  sha256sum F.oci.tar   (the statement's sha256 line)

Exit codes: 0 written, 1 error (one line: "bundle: CODE: message"), 2 usage.`,
    )
    .action(
      async (
        bundle: string,
        o: {
          key: string;
          passphraseFile?: string;
          output?: string;
          force?: boolean;
          json?: boolean;
        },
      ) => {
        await assertRegularFile(bundle);
        // Ctrl-C or a stop: the temporary file is removed, nothing half-written keeps the final name
        const ac = new AbortController();
        const stop = (signal: NodeJS.Signals, exitCode: number) =>
          ac.abort(
            Object.assign(new Error(`interrupted (${signal}): nothing written`), {
              code: 'INTERRUPTED',
              exitCode,
            }),
          );
        process.once('SIGINT', () => stop('SIGINT', 130));
        process.once('SIGTERM', () => stop('SIGTERM', 143));
        process.once('SIGHUP', () => stop('SIGHUP', 129));
        const s = await writeSidecar(bundle, { ...o, signal: ac.signal });
        if (o.json) process.stdout.write(JSON.stringify(s) + '\n');
        else reportSidecar(s, false);
      },
    );
}

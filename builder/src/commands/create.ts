import { stat } from 'node:fs/promises';
import { Command, InvalidArgumentError } from 'commander';
import { OciError } from '@offline-bundle/oci';
import { PASSPHRASE_ENV, readPassphrase } from '@offline-bundle/format';
import { createBundle, defaultCacheDir } from '../create.js';
import { Progress } from '../progress.js';
import { askSecret } from '../prompt.js';
import { collect } from '../args.js';
import { reportSidecar, writeSidecar } from '../agent-image-command.js';

const positiveInt = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number of at least 1');
  return n;
};
// a flag as skopeo's: bare (true) or =VALUE with the values of Go's strconv.ParseBool; a bare
// one never takes the next option as its value
const BOOL_VALUES: Record<string, boolean> = {
  1: true, t: true, T: true, TRUE: true, true: true, True: true,
  0: false, f: false, F: false, FALSE: false, false: false, False: false,
};
const boolArg = (value: string) => {
  const v = Object.hasOwn(BOOL_VALUES, value) ? BOOL_VALUES[value] : undefined;
  if (v === undefined) throw new InvalidArgumentError('must be true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False, as skopeo; write --tls-verify=false)');
  return v;
};
// 128 + the signal's number, as a shell reports a process the signal ended
// SIGHUP (the ssh session went away) stops the build as SIGTERM does: the temp file goes
const SIGNAL_EXIT = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 } as const;
const levelArg = (value: string) => {
  const n = Number(value);
  // the help promises 1-19; zstd would otherwise clamp other numbers silently
  if (!Number.isInteger(n) || n < 1 || n > 19) throw new InvalidArgumentError('must be a whole number from 1 to 19');
  return n;
};

const CREATE_HELP = `
Examples:
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.38-x86_64 \\
      --registries-conf mirror.conf --key factory.key -o 4.14.38.bundle
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.38-x86_64 \\
      --signature-store https://mirror.openshift.com/pub/openshift-v4/signatures/openshift/release \\
      --release-keyring redhat-release.gpg --key factory.key -o 4.14.38.bundle
  bundle create --version 1.30.2 --image docker.io/rancher/k3s:v1.30.2-k3s1 \\
      --image oci:./app-layout:v2=registry.example.com/app:v2 --key factory.key -o k3s.bundle
  skopeo copy docker://registry.example.com/tool:v3 dir:./tool && \\
    bundle create --version 1.0 --image dir:./tool=registry.example.com/tool:v3 --key factory.key -o tool.bundle

Registry access (as podman and skopeo):
  proxy        HTTPS_PROXY, HTTP_PROXY, NO_PROXY (names, host:port, 10.0.0.0/8; or lower case); never for loopback
  TLS          system CAs plus *.crt of the first of ~/.config/containers/certs.d/HOST:PORT,
               /etc/containers/certs.d/HOST:PORT, /etc/docker/certs.d/HOST:PORT (*.cert + *.key there:
               a client certificate); --cert-dir DIR: that directory for every registry
  credentials  --creds, else --authfile (or REGISTRY_AUTH_FILE) alone, else $XDG_RUNTIME_DIR/containers/auth.json
               (/run/containers/$UID/auth.json), ~/.config/containers/auth.json, ~/.docker/config.json,
               ~/.dockercfg; credHelpers/credsStore run docker-credential-NAME from PATH
  podman store export first: podman save --format oci-archive -o app.tar IMAGE, then --image oci-archive:app.tar

Exit codes: 0 written, 1 error (one line: "bundle: CODE: message"), 2 usage, 129/130/143 interrupted (SIGHUP/SIGINT/SIGTERM).`;

/** bundle create: its options, help and run. */
export function addCreateCommand(program: Command): void {
  program.command('create')
    .description('Build a bundle from a release image and/or images.')
    .option('--release <ref>', 'OpenShift release image: its payload images (release-manifests/image-references) are added by digest')
    .option('--image <source>', 'an image to add (repeatable): docker://REF (default), oci:DIR[:REF], oci-archive:FILE[:REF], docker-archive:FILE[:REF], dir:DIR (skopeo\'s dir layout); append =REGISTRY/REPO:TAG to name a local image (dir: always needs it)', collect)
    .option('--images-file <file>', 'a file with one image source per line (# comments)')
    .option('--agent-image <source>', 'a bundle-agent image (any --image source, e.g. oci-archive:bundle-agent-0.3.0.oci.tar): carried as localhost/offline-bundle/bundle-agent:VERSION; nodes switch to it once the bundle is Ready')
    .option('--agent-version <v>', 'the agent image\'s version, when it has no org.opencontainers.image.version label')
    .option('--arch <arch>', 'platform to keep from multi-arch images (amd64, arm64, linux/arm/v7)', 'amd64')
    .option('--all-platforms', 'keep every platform of multi-arch images')
    .option('--version <v>', 'release version (required without --release)')
    .option('--name <name>', 'human name of the release (default: the version)')
    .option('--upgrade-from <v>', 'a version the cluster may run before this one (repeatable; added to the release\'s own list)', collect)
    .option('--release-signature <file>', 'a signature of the release image (repeatable; a signature store\'s signature-N file): carried in the bundle for "bundle cluster prepare"', collect)
    .option('--signature-store <url>', 'take every release signature from this store (file:// or https://…/signatures/openshift/release: <url>/sha256=<hex>/signature-N)')
    .option('--release-keyring <file>', 'OpenPGP public keys (armored or binary) the release signatures must verify with; without it they are only checked to sign this release')
    .requiredOption('--key <file>', 'private key (PEM) to sign with (see "bundle keygen")')
    .option('--passphrase-file <file>', `the encrypted key's passphrase, on the file's first line (or set ${PASSPHRASE_ENV})`)
    .requiredOption('-o, --output <file>', 'bundle file to write (NAME.bundle); NAME.bundle.sha256 is written beside it (and with --agent-image, bundle-agent-VERSION-ARCH.oci.tar and its .sig: see "bundle agent-image export")')
    .option('--force', 'replace an existing output file')
    .option('--cache <dir>', 'content-addressed blob cache; a rerun resumes from it', defaultCacheDir())
    .option('--jobs <n>', 'parallel downloads', positiveInt, 4)
    .option('--authfile <file>', 'registry credentials file (default: REGISTRY_AUTH_FILE, else podman\'s, skopeo\'s and docker\'s files, with docker-credential-* helpers)')
    .option('--creds <user[:password]>', 'credentials for every registry, before any auth file (without the password: asked on the terminal)')
    .option('--cert-dir <dir>', 'CAs (*.crt) and a client certificate (*.cert + *.key) for every registry (default: the first HOST:PORT directory of ~/.config/containers/certs.d, /etc/containers/certs.d, /etc/docker/certs.d)')
    .option('--tls-verify [bool]', 'verify registry TLS certificates (--tls-verify=false skips the check and allows plain http)', boolArg, true)
    .option('--registries-conf <file>', 'containers-registries.conf(5) file: pull through its mirrors, keep the original names')
    .option('--level <n>', 'zstd compression level (1-19)', levelArg, 3)
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .option('--json', 'print a JSON summary on stdout at the end')
    .addHelpText('after', CREATE_HELP)
    .action(async (o) => {
      const progress = new Progress({ quiet: o.quiet });
      const ac = new AbortController();
      const stop = (signal: keyof typeof SIGNAL_EXIT) => ac.abort(Object.assign(new Error('interrupted: nothing written; a rerun resumes from the cache'), { name: 'AbortError', code: 'INTERRUPTED', exitCode: SIGNAL_EXIT[signal] }));
      // on, not once: a second Ctrl-C while the temp file is being removed must not kill the process and leave it
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
      process.on('SIGHUP', stop);
      // before anything else: a --passphrase-file pipe may keep it waiting, which a stop ends
      const passphrase = await readPassphrase(o.passphraseFile, process.env, ac.signal);
      // a directory is left to the write's own check, which names that problem
      if (!o.force && (await stat(o.output).catch(() => undefined))?.isFile()) {
        throw new OciError('OUTPUT_EXISTS', `${o.output} exists: pass --force to replace it`);
      }
      // skopeo's --creds USER asks the password, which then stays out of the shell's history
      if (typeof o.creds === 'string' && !o.creds.includes(':')) o.creds = `${o.creds}:${await askSecret(`Password for ${o.creds}: `, '--creds')}`;
      const r = await createBundle({ ...o, images: o.image, releaseSignatures: o.releaseSignature, progress, signal: ac.signal, ...(passphrase !== undefined ? { passphrase } : {}) });
      // the agent image beside the bundle too, for nodes with no agent yet (replaced with the bundle)
      const sidecar = r.manifest.agent ? await writeSidecar(r.output, { key: o.key, passphraseFile: o.passphraseFile, force: true, signal: ac.signal }) : undefined;
      if (sidecar && !o.quiet) reportSidecar(sidecar, !!o.json);
      if (o.json) {
        process.stdout.write(JSON.stringify({ output: r.output, digest: r.fileDigest, size: r.fileSize, images: r.images, blobs: r.blobs, frames: r.frames, release: r.manifest.release, totals: r.manifest.totals, ...(r.manifest.agent ? { agent: r.manifest.agent } : {}), ...(sidecar ? { agentSidecar: sidecar } : {}), signer: r.manifest.signer, warnings: r.warnings }) + '\n');
      } else {
        // shown even with --quiet: the cluster admin must fix these before the upgrade
        for (const w of r.warnings) process.stderr.write(`warning: ${w.kind}: ${w.object}: ${w.message}\n`);
      }
    });
}

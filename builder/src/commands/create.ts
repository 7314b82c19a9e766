import { Command, InvalidArgumentError } from 'commander';
import {
  FORMAT_VERSIONS,
  PIECE_BYTES,
  PASSPHRASE_ENV,
  VERSIONED_FEATURES,
  WRITABLE_VERSIONS,
  unwritableVersion,
} from '@offline-bundle/format';
import { PIECE_MODES } from '../piece-mode.js';
import { BLOB_ORDERS } from '../blob-order.js';
import { collect } from '../args.js';
import { addOptions, contentOptions, registryOptions, updateGraphOption } from '../create-flags.js';
import { SPLIT_SIZE_HELP, parseSize } from '../split.js';
import { runCreate } from './create-run.js';

const levelArg = (value: string) => {
  const n = Number(value);
  // the help promises 1-19; zstd would otherwise clamp other numbers silently
  if (!Number.isInteger(n) || n < 1 || n > 19)
    throw new InvalidArgumentError('must be a whole number from 1 to 19');
  return n;
};

const formatVersionArg = (value: string) => {
  const n = Number(value);
  const problem = /^\d+$/.test(value)
    ? unwritableVersion(n)
    : `"${value}" is not a format version; this tool writes ${WRITABLE_VERSIONS.join(', ')}`;
  if (problem) throw new InvalidArgumentError(problem);
  return n;
};
const blobOrderArg = (value: string) => {
  if (!(BLOB_ORDERS as readonly string[]).includes(value))
    throw new InvalidArgumentError(`must be ${BLOB_ORDERS.join(' or ')}`);
  return value;
};
const piecesArg = (value: string) => {
  if (!(PIECE_MODES as readonly string[]).includes(value))
    throw new InvalidArgumentError(`must be ${PIECE_MODES.join(' or ')}`);
  return value;
};
const PIECES_HELP = `digests per ${PIECE_BYTES >> 20} MiB piece of every blob longer than that, signed in bundle.json, so agents fetching from peers check and pass on each piece as it arrives: on (default) or none (for sites whose agents never use peers; saves some CPU-seconds per GiB while packing); older agents ignore them`;
const BLOB_ORDER_HELP = `the order blobs are written in: digest (default; every bundle-agent reads it) or pull (image by image as a runtime pulls them, so a node pulls each image while the rest is still read from the stick; needs format version 3, bundle-agent ${FORMAT_VERSIONS[VERSIONED_FEATURES['blobs in pull order']]!.minReader} or later)`;
const FORMAT_VERSION_HELP = `bundle.json's format version: ${[...WRITABLE_VERSIONS]
  .reverse()
  .map((v) => `${v} for bundle-agent ${FORMAT_VERSIONS[v]!.minReader} or later`)
  .join(
    ', ',
  )}; by default the oldest that carries what the bundle holds, so it reaches every agent that can use it ("bundle inspect" shows what a bundle needs)`;

const BASE_HELP =
  "make a delta against an earlier release of the same stream: its NAME.bundle, its parts, or only its bundle.json (signed or not: only its listing is read, to leave out the blobs it holds). The delta's signed bundle.json still lists every blob; a node fills the left-out ones from that release kept on its disk (staging.keep) and checks each against this bundle's digests, or refuses before writing anything. Needs format version 3 (bundle-agent 0.2.0)";

const CREATE_HELP = `
Examples:
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.38-x86_64 \\
      --registries-conf mirror.conf --key factory.key -o 4.14.38.bundle
  bundle create -f bundle.yaml --dry-run          # what the file brings, with sizes; no bundle written
  bundle create -f imageset-config.yaml --update-graph graph.json --key factory.key -o 4.14.bundle
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.38-x86_64 \\
      --signature-store https://mirror.openshift.com/pub/openshift-v4/signatures/openshift/release \\
      --release-keyring redhat-release.gpg --key factory.key -o 4.14.38.bundle
  bundle create --version 1.30.2 --image docker.io/rancher/k3s:v1.30.2-k3s1 \\
      --image oci:./app-layout:v2=registry.example.com/app:v2 --key factory.key -o k3s.bundle
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.39-x86_64 \\
      --base 4.14.38.bundle --key factory.key -o 4.14.39-delta.bundle   # only what 4.14.38 lacks
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

/** `bundle create`: its flags in help order (what a dry run resolves, the release's extras, signing and output, packing), then the run. */
export function addCreateCommand(program: Command): void {
  const create = program
    .command('create')
    .description('Build a bundle from a release image and/or images.')
    .option(
      '-f, --file <bundle.yaml>',
      'what goes into the bundle, declared in a file (its keys are these flags; see BUNDLE FILE in "man bundle" and bundle.schema.json), or an oc-mirror v2 ImageSetConfiguration; flags given here override it, repeatable ones add to its lists',
    )
    .addOption(updateGraphOption())
    .option(
      '--dry-run',
      "resolve every image and print the list with sizes; no bundle written, but the cache gets the manifests, the release image's layers (to read its payload) and each operator catalog image's layers (to read its catalog); no other layer fetched",
    );
  // what a dry run resolves (and so bundle diff -f): registered here in create's order, defined once
  addOptions(create, contentOptions());
  addReleaseAndOutputOptions(create);
  addOptions(create, registryOptions());
  addPackingOptions(create).addHelpText('after', CREATE_HELP).action(runCreate);
}

function addReleaseAndOutputOptions(create: Command): Command {
  return create
    .option(
      '--upgrade-from <v>',
      "a version the cluster may run before this one (repeatable; added to the release's own list)",
      collect,
    )
    .option(
      '--release-signature <file>',
      'a signature of the release image (repeatable; a signature store\'s signature-N file): carried in the bundle for "bundle cluster prepare"',
      collect,
    )
    .option(
      '--signature-store <url>',
      'take every release signature from this store (file:// or https://…/signatures/openshift/release: <url>/sha256=<hex>/signature-N)',
    )
    .option(
      '--release-keyring <file>',
      'OpenPGP public keys (armored or binary) the release signatures must verify with; without it they are only checked to sign this release',
    )
    .option(
      '--key <file>',
      'private key (PEM) to sign with (see "bundle keygen"; required, here or in -f)',
    )
    .option(
      '--passphrase-file <file>',
      `the encrypted key's passphrase, on the file's first line (or set ${PASSPHRASE_ENV})`,
    )
    .option(
      '-o, --output <file>',
      'bundle file to write (NAME.bundle; required, here or in -f); NAME.bundle.sha256 is written beside it (and with --agent-image, bundle-agent-VERSION-ARCH.oci.tar and its .sig: see "bundle agent-image export")',
    )
    .option('--force', 'replace an existing output file')
    .option(
      '--split-size <size>',
      `write NAME.bundle.part-001-of-NNN files instead of one file: ${SPLIT_SIZE_HELP}. The bundle is written whole first, then cut into parts in place: onto a FAT32 stick, create on a local disk and "bundle split --out"`,
      parseSize,
    );
}

function addPackingOptions(create: Command): Command {
  return create
    .option('--level <n>', 'zstd compression level (1-19)', levelArg, 3)
    .option('--format-version <n>', FORMAT_VERSION_HELP, formatVersionArg)
    .option('--base <bundle>', BASE_HELP)
    .option('--blob-order <order>', BLOB_ORDER_HELP, blobOrderArg)
    .option('--pieces <mode>', PIECES_HELP, piecesArg, 'on')
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .option('--json', 'print a JSON summary on stdout at the end');
}

import type { Command } from 'commander';
import { manPage } from '@offline-bundle/cli';
import { PASSPHRASE_ENV } from '@offline-bundle/format';
import { TOOL_VERSION } from './version.js';
import { BUNDLE_FILE_API_VERSION, BUNDLE_FILE_KIND, schemaFields } from './image-set/schema.js';

const BUNDLE_FILE_TEXT = `"bundle create -f FILE" reads what goes into a bundle from a YAML file with apiVersion ${BUNDLE_FILE_API_VERSION} and kind ${BUNDLE_FILE_KIND}. Its JSON Schema ships as share/bundle/bundle.schema.json (editors: a first line "# yaml-language-server: $schema=PATH"). A flag given on the command line overrides its key; --image, --upgrade-from and --release-signature add to its lists. Paths are taken from the file's directory. The file may instead be an oc-mirror v2 ImageSetConfiguration (apiVersion mirror.openshift.io/v2alpha1), read as is: mirror.platform.release, or one of mirror.platform.channels (name, minVersion, maxVersion, type) resolved against --update-graph, mirror.platform.architectures (one), mirror.operators (catalog, packages with name and channels with name, minVersion, maxVersion) and mirror.additionalImages; archiveSize (GiB) as --split-size (a bundle that fits stays one file); platform.graph is ignored with a warning; helm, blockedImages, kubeVirtContainer and any other field are refused by name. An operator catalog image is read for its file-based catalog: each package's channels (default: its defaultChannel) give their head, or every bundle from minVersion to maxVersion; each selected bundle image, its relatedImages and the catalog image itself (whole) go into the bundle. The fields:`;

type Rows = [string, string][];

const EXIT_STATUS: Rows = [
  [
    '0',
    'success (create: the bundle is written; verify: the bundle is valid; cluster status: every node is Ready for one bundle)',
  ],
  [
    '1',
    'an error, on one line: "bundle: CODE: message" (with --json also {"error":{"code","message"}} on stdout)',
  ],
  ['2', 'a usage error (unknown option, missing argument)'],
  [
    '129, 130, 143',
    'create was interrupted by SIGHUP, SIGINT or SIGTERM: nothing written, a rerun resumes from the cache',
  ],
];

const ENVIRONMENT: Rows = [
  [
    PASSPHRASE_ENV,
    'the passphrase of an encrypted signing key, when no --passphrase-file is given',
  ],
  [
    'CONTAINERS_REGISTRIES_CONF',
    'the registries.conf create reads instead of /etc/containers/registries.conf, when no --registries-conf is given',
  ],
  ['REGISTRY_AUTH_FILE', 'registry credentials file used instead of the default auth files'],
  [
    'HTTPS_PROXY, HTTP_PROXY, NO_PROXY',
    'proxy for registry access (also lower case); never used for loopback',
  ],
  [
    'XDG_CACHE_HOME',
    'the blob cache is $XDG_CACHE_HOME/offline-bundle (default ~/.cache/offline-bundle)',
  ],
  [
    'XDG_RUNTIME_DIR, XDG_CONFIG_HOME, DOCKER_CONFIG',
    'where the default auth files are looked for',
  ],
  [
    'KUBECONFIG',
    "the cluster commands' kubeconfig (its first file), when no --kubeconfig is given",
  ],
  ['SOURCE_DATE_EPOCH', 'the creation time written into a bundle (reproducible builds)'],
  ['COLUMNS', 'width of the progress display'],
];

const FILES: Rows = [
  [
    'NAME.bundle',
    'the bundle: a zstd-compressed tar holding bundle.json, its signature and an OCI image layout',
  ],
  [
    'NAME.bundle.sha256',
    "the whole file's sha256, written beside the bundle (for --digest and trust.digest)",
  ],
  [
    'NAME.bundle.part-001-of-NNN',
    'the bundle split into parts (create --split-size, split, write-media onto FAT32), their concatenation the bundle; read from the path of any part',
  ],
  ['PREFIX.key, PREFIX.pub', 'a signing key pair made by "bundle keygen"'],
  ['~/.cache/offline-bundle', 'the content-addressed blob cache (see "bundle cache")'],
  [
    '$XDG_RUNTIME_DIR/containers/auth.json, ~/.config/containers/auth.json, ~/.docker/config.json',
    'registry credentials, as podman and skopeo read them',
  ],
  [
    '/etc/containers/registries.conf, /etc/containers/registries.conf.d/*.conf, ~/.config/containers/registries.conf',
    'mirrors create pulls through when no --registries-conf is given (containers-registries.conf(5))',
  ],
  [
    '/etc/containers/certs.d/HOST:PORT, /etc/docker/certs.d/HOST:PORT',
    'registry CAs (*.crt) and client certificates (*.cert, *.key)',
  ],
];

const EXAMPLES = `bundle keygen --out factory
bundle create -f bundle.yaml --dry-run
bundle create -f bundle.yaml
bundle create --release quay.io/openshift-release-dev/ocp-release:4.15.1-x86_64 \\
    --key factory.key -o 4.15.1.bundle
bundle verify 4.15.1.bundle --key factory.pub
bundle inspect 4.15.1.bundle
bundle write-media 4.15.1.bundle /media/usb
bundle diff 4.15.0.bundle 4.15.1.bundle
bundle extract 4.15.1.bundle ./layout --key factory.pub
bundle cluster status
bundle cluster upgrade 4.15.1.bundle --key factory.pub --dry-run
bundle completion bash > /etc/bash_completion.d/bundle`;

/**
 * `bundle man`: prints bundle(1), written from this program's own command tree (see
 * manPage), so the page shipped in share/man/man1 says what `--help` says. Hidden: it is for
 * packaging (`pnpm package` runs it), not for users, who read the page with `man bundle`.
 */
export function addManCommand(program: Command): void {
  program
    .command('man', { hidden: true })
    .description('print the bundle(1) man page (roff)')
    .action(() => {
      process.stdout.write(
        manPage(program, {
          section: 1,
          version: TOOL_VERSION,
          summary: 'build, inspect and verify signed offline bundles of container images',
          exitStatus: EXIT_STATUS,
          environment: ENVIRONMENT,
          files: FILES,
          examples: EXAMPLES,
          sections: [{ title: 'BUNDLE FILE', text: BUNDLE_FILE_TEXT, items: schemaFields() }],
          seeAlso: [
            'bundle-agent(8)',
            'skopeo(1)',
            'podman(1)',
            'containers-registries.conf(5)',
            'zstd(1)',
          ],
        }),
      );
    });
}

import { Option, type Command } from 'commander';
import { boolArg, collect, positiveInt } from './args.js';
import { defaultCacheDir } from './create.js';
import { askSecret } from './prompt.js';
import { TOOL_VERSION } from './version.js';

/*
 * The flags that shape what "bundle create" resolves, defined once: create registers them, and
 * "bundle diff -f FILE BUNDLE" too, so the file resolves there as "create --dry-run" resolves it.
 * A function each, as a commander Option belongs to one command.
 */

/** What goes into the bundle besides the -f file: the release, images, charts, agent image, platform and version. */
export function contentOptions(): Option[] {
  return [
    new Option(
      '--release <ref>',
      'OpenShift release image: its payload images (release-manifests/image-references) are added by digest',
    ),
    new Option(
      '--release-from <version>',
      "the version the cluster runs: carry every release of the update graph's shortest path from it to the release named by channel in -f (4.14.30 → 4.15.40 → 4.16.2), each payload once (as release.from)",
    ),
    new Option(
      '--image <source>',
      "an image to add (repeatable): docker://REF (default), oci:DIR[:REF], oci-archive:FILE[:REF], docker-archive:FILE[:REF], dir:DIR (skopeo's dir layout); append =REGISTRY/REPO:TAG to name a local image (dir: always needs it)",
    ).argParser(collect),
    new Option('--images-file <file>', 'a file with one image source per line (# comments)'),
    new Option(
      '--chart <ref>',
      "a Helm chart stored in a registry (repeatable): oci://HOST/REPO/NAME:VERSION as helm push names it, or HOST/REPO/NAME:VERSION / @sha256:DIGEST; served by the node's registry, never pulled or pinned",
    ).argParser(collect),
    // the archive `pnpm package` ships with this release, so the example copies as it is
    new Option(
      '--agent-image <source>',
      `a bundle-agent image (any --image source, e.g. oci-archive:bundle-agent-${TOOL_VERSION}.oci.tar): carried as localhost/offline-bundle/bundle-agent:VERSION; nodes switch to it once the bundle is Ready`,
    ),
    new Option(
      '--agent-version <v>',
      "the agent image's version, when it has no org.opencontainers.image.version label",
    ),
    new Option(
      '--arch <arch>',
      'platform to keep from multi-arch images (amd64, arm64, linux/arm/v7)',
    ).default('amd64'),
    new Option('--all-platforms', 'keep every platform of multi-arch images'),
    new Option('--version <v>', 'release version (required without --release)'),
    new Option('--name <name>', 'human name of the release (default: the version)'),
  ];
}

/** Where the content comes from: the blob cache, the downloads and the registries' access (as podman and skopeo). */
export function registryOptions(): Option[] {
  return [
    new Option('--cache <dir>', 'content-addressed blob cache; a rerun resumes from it').default(
      defaultCacheDir(),
    ),
    new Option('--jobs <n>', 'parallel downloads').argParser(positiveInt).default(4),
    new Option(
      '--authfile <file>',
      "registry credentials file (default: REGISTRY_AUTH_FILE, else podman's, skopeo's and docker's files, with docker-credential-* helpers)",
    ),
    new Option(
      '--creds <user[:password]>',
      'credentials for every registry, before any auth file (without the password: asked on the terminal)',
    ),
    new Option(
      '--cert-dir <dir>',
      'CAs (*.crt) and a client certificate (*.cert + *.key) for every registry (default: the first HOST:PORT directory of ~/.config/containers/certs.d, /etc/containers/certs.d, /etc/docker/certs.d)',
    ),
    new Option(
      '--tls-verify [bool]',
      'verify registry TLS certificates (--tls-verify=false skips the check and allows plain http)',
    )
      .argParser(boolArg)
      .default(true),
    new Option(
      '--registries-conf <file>',
      "containers-registries.conf(5) file: pull through its mirrors, keep the original names (default: the system's, as podman's: $CONTAINERS_REGISTRIES_CONF or /etc/containers/registries.conf, with registries.conf.d/; this file replaces them all; /dev/null for none)",
    ),
  ];
}

export const updateGraphOption = (): Option =>
  new Option(
    '--update-graph <file>',
    'the Cincinnati update graph (JSON) a release channel of -f is resolved against',
  );

/** Adds `options` to `cmd`, in order. */
export function addOptions(cmd: Command, options: Option[]): Command {
  for (const o of options) cmd.addOption(o);
  return cmd;
}

/** skopeo's --creds USER asks the password, which then stays out of the shell's history. */
export async function askCredsPassword(o: Record<string, unknown>): Promise<void> {
  if (typeof o.creds === 'string' && !o.creds.includes(':'))
    o.creds = `${o.creds}:${await askSecret(`Password for ${o.creds}: `, '--creds')}`;
}

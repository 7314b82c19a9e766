import type { Command } from 'commander';
import { manPage } from '@offline-bundle/cli';
import { SYSTEM_ROOT_ENV } from '@offline-bundle/host';
import { DEFAULT_CONFIG_PATH } from './config.js';
import { TOOL_VERSION } from './version.js';

/**
 * Where the documented example configuration is once installed: the tarball's
 * share/bundle-agent/ (scripts/package.mjs copies systemd/ there) under install.sh's default
 * prefix, which is also where the OCI image keeps the tarball. install.sh copies it to
 * /etc/bundle-agent/config.yaml when that is absent.
 */
export const EXAMPLE_CONFIG_PATH = '/usr/local/share/bundle-agent/config.example.yaml';

type Rows = [string, string][];

const EXIT_STATUS: Rows = [
  ['0', 'success (load: the bundle is Ready on this node; status: the agent is running)'],
  [
    '1',
    'an error: "bundle-agent: <Reason>: <what to do>" on stderr (with --json also {"ready":false,"error":{...}} on stdout)',
  ],
  ['2', 'a usage error (unknown option, missing argument)'],
  ['3', 'status: the agent is not running or not responding (as systemctl status)'],
];

const ENVIRONMENT: Rows = [
  ['JOURNAL_STREAM', 'set by systemd: log lines then carry syslog priorities for the journal'],
  [
    SYSTEM_ROOT_ENV,
    'a directory standing for / in the system-wide registry paths (/etc/containers, /etc/docker): for tests and image builds',
  ],
];

const FILES: Rows = [
  [
    DEFAULT_CONFIG_PATH,
    'the configuration: trust (keys and/or digest), runtime, paths, version policy, media, status',
  ],
  [
    EXAMPLE_CONFIG_PATH,
    `every setting, commented (PREFIX/share/bundle-agent/ with install.sh --prefix); install.sh copies it to ${DEFAULT_CONFIG_PATH} when that is absent`,
  ],
  ['/etc/bundle-agent/keys/', "the factory's public keys (trust.keys)"],
  [
    '/var/lib/bundle-agent/status.json',
    'the node\'s status, read by "bundle-agent status" (paths.statusFile)',
  ],
  [
    '/var/lib/bundle-agent/drop/',
    'a watched directory: a bundle copied here is loaded (media.watchDirs)',
  ],
  [
    '/var/lib/upgrade/VERSION-ARCH/',
    'a staged bundle, served to the runtime while it loads (paths.upgradeDir)',
  ],
  [
    '/etc/containers/registries.conf.d/, /etc/crio/crio.conf.d/',
    'CRI-O: the temporary mirror drop-in and the pinned_images drop-in the agent writes',
  ],
  ['/etc/containerd/certs.d/', 'containerd: the temporary hosts.toml mirror the agent writes'],
  ['/run/issue.d/bundle-agent.issue', "the technician's line on the node's console"],
  [
    '/etc/systemd/system/bundle-agent.service',
    'the unit install.sh writes (ExecStart at the install prefix)',
  ],
  [
    '/etc/udev/rules.d/99-bundle-agent-media.rules',
    'mounts USB sticks read-only under /run/media/bundle-agent/',
  ],
  [
    'PREFIX/share/doc/bundle-agent/README.md, docs/',
    'the documentation: the README leads to the pages under docs/',
  ],
];

const EXAMPLES = `systemctl enable --now bundle-agent          # the daemon, as installed by install.sh
bundle-agent load /media/usb/4.15.1.bundle    # one bundle, in the foreground
bundle-agent status                           # "Done: ... You may remove the USB stick."
bundle-agent releases list
bundle-agent serve 4.15.1.bundle --key /etc/bundle-agent/keys/factory.pub --listen 127.0.0.1:5000`;

/**
 * `bundle-agent man`: prints bundle-agent(8), written from this program's own command tree
 * (see manPage), so the page shipped in share/man/man8 says what `--help` says. Hidden: it is
 * for packaging (`pnpm package` runs it); users read the page with `man bundle-agent`.
 */
export function addManCommand(program: Command): void {
  program
    .command('man', { hidden: true })
    .description('print the bundle-agent(8) man page (roff)')
    .action(() => {
      process.stdout.write(
        manPage(program, {
          section: 8,
          version: TOOL_VERSION,
          summary: "load signed offline bundles from USB media into the node's container runtime",
          exitStatus: EXIT_STATUS,
          environment: ENVIRONMENT,
          files: FILES,
          examples: EXAMPLES,
          seeAlso: [
            'bundle(1)',
            'crio(8)',
            'containerd(8)',
            'containers-registries.conf(5)',
            'systemctl(1)',
          ],
        }),
      );
    });
}

import { resolve } from 'node:path';
import type { Command } from 'commander';
import { DEFAULT_CONFIG_PATH } from './config.js';
import {
  collect,
  COLLECT_COMMAND_MS,
  COLLECT_DEADLINE_MS,
  COLLECT_JOURNAL_LINES,
} from './collect.js';
import { configForCollect } from './collect-config.js';
import { RUNTIME_JOURNAL_SINCE, RUNTIME_JOURNAL_UNITS } from './collect-node.js';
import { MAX_COLLECT_ENTRY_BYTES, MAX_COLLECT_TOTAL_BYTES } from './collect-archive.js';

const MiB = 1024 * 1024;

/** `bundle-agent collect`: the support archive (see collect.ts). */
export function addCollectCommand(program: Command): void {
  program
    .command('collect')
    .description(
      "Write one .tar.gz for support: version, config, status and history, state, drop-ins, images, journal, OS and kernel, the runtime's version, config and journal, disk and media mounts, with credentials redacted; written also when the config does not load.",
    )
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option(
      '--output <file>',
      'the archive to write (default: ./bundle-agent-collect-NODE-TIME.tar.gz)',
    )
    .option(
      '--root <dir>',
      "when the config does not load: the root its default paths are taken under (default: the config's root if it says one, else /)",
    )
    .option('--json', 'print {"output", "files", "notes", "configError"?} as JSON')
    .addHelpText(
      'after',
      `
The archive holds: version.txt; config.yaml as written and config-effective.json with the
defaults applied; the status.kubeconfig file; status.json (with the history); the agent's state
files; the drop-ins it wrote (registries.conf.d, crio.conf.d, containerd's certs.d, the
self-upgrade drop-in); the runtime's image list; the last ${COLLECT_JOURNAL_LINES} journal lines of the unit;
os.txt (kernel, uptime, boot id, /etc/os-release); runtime/: the runtime's version and config
as it runs it ("containerd --version", "containerd config dump"; "crio --version", "crio status
config" else "crio config"), its CRI status (as "crictl info"), and the journal of
${RUNTIME_JOURNAL_UNITS.join(', ')} (journalctl --since ${RUNTIME_JOURNAL_SINCE}, ${COLLECT_JOURNAL_LINES} lines); disk.json (capacity and free space of the
agent's paths, the kubelet thresholds the space check uses); media-mounts.txt, the mounts under
media.roots and media.watchDirs (or why there are none); NOTES.txt (what could not be read, or
was cut: a runtime or journalctl not on PATH is named there).

A config that does not load (bad YAML, a setting refused) does not stop collect: the archive
holds the file as it is (redacted), CONFIG-ERROR.txt with the lines "bundle-agent run" stops
with, and config-assumed.json, the settings collected with (the config's valid ones, defaults
under --root for the rest). collect then prints those lines on stderr and exits 0, its stdout
saying the archive was written and the config is broken; --json adds "configError".

Credentials never leave the node: values under key names such as token, password, secret,
client-key-data or auth (in parsed documents, and line by line in any text, whether it parses
or not: YAML, JSON, KEY=value, headers such as X-Auth-Token:, flags such as --src-creds user:pw
or --password x), and anything shaped like a PEM block, a bearer or basic token, a JWT, an
OpenShift sha256~ token, a GitHub, GitLab, Slack, npm, Stripe, Google or AWS key, URL user
info or a long base64 run, are replaced by <redacted> in every file; NOTES.txt counts them. Bounds: ${MAX_COLLECT_ENTRY_BYTES / MiB} MiB per file, ${MAX_COLLECT_TOTAL_BYTES / MiB} MiB in all,
${COLLECT_COMMAND_MS / 1000} s for each command (journalctl, the runtime's CLI) and for each answer of the runtime, ${COLLECT_DEADLINE_MS / 1000} s in all
(what is not collected by then is named in NOTES.txt). The archive is mode 0600.

Example:
  bundle-agent collect --output /tmp/node1.tar.gz   # then copy it off the node`,
    )
    .action(async (o: { config: string; output?: string; root?: string; json?: boolean }) => {
      const { config, broken } = await configForCollect(
        o.config,
        o.root === undefined ? undefined : resolve(o.root),
      );
      const r = await collect(config, {
        configPath: o.config,
        ...(o.output ? { output: o.output } : {}),
        ...(broken ? { broken } : {}),
      });
      if (o.root !== undefined && !broken)
        process.stderr.write(
          'bundle-agent: --root is not used: the config loads and names its own root\n',
        );
      for (const line of broken?.lines ?? []) process.stderr.write(`${line}\n`);
      if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else
        process.stdout.write(
          `wrote ${r.output} (${r.files} files${r.notes.length ? `; ${r.notes.length} notes in NOTES.txt` : ''})${broken ? '; the config is BROKEN, the agent does not start with it: CONFIG-ERROR.txt in the archive says why' : ''}\n`,
        );
    });
}

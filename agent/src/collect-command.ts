import type { Command } from 'commander';
import { DEFAULT_CONFIG_PATH, loadConfig } from './config.js';
import { collect, COLLECT_COMMAND_MS, COLLECT_JOURNAL_LINES } from './collect.js';
import { MAX_COLLECT_ENTRY_BYTES, MAX_COLLECT_TOTAL_BYTES } from './collect-archive.js';

const MiB = 1024 * 1024;

/** `bundle-agent collect`: the support archive (see collect.ts). */
export function addCollectCommand(program: Command): void {
  program.command('collect')
    .description('Write one .tar.gz for support: version, config, status and history, state, drop-ins, images, journal, disk and media mounts, with credentials redacted.')
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--output <file>', 'the archive to write (default: ./bundle-agent-collect-NODE-TIME.tar.gz)')
    .option('--json', 'print {"output", "files", "notes"} as JSON')
    .addHelpText('after', `
The archive holds: version.txt; config.yaml as written and config-effective.json with the
defaults applied; the status.kubeconfig file; status.json (with the history); the agent's state
files; the drop-ins it wrote (registries.conf.d, crio.conf.d, containerd's certs.d, the
self-upgrade drop-in); the runtime's image list; the last ${COLLECT_JOURNAL_LINES} journal lines of the unit;
disk.json (capacity and free space of the agent's paths, the kubelet thresholds the space
check uses); the mounts under media.roots and media.watchDirs; NOTES.txt (what could not be
read, or was cut).

Credentials never leave the node: values under key names such as token, password, secret,
client-key-data or auth, and anything shaped like a PEM block, a bearer or basic token, a JWT,
an OpenShift sha256~ token, a password=/token= pair, URL user info or a long base64 run, are
replaced by <redacted> in every file. Bounds: ${MAX_COLLECT_ENTRY_BYTES / MiB} MiB per file, ${MAX_COLLECT_TOTAL_BYTES / MiB} MiB in all,
${COLLECT_COMMAND_MS / 1000} s for journalctl and for the runtime's answer each. The archive is mode 0600.

Example:
  bundle-agent collect --output /tmp/node1.tar.gz   # then copy it off the node`)
    .action(async (o: { config: string; output?: string; json?: boolean }) => {
      const config = await loadConfig(o.config);
      const r = await collect(config, { configPath: o.config, ...(o.output ? { output: o.output } : {}) });
      if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else process.stdout.write(`wrote ${r.output} (${r.files} files${r.notes.length ? `; ${r.notes.length} notes in NOTES.txt` : ''})\n`);
    });
}

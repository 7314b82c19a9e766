import type { Command } from 'commander';
import { DEFAULT_CONFIG_PATH, loadConfig } from '../config.js';
import { runDaemon } from '../daemon/daemon.js';
import { createLogger } from '../log.js';
import { checkKubeconfig } from '../kubeconfig-check.js';
import { untilSignal } from './until-signal.js';

/** `bundle-agent run`: the daemon, as the systemd unit starts it. */
export function addRunCommand(program: Command): void {
  program
    .command('run')
    .description(
      'The daemon: watch for media and drop directories, load every new bundle, report status.',
    )
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .action(async (o: { config: string }) => {
      const config = await loadConfig(o.config);
      await checkKubeconfig(config, o.config);
      const { signal } = untilSignal();
      await runDaemon(config, createLogger(), signal);
    });
}

import type { Command } from 'commander';
import { fitToWidth } from '@offline-bundle/cli';
import {
  lastWordOf,
  notRunningLine,
  readStatusFile,
  technicianLine,
  writerLiveness,
} from '@offline-bundle/status';
import { DEFAULT_CONFIG_PATH, loadConfig } from '../config.js';
import { terminalColumns } from './until-signal.js';

const STATUS_HELP = `
The sentence is the one the node's console shows. The status file names the process that
wrote it (pid, start time, boot) and its heartbeat (every status.heartbeatSeconds, 30 s by
default): when that process is gone, or has stopped beating, the agent's last sentence is no
longer true and this prints "The bundle agent is not running." instead, with what it last
reported. Exit codes, as "systemctl status" uses them: 0 running (or a status file from an
agent too old to say), 3 not running or not responding, 1 an error.`;

/** `bundle-agent status`: the node's sentence (or JSON); exit 3 when the agent is not running. */
export function addStatusCommand(program: Command): void {
  program
    .command('status')
    .description(
      'Where this node stands, in one sentence (or JSON); exit 3 when the agent is not running.',
    )
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option(
      '--json',
      'print the full status as JSON, with "agent": running | stopped | unresponsive | unknown',
    )
    .addHelpText('after', STATUS_HELP)
    .action(async (o: { config: string; json?: boolean }) => {
      const config = await loadConfig(o.config);
      const read = await readStatusFile(config.paths.statusFile);
      // a load that hands the file back and exits while this looks: its last write, not "not running"
      const last = read ? await lastWordOf(config.paths.statusFile, read) : undefined;
      const s = last?.file;
      const agent = s ? (last!.liveness ?? (await writerLiveness(s.writer))) : 'stopped';
      if (agent === 'stopped' || agent === 'unresponsive') process.exitCode = 3;
      if (o.json) {
        process.stdout.write(
          JSON.stringify(
            s ? { ...s, agent } : { phase: 'Idle', agent, message: notRunningLine(undefined) },
            null,
            2,
          ) + '\n',
        );
      } else if (agent === 'stopped' || agent === 'unresponsive') {
        process.stdout.write(`${fitToWidth(notRunningLine(s, agent), terminalColumns())}\n`);
      } else {
        process.stdout.write(`${fitToWidth(technicianLine(s!), terminalColumns())}\n`);
      }
    });
}

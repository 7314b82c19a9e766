import { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { addCompletionCommand, runCli } from '@offline-bundle/cli';
import { ConfigError, DEFAULT_CONFIG_PATH } from './config.js';
import { oneLine, reasonOf } from './errors.js';
import { TOOL_VERSION } from './version.js';
import { EXAMPLE_CONFIG_PATH, addManCommand } from './man.js';
import { addCollectCommand } from './collect-command.js';
import { addRunCommand } from './commands/run.js';
import { addLoadCommand } from './commands/load.js';
import { addServeCommand } from './commands/serve.js';
import { addReleasesCommands } from './commands/releases.js';
import { addStatusCommand } from './commands/status.js';

const PROGRAM_HELP = `
Configuration: ${DEFAULT_CONFIG_PATH}, which install.sh writes (when absent) from
${EXAMPLE_CONFIG_PATH}, every setting commented (PREFIX/share/bundle-agent/
with install.sh --prefix). Every path in it is taken under its "root"; trust (factory public
keys and/or the bundle's sha256) is required. Failures print "bundle-agent: <Reason>: <what to do>" and set the Failed condition.

Examples:
  bundle-agent run                                  # as the systemd service does
  bundle-agent load /media/usb/4.14.39.bundle       # one bundle, in the foreground
  bundle-agent serve 4.14.39.bundle --key factory.pub --listen 127.0.0.1:5000
  bundle-agent status                               # "Done: ... You may remove the USB stick."; exit 3: not running
  bundle-agent releases list                        # releases kept on this node: pinned, layout kept, running`;

/** The program: each command (or group) is defined in its own module under commands/. */
function buildProgram(): Command {
  const program = new Command('bundle-agent')
    .description(
      "Loads update bundles from USB media into this node's container runtime: verify, stage, serve, pre-pull, pin.",
    )
    .version(TOOL_VERSION)
    .enablePositionalOptions()
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', PROGRAM_HELP);

  addRunCommand(program);
  addLoadCommand(program);
  addServeCommand(program);
  addReleasesCommands(program);
  addStatusCommand(program);
  addCollectCommand(program);
  addCompletionCommand(program);
  addManCommand(program);

  return program;
}

async function main(argv: string[]): Promise<number> {
  // `status` answers 3 (not running) as systemctl does: a result, not an error
  const code = await runCli(buildProgram(), argv, (err) => {
    const reason = reasonOf(err);
    // a config with several problems names each on its own line
    const lines = err instanceof ConfigError ? err.problems.map(escapeControls) : [oneLine(err)];
    if (argv.includes('--json'))
      process.stdout.write(
        JSON.stringify({ ready: false, error: { reason, message: lines.join('; ') } }) + '\n',
      );
    for (const line of lines) process.stderr.write(`bundle-agent: ${reason}: ${line}\n`);
    return 1;
  });
  return code || Number(process.exitCode ?? 0);
}

process.exitCode = await main(process.argv);

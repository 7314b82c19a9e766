import { Command } from 'commander';
import { BaseError, escapeControls } from '@offline-bundle/host';
import { addCompletionCommand, runCli } from '@offline-bundle/cli';
import { TOOL_VERSION } from './version.js';
import { addImageSetCommands } from './image-set/commands.js';
import { addClusterCommands } from './cluster.js';
import { addCacheCommands } from './commands/cache.js';
import { addManCommand } from './man.js';
import { addAgentImageCommands } from './commands/agent-image.js';
import { addSplitCommand } from './commands/split.js';
import { addWriteMediaCommand } from './commands/write-media.js';
import { addKeygenCommand } from './commands/keygen.js';
import { addCreateCommand } from './commands/create.js';
import { addInspectCommand } from './commands/inspect.js';
import { addVerifyCommand } from './commands/verify.js';
import { addExtractCommand } from './commands/extract.js';

/** The program: each command (or group) is defined in its own module; their order is the help's. */
function buildProgram(): Command {
  const program = new Command('bundle')
    .description(
      'Build, inspect and verify signed offline bundles: one file that carries a release and its images to clusters without a registry. "bundle create -f bundle.yaml" declares a bundle in a file (or an oc-mirror ImageSetConfiguration); --dry-run lists what it would carry.',
    )
    .version(TOOL_VERSION)
    .enablePositionalOptions()
    .showHelpAfterError('(run with --help for usage)')
    .configureHelp({ sortOptions: false });

  addKeygenCommand(program);
  addCreateCommand(program);
  addInspectCommand(program);
  addVerifyCommand(program);
  addExtractCommand(program);
  addClusterCommands(program);
  addCacheCommands(program);
  addAgentImageCommands(program);
  addSplitCommand(program);
  addWriteMediaCommand(program);
  addCompletionCommand(program);
  addManCommand(program);
  addImageSetCommands(program);

  return program;
}

function main(argv: string[]): Promise<number> {
  return runCli(buildProgram(), argv, (err) => {
    const own = (err as { code?: unknown })?.code;
    const code =
      err instanceof BaseError
        ? (err.code as string)
        : typeof own === 'string' && /^[A-Z_]+$/.test(own)
          ? own
          : 'ERROR';
    // Errors are one line: some library messages carry newlines (code frames, stacks), and
    // quote entry names and other untrusted strings, whose control characters are escaped.
    const message = escapeControls(
      String((err as Error)?.message ?? err)
        .replace(/\s*\n\s*/g, ' ')
        .trim(),
    );
    // a command that already printed its JSON result (cluster status not ready) adds no second document
    if (argv.includes('--json') && !(err as { reported?: boolean })?.reported)
      process.stdout.write(JSON.stringify({ error: { code, message } }) + '\n');
    // a file's problems one a line (FILE:LINE (key): ...), then the error line sums them up
    const { lines, summary } = (err ?? {}) as { lines?: unknown; summary?: unknown };
    if (Array.isArray(lines) && typeof summary === 'string') {
      process.stderr.write(
        lines.map((l) => `  ${escapeControls(String(l).replace(/\s*\n\s*/g, ' '))}\n`).join('') +
          `bundle: ${code}: ${escapeControls(summary)}\n`,
      );
    } else {
      process.stderr.write(`bundle: ${code}: ${message}\n`);
    }
    const exit = (err as { exitCode?: unknown })?.exitCode;
    return code === 'INTERRUPTED' && typeof exit === 'number' ? exit : 1;
  });
}

process.exitCode = await main(process.argv);

import { describeSystemError } from '@offline-bundle/host';

/**
 * For a CLI built on commander: the exit code of a commander outcome (help and version 0,
 * usage errors 2), or undefined for an error of the command itself. Duck-typed, so the
 * libraries do not depend on commander.
 */
function usageExitCode(err: unknown): 0 | 2 | undefined {
  const e = err as { code?: unknown; exitCode?: number };
  if (typeof e?.code !== 'string' || !e.code.startsWith('commander.')) return undefined;
  if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') return 0;
  // 'commander.help' is both `x help` (exit code 0) and help shown for a missing command (1)
  return e.code === 'commander.help' && e.exitCode === 0 ? 0 : 2;
}

interface CommanderLike {
  readonly commands: readonly { exitOverride(): unknown }[];
  exitOverride(): unknown;
  parseAsync(argv: string[]): Promise<unknown>;
}

/**
 * A reader that went away (`bundle --help | head -1`) is no failure of ours: without a
 * listener, the EPIPE is an unhandled 'error' event and a stack trace. Later writes are dropped
 * quietly and the command itself goes on (a load must still clean up), ending with its own code.
 */
function ignoreBrokenPipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE' && err.code !== 'ERR_STREAM_DESTROYED') throw err;
  });
}

/**
 * Runs a commander program and returns the process exit code: 0 on success (and help,
 * version), 2 on a usage error, else whatever `report` makes of the command's error.
 */
export async function runCli(
  program: CommanderLike,
  argv: string[],
  report: (err: unknown) => number,
): Promise<number> {
  ignoreBrokenPipe(process.stdout);
  ignoreBrokenPipe(process.stderr);
  // Subcommands copy settings when they are created, so the override must reach each one:
  // otherwise commander exits 1 by itself on a usage error of a subcommand.
  for (const cmd of [program, ...program.commands]) cmd.exitOverride();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    return usageExitCode(err) ?? report(describeSystemError(err));
  }
}

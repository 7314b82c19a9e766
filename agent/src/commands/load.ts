import { resolve } from 'node:path';
import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { fitToWidth } from '@offline-bundle/cli';
import { DEFAULT_CONFIG_PATH, loadConfig } from '../config.js';
import { daemonRuns, statusOutputs, statusTracker } from '../daemon/daemon.js';
import { createLogger } from '../log.js';
import { runLoad } from '../load/pipeline.js';
import { notLoadable } from '../load/bundle-file.js';
import { runtimeTarget } from '../runtime/runtime-target.js';
import { clearForgotten } from '../state/bundle-records.js';
import { terminalColumns, untilSignal } from './until-signal.js';

/** `bundle-agent load FILE`: one bundle in the foreground, its status sentences on stdout. */
export function addLoadCommand(program: Command): void {
  program
    .command('load')
    .description(
      'Load one bundle in the foreground: exit 0 when Ready, non-zero with the reason otherwise.',
    )
    .argument('<file>')
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--json', 'print the result as JSON on stdout')
    .action(loadInForeground);
}

async function loadInForeground(
  file: string,
  o: { config: string; json?: boolean },
  cmd: Command,
): Promise<void> {
  const path = resolve(file);
  // a mistyped path or a file of another kind is the caller's mistake: said as such, with no status written
  // (an empty argument, an unset shell variable, would resolve to the working directory)
  const problem =
    file.trim() === ''
      ? 'the bundle path is empty (an unset variable?): give the path of a NAME.bundle file'
      : await notLoadable(path);
  if (problem)
    cmd.error(`error: ${escapeControls(problem)}`, { exitCode: 2, code: 'commander.usage' });
  const config = await loadConfig(o.config);
  const log = createLogger();
  const tracker = await statusTracker(config);
  // Beside a running daemon the console and status show what the daemon did: this load
  // writes them only once it changes the node (past the checks). A refusal (bad signature,
  // policy, Busy) is this command's answer, not the node's state. With no daemon, from the start.
  const beside = await daemonRuns(config);
  let outputs: Promise<() => Promise<void>> | undefined = beside
    ? undefined
    : statusOutputs(config, log, tracker, 'load');
  if (beside) {
    tracker.onChange((s) => {
      if (!outputs && !['Idle', 'Verifying', 'Failed'].includes(s.phase))
        outputs = statusOutputs(config, log, tracker, 'load');
    });
  }
  const runtime = runtimeTarget(config, log);
  let last = '';
  tracker.onChange((s) => {
    if (!o.json && s.message !== last)
      process.stdout.write(`${fitToWidth(s.message, terminalColumns())}\n`);
    last = s.message;
  });
  // Ctrl-C, SIGTERM or SIGHUP (the technician's terminal or ssh session closed): stop the
  // load, and let its cleanup remove drop-ins and staging.
  const { signal } = untilSignal(['SIGINT', 'SIGTERM', 'SIGHUP']);
  try {
    const r = await runLoad(path, { config, log, tracker, runtime, media: 'file', signal });
    // loaded by hand: the admin wants it, even if it was forgotten before
    await clearForgotten(config.paths.stateDir, r.version, r.arch);
    if (o.json) process.stdout.write(JSON.stringify({ ready: true, ...r }) + '\n');
  } finally {
    await runtime.close();
    await (
      await outputs
    )?.();
  }
}

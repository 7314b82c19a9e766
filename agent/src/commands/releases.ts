import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { DEFAULT_CONFIG_PATH, loadConfig } from '../config.js';
import { createLogger } from '../log.js';
import { runtimeTarget } from '../runtime/runtime-target.js';
import {
  forgetRelease,
  listReleases,
  pruneReleases,
  unforgetRelease,
} from '../releases/releases.js';
import { forgottenLine, releasesTable } from '../releases/releases-text.js';

const RELEASES_HELP = `
Each release the agent loaded stays pinned (the kubelet never removes its images) while the
node may still need it: the release the cluster runs and the one being installed. Older ones
are unpinned when a newer release is reported complete (version.fromCluster). With a fixed
version.current, or to cancel a release loaded by mistake, let go of them here:

  bundle-agent releases list                 # what is loaded, pinned, kept, running
  bundle-agent releases forget 4.14.38       # unpin it, remove its kept layout and records
  bundle-agent releases prune                # forget every release older than the running one

forget and prune wait for no load: they refuse (Busy) while one runs. The running release is
never forgotten. The daemon does not load a forgotten release again from any stick (its
status says so, reason ReleaseForgotten) until "releases unforget VERSION", or until it is
loaded by hand with "bundle-agent load FILE".`;

/** `bundle-agent releases list|forget|unforget|prune`: the releases this node keeps. */
export function addReleasesCommands(program: Command): void {
  const releases = program
    .command('releases')
    .description(
      'The releases this node keeps (loaded, pinned, kept on disk, running), and letting go of old ones.',
    )
    .addHelpText('after', RELEASES_HELP);
  addListCommand(releases);
  addForgetCommand(releases);
  addUnforgetCommand(releases);
  addPruneCommand(releases);
  for (const c of releases.commands) c.exitOverride();
}

function addListCommand(releases: Command): void {
  releases
    .command('list')
    .description(
      'Every release recorded on this node: state, images present, pinned, layout kept, running.',
    )
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--json', 'print the list as JSON')
    .action(async (o: { config: string; json?: boolean }) => {
      const config = await loadConfig(o.config);
      const runtime = runtimeTarget(config);
      try {
        const view = await listReleases(
          config,
          runtime,
          o.json ? undefined : createLogger(process.stderr),
        );
        if (o.json) process.stdout.write(JSON.stringify(view, null, 2) + '\n');
        else process.stdout.write(releasesTable(view));
      } finally {
        await runtime.close();
      }
    });
}

function addForgetCommand(releases: Command): void {
  releases
    .command('forget')
    .description(
      'Unpin a release, remove its kept layout and drop its records (not the running one).',
    )
    .argument('<version>')
    .option('--arch <arch>', 'only this architecture (default: every one recorded)')
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--json', 'print what was done as JSON')
    .action(async (version: string, o: { arch?: string; config: string; json?: boolean }) => {
      const config = await loadConfig(o.config);
      const runtime = runtimeTarget(config, createLogger(process.stderr));
      try {
        const gone = await forgetRelease(config, runtime, version, o.arch);
        if (o.json) process.stdout.write(JSON.stringify({ forgotten: gone }, null, 2) + '\n');
        else for (const f of gone) process.stdout.write(escapeControls(forgottenLine(f)) + '\n');
      } finally {
        await runtime.close();
      }
    });
}

function addUnforgetCommand(releases: Command): void {
  releases
    .command('unforget')
    .description(
      'Let the daemon load a forgotten release again when a stick holding it is plugged in.',
    )
    .argument('<version>')
    .option('--arch <arch>', 'only this architecture (default: every one forgotten)')
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--json', 'print what was done as JSON')
    .action(async (version: string, o: { arch?: string; config: string; json?: boolean }) => {
      const config = await loadConfig(o.config);
      const cleared = await unforgetRelease(config, version, o.arch);
      if (o.json) process.stdout.write(JSON.stringify({ unforgotten: cleared }, null, 2) + '\n');
      else
        for (const r of cleared)
          process.stdout.write(
            escapeControls(
              `${r.version} (${r.arch}) is no longer forgotten: a stick holding it is loaded when plugged in`,
            ) + '\n',
          );
    });
}

function addPruneCommand(releases: Command): void {
  releases
    .command('prune')
    .description('Forget every release older than the one this node runs.')
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--json', 'print what was done as JSON')
    .action(async (o: { config: string; json?: boolean }) => {
      const config = await loadConfig(o.config);
      const runtime = runtimeTarget(config, createLogger(process.stderr));
      try {
        const r = await pruneReleases(config, runtime);
        if (o.json) process.stdout.write(JSON.stringify(r, null, 2) + '\n');
        else if (r.forgotten.length === 0)
          process.stdout.write(
            escapeControls(`nothing older than the running ${r.running} to forget`) + '\n',
          );
        else
          for (const f of r.forgotten)
            process.stdout.write(escapeControls(forgottenLine(f)) + '\n');
        if (!o.json) for (const why of r.ignored) process.stdout.write(escapeControls(why) + '\n');
      } finally {
        await runtime.close();
      }
    });
}

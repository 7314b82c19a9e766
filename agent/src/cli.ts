import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import {
  checkSignature,
  loadTrust,
  openBundle,
  parseManifestBytes,
  readLayoutDescription,
  verifyBundle,
  type BundleSource,
} from '@offline-bundle/format';
import { isDigest } from '@offline-bundle/oci';
import { escapeControls } from '@offline-bundle/host';
import { addCompletionCommand, runCli, fitToWidth, plural } from '@offline-bundle/cli';
import {
  BundleFileStore,
  LayoutStore,
  catalogOf,
  servedNames,
  startRegistry,
} from '@offline-bundle/registry';
import {
  lastWordOf,
  notRunningLine,
  readStatusFile,
  technicianLine,
  writerLiveness,
} from '@offline-bundle/status';
import {
  ConfigError,
  DEFAULT_CONFIG_PATH,
  loadConfig,
  parseLoopbackAddress,
  type AgentConfig,
} from './config.js';
import { daemonRuns, runDaemon, statusOutputs, statusTracker } from './daemon/daemon.js';
import { AgentError, oneLine, reasonOf } from './errors.js';
import { createLogger } from './log.js';
import { runLoad } from './load/pipeline.js';
import { runtimeTarget } from './runtime/runtime-target.js';
import {
  forgetRelease,
  listReleases,
  pruneReleases,
  unforgetRelease,
} from './releases/releases.js';
import { clearForgotten } from './state/bundle-records.js';
import { assertBundleFile, notLoadable } from './load/bundle-file.js';
import { forgottenLine, releasesTable } from './releases/releases-text.js';
import { TOOL_VERSION } from './version.js';
import { EXAMPLE_CONFIG_PATH, addManCommand } from './man.js';
import { addCollectCommand } from './collect-command.js';
import { checkKubeconfig } from './kubeconfig-check.js';

const collect = (v: string, prev: string[] = []) => [...prev, v];

function listenArg(v: string): { host: string; port: number } {
  const addr = parseLoopbackAddress(v);
  if (!addr)
    throw new InvalidArgumentError(
      'must be a loopback address such as 127.0.0.1:5000 (the registry never listens beyond this node)',
    );
  return addr;
}

/** The terminal's width, or undefined when stdout is not one (a log or a pipe keeps one line per sentence). */
const terminalColumns = () => (process.stdout.isTTY ? process.stdout.columns : undefined);

function untilSignal(signals: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM']): {
  signal: AbortSignal;
  done: Promise<void>;
} {
  const ac = new AbortController();
  const done = new Promise<void>((res) => {
    for (const s of signals)
      process.once(s, () => {
        ac.abort();
        res();
      });
  });
  return { signal: ac.signal, done };
}

function buildProgram(): Command {
  const program = new Command('bundle-agent')
    .description(
      "Loads update bundles from USB media into this node's container runtime: verify, stage, serve, pre-pull, pin.",
    )
    .version(TOOL_VERSION)
    .enablePositionalOptions()
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText(
      'after',
      `
Configuration: ${DEFAULT_CONFIG_PATH}, which install.sh writes (when absent) from
${EXAMPLE_CONFIG_PATH}, every setting commented (PREFIX/share/bundle-agent/
with install.sh --prefix). Every path in it is taken under its "root"; trust (factory public
keys and/or the bundle's sha256) is required. Failures print "bundle-agent: <Reason>: <what to do>" and set the Failed condition.

Examples:
  bundle-agent run                                  # as the systemd service does
  bundle-agent load /media/usb/4.14.39.bundle       # one bundle, in the foreground
  bundle-agent serve 4.14.39.bundle --key factory.pub --listen 127.0.0.1:5000
  bundle-agent status                               # "Done: ... You may remove the USB stick."; exit 3: not running
  bundle-agent releases list                        # releases kept on this node: pinned, layout kept, running`,
    );

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

  program
    .command('load')
    .description(
      'Load one bundle in the foreground: exit 0 when Ready, non-zero with the reason otherwise.',
    )
    .argument('<file>')
    .option('--config <file>', 'configuration file', DEFAULT_CONFIG_PATH)
    .option('--json', 'print the result as JSON on stdout')
    .action(async (file: string, o: { config: string; json?: boolean }, cmd: Command) => {
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
    });

  program
    .command('serve')
    .description(
      'Only the registry: serve a bundle file (random access through its seek index, after a full verification) or a staged/extracted layout; prints the address and runs until interrupted.',
    )
    .argument('<path>', 'NAME.bundle or a directory made by "bundle extract" or by staging')
    .addOption(
      new Option('--listen <addr>', 'loopback address to listen on, as HOST:PORT')
        .argParser(listenArg)
        .default({ host: '127.0.0.1', port: 0 }, 'a free port on 127.0.0.1'),
    )
    .option('--key <pub>', "trusted public key (repeatable; default: the config's)", collect)
    .option('--digest <sha256>', 'expected whole-file digest of a bundle file', (v: string) => {
      if (!isDigest(v))
        throw new InvalidArgumentError('must be sha256:<64 hex digits> (see NAME.bundle.sha256)');
      return v;
    })
    .option('--config <file>', 'configuration file for default trust (optional)')
    .option('--json', 'print the address and names as JSON')
    .addHelpText(
      'after',
      `
Names: an image of REGISTRY/PATH is served as ADDRESS/PATH (docker://127.0.0.1:PORT/acme/app:v1
for 127.0.0.1:5000/acme/app:v1) and as ADDRESS/REGISTRY/PATH with the registry's ":" written
"_" (127.0.0.1:PORT/127.0.0.1_5000/acme/app:v1; the name the agent's mirrors use). When two
registries in the bundle hold the same PATH, ADDRESS/PATH is refused (NAME_UNKNOWN naming both)
and only the second form serves them. The names are printed at start.`,
    )
    .action(
      async (
        path: string,
        o: {
          listen: { host: string; port: number };
          key?: string[];
          digest?: string;
          config?: string;
          json?: boolean;
        },
      ) => {
        let config: AgentConfig | undefined;
        if (o.config || (!o.key && !o.digest))
          config = await loadConfig(o.config ?? DEFAULT_CONFIG_PATH);
        const trust = await loadTrust(
          o.key ?? config?.trust.keys ?? [],
          o.digest ?? config?.trust.digest,
        );
        const isDir = await stat(path).then(
          (s) => s.isDirectory(),
          () => false,
        );
        let manifest;
        let store;
        let source: BundleSource | undefined;
        // the opener closes the source, also when verifying or serving it fails
        try {
          if (isDir) {
            const { manifestBytes: bytes, signature: sig } = await readLayoutDescription(path);
            manifest = parseManifestBytes(bytes);
            if (!trust.keys)
              throw new AgentError(
                'NoTrust',
                'serving a layout needs --key (its bundle.json signature is checked)',
              );
            checkSignature(bytes, sig, manifest.signer.fingerprint, trust);
            store = await LayoutStore.open(path, catalogOf(manifest));
          } else {
            await assertBundleFile(path);
            // one open for the verifying pass and the serving after it: the same bytes, read twice
            source = await openBundle(path);
            const v = await verifyBundle(source, { trust, frameDigests: true });
            manifest = v.manifest;
            store = await BundleFileStore.open(source, manifest, catalogOf(manifest), {
              seekIndex: v.seekIndex,
              frameDigests: v.frameDigests!,
            });
          }
          const catalog = catalogOf(manifest);
          const reg = await startRegistry({
            store,
            catalog,
            host: o.listen.host,
            port: o.listen.port,
          });
          const names = servedNames(catalog, reg.address);
          if (o.json)
            process.stdout.write(
              JSON.stringify({
                address: reg.address,
                images: manifest.images.length,
                repositories: names,
              }) + '\n',
            );
          else
            process.stdout.write(
              [
                `serving ${plural(manifest.images.length, 'image')} of ${manifest.release.name} on ${reg.address}`,
                ...names.map((n) => `  ${n.source}: ${n.names.join(' or ')}`),
              ]
                .map(escapeControls)
                .join('\n') + '\n',
            );
          const { done } = untilSignal();
          await done;
          await reg.close();
          await store.close();
        } finally {
          await source?.close();
        }
      },
    );

  const releases = program
    .command('releases')
    .description(
      'The releases this node keeps (loaded, pinned, kept on disk, running), and letting go of old ones.',
    )
    .addHelpText(
      'after',
      `
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
loaded by hand with "bundle-agent load FILE".`,
    );

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
  for (const c of releases.commands) c.exitOverride();

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
    .addHelpText(
      'after',
      `
The sentence is the one the node's console shows. The status file names the process that
wrote it (pid, start time, boot) and its heartbeat (every status.heartbeatSeconds, 30 s by
default): when that process is gone, or has stopped beating, the agent's last sentence is no
longer true and this prints "The bundle agent is not running." instead, with what it last
reported. Exit codes, as "systemctl status" uses them: 0 running (or a status file from an
agent too old to say), 3 not running or not responding, 1 an error.`,
    )
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

// What `bundle-agent collect` says of the node around the agent: the OS and kernel, the
// container runtime as it runs (version, configuration, CRI status) and the runtime's journal.
// Each part bounded as the rest of the archive; what is absent is named in NOTES.txt.
import { lstat, readdir, readlink } from 'node:fs/promises';
import os from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { readSmallFile } from '@offline-bundle/host';
import { criStatusInfo } from '@offline-bundle/runtime';
import type { AgentConfig, RuntimeKind } from './config.js';
import type { CollectArchive } from './collect-archive.js';
import { COLLECT_COMMAND_MS, commandOutput, errLine, type Ran } from './collect-exec.js';
import { redactDocument, type RedactionTally } from './collect-redact.js';

/** Lines of each journal kept (the agent's unit, and the runtime's and kubelet's units). */
export const COLLECT_JOURNAL_LINES = 2000;
/** The units of the runtime journal, and how far back it goes. */
export const RUNTIME_JOURNAL_UNITS = ['crio', 'containerd', 'kubelet'];
export const RUNTIME_JOURNAL_SINCE = '-24h';

const SMALL = 64 * 1024;

/** A small text file, or why not; never through a symlink but one within `root` (as /etc/os-release → ../usr/lib/os-release). */
async function readWithinRoot(root: string, path: string): Promise<string> {
  try {
    return (await readSmallFile(path, SMALL, { noFollow: true })).bytes.toString('utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ELOOP') throw err;
    const target = await readlink(path);
    const next = isAbsolute(target) ? join(root, target) : resolve(dirname(path), target);
    return (await readSmallFile(next, SMALL, { noFollow: true })).bytes.toString('utf8');
  }
}

const hours = (s: number) => `${Math.round(s)} s (${(s / 3600).toFixed(1)} h)`;

/** os.txt: the kernel (uname), uptime, boot id, memory, and /etc/os-release of the node (under root) and of the agent's own image when root is not /. */
export async function addOs(a: CollectArchive, c: AgentConfig, now: Date): Promise<void> {
  const lines = [
    `kernel ${os.type()} ${os.release()} ${os.version()} ${os.machine()}`,
    `hostname ${os.hostname()}`,
    `uptime ${hours(os.uptime())}, booted ${new Date(now.getTime() - os.uptime() * 1000).toISOString()}`,
    `load ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
    `memory ${Math.round(os.totalmem() / 2 ** 20)} MiB, ${Math.round(os.freemem() / 2 ** 20)} MiB free`,
    `cpus ${os.cpus().length}`,
  ];
  const bootId = await readWithinRoot('/', '/proc/sys/kernel/random/boot_id').catch(
    (err: unknown) => `? (${errLine(err)})`,
  );
  lines.push(`boot id ${bootId.trim()}`);
  const releases =
    c.root === '/'
      ? [['the node', '/']]
      : [
          ['the node', c.root],
          ["the agent's image", '/'],
        ];
  for (const [whose, root] of releases) {
    const path = join(root!, 'etc/os-release');
    const text = await readWithinRoot(root!, path).catch((err: unknown) => {
      a.note(`os.txt: ${path}: ${errLine(err)}`);
      return `(not read: ${errLine(err)})\n`;
    });
    lines.push('', `${path} (${whose}):`, text.trimEnd());
  }
  a.add('os.txt', `${lines.join('\n')}\n`);
}

interface RuntimeCommand {
  file: string;
  argvs: string[][];
}

/** What each runtime's own CLI says of itself: version, then its configuration as it runs it. */
function runtimeCommands(kind: RuntimeKind, c: AgentConfig): RuntimeCommand[] {
  if (kind === 'containerd') {
    return [
      { file: 'version.txt', argvs: [['containerd', '--version']] },
      { file: 'config.toml', argvs: [['containerd', 'config', 'dump']] },
    ];
  }
  // crio status config asks the running daemon (its socket); crio config renders what it would read from the files
  return [
    { file: 'version.txt', argvs: [['crio', '--version']] },
    {
      file: 'config.toml',
      argvs: [
        ['crio', 'status', '--socket', c.criSocket, 'config'],
        ['crio', 'config'],
      ],
    },
  ];
}

/** runtime/<kind>-<file>: the first command that answers; each miss named in NOTES.txt. */
async function addRuntimeCli(a: CollectArchive, kind: RuntimeKind, c: AgentConfig): Promise<void> {
  for (const { file, argvs } of runtimeCommands(kind, c)) {
    const name = `runtime/${kind}-${file}`;
    const misses: string[] = [];
    let got: Ran | undefined;
    for (const argv of argvs) {
      const r = await commandOutput(a, name, argv, { quiet: true });
      if (r.missing) {
        a.note(
          `${name}: ${kind} not found on PATH (${process.env.PATH ?? ''}): the runtime's version and configuration are not in the archive`,
        );
        return;
      }
      if (r.started && r.code === 0 && r.text.trim() !== '') {
        got = r;
        break;
      }
      misses.push(`${argv.join(' ')}: ${r.problem ?? 'wrote nothing'}`);
    }
    if (got) a.add(name, got.text);
    for (const m of misses) a.note(`${name}: ${m}`);
  }
}

/** The CRI's Status with verbose (as `crictl info`): the runtime's conditions and its config as it runs, each value parsed when JSON. */
async function addCriStatus(a: CollectArchive, c: AgentConfig): Promise<void> {
  try {
    const info = await criStatusInfo(c.criSocket, COLLECT_COMMAND_MS);
    const parsed: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(info)) {
      try {
        parsed[k] = JSON.parse(v);
      } catch {
        parsed[k] = v;
      }
    }
    const tally: RedactionTally = new Map();
    a.add(
      'runtime/cri-status.json',
      `${JSON.stringify(redactDocument(parsed, tally), null, 1)}\n`,
      tally,
    );
  } catch (err) {
    a.note(
      `runtime/cri-status.json: the runtime at ${c.criSocket} gave no status: ${errLine(err)}`,
    );
  }
}

/**
 * The runtime as this node runs it: the configured runtime's CLI (both runtimes' when the
 * config could not say which), and its CRI status.
 */
export async function addRuntimeFacts(
  a: CollectArchive,
  c: AgentConfig,
  runtimeKnown: boolean,
): Promise<void> {
  for (const kind of runtimeKnown ? [c.runtime] : (['crio', 'containerd'] as const))
    await addRuntimeCli(a, kind, c);
  await addCriStatus(a, c);
}

/** Where a journal would be on disk, when journalctl is not here to read it (the OpenShift agent image). */
async function journalDirs(c: AgentConfig): Promise<string[]> {
  const found: string[] = [];
  for (const dir of new Set([
    '/var/log/journal',
    '/run/log/journal',
    join(c.root, 'var/log/journal'),
    join(c.root, 'run/log/journal'),
  ])) {
    if (
      !(await lstat(dir).then(
        (s) => s.isDirectory(),
        () => false,
      ))
    )
      continue;
    const n = (await readdir(dir).catch(() => [])).length;
    found.push(`${dir} (${n} ${n === 1 ? 'entry' : 'entries'})`);
  }
  return found;
}

/** The NOTES.txt line for a journal that could not be read because journalctl is absent. */
export async function noJournalctl(
  a: CollectArchive,
  name: string,
  c: AgentConfig,
  program: string,
  problem: string,
): Promise<void> {
  const dirs = await journalDirs(c);
  a.note(
    `${name}: cannot run ${program}: ${problem}: journalctl is not in this image or on PATH (as in the OpenShift agent image), so no journal is collected; ${
      dirs.length
        ? `the journal's files are mounted at ${dirs.join(', ')}: read them with "journalctl -D DIR" on the host`
        : 'no journal directory (/var/log/journal, /run/log/journal) is mounted here either: run "journalctl -u UNIT" on the host'
    }`,
  );
}

/** The runtime's and kubelet's journal of the last day, bounded like the agent's. */
export async function addRuntimeJournal(
  a: CollectArchive,
  c: AgentConfig,
  argv?: string[],
): Promise<void> {
  const name = 'runtime/journal.txt';
  const cmd = argv ?? [
    'journalctl',
    '--no-pager',
    '-o',
    'short-iso',
    '-n',
    String(COLLECT_JOURNAL_LINES),
    '--since',
    RUNTIME_JOURNAL_SINCE,
    ...RUNTIME_JOURNAL_UNITS.flatMap((u) => ['-u', u]),
  ];
  const r = await commandOutput(a, name, cmd, { quiet: true });
  if (r.missing) return noJournalctl(a, name, c, cmd[0]!, r.problem!);
  if (!r.started) return a.note(`${name}: cannot run ${cmd[0]}: ${r.problem}`);
  if (r.problem) a.note(`${name}: ${cmd[0]} ${r.problem}`);
  a.add(name, r.text);
}

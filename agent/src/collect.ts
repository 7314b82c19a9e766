// `bundle-agent collect`: one archive with what a support engineer asks for first, so a
// technician sends one file instead of running ten commands. Every part is optional: what
// cannot be read is named in NOTES.txt, never a reason to write nothing.
import { lstat, readdir, readFile, readlink, statfs } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import { readSmallFile } from '@offline-bundle/host';
import { CriImageClient, MANAGED_MARKER } from '@offline-bundle/runtime';
import type { AgentConfig } from './config.js';
import { MAX_CONFIG_FILE_BYTES } from './config.js';
import { CollectArchive, MAX_COLLECT_ENTRY_BYTES } from './collect-archive.js';
import { COLLECT_DEADLINE_MS, runSteps } from './collect-steps.js';
import { redactDocument, type RedactionTally } from './collect-redact.js';
import { redactedDocument } from './collect-document.js';
import { parseMountinfo } from './daemon/media.js';
import { SPOOL_DIR_NAME } from './daemon/part-spool.js';
import { readKubeletThresholds } from './load/kubelet-thresholds.js';
import { partialBytes } from './load/space-credit.js';
import { TOOL_VERSION } from './version.js';
import { COLLECT_COMMAND_MS, commandOutput, errLine } from './collect-exec.js';
import {
  COLLECT_JOURNAL_LINES,
  addOs,
  addRuntimeFacts,
  addRuntimeJournal,
  noJournalctl,
} from './collect-node.js';
import type { BrokenConfig } from './collect-config.js';

export { COLLECT_COMMAND_MS } from './collect-exec.js';
export { COLLECT_JOURNAL_LINES } from './collect-node.js';
export { COLLECT_DEADLINE_MS } from './collect-steps.js';
export { MAX_COLLECT_YAML_PARSE_BYTES } from './collect-document.js';
/** Most files taken from one directory (state, drop-ins). */
export const MAX_COLLECT_DIR_FILES = 200;

interface CollectOptions {
  output?: string;
  /** The config file, included redacted. */
  configPath: string;
  now?: Date;
  /** The journal's command (default journalctl -u UNIT); tests point it elsewhere. */
  journal?: string[];
  /** The runtime journal's command (default journalctl -u crio -u containerd -u kubelet --since -24h). */
  runtimeJournal?: string[];
  /** The config did not load: `c` is what was assumed in its place (collect-config.ts). */
  broken?: BrokenConfig;
  /** Where the mounts are read (default /proc/self/mountinfo). */
  mountinfo?: string;
  /** The deadline for the whole collect (default COLLECT_DEADLINE_MS); tests shorten it. */
  deadlineMs?: number;
}

/**
 * A path's text, never through a symlink: a link (to /etc/shadow, say) is collected as the name
 * of its target, so nothing outside what the agent meant to collect leaves the node. O_NOFOLLOW
 * makes the check and the read one step: a link put in place between them is refused too.
 */
async function readNoFollow(
  path: string,
  max: number,
): Promise<{ text: string } | { link: string }> {
  try {
    return { text: (await readSmallFile(path, max, { noFollow: true })).bytes.toString('utf8') };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ELOOP') throw err;
    return { link: await readlink(path) };
  }
}

/** Records a symlink found where the agent's file or directory should be: its target's name, and a note. */
function addLink(a: CollectArchive, name: string, path: string, target: string): void {
  a.add(name, `symlink → ${target}\n`);
  a.note(`${name}: ${path} is a symlink to ${target}: not followed`);
}

/** Adds a small file, redacted as a document; a missing one is noted, a symlink named and not followed. */
async function addFile(
  a: CollectArchive,
  name: string,
  path: string,
  as: 'yaml' | 'json' | 'text',
  max = MAX_COLLECT_ENTRY_BYTES,
): Promise<void> {
  try {
    const got = await readNoFollow(path, max);
    if ('link' in got) return addLink(a, name, path, got.link);
    const tally: RedactionTally = new Map();
    a.add(name, as === 'text' ? got.text : redactedDocument(got.text, as, tally), tally);
  } catch (err) {
    a.note(`${name}: ${path}: ${errLine(err)}`);
  }
}

/** Whether `dir` is a directory to list: a symlink in its place is named as `name` and not followed; an absent one is nothing. */
async function isOwnDir(a: CollectArchive, name: string, dir: string): Promise<boolean> {
  const st = await lstat(dir).catch(() => undefined);
  if (st?.isSymbolicLink())
    addLink(a, name, dir, await readlink(dir).catch((err: unknown) => `? (${errLine(err)})`));
  return st?.isDirectory() === true;
}

/** The regular files (and symlinks, to be named) of `dir` that `keep` accepts, by name order, at most MAX_COLLECT_DIR_FILES. */
async function filesIn(
  a: CollectArchive,
  dir: string,
  keep: (name: string) => boolean,
): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') a.note(`${dir}: ${errLine(err)}`);
    return [];
  });
  const names = entries
    .filter((e) => (e.isFile() || e.isSymbolicLink()) && keep(e.name))
    .map((e) => e.name)
    .sort();
  if (names.length > MAX_COLLECT_DIR_FILES)
    a.note(`${dir}: ${names.length} files, the first ${MAX_COLLECT_DIR_FILES} taken`);
  return names.slice(0, MAX_COLLECT_DIR_FILES);
}

/** The agent's own records (not bundles dropped there), and the drop-ins it wrote. */
async function addStateAndDropIns(a: CollectArchive, c: AgentConfig): Promise<void> {
  // the status file is status.json already; bundles dropped there are not records
  const record = (n: string) =>
    !/\.bundle(\.|$)/.test(n) &&
    !n.startsWith('.') &&
    join(c.paths.stateDir, n) !== c.paths.statusFile;
  if (await isOwnDir(a, 'state', c.paths.stateDir)) {
    for (const name of await filesIn(a, c.paths.stateDir, record)) {
      await addFile(
        a,
        `state/${name}`,
        join(c.paths.stateDir, name),
        name.endsWith('.json') ? 'json' : 'text',
      );
    }
  }
  const ours = (n: string) => n.startsWith(c.prefix);
  for (const [label, dir] of [
    ['registries.conf.d', c.paths.registriesDropInDir],
    ['crio.conf.d', c.paths.crioDropInDir],
    ['self-upgrade', c.selfUpgrade.dropInDir],
  ] as const) {
    if (!(await isOwnDir(a, `drop-ins/${label}`, dir))) continue;
    for (const name of await filesIn(a, dir, ours))
      await addFile(a, `drop-ins/${label}/${name}`, join(dir, name), 'text');
  }
  await addContainerdHosts(a, c.paths.containerdCertsDir);
}

/** containerd: certs.d/<host>/hosts.toml, ours when it starts with the agent's marker; a symlink for a host or its file is named. */
async function addContainerdHosts(a: CollectArchive, certsDir: string): Promise<void> {
  if (!(await isOwnDir(a, 'drop-ins/certs.d', certsDir))) return;
  const hosts = await readdir(certsDir).catch(() => [] as string[]);
  for (const host of hosts.sort().slice(0, MAX_COLLECT_DIR_FILES)) {
    if (!(await isOwnDir(a, `drop-ins/certs.d/${host}`, join(certsDir, host)))) continue;
    const name = `drop-ins/certs.d/${host}/hosts.toml`;
    const path = join(certsDir, host, 'hosts.toml');
    const got = await readNoFollow(path, MAX_COLLECT_ENTRY_BYTES).catch(() => undefined);
    if (got && 'link' in got) addLink(a, name, path, got.link);
    else if (got?.text.startsWith(MANAGED_MARKER)) a.add(name, got.text);
  }
}

/** The runtime's images (CRI ListImages), within COLLECT_COMMAND_MS. */
async function addImages(a: CollectArchive, c: AgentConfig): Promise<void> {
  const client = new CriImageClient(c.criSocket, { callTimeoutMs: COLLECT_COMMAND_MS });
  try {
    const images = await client.listImages();
    a.add('runtime-images.json', `${JSON.stringify(images, null, 1)}\n`);
  } catch (err) {
    a.note(
      `runtime-images.json: the runtime at ${c.criSocket} did not list its images: ${errLine(err)}`,
    );
  } finally {
    client.close();
  }
}

/** statfs of the agent's paths, and the kubelet thresholds the space check would use. */
async function addDisk(a: CollectArchive, c: AgentConfig): Promise<void> {
  const paths = {
    upgradeDir: c.paths.upgradeDir,
    stateDir: c.paths.stateDir,
    imageStoreDir: c.paths.imageStoreDir,
    kubeletRootDir: c.space.kubeletRootDir,
  };
  const out: Record<string, unknown> = {};
  for (const [key, path] of Object.entries(paths)) {
    try {
      const fs = await statfs(path);
      const size = fs.blocks * fs.bsize;
      out[key] = {
        path,
        sizeBytes: size,
        availableBytes: fs.bavail * fs.bsize,
        usedPercent: size ? Math.round(((size - fs.bavail * fs.bsize) * 1000) / size) / 10 : null,
      };
    } catch (err) {
      out[key] = { path, error: errLine(err) };
    }
  }
  out.kubeletThresholds = await readKubeletThresholds(c.space.kubeletConfig);
  a.add('disk.json', `${JSON.stringify(out, null, 2)}\n`);
}

/**
 * The lines of /proc/self/mountinfo whose mount point is under a media root or watched
 * directory; when there are none, or the file cannot be read, media-mounts.txt says so and
 * names the directories looked under.
 */
async function addMounts(
  a: CollectArchive,
  c: AgentConfig,
  mountinfo = '/proc/self/mountinfo',
): Promise<void> {
  const roots = [...c.media.roots, ...c.media.watchDirs];
  const under = (p: string) =>
    roots.some((r) => p === r || p.startsWith(r.endsWith(sep) ? r : r + sep));
  const looked = `under media.roots and media.watchDirs: ${roots.length ? roots.join(', ') : '(none configured)'}`;
  let text: string;
  try {
    text = await readFile(mountinfo, 'utf8');
  } catch (err) {
    a.add(
      'media-mounts.txt',
      `# no mounts: ${mountinfo} could not be read (${errLine(err)}); looked ${looked}\n`,
    );
    a.note(`media-mounts.txt: ${mountinfo}: ${errLine(err)}`);
    return;
  }
  const lines = text.split('\n').filter(Boolean);
  const points = parseMountinfo(text);
  const kept = lines.filter((_, i) => under(points[i]!));
  if (kept.length) return a.add('media-mounts.txt', `${kept.join('\n')}\n`);
  a.add(
    'media-mounts.txt',
    `# no removable media mounted: none of the ${lines.length} mounts in ${mountinfo} is ${looked}\n`,
  );
}

/**
 * What the upgrade directory holds, by name and size, never the bytes: staged layouts, partial
 * staging (with the marker naming its bundle) and the part spool (with its index), which a
 * parts or resume case needs and which can be gigabytes.
 */
async function addUpgradeDir(a: CollectArchive, c: AgentConfig): Promise<void> {
  const dir = c.paths.upgradeDir;
  if (!(await isOwnDir(a, 'upgrade-dir.json', dir))) return;
  const listing: Record<string, unknown>[] = [];
  for (const e of (await readdir(dir, { withFileTypes: true }).catch(() => [])).slice(
    0,
    MAX_COLLECT_DIR_FILES,
  )) {
    const path = join(dir, e.name);
    if (!e.isDirectory()) {
      listing.push({
        name: e.name,
        type: e.isFile() ? 'file' : 'other',
        bytes: e.isFile() ? (await lstat(path).catch(() => undefined))?.size : undefined,
      });
      continue;
    }
    listing.push({ name: e.name, type: 'dir', bytes: await partialBytes(path) });
    if (e.name.endsWith('.partial'))
      await addFile(a, `upgrade-dir/${e.name}/resume.json`, join(path, 'resume.json'), 'json');
    if (e.name === SPOOL_DIR_NAME)
      await addFile(
        a,
        `upgrade-dir/${SPOOL_DIR_NAME}/spool.json`,
        join(path, 'spool.json'),
        'json',
      );
  }
  a.add('upgrade-dir.json', `${JSON.stringify({ path: dir, entries: listing }, null, 1)}\n`);
}

function header(c: AgentConfig, now: Date, broken: boolean): string {
  const config = broken
    ? 'config BROKEN: the agent does not start with it; see CONFIG-ERROR.txt\n'
    : '';
  return `bundle-agent ${TOOL_VERSION}\n${config}node ${c.nodeName}\nruntime ${c.runtime} (${c.criSocket})\narch ${c.arch}\nroot ${c.root}\ncollected ${now.toISOString()}\n`;
}

/** The config as written, and as the agent reads it (or, broken, what it says is wrong and what was assumed). */
async function addConfig(a: CollectArchive, c: AgentConfig, o: CollectOptions): Promise<void> {
  await addFile(a, 'config.yaml', o.configPath, 'yaml', MAX_CONFIG_FILE_BYTES);
  if (o.broken) {
    a.add('CONFIG-ERROR.txt', o.broken.text);
    a.note(
      `the config ${o.configPath} did not load: CONFIG-ERROR.txt says why; the rest was collected with config-assumed.json`,
    );
  }
  const tally: RedactionTally = new Map();
  a.add(
    o.broken ? 'config-assumed.json' : 'config-effective.json',
    `${JSON.stringify(redactDocument(c, tally), null, 2)}\n`,
    tally,
  );
}

/** The agent's own journal; journalctl absent (the OpenShift image) named with where the journal's files are. */
async function addJournal(a: CollectArchive, c: AgentConfig, argv?: string[]): Promise<void> {
  const cmd = argv ?? [
    'journalctl',
    '--no-pager',
    '-o',
    'short-iso',
    '-n',
    String(COLLECT_JOURNAL_LINES),
    '-u',
    c.selfUpgrade.unit,
  ];
  const r = await commandOutput(a, 'journal.txt', cmd, { quiet: true });
  if (r.started) a.add('journal.txt', r.text);
  else if (r.missing) await noJournalctl(a, 'journal.txt', c, cmd[0]!, r.problem!);
  else a.note(`journal.txt: cannot run ${cmd[0]}: ${r.problem}`);
}

/** Collects and writes the archive, within COLLECT_DEADLINE_MS (or `o.deadlineMs`); returns where, and how many files it holds. */
export async function collect(
  c: AgentConfig,
  o: CollectOptions,
): Promise<{ output: string; files: number; notes: string[]; configError?: string[] }> {
  const now = o.now ?? new Date();
  const stamp = now.toISOString().replace(/[:.]/g, '').slice(0, 15);
  const name = `bundle-agent-collect-${c.nodeName}-${stamp}`;
  const output = resolve(o.output ?? `${name}.tar.gz`);
  const deadlineMs = o.deadlineMs ?? COLLECT_DEADLINE_MS;
  const a = new CollectArchive(name, AbortSignal.timeout(deadlineMs));
  a.add('version.txt', header(c, now, o.broken !== undefined));
  await runSteps(
    a,
    [
      ['config.yaml, config-effective.json', () => addConfig(a, c, o)],
      [
        'kubeconfig.yaml',
        async () => {
          if (c.status.kubeconfig) await addFile(a, 'kubeconfig.yaml', c.status.kubeconfig, 'yaml');
        },
      ],
      ['status.json', () => addFile(a, 'status.json', c.paths.statusFile, 'json')],
      ['state/, drop-ins/', () => addStateAndDropIns(a, c)],
      ['runtime-images.json', () => addImages(a, c)],
      ['journal.txt', () => addJournal(a, c, o.journal)],
      ['os.txt', () => addOs(a, c, now)],
      ['runtime/', () => addRuntimeFacts(a, c, o.broken?.runtimeKnown ?? true)],
      ['runtime/journal.txt', () => addRuntimeJournal(a, c, o.runtimeJournal)],
      ['disk.json', () => addDisk(a, c)],
      ['media-mounts.txt', () => addMounts(a, c, o.mountinfo)],
      ['upgrade-dir.json', () => addUpgradeDir(a, c)],
    ],
    deadlineMs,
  );
  await a.write(output, now);
  return {
    output,
    files: a.files,
    notes: a.notes,
    ...(o.broken ? { configError: o.broken.lines } : {}),
  };
}

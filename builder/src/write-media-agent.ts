// The agent image beside a bundle (bundle-agent-VERSION-ARCH.oci.tar and its signed statement
// ….oci.tar.sig, written by `create --agent-image` or `agent-image export`), taken onto the
// stick by `bundle write-media` with the bundle: a node with no agent yet starts from them
// (deploy/openshift/bundle-agent-bootstrap.sh). Copied under dot names like the bundle, its
// sha256 checked against the statement while it is copied, and read back from the stick after.
import { createHash } from 'node:crypto';
import { readFile, readdir, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { BundleManifest } from '@offline-bundle/format';
import { pidExists } from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/cli';
import { SIDECAR_SUFFIX, STATEMENT_FORMAT, archiveName } from './agent-sidecar.js';
import type { Progress } from './progress.js';
import { copyRange } from './split.js';
import { MediaError } from './write-media-target.js';

/** A statement is some 500 bytes; a file far larger is not one. */
const MAX_STATEMENT_BYTES = 64 * 1024;

/** One file of the pair as written: its final name on the stick, the dot name it is written under first. */
export interface AgentFile {
  source: string;
  final: string;
  temp: string;
  size: number;
  /** The sha256 the copy must have: the statement's line for the archive, the statement's own bytes for itself. */
  sha256: string;
  started?: boolean;
}

export interface AgentCopy {
  archive: AgentFile;
  statement: AgentFile;
  version: string;
  arch: string;
  /** The same pair is on the stick already (same statement, same size): not written again, only read back. */
  present: boolean;
  /** Files of another copy of the pair there, replaced under --force (renamed over). */
  replaces: Array<{ path: string; size: number }>;
}

/** What the statement says, the lines write-media checks (the signature is the node's to check, with its keys). */
interface Statement {
  file: string;
  size: number;
  sha256: string;
  version: string;
  arch: string;
}

export function parseStatement(text: string, where: string): Statement {
  const lines = text.split('\n');
  const bad = (why: string) =>
    new MediaError(
      'NOT_A_BUNDLE',
      `${where} is not an agent image statement (${why}): write it again with "bundle agent-image export"`,
    );
  if (lines[0] !== STATEMENT_FORMAT) throw bad(`its first line is not "${STATEMENT_FORMAT}"`);
  const fields = new Map<string, string>();
  for (const l of lines.slice(1)) {
    const sp = l.indexOf(' ');
    if (sp > 0 && !fields.has(l.slice(0, sp))) fields.set(l.slice(0, sp), l.slice(sp + 1));
  }
  const get = (k: string) => {
    const v = fields.get(k);
    if (v === undefined || v === '') throw bad(`no ${k} line`);
    return v;
  };
  const size = Number(get('size'));
  const sha256 = get('sha256');
  if (!Number.isSafeInteger(size) || size < 0) throw bad('its size is not a number of bytes');
  if (!/^[0-9a-f]{64}$/.test(sha256)) throw bad('its sha256 is not 64 hex digits');
  get('signature');
  return { file: get('file'), size, sha256, version: get('version'), arch: get('arch') };
}

const exists = (p: string) =>
  stat(p).then(
    (s) => s.isFile(),
    () => false,
  );

/**
 * The pair to take along: the one --agent-image names (the archive or its .sig), or, unless
 * --no-agent-image, the one the bundle's agent field names beside the bundle. A bundle that
 * carries an agent with no pair beside it is written alone, with a warning.
 */
export async function findAgentImage(
  bundle: string,
  manifest: BundleManifest,
  flag: string | boolean | undefined,
  progress: Progress,
): Promise<{ archive: string; statement: string } | undefined> {
  if (flag === false) return undefined;
  if (typeof flag === 'string') {
    const archive = flag.endsWith(SIDECAR_SUFFIX) ? flag.slice(0, -'.sig'.length) : flag;
    if (!archive.endsWith('.oci.tar'))
      throw new MediaError(
        'NOT_A_BUNDLE',
        `--agent-image ${flag}: give the agent image archive (bundle-agent-VERSION-ARCH.oci.tar) or its .sig`,
      );
    for (const f of [archive, `${archive}.sig`]) {
      if (!(await exists(f)))
        throw new MediaError(
          'NOT_A_BUNDLE',
          `--agent-image: ${f} is not there: the archive and its .sig go together ("bundle agent-image export BUNDLE --key KEY" writes both)`,
        );
    }
    return { archive, statement: `${archive}.sig` };
  }
  const agent = manifest.agent;
  if (!agent) return undefined;
  const archive = join(dirname(bundle), archiveName(agent.version, manifest.release.arch));
  const [a, s] = [await exists(archive), await exists(`${archive}.sig`)];
  if (a && s) return { archive, statement: `${archive}.sig` };
  if (a !== s) {
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${a ? archive : `${archive}.sig`} is beside the bundle without ${a ? 'its .sig' : 'the archive'}: a node checks one against the other; write both again with "bundle agent-image export ${bundle} --key KEY --force", or pass --no-agent-image to write the bundle alone`,
    );
  }
  progress.log(
    `warning: the bundle carries bundle-agent ${agent.version} but ${basename(archive)} and its .sig are not beside it: the stick serves nodes that run an agent already; for a first install write them with "bundle agent-image export ${bundle} --key KEY" and rerun (or name them with --agent-image)`,
  );
  return undefined;
}

/** The statement checked against its archive and the bundle, and against what is on the stick already. */
export async function planAgent(
  dir: string,
  found: { archive: string; statement: string },
  manifest: BundleManifest,
  o: { force?: boolean; temp: (dir: string, name: string) => string },
): Promise<AgentCopy> {
  const st = await stat(found.statement);
  if (st.size > MAX_STATEMENT_BYTES)
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${found.statement} is ${formatBytes(st.size)}: not an agent image statement`,
    );
  const text = await readFile(found.statement);
  const s = parseStatement(text.toString('latin1'), found.statement);
  const name = basename(found.archive);
  const mismatch = (why: string) =>
    new MediaError(
      'NOT_A_BUNDLE',
      `${found.statement} does not go with ${name} (${why}): write both again with "bundle agent-image export"`,
    );
  if (s.file !== name) throw mismatch(`it names ${s.file}`);
  const size = (await stat(found.archive)).size;
  if (size !== s.size) throw mismatch(`it says ${s.size} bytes, the archive has ${size}`);
  if (
    manifest.agent &&
    (s.version !== manifest.agent.version || s.arch !== manifest.release.arch)
  ) {
    throw new MediaError(
      'NOT_A_BUNDLE',
      `${name} is bundle-agent ${s.version} (${s.arch}), the bundle carries ${manifest.agent.version} (${manifest.release.arch}): export the bundle's own with "bundle agent-image export", or pass --no-agent-image`,
    );
  }
  const file = (source: string, fileSize: number, sha256: string): AgentFile => ({
    source,
    final: join(dir, basename(source)),
    temp: o.temp(dir, basename(source)),
    size: fileSize,
    sha256,
  });
  const copy: AgentCopy = {
    archive: file(found.archive, size, s.sha256),
    statement: file(found.statement, text.length, createHash('sha256').update(text).digest('hex')),
    version: s.version,
    arch: s.arch,
    present: false,
    replaces: [],
  };
  const there = await Promise.all(
    [copy.archive, copy.statement].map(async (f) => ({
      path: f.final,
      st: await stat(f.final).catch(() => undefined),
    })),
  );
  if (!there.some((t) => t.st)) return copy;
  const onStick =
    (there[1]!.st?.size ?? Infinity) <= MAX_STATEMENT_BYTES
      ? await readFile(copy.statement.final).catch(() => undefined)
      : undefined;
  // the same pair (a second bundle of this agent on one stick): kept, and read back below
  if (onStick?.equals(text) && there[0]!.st?.size === size) return { ...copy, present: true };
  const names = there
    .filter((t) => t.st)
    .map((t) => basename(t.path))
    .join(', ');
  if (!o.force)
    throw new MediaError(
      'OUTPUT_EXISTS',
      `${dir} already holds ${names} of another agent image of that name: pass --force to replace them, or remove them first`,
    );
  return {
    ...copy,
    replaces: there.flatMap((t) => (t.st ? [{ path: t.path, size: t.st.size }] : [])),
  };
}

/** Bytes and files the pair adds to the stick (none when it is there already). */
export const agentNeeds = (c: AgentCopy | undefined) =>
  !c || c.present ? { bytes: 0, files: 0 } : { bytes: c.archive.size + c.statement.size, files: 2 };

/** Dot-named copies an earlier run left of the pair (the stick went away under it): removed when no process of this boot writes them. */
export async function removeStaleAgentTemps(
  dir: string,
  c: AgentCopy | undefined,
  bootTag: string,
): Promise<void> {
  if (!c) return;
  const re = (n: string) =>
    new RegExp(`^\\.${n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.([0-9a-f]{8})-(\\d+)\\.tmp$`);
  const ours = [re(basename(c.archive.final)), re(basename(c.statement.final))];
  for (const n of await readdir(dir)) {
    const m = ours.map((r) => r.exec(n)).find(Boolean);
    if (m && (m[1] !== bootTag || !pidExists(Number(m[2]))))
      await rm(join(dir, n), { force: true });
  }
}

/**
 * The archive, then its statement, into their dot names, streamed and synced; the archive's
 * sha256 as read must be the statement's (else the pair beside the bundle does not go together).
 */
export async function writeAgentTemps(
  c: AgentCopy,
  at: { file: string },
  progress: Progress,
  signal?: AbortSignal,
): Promise<void> {
  if (c.present) return;
  progress.start(
    `writing ${basename(c.archive.final)} and its .sig to ${dirname(c.archive.final)}`,
    c.archive.size + c.statement.size,
  );
  let done = 0;
  for (const f of [c.archive, c.statement]) {
    const h = createHash('sha256');
    at.file = f.final;
    f.started = true;
    await copyRange(
      f.source,
      f.temp,
      0,
      f.size,
      (chunk) => {
        h.update(chunk);
        progress.update((done += chunk.length));
      },
      signal,
    );
    if (h.digest('hex') !== f.sha256) {
      const why =
        f === c.archive
          ? `it reads as another sha256 than ${basename(c.statement.source)} says`
          : 'it changed while being copied';
      throw new MediaError(
        'SOURCE_CHANGED',
        `${f.source}: ${why}: the pair does not go together; what was written is removed: write both again with "bundle agent-image export" and rerun`,
      );
    }
  }
}

/** Both files read back from the stick: the archive must hash to the statement's sha256, the statement to what was read. */
export async function readBackAgent(
  c: AgentCopy,
  at: { file: string },
  hash: (file: string, onBytes: (n: number) => void) => Promise<string>,
  progress: Progress,
): Promise<void> {
  progress.start(
    `reading back ${basename(c.archive.final)} from ${dirname(c.archive.final)}`,
    c.archive.size + c.statement.size,
  );
  let done = 0;
  for (const f of [c.archive, c.statement]) {
    at.file = f.final;
    if ((await hash(f.final, (n) => progress.update((done += n)))) !== f.sha256) {
      throw new MediaError(
        'READ_BACK_FAILED',
        `${basename(f.final)} reads back from ${dirname(f.final)} other than it was written${c.present ? ' (the copy that was there already)' : ''}: the stick does not keep what it is given; use another stick${c.present ? ', or pass --force' : ''}`,
      );
    }
  }
}

/** What the result says of the pair. */
export function agentResult(c: AgentCopy): {
  archive: string;
  statement: string;
  size: number;
  sha256: string;
  version: string;
  arch: string;
  alreadyThere: boolean;
} {
  return {
    archive: c.archive.final,
    statement: c.statement.final,
    size: c.archive.size,
    sha256: `sha256:${c.archive.sha256}`,
    version: c.version,
    arch: c.arch,
    alreadyThere: c.present,
  };
}

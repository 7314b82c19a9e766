// `bundle-agent collect` on a node whose config does not load: the archive is written anyway.
// The settings it is collected with are the config's own where they are valid, the defaults
// (under --root, else the config's root, else /) where the config cannot say; CONFIG-ERROR.txt
// holds the exact lines `bundle-agent run` stops with.
import { stringify as stringifyYaml } from 'yaml';
import { escapeControls, readSmallFile } from '@offline-bundle/host';
import {
  ConfigError,
  MAX_CONFIG_FILE_BYTES,
  loadConfig,
  parseConfig,
  type AgentConfig,
} from './config.js';
import { oneLine, reasonOf } from './errors.js';
import { parseYamlBounded } from './collect-document.js';

/** Stands in for the trust the config does not give: collect verifies nothing. */
const NO_TRUST = `sha256:${'0'.repeat(64)}`;
/** Rounds of dropping the keys a parse refused (a key dropped can make a rule between keys fail). */
const MAX_ROUNDS = 8;

type Raw = Record<string, unknown>;

export interface BrokenConfig {
  /** What `bundle-agent run` prints for this config, line by line ("bundle-agent: InvalidConfig: ..."). */
  lines: string[];
  /** CONFIG-ERROR.txt. */
  text: string;
  /** Whether the runtime kind came from the config (else both runtimes are asked). */
  runtimeKnown: boolean;
}

interface RawDocument {
  raw: Raw;
  read: boolean;
  parsed: boolean;
}

/**
 * The config's document as a mapping ({} when it gives none), and whether the file was read. A
 * document that does not parse still gives its top-level `root:` line, if it has a plain one.
 */
async function rawDocument(path: string): Promise<RawDocument> {
  let text: string;
  try {
    text = (await readSmallFile(path, MAX_CONFIG_FILE_BYTES)).bytes.toString('utf8');
  } catch {
    return { raw: {}, read: false, parsed: false };
  }
  const doc = parseYamlBounded(text)?.value;
  const mapping = doc !== null && typeof doc === 'object' && !Array.isArray(doc);
  if (mapping) return { raw: doc as Raw, read: true, parsed: true };
  const root = /^root:[ \t]*["']?(\/[^"'\s#]*)["']?[ \t]*(#.*)?$/m.exec(text)?.[1];
  return { raw: root ? { root } : {}, read: true, parsed: false };
}

/** The dotted key a problem line ("FILE: KEY: what") names, without a list index. */
function keyOfProblem(line: string, file: string): string {
  const rest = line.startsWith(`${file}: `) ? line.slice(file.length + 2) : line;
  return rest.split(': ')[0]!.replace(/\[.*$/, '');
}

function dropKey(doc: Raw, key: string): void {
  const parts = key.split('.');
  let at: unknown = doc;
  for (const part of parts.slice(0, -1))
    at = at !== null && typeof at === 'object' ? (at as Raw)[part] : undefined;
  if (at !== null && typeof at === 'object') delete (at as Raw)[parts.at(-1)!];
}

/** The settings collect runs with: the document less every key a parse refuses, trust stood in for. */
function assumedConfig(
  raw: Raw,
  file: string,
  root: string | undefined,
): { config: AgentConfig; dropped: string[] } {
  const doc: Raw = structuredClone(raw);
  if (root !== undefined) doc.root = root;
  const dropped: string[] = [];
  for (let round = 0; round < MAX_ROUNDS; round++) {
    if (doc.trust === undefined) doc.trust = { digest: NO_TRUST };
    try {
      return { config: parseConfig(stringifyYaml(doc), file), dropped };
    } catch (err) {
      if (!(err instanceof ConfigError)) break;
      for (const line of err.problems) {
        const key = keyOfProblem(line, file);
        if (key === '(top)' || key === 'not valid YAML') return assumedConfig({}, file, root);
        if (!dropped.includes(key)) dropped.push(key);
        dropKey(doc, key);
      }
    }
  }
  // nothing of the document holds: the defaults, under root (a host name that is no node name, named)
  const base = { root: root ?? '/', trust: { digest: NO_TRUST } };
  try {
    return { config: parseConfig(stringifyYaml(base), file), dropped: ['(all)'] };
  } catch {
    return {
      config: parseConfig(stringifyYaml({ ...base, nodeName: 'unknown-node' }), file),
      dropped: ['(all)', 'nodeName'],
    };
  }
}

function explain(
  path: string,
  lines: string[],
  config: AgentConfig,
  dropped: string[],
  root: string | undefined,
  doc: RawDocument,
): string {
  const rootFrom =
    root !== undefined
      ? 'given with --root'
      : dropped.includes('root') || doc.raw.root === undefined
        ? 'the default'
        : "the config's";
  return [
    `The configuration ${path} did not load. "bundle-agent run" (and every command that reads it) stops with:`,
    '',
    ...lines,
    '',
    doc.read
      ? 'config.yaml in this archive is that file as it is (redacted as every file is).'
      : 'The file could not be read: the archive has no config.yaml.',
    `This archive was collected with root ${config.root} (${rootFrom}), ${
      doc.parsed
        ? dropped.length
          ? `the config's valid settings and the defaults for ${dropped.join(', ')}`
          : "the config's settings"
        : 'the defaults for every setting (the file gave no settings to read)'
    }: config-assumed.json.`,
    '',
  ].join('\n');
}

/**
 * The config for collect: the one `run` would use, or, when it does not load, the settings
 * assumed in its place with what is broken (the error lines `run` prints).
 */
export async function configForCollect(
  path: string,
  root?: string,
): Promise<{ config: AgentConfig; broken?: BrokenConfig }> {
  let err: unknown;
  try {
    return { config: await loadConfig(path) };
  } catch (e) {
    err = e;
  }
  const reason = reasonOf(err);
  const lines = (
    err instanceof ConfigError ? err.problems.map(escapeControls) : [oneLine(err)]
  ).map((l) => `bundle-agent: ${reason}: ${l}`);
  const doc = await rawDocument(path);
  const { config, dropped } = assumedConfig(doc.raw, path, root);
  // a document that parses says which runtime (crio when it names none); one that does not, or a runtime refused, cannot
  const runtimeKnown = doc.parsed && !dropped.includes('runtime') && !dropped.includes('(all)');
  return {
    config,
    broken: { lines, text: explain(path, lines, config, dropped, root, doc), runtimeKnown },
  };
}

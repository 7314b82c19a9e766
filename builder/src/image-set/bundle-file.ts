import { stat } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { OciError, type OciErrorCode } from '@offline-bundle/oci';
import { parseSourceSpec, type SourceSpec } from '@offline-bundle/image-fetch';
import { FormatError, checkReleaseFields } from '@offline-bundle/format';
import { HostError, assertNesting, assertValueNesting, readSmallFile } from '@offline-bundle/host';
import { plural } from '@offline-bundle/cli';
import {
  BUNDLE_FILE_SCHEMA,
  MAX_PROBLEMS_SHOWN,
  REFUSED_KEYS,
  someProblems,
  type BundleFile,
  type LoadedBundleFile,
  type Locate,
} from './schema.js';
import { checkCatalogReference } from './catalog.js';
import { didYouMean } from '../args.js';
import { archProblem } from '../preflight.js';
import { IMAGE_SET_API_VERSION, IMAGE_SET_V1_API_VERSION, translateImageSet } from './oc-mirror.js';

/** Most alias expansions in a bundle file (YAML's "billion laughs"). */
const MAX_YAML_ALIASES = 100;

/** Largest bundle file read: far above any hand-written one (10 000 images is some 1 MiB). */
const MAX_BUNDLE_FILE_BYTES = 4 * 1024 * 1024;

const fieldName = (path: (string | number)[]) =>
  path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i ? `.${p}` : p)).join('');

/** Each node's line by path (JSON of the path), in one walk: a key's line is its key's, not its value's (a block mapping starts below). */
function lineIndex(doc: Document, lines: LineCounter): Map<string, number> {
  const index = new Map<string, number>();
  const lineOf = (node: unknown) => {
    const range = (node as { range?: [number, number, number] } | null)?.range;
    return range ? lines.linePos(range[0]).line : undefined;
  };
  const walk = (node: unknown, path: (string | number)[], line: number | undefined) => {
    if (line !== undefined) index.set(JSON.stringify(path), line);
    if (isMap(node)) {
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? pair.key.value : pair.key;
        if (typeof key === 'string' || typeof key === 'number')
          walk(pair.value, [...path, String(key)], lineOf(pair.key) ?? lineOf(pair.value));
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, i) => walk(item, [...path, i], lineOf(item)));
    }
  };
  walk(doc.contents, [], lineOf(doc.contents));
  return index;
}

/** A mapping's keys are unique (YAML 1.2), checked with one set per mapping. */
function checkUniqueKeys(doc: Document, lines: LineCounter, file: string): void {
  const walk = (node: unknown): void => {
    if (isMap(node)) {
      const seen = new Set<unknown>();
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? pair.key.value : pair.key;
        if (seen.has(key)) {
          const at = (pair.key as { range?: [number, number, number] } | null)?.range;
          throw new OciError(
            'INVALID_CONFIG',
            `${file}${at ? `:${lines.linePos(at[0]).line}` : ''} is not valid YAML: the key ${JSON.stringify(String(key))} appears twice in one mapping`,
          );
        }
        seen.add(key);
        walk(pair.value);
      }
    } else if (isSeq(node)) {
      for (const item of node.items) walk(item);
    }
  };
  walk(doc.contents);
}

function locator(file: string, doc: Document, lines: LineCounter): Locate {
  let index: Map<string, number> | undefined;
  return (path) => {
    index ??= lineIndex(doc, lines);
    // the closest node that exists: an unknown key's parent is still a place to look at
    for (let n = path.length; n >= 0; n--) {
      const line = index.get(
        JSON.stringify(path.slice(0, n).map((p) => (typeof p === 'number' ? p : String(p)))),
      );
      if (line !== undefined) return `${file}:${line}${path.length ? ` (${fieldName(path)})` : ''}`;
    }
    return file;
  };
}

async function parseYamlFile(file: string): Promise<{ value: unknown; locate: Locate }> {
  let text: string;
  try {
    text = (await readSmallFile(file, MAX_BUNDLE_FILE_BYTES)).bytes.toString('utf8');
  } catch (cause) {
    if (cause instanceof HostError && cause.code === 'FILE_TOO_LARGE') throw cause;
    const missing = (cause as NodeJS.ErrnoException).code === 'ENOENT';
    throw new OciError(
      'INVALID_CONFIG',
      missing
        ? `the bundle file ${file} does not exist`
        : `cannot read the bundle file ${file}: ${(cause as Error).message}`,
      { cause },
    );
  }
  // the library recurses per level: a 3 MB `[[[[…` took it past a 1.7 GB heap
  assertNesting(text, 'yaml', file);
  const lines = new LineCounter();
  // the library's own duplicate-key check compares each key with every other (150 000 keys: minutes)
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: false });
  const err = doc.errors[0];
  // the library's own advice ("please use YAML.parseAllDocuments()") is for programmers, not for users
  const why =
    err?.code === 'MULTIPLE_DOCS'
      ? 'it holds several documents (---); a bundle file is one'
      : err?.message.split('\n')[0];
  if (err)
    throw new OciError(
      'INVALID_CONFIG',
      `${file}:${lines.linePos(err.pos[0]).line} is not valid YAML: ${why}`,
    );
  checkUniqueKeys(doc, lines, file);
  let value: unknown;
  try {
    // aliases are expanded at most 100 times: a small file cannot unfold into gigabytes
    value = doc.toJS({ maxAliasCount: MAX_YAML_ALIASES });
  } catch (cause) {
    throw new OciError(
      'INVALID_CONFIG',
      `${file} is not a bundle file: ${(cause as Error).message}`,
      { cause },
    );
  }
  assertValueNesting(value, file);
  return { value, locate: locator(file, doc, lines) };
}

let validator: ReturnType<Ajv['compile']> | undefined;

/** One message per problem, the most specific: a oneOf's variant that does not apply is no news. */
function schemaProblems(
  errors: ErrorObject[],
  value: Record<string, unknown>,
  locate: Locate,
): string[] {
  const releaseIsObject = typeof value.release === 'object' && value.release !== null;
  const keep = errors.filter((e) => {
    if (e.keyword === 'oneOf') return !releaseIsObject && typeof value.release !== 'string';
    if (e.schemaPath.includes('/oneOf/0/')) return false;
    return !(e.schemaPath.includes('/oneOf/1/') && !releaseIsObject);
  });
  return keep.map((e) => {
    const path = e.instancePath
      .split('/')
      .slice(1)
      .map((p) => (/^\d+$/.test(p) ? Number(p) : p));
    if (e.keyword === 'additionalProperties') {
      const key = (e.params as { additionalProperty: string }).additionalProperty;
      // the keys that mapping may have: a near one is likely what was meant, as for a mistyped flag
      const known = Object.keys(
        (e.parentSchema as { properties?: object } | undefined)?.properties ?? {},
      );
      return `${locate([...path, key])}: unknown field${didYouMean(key, known)} (see bundle.schema.json, or "man bundle")`;
    }
    if (e.keyword === 'required')
      return `${locate(path)}: ${fieldName([...path, (e.params as { missingProperty: string }).missingProperty])} is required`;
    if (e.keyword === 'not') return `${locate(path)}: give version or versionRange, not both`;
    if (e.keyword === 'oneOf')
      return `${locate(path)}: must be a pull spec or {channel, version or versionRange, updateGraph}`;
    if (e.keyword === 'enum')
      return `${locate(path)}: must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`;
    if (e.keyword === 'const')
      return `${locate(path)}: must be ${String((e.params as { allowedValue: unknown }).allowedValue)}`;
    return `${locate(path)}: ${e.message ?? e.keyword}`;
  });
}

/** A problem of the file and the code it would have alone (a missing key file is KEY_ERROR, as from --key). */
interface Problem {
  text: string;
  code: OciErrorCode | 'KEY_ERROR';
}

/** Which keys' values this run does not use (a flag on the command line replaces them): not checked. */
type Unused = (key: string) => boolean;

const missingPath = async (path: string) =>
  stat(path).then(
    () => false,
    (err: NodeJS.ErrnoException) => err.code === 'ENOENT' || err.code === 'ENOTDIR',
  );

/** A source naming a local path (oci-archive:app.tar): the spec parses, and the path exists. */
async function sourceProblem(
  spec: string,
  base: string,
  where: string,
): Promise<Problem | undefined> {
  let s: SourceSpec;
  try {
    s = parseSourceSpec(resolveSource(spec, base));
  } catch (err) {
    return {
      text: `${where}: ${(err as Error).message}`,
      code: (err as OciError).code ?? 'INVALID_CONFIG',
    };
  }
  if (s.transport === 'docker' || !(await missingPath(s.target))) return undefined;
  const what =
    s.transport === 'oci-archive' || s.transport === 'docker-archive' ? 'file' : 'directory';
  return {
    text: `${where}: ${spec}: the ${s.transport}: ${what} ${s.target} does not exist: check the path (relative ones are the bundle file's directory's)`,
    code: 'INVALID_CONFIG',
  };
}

/** A path key's file, when the file names one that is not there. */
async function pathProblem(key: string, path: string, where: string): Promise<Problem | undefined> {
  if (!(await missingPath(path))) return undefined;
  // the same sentence as from --key, so a key file is named alike wherever it was given
  if (key === 'key')
    return {
      text: `${where}: the key file ${path} does not exist: check the path (keys are made by "bundle keygen --out PREFIX")`,
      code: 'KEY_ERROR',
    };
  return {
    text: `${where}: ${path} does not exist: check the path (relative ones are the bundle file's directory's)`,
    code: 'INVALID_CONFIG',
  };
}

const LOCAL_PATH_KEYS = [
  'imagesFile',
  'releaseKeyring',
  'key',
  'passphraseFile',
  'authfile',
  'certDir',
  'registriesConf',
] as const;

/**
 * What the schema cannot see, checked before anything is fetched so that one run names every
 * mistake: an architecture no image has, release fields bundle.json refuses, sources that do
 * not parse or name local paths that are not there, and files the keys name. Values of the
 * wrong type are the schema's to report; keys a flag replaces are not looked at.
 */
async function valueProblems(
  v: Record<string, unknown>,
  locate: Locate,
  base: string,
  unused: Unused,
): Promise<Problem[]> {
  const use = (key: string) => !unused(key);
  const str = (key: string) =>
    use(key) && typeof v[key] === 'string' && v[key] !== '' ? v[key] : undefined;
  const list = (key: string) =>
    Array.isArray(v[key])
      ? (v[key] as unknown[]).flatMap((x, i) =>
          typeof x === 'string' && x ? [[x, i] as const] : [],
        )
      : [];
  const at = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  const found: (Problem | undefined)[] = [];
  const arch = str('arch');
  const badArch = arch === undefined ? undefined : archProblem(arch);
  if (badArch) found.push({ text: `${locate(['arch'])}: ${badArch}`, code: 'INVALID_CONFIG' });
  const release = {
    version: str('version'),
    name: str('name'),
    upgradeFrom: list('upgradeFrom').map(([x]) => x),
  };
  for (const [key, fields] of [
    ['version', { version: release.version }],
    ['name', { name: release.name }],
    ['upgradeFrom', { upgradeFrom: release.upgradeFrom }],
  ] as const) {
    const rule = releaseFieldProblem(fields);
    if (rule)
      found.push({
        text: `${locate(rule.index === undefined ? [key] : [key, rule.index])}: ${rule.text}`,
        code: 'INVALID_CONFIG',
      });
  }
  for (const [spec, i] of list('images'))
    found.push(await sourceProblem(spec, base, locate(['images', i])));
  const rel = str('release');
  if (rel !== undefined) found.push(await sourceProblem(rel, base, locate(['release'])));
  const agent = str('agentImage');
  if (agent !== undefined) found.push(await sourceProblem(agent, base, locate(['agentImage'])));
  for (const key of LOCAL_PATH_KEYS) {
    const p = str(key);
    if (p !== undefined) found.push(await pathProblem(key, at(p), locate([key])));
  }
  for (const [p, i] of list('releaseSignatures'))
    found.push(await pathProblem('releaseSignatures', at(p), locate(['releaseSignatures', i])));
  const graph = (v.release as { updateGraph?: unknown } | undefined)?.updateGraph;
  // --update-graph replaces it, and --release the whole release: key
  if (typeof graph === 'string' && graph && use('release') && use('updateGraph'))
    found.push(await pathProblem('updateGraph', at(graph), locate(['release', 'updateGraph'])));
  return found.filter((p): p is Problem => p !== undefined);
}

/** A release field bundle.json would refuse, said as the file's (its value and the rule). */
function releaseFieldProblem(fields: {
  version?: string | undefined;
  name?: string | undefined;
  upgradeFrom?: string[];
}): { text: string; index?: number } | undefined {
  let found: { text: string; index?: number } | undefined;
  try {
    checkReleaseFields(fields, (field, rule) => {
      const item = /\[(\d+)\]$/.exec(field);
      const value = item
        ? fields.upgradeFrom?.[Number(item[1])]
        : field.endsWith('version')
          ? fields.version
          : fields.name;
      found = {
        text: `${JSON.stringify(value ?? '')} is not a valid ${item ? 'version' : field === 'release.version' ? 'release version' : 'release name'}: it ${rule}`,
        ...(item ? { index: Number(item[1]) } : {}),
      };
      throw found;
    });
  } catch (err) {
    if (err !== found) throw err;
  }
  return found;
}

/**
 * Every problem of the file in one error, before anything is fetched: with several, one line
 * each on the terminal (`lines`, which the CLI prints above its error line), "; "-joined in the
 * message (--json). A single kind of problem keeps its code, as a bad --images-file line does.
 */
function fileProblems(problems: Problem[], file: string): Error {
  const codes = new Set(problems.map((p) => p.code));
  const code = codes.size === 1 ? [...codes][0]! : 'INVALID_CONFIG';
  // in the file's order, as an editor walks it
  const line = (text: string) => Number(/^:(\d+)/.exec(text.slice(file.length))?.[1] ?? 0);
  const texts = problems.map((p) => p.text).sort((a, b) => line(a) - line(b));
  const head = `${plural(problems.length, 'problem')} in the bundle file ${file}, nothing fetched`;
  const more = texts.length - MAX_PROBLEMS_SHOWN;
  const message = `${head}: ${someProblems(texts)}`;
  const error = code === 'KEY_ERROR' ? new FormatError(code, message) : new OciError(code, message);
  // one problem stays the one error line every other error is
  if (problems.length === 1) return error;
  return Object.assign(error, {
    lines: [...texts.slice(0, MAX_PROBLEMS_SHOWN), ...(more > 0 ? [`and ${more} more`] : [])],
    summary: `${head} (each is on a line above)`,
  });
}

async function checkOwnFile(
  value: Record<string, unknown>,
  locate: Locate,
  file: string,
  unused: Unused,
): Promise<BundleFile> {
  const problems: Problem[] = Object.keys(value)
    .filter((k) => Object.hasOwn(REFUSED_KEYS, k))
    .map((k) => ({ text: `${locate([k])}: ${REFUSED_KEYS[k]}`, code: 'INVALID_CONFIG' }));
  // verbose: an unknown key's error carries the properties its mapping may have
  validator ??= new Ajv({
    allErrors: true,
    strict: true,
    strictRequired: false,
    verbose: true,
  }).compile(BUNDLE_FILE_SCHEMA);
  if (!validator(value)) {
    const known = new Set(Object.keys(REFUSED_KEYS));
    const errors = (validator.errors ?? []).filter(
      (e) =>
        !(
          e.instancePath === '' &&
          e.keyword === 'additionalProperties' &&
          known.has((e.params as { additionalProperty: string }).additionalProperty)
        ),
    );
    problems.push(
      ...schemaProblems(errors, value, locate).map((text) => ({
        text,
        code: 'INVALID_CONFIG' as const,
      })),
    );
  }
  problems.push(...(await valueProblems(value, locate, dirname(resolve(file)), unused)));
  if (problems.length) throw fileProblems(problems, file);
  return value as BundleFile;
}

/** oci:, oci-archive:, docker-archive: and dir: sources name paths, taken from the file's directory. */
export function resolveSource(spec: string, base: string): string {
  return spec.replace(/^(oci|oci-archive|docker-archive|dir):(?!\/)/, (m) => `${m}${base}/`);
}

const PATH_KEYS = [
  'imagesFile',
  'releaseKeyring',
  'key',
  'passphraseFile',
  'output',
  'cache',
  'authfile',
  'certDir',
  'registriesConf',
] as const;

function resolvePaths(f: BundleFile, base: string): BundleFile {
  const at = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  const out: BundleFile = { ...f };
  for (const k of PATH_KEYS) if (out[k] !== undefined) out[k] = at(out[k]);
  if (out.releaseSignatures) out.releaseSignatures = out.releaseSignatures.map(at);
  if (out.images) out.images = out.images.map((s) => resolveSource(s, base));
  if (out.agentImage) out.agentImage = resolveSource(out.agentImage, base);
  if (typeof out.release === 'string') out.release = resolveSource(out.release, base);
  if (typeof out.release === 'object' && out.release.updateGraph)
    out.release = { ...out.release, updateGraph: at(out.release.updateGraph) };
  return out;
}

/**
 * Reads `bundle create -f FILE`: this tool's bundle file (checked against its schema) or an
 * oc-mirror v2 ImageSetConfiguration, translated where it says what a bundle carries and refused,
 * by field, where it does not. Every problem of the file is named in one error, with its line.
 */
export async function readBundleFile(
  file: string,
  unused: Unused = () => false,
): Promise<LoadedBundleFile> {
  const { value, locate } = await parseYamlFile(file);
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new OciError(
      'INVALID_CONFIG',
      `${file} is not a bundle file: a YAML mapping with apiVersion and kind`,
    );
  const doc = value as Record<string, unknown>;
  if (doc.apiVersion === IMAGE_SET_V1_API_VERSION) {
    throw new OciError(
      'INVALID_CONFIG',
      `${locate(['apiVersion'])}: oc-mirror's v1 ImageSetConfiguration is not read; write it as ${IMAGE_SET_API_VERSION} (oc-mirror --v2's format, the same mirror: section without storageConfig)`,
    );
  }
  const base = dirname(resolve(file));
  if (doc.apiVersion === IMAGE_SET_API_VERSION) {
    const t = translateImageSet(doc, locate);
    for (const op of t.file.operators ?? []) checkCatalogReference(op);
    return { ...t, file: resolvePaths(t.file, base) };
  }
  const own = resolvePaths(await checkOwnFile(doc, locate, file, unused), base);
  if (own.operators)
    own.operators = own.operators.map((op, i) => ({ ...op, where: locate(['operators', i]) }));
  for (const op of own.operators ?? []) checkCatalogReference(op);
  return {
    file: own,
    imagesWhere: (own.images ?? []).map((_, i) => locate(['images', i])),
    chartsWhere: (own.charts ?? []).map((_, i) => locate(['charts', i])),
    releaseWhere: locate(['release']),
    warnings: [],
  };
}

import { dirname, isAbsolute, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { OciError } from '@offline-bundle/oci';
import { HostError, readSmallFile } from '@offline-bundle/host';
import { plural } from '@offline-bundle/status';
import { BUNDLE_FILE_SCHEMA, REFUSED_KEYS, someProblems, type BundleFile, type LoadedBundleFile, type Locate } from './schema.js';
import { checkCatalogReference } from './catalog.js';
import { IMAGE_SET_API_VERSION, IMAGE_SET_V1_API_VERSION, translateImageSet } from './oc-mirror.js';

/** Most alias expansions in a bundle file (YAML's "billion laughs"). */
export const MAX_YAML_ALIASES = 100;

/** Largest bundle file read: far above any hand-written one (10 000 images is some 1 MiB). */
export const MAX_BUNDLE_FILE_BYTES = 4 * 1024 * 1024;

const fieldName = (path: (string | number)[]) => path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i ? `.${p}` : p)).join('');

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
        if (typeof key === 'string' || typeof key === 'number') walk(pair.value, [...path, String(key)], lineOf(pair.key) ?? lineOf(pair.value));
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
          throw new OciError('INVALID_CONFIG', `${file}${at ? `:${lines.linePos(at[0]).line}` : ''} is not valid YAML: the key ${JSON.stringify(String(key))} appears twice in one mapping`);
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
      const line = index.get(JSON.stringify(path.slice(0, n).map((p) => (typeof p === 'number' ? p : String(p)))));
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
    throw new OciError('INVALID_CONFIG', missing ? `the bundle file ${file} does not exist` : `cannot read the bundle file ${file}: ${(cause as Error).message}`, { cause });
  }
  const lines = new LineCounter();
  // the library's own duplicate-key check compares each key with every other (150 000 keys: minutes)
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: false });
  const err = doc.errors[0];
  // the library's own advice ("please use YAML.parseAllDocuments()") is for programmers, not for users
  const why = err?.code === 'MULTIPLE_DOCS' ? 'it holds several documents (---); a bundle file is one' : err?.message.split('\n')[0];
  if (err) throw new OciError('INVALID_CONFIG', `${file}:${lines.linePos(err.pos[0]).line} is not valid YAML: ${why}`);
  checkUniqueKeys(doc, lines, file);
  let value: unknown;
  try {
    // aliases are expanded at most 100 times: a small file cannot unfold into gigabytes
    value = doc.toJS({ maxAliasCount: MAX_YAML_ALIASES });
  } catch (cause) {
    throw new OciError('INVALID_CONFIG', `${file} is not a bundle file: ${(cause as Error).message}`, { cause });
  }
  return { value, locate: locator(file, doc, lines) };
}

let validator: ReturnType<Ajv['compile']> | undefined;

/** One message per problem, the most specific: a oneOf's variant that does not apply is no news. */
function schemaProblems(errors: ErrorObject[], value: Record<string, unknown>, locate: Locate): string[] {
  const releaseIsObject = typeof value.release === 'object' && value.release !== null;
  const keep = errors.filter((e) => {
    if (e.keyword === 'oneOf') return !releaseIsObject && typeof value.release !== 'string';
    if (e.schemaPath.includes('/oneOf/0/')) return false;
    return !(e.schemaPath.includes('/oneOf/1/') && !releaseIsObject);
  });
  return keep.map((e) => {
    const path = e.instancePath.split('/').slice(1).map((p) => (/^\d+$/.test(p) ? Number(p) : p));
    if (e.keyword === 'additionalProperties') {
      const key = (e.params as { additionalProperty: string }).additionalProperty;
      return `${locate([...path, key])}: unknown field (see bundle.schema.json, or "man bundle")`;
    }
    if (e.keyword === 'required') return `${locate(path)}: ${fieldName([...path, (e.params as { missingProperty: string }).missingProperty])} is required`;
    if (e.keyword === 'not') return `${locate(path)}: give version or versionRange, not both`;
    if (e.keyword === 'oneOf') return `${locate(path)}: must be a pull spec or {channel, version or versionRange, updateGraph}`;
    if (e.keyword === 'enum') return `${locate(path)}: must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`;
    if (e.keyword === 'const') return `${locate(path)}: must be ${String((e.params as { allowedValue: unknown }).allowedValue)}`;
    return `${locate(path)}: ${e.message ?? e.keyword}`;
  });
}

function checkOwnFile(value: Record<string, unknown>, locate: Locate, file: string): BundleFile {
  const refused = Object.keys(value).filter((k) => Object.hasOwn(REFUSED_KEYS, k));
  if (refused.length) throw new OciError('INVALID_CONFIG', refused.map((k) => `${locate([k])}: ${REFUSED_KEYS[k]}`).join('; '));
  validator ??= new Ajv({ allErrors: true, strict: true, strictRequired: false }).compile(BUNDLE_FILE_SCHEMA);
  if (!validator(value)) {
    const problems = schemaProblems(validator.errors ?? [], value, locate);
    throw new OciError('INVALID_CONFIG', `${plural(problems.length, 'problem')} in the bundle file ${file}, nothing fetched: ${someProblems(problems)}`);
  }
  return value as BundleFile;
}

/** oci:, oci-archive:, docker-archive: and dir: sources name paths, taken from the file's directory. */
export function resolveSource(spec: string, base: string): string {
  return spec.replace(/^(oci|oci-archive|docker-archive|dir):(?!\/)/, (m) => `${m}${base}/`);
}

const PATH_KEYS = ['imagesFile', 'releaseKeyring', 'key', 'passphraseFile', 'output', 'cache', 'authfile', 'certDir', 'registriesConf'] as const;

function resolvePaths(f: BundleFile, base: string): BundleFile {
  const at = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  const out: BundleFile = { ...f };
  for (const k of PATH_KEYS) if (out[k] !== undefined) out[k] = at(out[k]);
  if (out.releaseSignatures) out.releaseSignatures = out.releaseSignatures.map(at);
  if (out.images) out.images = out.images.map((s) => resolveSource(s, base));
  if (out.agentImage) out.agentImage = resolveSource(out.agentImage, base);
  if (typeof out.release === 'string') out.release = resolveSource(out.release, base);
  if (typeof out.release === 'object' && out.release.updateGraph) out.release = { ...out.release, updateGraph: at(out.release.updateGraph) };
  return out;
}

/**
 * Reads `bundle create -f FILE`: this tool's bundle file (checked against its schema) or an
 * oc-mirror v2 ImageSetConfiguration, translated where it says what a bundle carries and refused,
 * by field, where it does not. Every problem of the file is named in one error, with its line.
 */
export async function readBundleFile(file: string): Promise<LoadedBundleFile> {
  const { value, locate } = await parseYamlFile(file);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new OciError('INVALID_CONFIG', `${file} is not a bundle file: a YAML mapping with apiVersion and kind`);
  const doc = value as Record<string, unknown>;
  if (doc.apiVersion === IMAGE_SET_V1_API_VERSION) {
    throw new OciError('INVALID_CONFIG', `${locate(['apiVersion'])}: oc-mirror's v1 ImageSetConfiguration is not read; write it as ${IMAGE_SET_API_VERSION} (oc-mirror --v2's format, the same mirror: section without storageConfig)`);
  }
  const base = dirname(resolve(file));
  if (doc.apiVersion === IMAGE_SET_API_VERSION) {
    const t = translateImageSet(doc, locate);
    for (const op of t.file.operators ?? []) checkCatalogReference(op);
    return { ...t, file: resolvePaths(t.file, base) };
  }
  const own = resolvePaths(checkOwnFile(doc, locate, file), base);
  if (own.operators) own.operators = own.operators.map((op, i) => ({ ...op, where: locate(['operators', i]) }));
  for (const op of own.operators ?? []) checkCatalogReference(op);
  return { file: own, imagesWhere: (own.images ?? []).map((_, i) => locate(['images', i])), chartsWhere: (own.charts ?? []).map((_, i) => locate(['charts', i])), releaseWhere: locate(['release']), warnings: [] };
}

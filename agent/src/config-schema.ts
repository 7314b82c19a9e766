// The agent's config is checked against the JSON Schema it ships for editors
// (systemd/config.schema.json, share/bundle-agent/ in the artifact), so the two cannot drift:
// the schema holds the keys, their types, ranges and static defaults; this module turns the
// validator's findings into the agent's one-line problems ("KEY: what to write").
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { LIMITS, PEER_PORT_MAX, PEER_PORT_MIN } from '@offline-bundle/status';
// bundled into the artifact by esbuild: nothing is read from disk at run time
import schema from '../../systemd/config.schema.json' with { type: 'json' };

/** One problem of a config: the key it is at (dotted, list items as [i]) and what to write. */
interface KeyProblem {
  key: string;
  what: string;
}

interface SchemaNode {
  type?: string | string[];
  minimum?: number;
  default?: unknown;
  properties?: Record<string, SchemaNode>;
}

export const NODE_NAME_RULE = `is not a Kubernetes node name (lowercase letters, digits, '-' and '.'; at most ${LIMITS.nodeName})`;
const NON_EMPTY = 'must be a non-empty string';
const ABSOLUTE = 'must be an absolute path (it is taken under root)';
export const LOOPBACK_FIX = 'must be a loopback address such as 127.0.0.1:9469';
/** Every fetching node ignores a published port outside this range (agent/src/peers/directory.ts). */
const PEER_PORT_FIX = `must be a port from ${PEER_PORT_MIN} to ${PEER_PORT_MAX} (OpenShift's range for host services; peers ignore any other)`;

/** A key whose every refusal reads one way: its rule is more than one keyword. */
const WHOLE_KEY: Record<string, string> = {
  'space.reserveBytes': 'must be a byte count such as 1073741824 or "1GiB"',
  'staging.keep': 'must be true, false or untilComplete',
  'peers.uploadRate':
    'must be a byte count per second such as 52428800 or "50MiB" (at least 64KiB)',
};

/** Where a key's rule says more than the keyword that refused it. */
const FIXES: Record<string, (e: ErrorObject) => string | undefined> = {
  root: (e) => (e.keyword === 'pattern' ? 'must be an absolute path' : undefined),
  nodeName: (e) =>
    e.keyword === 'pattern' || e.keyword === 'maxLength'
      ? `${JSON.stringify(e.data)} ${NODE_NAME_RULE}`
      : undefined,
  trust: (e) =>
    e.keyword === 'anyOf' || e.keyword === 'required'
      ? "give keys (the factory's public keys) and/or digest (the expected bundle sha256): the agent loads nothing it cannot verify"
      : undefined,
  'trust.digest': (e) => (e.keyword === 'pattern' ? 'must be sha256:<64 hex digits>' : undefined),
  'version.current': (e) =>
    e.keyword === 'type' && typeof e.data === 'number'
      ? `must be quoted ("${e.data}"): YAML reads an unquoted 4.10 as the number 4.1`
      : undefined,
  prefix: (e) =>
    e.keyword === 'pattern' ? 'must be lowercase letters, digits and dashes' : undefined,
  'status.listen': (e) => (e.keyword === 'pattern' ? LOOPBACK_FIX : undefined),
  'metrics.address': (e) =>
    e.keyword === 'pattern'
      ? "must be an IP address (or left out: the Node's InternalIP)"
      : undefined,
  'peers.port': (e) =>
    e.keyword === 'minimum' || e.keyword === 'maximum' || e.keyword === 'type'
      ? PEER_PORT_FIX
      : undefined,
  'selfUpgrade.mode': (e) =>
    e.keyword === 'enum' && e.data === 'tarball'
      ? 'tarball is not built yet: on a tarball install, install a new agent with install.sh from its tarball, and set off'
      : undefined,
  'selfUpgrade.unit': (e) =>
    e.keyword === 'pattern' ? 'must be a systemd unit name (letters, digits, @ . _ -)' : undefined,
};

/** "a, b or c" */
function orList(values: unknown[]): string {
  const words = values.filter((v) => v !== null).map(String);
  return words.length > 1 ? `${words.slice(0, -1).join(', ')} or ${words.at(-1)}` : words.join('');
}

/** What a value of the wrong type should be, by the first type the key takes. */
function typeFix(node: SchemaNode): string {
  const want = [node.type ?? []].flat().find((t) => t !== 'null');
  if (want === 'object') return 'must be a mapping';
  if (want === 'array') return 'must be a list';
  if (want === 'boolean') return 'must be true or false';
  if (want === 'integer') return `must be a whole number of at least ${node.minimum ?? 0}`;
  return NON_EMPTY;
}

function fixOf(e: ErrorObject, key: string): string {
  // a key written with no value, where it has no default to read as
  if (e.keyword === 'type' && e.data === null) return 'is required';
  const whole = WHOLE_KEY[key];
  if (whole) return whole;
  // a string key left empty: refused by its length, pattern or list of values alike
  if (e.data === '' && e.keyword !== 'type') return NON_EMPTY;
  const fixed = FIXES[key]?.(e);
  if (fixed) return fixed;
  switch (e.keyword) {
    case 'type':
      return typeFix(e.parentSchema as SchemaNode);
    case 'minLength':
      return NON_EMPTY;
    case 'minimum':
      return `must be a whole number of at least ${(e.params as { limit: number }).limit}`;
    case 'enum':
      return `must be ${orList((e.params as { allowedValues: unknown[] }).allowedValues)}`;
    case 'pattern':
      return e.schema === '^/' ? ABSOLUTE : `must match ${String(e.schema)}`;
    case 'additionalProperties':
      return `unknown key (known: ${Object.keys((e.parentSchema as SchemaNode).properties ?? {}).join(', ')})`;
    default:
      return e.message ?? 'is not valid';
  }
}

/** "/trust/keys/0" as "trust.keys[0]"; the document itself is "(top)". */
function keyOf(e: ErrorObject): string {
  let key = '';
  for (const part of e.instancePath
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))) {
    key += /^\d+$/.test(part) ? `[${part}]` : key ? `.${part}` : part;
  }
  const child =
    (e.params as { additionalProperty?: string; missingProperty?: string }).additionalProperty ??
    (e.keyword === 'required'
      ? (e.params as { missingProperty: string }).missingProperty
      : undefined);
  if (child !== undefined) return key ? `${key}.${child}` : child;
  return key || '(top)';
}

/** Whether key `k` is `key` or one under it ("trust.keys[0]" is under "trust"). */
export function atOrUnder(k: string, key: string): boolean {
  return k === key || k.startsWith(`${key}.`) || k.startsWith(`${key}[`);
}

/** The refusal of a key to report: its type before its length before the rest. */
const rank = (e: ErrorObject) => (e.keyword === 'type' ? 0 : e.keyword === 'minLength' ? 1 : 2);

let validator: ValidateFunction | undefined;

/**
 * Every problem the schema finds in `doc`, one per key: unknown keys first, then the rest in
 * the schema's order. An `anyOf` (trust's keys and/or digest) is reported only when nothing
 * under its key was refused already: fixing that may be all it needs.
 */
export function schemaProblems(doc: unknown): KeyProblem[] {
  validator ??= new Ajv({
    allErrors: true,
    strict: true,
    allowUnionTypes: true,
    verbose: true,
  }).compile(schema);
  if (validator(doc)) return [];
  // the branches of an anyOf say what each alternative lacks: the anyOf itself says it once
  const errors = (validator.errors ?? []).filter((e) => !e.schemaPath.includes('/anyOf/'));
  const byKey = new Map<string, ErrorObject>();
  for (const e of errors) {
    const key = keyOf(e);
    const seen = byKey.get(key);
    if (e.keyword !== 'anyOf' && (!seen || rank(e) < rank(seen))) byKey.set(key, e);
  }
  for (const e of errors)
    if (e.keyword === 'anyOf' && ![...byKey.keys()].some((k) => atOrUnder(k, keyOf(e))))
      byKey.set(keyOf(e), e);
  const unknownFirst = [...byKey].sort(
    ([, a], [, b]) =>
      Number(b.keyword === 'additionalProperties') - Number(a.keyword === 'additionalProperties'),
  );
  return unknownFirst.map(([key, e]) => ({ key, what: fixOf(e, key) }));
}

/** The schema's default for a dotted key (a copy: callers may change it); undefined where it depends on other keys. */
export function schemaDefault(key: string): unknown {
  let node: SchemaNode | undefined = schema as SchemaNode;
  for (const part of key.split('.')) node = node?.properties?.[part];
  return structuredClone(node?.default);
}

// What `bundle-agent collect` takes off the node is read by whoever the technician sends it to:
// credentials never leave. Three nets, so that a secret in a file that does not parse, or under
// an unexpected key, is still caught:
// - by key name in parsed documents (YAML, JSON): the whole value under the key;
// - by key name line by line in any text, whatever its format and whether it parses (YAML too
//   large to parse: the same key names as the first net): YAML `key: value` or `"key": value`
//   and every line of a value over several (block scalars, continuation lines), JSON `"key": "value"` (escaped too), `KEY=value` and
//   `key = "value"` (env, shell, INI, TOML, logfmt), headers (`X-Auth-Token: ...`), command-line
//   flags (`--src-creds user:pw`, `--password x`, `login -p x`, `-u user:pw`);
// - by the shape of the value everywhere: PEM blocks, bearer/basic tokens, JWTs, OpenShift,
//   GitHub, GitLab, Slack, npm, Stripe and Google API tokens, AWS access keys (and the secret
//   beside one), k3s join tokens, bare 64-hex tokens, URL user info, long base64 runs. The shapes
//   follow the rules of common secret scanners (gitleaks, secretlint's recommended preset).
// Every pattern is linear in its input (no nested or unbounded-backtracking quantifier starts
// inside a run it already scanned): a file of whitespace or of one repeated token costs no more
// than its length.

export const REDACTED = '<redacted>';

/**
 * Key names that hold a credential, one list for every rule (parsed documents and text line by
 * line, so that a file too large to parse loses nothing): a part anywhere in the key, case and
 * separators aside (htpasswd, sessionId, kubetoken, client-key-data); a word of it, for words
 * too short to match inside others (`auth` but not `authority` or `unauthorized`); or two words
 * together. A key is split into words at -, _, ., spaces and camelCase.
 */
const SECRET_PARTS = [
  'token',
  'passw',
  'pwd',
  'passphrase',
  'secret',
  'credential',
  'creds',
  'private',
  'clientkey',
  'clientcertificate',
  'apikey',
  'authorization',
  'cookie',
  'session',
  'bearer',
];
const SECRET_WORDS = new Set(['pass', 'auth', 'auths', 'oauth', 'cred']);
/** Two words that together make a credential's key (aws_access_key_id, signing-key, ...). */
const SECRET_PAIRS = new Set(['access key', 'signing key', 'encryption key']);
/** A flag whose last word is one of these names where the credential is, not the credential (--password-stdin, --token-file). */
const WHERE_WORDS = new Set(['stdin', 'file', 'path', 'dir', 'env']);

function words(key: string): string[] {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
}

/** Whether a key (a YAML or JSON key, a variable, a header, a flag) names a credential. */
function isSecretKey(key: string): boolean {
  const joined = key.toLowerCase().replace(/[^a-z0-9]+/g, '');
  if (SECRET_PARTS.some((part) => joined.includes(part))) return true;
  const w = words(key);
  return w.some((x, i) => SECRET_WORDS.has(x) || (i > 0 && SECRET_PAIRS.has(`${w[i - 1]} ${x}`)));
}

/** Counts of what was redacted, by rule name (said in the archive's NOTES.txt). */
export type RedactionTally = Map<string, number>;

const count = (tally: RedactionTally | undefined, rule: string) =>
  tally?.set(rule, (tally.get(rule) ?? 0) + 1);

/** Values that are credentials whatever key holds them; each replaced whole. */
const SECRET_SHAPES: readonly [string, RegExp][] = [
  // a PEM block: keys and certificates alike (a certificate names its holder)
  ['PEM block', /-----BEGIN [A-Z0-9 ]{1,64}-----[\s\S]*?(-----END [A-Z0-9 ]{1,64}-----|$)/g],
  ['bearer/basic token', /\b(Bearer|Basic)[ \t]+[A-Za-z0-9._~+/=-]{8,}/gi],
  // a JWT (service account tokens): three base64url parts, the first a JSON header
  ['JWT', /(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g],
  ['OpenShift token', /\bsha256~[A-Za-z0-9_-]{20,}/g],
  ['GitHub token', /(?<![\w-])(gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})/g],
  ['GitLab token', /(?<![\w-])gl(pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}/g],
  ['Slack token', /(?<![\w-])xox[abposr]-[A-Za-z0-9-]{10,}/g],
  ['npm token', /(?<![\w-])npm_[A-Za-z0-9]{36}/g],
  ['Stripe key', /(?<![\w-])[rs]k_(live|test)_[A-Za-z0-9]{16,}/g],
  ['Google API key', /(?<![\w-])AIza[0-9A-Za-z_-]{35}/g],
  // an AWS access key id, and a 40-character secret written beside it (the pair of a credentials line)
  [
    'AWS access key',
    /(?<![A-Z0-9])(AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[A-Z0-9]{16}(?![A-Z0-9])([ \t,;:|="']{1,8}[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+]))?/g,
  ],
  // k3s / rke2 join token: K10<ca hash>::<user>:<password>
  ['k3s token', /(?<![\w-])K10[0-9a-f]{32,}::[^\s:]{1,64}:[^\s]+/g],
  // key=value credentials in a command line, and a URL's user info
  ['URL user info', /\/\/[^/\s:@]{1,256}:[^/\s@]{1,256}@/g],
];

/**
 * A bare 64-hex token (a k3s/kubeadm or API token). A digest is kept: after `sha256:`, `sha256-`,
 * `@` or `/` (paths of layers), or as the JSON value of an id, digest, imageRef, fingerprint or signer.
 */
const HEX64 =
  /(?<![\w:~@/.+-])(?<!"(id|imageId|imageRef|image_id|containerId|digest|layer|fingerprint|signer|sha256|checksum)"[ \t]*:[ \t]*")[0-9a-fA-F]{64}(?![\w])/g;

/**
 * Long base64 runs (kubeconfig *-data under an unexpected key). Random base64 this long mixes
 * upper and lower case and digits; a digest (hex) or a long path seldom does: those are kept.
 */
const LONG_BASE64 = /(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{64,}={0,2}(?![A-Za-z0-9+/=])/g;

/** Line rules by key name: [rule, pattern, group of the key, group of the value]. */
const KEY_RULES: readonly [string, RegExp][] = [
  // JSON inside a JSON string (a log line's message): \"password\":\"x\"
  ['escaped JSON key', /(\\"([\w .-]{1,128})\\"[ \t]*:[ \t]*\\")((?:[^"\\\n]|\\[^"\n])*)(?=\\")/g],
  // JSON (or a YAML flow mapping, a Python repr): "password": "x", 'token': 'y'
  ['JSON key', /("((?:[^"\\\n]|\\.){1,128})"[ \t]*:[ \t]*")((?:[^"\\\n]|\\.)*)(?=")/g],
  ['JSON key', /('([^'\n]{1,128})'[ \t]*:[ \t]*')([^'\n]*)(?=')/g],
  // env, shell, INI, TOML, logfmt, flags: KEY=value, key = "value", --password=x
  [
    'key=value',
    /((?<![\w.-])(-{0,2}[A-Za-z_][\w.-]{0,127})[ \t]*=[ \t]*)("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s,;&"'][^\s,;&]*)/g,
  ],
  // a flag and its value as the next argument: --src-creds user:pw, --password x
  ['flag value', /((?<![\w-])(--?[A-Za-z][\w-]{0,63})[ \t]+)([^\s-]\S*)/g],
];

/** YAML, headers, log fields: a key (quoted or not) and its colon; its value, to the end of the line, is what follows. */
const COLON_KEY = /(?<![\w.-])(["']?)([A-Za-z][\w.-]{0,127})\1[ \t]*:[ \t]+/g;
/** A quoted string closed on its line, at lastIndex: after a quoted key the JSON key rule redacts it alone. */
const CLOSED_STRING = /"(?:[^"\\\n]|\\.)*"|'[^'\n]*'/y;

/**
 * `key: value` with the value (to the end of the line) replaced when the key names a credential;
 * a key that does not leaves the rest of its line to be searched on (`headers: X-Auth-Token: x`).
 * A block indicator (`|`, `>`) or a comment is not a value: redactBlocks has those.
 */
function redactColonKeys(text: string, tally?: RedactionTally): string {
  const parts: string[] = [];
  let at = 0;
  COLON_KEY.lastIndex = 0;
  for (let m = COLON_KEY.exec(text); m; m = COLON_KEY.exec(text)) {
    const start = m.index + m[0].length;
    if (
      !isSecretKey(m[2]!) ||
      /^([#\s]|[|>][-+0-9]*[ \t]*(\n|$))/.test(text.slice(start, start + 8))
    )
      continue;
    CLOSED_STRING.lastIndex = start;
    if (m[1] !== '' && CLOSED_STRING.test(text)) continue;
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    if (text.slice(start, end) === REDACTED) continue;
    parts.push(text.slice(at, start), REDACTED);
    count(tally, 'key: value');
    at = end;
    COLON_KEY.lastIndex = end;
  }
  parts.push(text.slice(at));
  return parts.join('');
}

/** A value that is the marker already, with at most the quotes, brackets or commas that close it. */
const ALREADY_REDACTED = new RegExp(`^"?${REDACTED}["',\\])}]*$`);

/** Replaces the value of every `key` a rule finds when the key names a credential. */
function redactKeys(text: string, tally?: RedactionTally): string {
  let out = redactColonKeys(text, tally);
  for (const [rule, re] of KEY_RULES) {
    out = out.replace(
      re,
      (whole: string, before: string, key: string, value: string | undefined) => {
        // a value redacted before (a document's string, then its JSON): its closing quote or bracket is not part of it
        if (
          value === undefined ||
          value === '' ||
          ALREADY_REDACTED.test(value) ||
          !isSecretKey(key)
        )
          return whole;
        if (rule === 'flag value' && WHERE_WORDS.has(words(key).at(-1) ?? '')) return whole;
        count(tally, rule);
        return `${before}${/^["']/.test(value) ? `${value[0]}${REDACTED}${value[0]}` : REDACTED}`;
      },
    );
  }
  // `login ... -p secret` (docker, podman, helm registry) and `-u user:password` (curl)
  out = out.replace(
    /(\blogin\b[^\n]{0,200}?[ \t]-p[ \t]+)(\S+)/g,
    (_w, before: string) => (count(tally, 'flag value'), `${before}${REDACTED}`),
  );
  return out.replace(
    /((?<![\w-])-u[ \t]+[^\s:]{1,128}:)(\S+)/g,
    (_w, before: string) => (count(tally, 'flag value'), `${before}${REDACTED}`),
  );
}

/** A YAML line that starts with a key (quoted or not, in a sequence's entry or not) and its colon; after it, the key's value on that line. */
const LINE_KEY = /^([ \t]*(?:-[ \t]+)?)(["']?)([A-Za-z_][\w.-]{0,127})\2[ \t]*:(?=[ \t]|$)/;
/** Tab stops, for the column of a line indented with tabs (YAML refuses them; a file that does not parse may have them). */
const TAB_WIDTH = 8;

/** The column where `prefix` (spaces, tabs, a sequence's `- `) ends, tabs to the next stop. */
function columnOf(prefix: string): number {
  let column = 0;
  for (const c of prefix)
    column = c === '\t' ? column - (column % TAB_WIDTH) + TAB_WIDTH : column + 1;
  return column;
}

/**
 * The lines after a secret key's line that belong to its value (j, the first that does not): every
 * line indented deeper than the key (a block scalar, a nested mapping, a plain or quoted scalar's
 * continuation), and, when nothing follows the key on its line, a sequence's entries at the key's own column.
 */
function valueEnd(lines: string[], i: number, column: number, valueOnLine: boolean): number {
  let j = i + 1;
  for (; j < lines.length; j++) {
    const line = lines[j]!;
    const lead = /^[ \t]*/.exec(line)![0];
    if (lead.length === line.length || columnOf(lead) > column) continue;
    if (
      !valueOnLine &&
      columnOf(lead) === column &&
      /^-([ \t]|$)/.test(line.slice(lead.length, lead.length + 2))
    )
      continue;
    break;
  }
  while (j > i + 1 && lines[j - 1]!.trim() === '') j--;
  return j;
}

/**
 * YAML values over several lines under a credential's key, whether or not the file parses:
 * `password: |` (or `>`, or a tag, or nothing: a nested mapping or a sequence following), a
 * multi-line plain or quoted value; its lines after the key's replaced by one (the key's own
 * line is redactColonKeys's).
 */
function redactBlocks(text: string, tally?: RedactionTally): string {
  const lines = text.split('\n');
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    out.push(line);
    const m = LINE_KEY.exec(line);
    if (!m || !isSecretKey(m[3]!)) continue;
    const column = columnOf(m[1]!);
    const j = valueEnd(lines, i, column, !/^[ \t]*(#.*)?$/.test(line.slice(m[0].length)));
    if (j === i + 1) continue;
    count(tally, 'key: block');
    out.push(`${' '.repeat(column + 2)}${REDACTED}`);
    i = j - 1;
  }
  return out.join('\n');
}

/** `text` with every credential found by shape or by key name replaced by REDACTED; `tally` counts what, by rule. */
export function redactText(text: string, tally?: RedactionTally): string {
  let out = text;
  for (const [rule, re] of SECRET_SHAPES)
    out = out.replace(re, () => (count(tally, rule), REDACTED));
  out = redactKeys(redactBlocks(out, tally), tally);
  out = out.replace(HEX64, () => (count(tally, '64-hex token'), REDACTED));
  return out.replace(LONG_BASE64, (run) =>
    /[A-Z]/.test(run) && /[a-z]/.test(run) && /\d/.test(run)
      ? (count(tally, 'long base64'), REDACTED)
      : run,
  );
}

/** A command line as a list (`[skopeo, copy, --src-creds, user:pw]`): the element after a credential's flag replaced. */
function redactArgv(list: unknown[]): unknown[] {
  return list.map((v, i) => {
    const flag = list[i - 1];
    if (
      typeof flag !== 'string' ||
      !/^--?[A-Za-z][\w-]*$/.test(flag) ||
      !isSecretKey(flag) ||
      WHERE_WORDS.has(words(flag).at(-1) ?? '')
    )
      return v;
    return typeof v === 'string' && !v.startsWith('-') ? REDACTED : v;
  });
}

/**
 * A parsed document (YAML or JSON) with every value under a secret key name replaced whole
 * (a mapping or a list under it too), and every remaining string held to the shapes.
 */
export function redactDocument(value: unknown, tally?: RedactionTally, depth = 0): unknown {
  if (depth > 64) return REDACTED;
  if (typeof value === 'string') return redactText(value, tally);
  if (Array.isArray(value))
    return redactArgv(value).map((v) => redactDocument(v, tally, depth + 1));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const secret = isSecretKey(k) && v !== null && v !== '' && v !== REDACTED;
      if (secret) count(tally, 'document key');
      out[k] = secret ? REDACTED : redactDocument(v, tally, depth + 1);
    }
    return out;
  }
  return value;
}

/** One line for the archive's notes: what was redacted in `name`, by rule (never a value). */
export function tallyLine(name: string, tally: RedactionTally): string | undefined {
  if (tally.size === 0) return undefined;
  return `${name}: ${[...tally]
    .sort((a, b) => b[1] - a[1])
    .map(([rule, n]) => `${n} × ${rule}`)
    .join(', ')}`;
}

// What `bundle-agent collect` takes off the node is read by whoever the technician sends it to:
// credentials never leave. Two nets, so that a secret under an unexpected key is still caught:
// by key name (token, password, client-key-data, ...) in documents, and by the shape of the
// value (PEM blocks, bearer tokens, JWTs, OpenShift tokens, long base64) everywhere.

export const REDACTED = '<redacted>';

/** Key names whose values are credentials (kubeconfig users, auth files, anything alike). */
const SECRET_KEY = /(token|passw|secret|credential|private|client-key|client-certificate|auth|apikey|api-key|cookie|session)/i;

/** Values that are credentials whatever key holds them; each replaced whole. */
const SECRET_SHAPES: readonly RegExp[] = [
  // a PEM block: keys and certificates alike (a certificate names its holder)
  /-----BEGIN [A-Z0-9 ]+-----[\s\S]*?(-----END [A-Z0-9 ]+-----|$)/g,
  /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi,
  // a JWT (service account tokens): three base64url parts, the first a JSON header
  /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g,
  // OpenShift OAuth tokens
  /\bsha256~[A-Za-z0-9_-]{20,}/g,
  // key=value credentials in a command line or a URL's user info
  /\b(password|passwd|pwd|token|secret|creds|credentials|api[-_]?key)=\S+/gi,
  /(?<=--(password|passwd|creds|token|secret)\s+)\S+/gi,
  /\/\/[^/\s:@]+:[^/\s@]+@/g,
];

/**
 * Long base64 runs (kubeconfig *-data under an unexpected key). Random base64 this long mixes
 * upper and lower case and digits; a digest (hex) or a long path seldom does: those are kept.
 */
const LONG_BASE64 = /(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{64,}={0,2}(?![A-Za-z0-9+/=])/g;

/** `text` with every value of a secret shape replaced by REDACTED. */
export function redactText(text: string): string {
  const shaped = SECRET_SHAPES.reduce((t, re) => t.replace(re, REDACTED), text);
  return shaped.replace(LONG_BASE64, (run) => (/[A-Z]/.test(run) && /[a-z]/.test(run) && /\d/.test(run) ? REDACTED : run));
}

/** Whether a key names a credential. Public key paths (trust.keys) are paths, not keys: kept. */
export function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key) && key !== 'keys';
}

/**
 * A parsed document (YAML or JSON) with every value under a secret key name replaced whole
 * (a mapping or a list under it too), and every remaining string held to the shapes.
 */
export function redactDocument(value: unknown, depth = 0): unknown {
  if (depth > 64) return REDACTED;
  if (typeof value === 'string') return redactText(value);
  if (Array.isArray(value)) return value.map((v) => redactDocument(v, depth + 1));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = isSecretKey(k) && v !== null && v !== '' ? REDACTED : redactDocument(v, depth + 1);
    return out;
  }
  return value;
}

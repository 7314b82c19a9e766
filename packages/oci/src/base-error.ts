/**
 * The one error shape of every package: a stable `code` callers branch on (never the
 * message text), an optional cause, and a message that is one line a person can act on.
 */
export class BaseError<Code extends string> extends Error {
  readonly code: Code;
  constructor(code: Code, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** First non-empty line of a (possibly multi-line) message, trimmed. */
export function firstLine(text: unknown): string {
  const s = text instanceof Error ? text.message : String(text);
  for (const line of s.split(/\r?\n/)) {
    const l = line.trim();
    if (l) return l;
  }
  return '';
}

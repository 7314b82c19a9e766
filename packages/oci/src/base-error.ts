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

/**
 * For a CLI built on commander: the exit code of a commander outcome (help and version 0,
 * usage errors 2), or undefined for an error of the command itself. Duck-typed, so the
 * libraries do not depend on commander.
 */
export function usageExitCode(err: unknown): 0 | 2 | undefined {
  const e = err as { code?: unknown; exitCode?: number };
  if (typeof e?.code !== 'string' || !e.code.startsWith('commander.')) return undefined;
  if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') return 0;
  // 'commander.help' is both `x help` (exit code 0) and help shown for a missing command (1)
  return e.code === 'commander.help' && e.exitCode === 0 ? 0 : 2;
}

/**
 * Nesting is bounded before any parser sees text from outside: the yaml library recurses per
 * level and a 3 MB `[[[[…` took it to 1.7 GB and an abort (V8 heap out of memory); JSON.parse
 * itself copes, but client-node's deserializer, ajv and every walk after it recurse per level
 * (a 63 MiB answer of nested arrays cost 3.5 GB and two minutes). The scans here are linear,
 * one pass, and keep nothing but a few counters.
 */
import { HostError } from './errors.js';
import { yamlTooDeep } from './yaml-depth.js';

/** Deepest nesting read from outside: far above any Kubernetes object, catalog or config (some 30 levels at most). */
export const MAX_NESTING_DEPTH = 100;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const NEWLINE = 0x0a;

/**
 * Counts the nesting of JSON text (`{` and `[` outside strings) as its bytes arrive, so an
 * answer read in chunks is refused at the level that breaks the bound, before it is whole.
 * Bytes or a string (counted as its UTF-8, in which no byte of a multi-byte character is an
 * ASCII bracket or quote).
 */
export class JsonNestingGauge {
  /** The line (1-based) where the nesting first went past `max`; undefined while within it. */
  overAtLine: number | undefined;
  private depth = 0;
  private line = 1;
  private inString = false;
  private escaped = false;

  constructor(readonly max = MAX_NESTING_DEPTH) {}

  /** Feeds the next piece of the text; false once the nesting went past `max`. */
  feed(chunk: Uint8Array | string): boolean {
    if (this.overAtLine !== undefined) return false;
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    // locals, not fields, in the loop: it runs over every byte of answers of up to 64 MiB
    let { depth, line, inString, escaped } = this;
    const max = this.max;
    for (let i = 0; i < bytes.length; i++) {
      const c = bytes[i]!;
      if (inString) {
        if (escaped) escaped = false;
        else if (c === BACKSLASH) escaped = true;
        else if (c === QUOTE) inString = false;
        else if (c === NEWLINE) line++;
      } else if (c === QUOTE) inString = true;
      else if (c === NEWLINE) line++;
      else if (c === 0x5b || c === 0x7b) {
        if (++depth > max) {
          this.overAtLine = line;
          return false;
        }
      } else if ((c === 0x5d || c === 0x7d) && depth > 0) depth--;
    }
    this.depth = depth;
    this.line = line;
    this.inString = inString;
    this.escaped = escaped;
    return true;
  }
}

/** The line (1-based) where `text` first nests deeper than `max`, or undefined when it stays within. */
export function nestingTooDeep(
  text: string,
  syntax: 'json' | 'yaml',
  max = MAX_NESTING_DEPTH,
): number | undefined {
  if (syntax === 'yaml') return yamlTooDeep(text, max);
  const gauge = new JsonNestingGauge(max);
  gauge.feed(text);
  return gauge.overAtLine;
}

/** The one-line refusal of `what` (a file's name, "the answer of …") nested past `max` at `line`. */
export function tooDeepError(what: string, line: number, max = MAX_NESTING_DEPTH): HostError {
  return new HostError(
    'TOO_DEEPLY_NESTED',
    `${what}:${line} nests deeper than ${max} levels (MAX_NESTING_DEPTH), more than any config or catalog does: is it the right file?`,
  );
}

/** Refuses `text` (named `what`) that nests deeper than `max`, before any parser sees it. */
export function assertNesting(
  text: string,
  syntax: 'json' | 'yaml',
  what: string,
  max = MAX_NESTING_DEPTH,
): void {
  const line = nestingTooDeep(text, syntax, max);
  if (line !== undefined) throw tooDeepError(what, line, max);
}

/**
 * Whether a parsed value nests deeper than `max`, walked without recursion. The text scans
 * cannot see it: an alias puts its anchor's whole depth where it stands, so 90 anchors of 90
 * levels, each holding the one before, parse to 8,100 levels from 17.5 KB, and JSON.stringify
 * or any walk after it overflows the stack. Aliases share objects: each is walked again only
 * from a deeper level than before, and a cycle (an alias inside its own anchor) is too deep.
 */
export function valueTooDeep(value: unknown, max = MAX_NESTING_DEPTH): boolean {
  const deepest = new Map<object, number>();
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth > max) return true;
    if ((deepest.get(v) ?? 0) >= depth) continue;
    deepest.set(v, depth);
    for (const child of v instanceof Map ? v.values() : Object.values(v))
      stack.push([child, depth + 1]);
  }
  return false;
}

/** Refuses a value parsed from `what` that nests deeper than `max` once its aliases are expanded. */
export function assertValueNesting(value: unknown, what: string, max = MAX_NESTING_DEPTH): void {
  if (valueTooDeep(value, max)) {
    throw new HostError(
      'TOO_DEEPLY_NESTED',
      `${what} nests deeper than ${max} levels (MAX_NESTING_DEPTH) once its aliases (*name) are expanded, more than any config or catalog does: is it the right file?`,
    );
  }
}

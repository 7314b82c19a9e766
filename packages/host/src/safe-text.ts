/**
 * Untrusted text (entry names, bundle.json strings, file names on the media, messages that
 * quote them) must not drive a terminal, the console or the journal: an ESC could clear the
 * screen and draw a fake "Done", a bidi override could reorder what a person reads.
 */

// Cc: C0, DEL and C1 controls (line feeds too: every output is one line); Cf: format
// characters (bidi embeddings, overrides and isolates, zero-width characters, BOM, tag
// characters); Zl/Zp: line and paragraph separators; Cs: lone surrogates.
const UNSAFE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/gu;

function visible(ch: string): string {
  const cp = ch.codePointAt(0)!;
  if (cp < 0x100) return `\\x${cp.toString(16).padStart(2, '0')}`;
  if (cp <= 0xffff) return `\\u${cp.toString(16).padStart(4, '0')}`;
  return `\\u{${cp.toString(16)}}`;
}

/**
 * Replaces every control and dangerous Unicode format character with a visible escape
 * (`\x1b`, `\u202e`). The result is printable and idempotent (backslashes are left alone),
 * so every output may apply it whether or not an earlier layer already did.
 */
export function escapeControls(text: string): string {
  return text.replace(UNSAFE, visible);
}

/** Rows under a header, in columns two spaces apart; every cell escaped (they quote untrusted text). */
export function textTable(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const cells = [head, ...rows].map((r) => r.map((x) => escapeControls(x)));
  const w = head.map((_, i) => Math.max(...cells.map((c) => (c[i] ?? '').length)));
  return (
    cells
      .map((c) =>
        c
          .map((x, i) => x.padEnd(w[i]!))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

/** The most characters of an untrusted name an error quotes: a tar entry's name may run to megabytes (a GNU long name). */
export const MAX_QUOTED_CHARS = 200;

/**
 * An untrusted name (a tar entry's, an image reference, a path from bundle.json) as an error
 * line quotes it: in double quotes, controls escaped, and past MAX_QUOTED_CHARS cut with a note
 * of its full length, so that no name can make a line megabytes long.
 */
export function quoteName(name: string): string {
  if (name.length <= MAX_QUOTED_CHARS) return `"${escapeControls(name)}"`;
  // not half of a surrogate pair at the cut
  const cut = /[\ud800-\udbff]$/.test(name.slice(0, MAX_QUOTED_CHARS))
    ? MAX_QUOTED_CHARS - 1
    : MAX_QUOTED_CHARS;
  return `"${escapeControls(name.slice(0, cut))}…" (${name.length} characters)`;
}

// The project's prose lives in README.md (the front door) and docs/*.md (issue #41, "Docs that
// lead"). Tests that hold the docs to the code read them through here, by heading or by page,
// so a section can move between pages without the tests that check it going blind.
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

export const ROOT = new URL('../../', import.meta.url).pathname;

/** README.md and every docs/*.md, as paths relative to the repository root. */
export function docFiles(): string[] {
  const docs = readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort();
  return ['README.md', ...docs.map((f) => `docs/${f}`)];
}

/** The text of one page, by its path relative to the repository root (`docs/install.md`). */
export function readDoc(file: string): string {
  return readFileSync(path.join(ROOT, file), 'utf8');
}

export interface Heading {
  level: number;
  text: string;
  line: number;
}

/** The Markdown headings of a page, skipping fenced code (where `#` starts a shell comment). */
export function headings(text: string): Heading[] {
  const out: Heading[] = [];
  let fence = false;
  text.split('\n').forEach((l, line) => {
    if (/^\s*```/.test(l)) fence = !fence;
    const m = fence ? null : /^(#{1,6}) +(.+?) *#*$/.exec(l);
    if (m) out.push({ level: m[1]!.length, text: m[2]!, line });
  });
  return out;
}

/**
 * One section wherever it now lives: the heading whose text is `heading` (exactly, as written
 * after the `#`s) in README.md or docs/*.md, through to the next heading of the same or a higher
 * level. Throws when no page, or more than one, has it: a test must not silently read nothing.
 */
export function docsSection(heading: string): { file: string; text: string } {
  const found: { file: string; text: string }[] = [];
  for (const file of docFiles()) {
    const text = readDoc(file);
    const hs = headings(text);
    hs.forEach((h, i) => {
      if (h.text !== heading) return;
      const end = hs.slice(i + 1).find((n) => n.level <= h.level);
      found.push({ file, text: text.split('\n').slice(h.line, end?.line).join('\n') });
    });
  }
  if (found.length !== 1) {
    throw new Error(
      `docs: the heading "${heading}" is in ${found.length === 0 ? 'no page' : found.map((f) => f.file).join(' and ')} of README.md and docs/*.md: a test that reads it needs exactly one`,
    );
  }
  return found[0]!;
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  const plain = heading.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/<[^>]+>/g, '');
  return plain
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a page offers, with GitHub's `-1`, `-2` … for a heading met again. */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const h of headings(text)) {
    const base = slug(h.text);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/**
 * The relative link targets of a page (Markdown links and images, HTML `src`/`href`), outside
 * fenced and inline code; URLs with a scheme (https:, mailto:) are left out.
 */
export function relativeLinks(text: string): string[] {
  let fence = false;
  // inline code may wrap onto the next line, so it is taken out of the whole text, not per line
  const prose = text
    .split('\n')
    .map((l) => {
      if (/^\s*```/.test(l)) {
        fence = !fence;
        return '';
      }
      return fence ? '' : l;
    })
    .join('\n')
    .replace(/`[^`]*`/g, '');
  const targets = [
    ...[...prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!),
    ...[...prose.matchAll(/\b(?:src|href)="([^"]+)"/g)].map((m) => m[1]!),
  ];
  return targets.filter((u) => !/^[a-z][a-z0-9+.-]*:/i.test(u));
}

/**
 * A shell block of a page meant to be run as written (issue #39): its fence's info string is
 * the language (`sh`, `bash` or `shell`, which GitHub still highlights: it reads only the first
 * word) then `run=GROUP` and optionally `after=stick` (run once the stick is plugged in) or
 * `on=workstation` (an admin's commands, run off the node, e.g. `oc apply`):
 *
 *     ```sh run=plain-linux
 *     ```sh run=plain-linux after=stick
 *     ```sh run=quadlet on=workstation
 */
export interface RunBlock {
  file: string;
  line: number;
  group: string;
  after?: 'stick';
  on?: 'workstation';
  code: string;
}

const RUN_LANGUAGES = new Set(['sh', 'bash', 'shell']);
const RUN_KEYS: Record<string, (v: string) => boolean> = {
  run: (v) => /^[a-z][a-z0-9-]*$/.test(v),
  after: (v) => v === 'stick',
  on: (v) => v === 'workstation',
};
/** What the docs tell the reader to replace: `<running-version>` (lower case, digits, hyphens). */
const PLACEHOLDER = /<([a-z][a-z0-9-]*)>/g;

/** Every block with `run=` in its info string, in page order; a malformed marker throws, naming the line. */
export function markedBlocks(file: string, text = readDoc(file)): RunBlock[] {
  const out: RunBlock[] = [];
  let open: { indent: string; block?: RunBlock; lines: string[] } | undefined;
  text.split('\n').forEach((l, i) => {
    const fence = /^(\s*)```(.*)$/.exec(l);
    if (open) {
      if (fence && fence[2]!.trim() === '') {
        if (open.block) out.push({ ...open.block, code: `${open.lines.join('\n')}\n` });
        open = undefined;
      } else
        open.lines.push(l.startsWith(open.indent) ? l.slice(open.indent.length) : l.trimStart());
      return;
    }
    if (!fence) return;
    const [lang = '', ...words] = fence[2]!.trim().split(/\s+/);
    open = { indent: fence[1]!, lines: [] };
    const attrs = Object.fromEntries(words.map((w) => w.split('=', 2) as [string, string]));
    if (!('run' in attrs)) return;
    const where = `${file}:${i + 1}`;
    if (!RUN_LANGUAGES.has(lang))
      throw new Error(
        `${where}: a block marked run= must be \`\`\`sh (or bash, shell), not "${lang}"`,
      );
    for (const [k, v] of Object.entries(attrs)) {
      if (!RUN_KEYS[k]?.(v ?? ''))
        throw new Error(
          `${where}: "${k}=${v}" in the fence: write run=GROUP (lower case) and at most after=stick or on=workstation`,
        );
    }
    open.block = {
      file,
      line: i + 1,
      group: attrs.run!,
      ...(attrs.after ? { after: 'stick' as const } : {}),
      ...(attrs.on ? { on: 'workstation' as const } : {}),
      code: '',
    };
  });
  if (open)
    throw new Error(`${file}: the code block opened at the end of the page is never closed`);
  return out;
}

/**
 * The blocks of `group` on a page, in page order, with each `<name>` placeholder replaced by
 * `values[name]` (the only change made to a block). Throws when the page has no such block, a
 * placeholder has no value, or a value no placeholder uses: the test and the page must agree.
 */
export function runBlocks(
  file: string,
  group: string,
  values: Record<string, string> = {},
  text?: string,
): RunBlock[] {
  const blocks = markedBlocks(file, text).filter((b) => b.group === group);
  if (!blocks.length) throw new Error(`${file}: no block marked run=${group}`);
  const used = new Set<string>();
  const filled = blocks.map((b) => ({
    ...b,
    code: b.code.replace(PLACEHOLDER, (_, name: string) => {
      if (!(name in values))
        throw new Error(
          `${b.file}:${b.line}: the block has the placeholder <${name}>, which the test does not fill`,
        );
      used.add(name);
      return values[name]!;
    }),
  }));
  const unused = Object.keys(values).filter((k) => !used.has(k));
  if (unused.length)
    throw new Error(
      `${file}: no block marked run=${group} has the placeholder ${unused.map((k) => `<${k}>`).join(', ')} the test fills`,
    );
  return filled;
}

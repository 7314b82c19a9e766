// tier: unit
// The docs' pictures (docs/admin.md) come from scripts/screenshots.mjs (#40 item 4): agents loading a real
// bundle and reporting to the API stand-in, the real dashboard in Chromium. The script writes
// docs/img/screenshots.json beside the PNGs: each picture's sha256 and what its rows say. This
// test fails when a picture the docs show is not one the script made (a hand-made or
// test-fixture image, or one changed after), and when a message in a picture is not one the
// agent can write: every part of it must be a fixed piece of a string in agent/src or
// packages/{status,cli,kube}/src, or a value (a number, a size, a version, a reason code).
import t from 'tap';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { docFiles, readDoc } from '../helpers/docs.js';
import { ROOT } from './lib.js';

const IMG = path.join(ROOT, 'docs', 'img');
interface Manifest {
  script: string;
  images: {
    file: string;
    sha256: string;
    rows: { node: string; phase: string; reason: string; message: string }[];
  }[];
}
const MANIFEST = path.join(IMG, 'screenshots.json');
// none: no picture was made by the script (each check below then fails, naming the picture)
const manifest: Manifest = existsSync(MANIFEST)
  ? JSON.parse(readFileSync(MANIFEST, 'utf8'))
  : { script: '', images: [] };

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return tsFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** Every fixed piece of text in the sources' strings: string literals and each literal part of a template. */
export function fixedParts(files: string[]): Set<string> {
  const out = new Set<string>();
  for (const file of files) {
    const src = ts.createSourceFile(
      file,
      readFileSync(file, 'utf8'),
      ts.ScriptTarget.Latest,
      false,
    );
    const visit = (n: ts.Node): void => {
      if (
        ts.isStringLiteral(n) ||
        ts.isNoSubstitutionTemplateLiteral(n) ||
        ts.isTemplateHead(n) ||
        ts.isTemplateMiddle(n) ||
        ts.isTemplateTail(n)
      ) {
        if (n.text.trim()) out.add(n.text);
      }
      ts.forEachChild(n, visit);
    };
    visit(src);
  }
  return out;
}

/** A part of a message that is not fixed text: a number, a size or rate, a version, a name, a reason code. */
const VALUE =
  /^(?:[\w.:/@-]*\d[\w.:/@-]*|[KMGT]?i?B(?:\/s)?|[A-Z][a-z]+(?:[A-Z][a-z]*)+|[a-z]{1,3})$/;

/**
 * What is left of `message` once every fixed part (5 characters or more without its spaces,
 * longest first) is taken out: the words that are neither fixed text nor values. Empty: the
 * agent can write it.
 */
export function unexplained(message: string, parts: Set<string>): string[] {
  let rest = message;
  for (const p of [...parts]
    .filter((x) => x.trim().length >= 5)
    .sort((a, b) => b.length - a.length)) {
    if (rest.includes(p)) rest = rest.split(p).join('\u0000');
  }
  return rest
    .split(/[\u0000\s]+/)
    .map((w) => w.replace(/^[(,;:]+|[),;:.]+$/g, ''))
    .filter((w) => w && !VALUE.test(w));
}

const parts = fixedParts([
  ...tsFiles(path.join(ROOT, 'agent', 'src')),
  ...['status', 'cli', 'kube'].flatMap((p) => tsFiles(path.join(ROOT, 'packages', p, 'src'))),
]);

t.test(
  'every picture the README or docs/*.md show is listed, with the hash of the file',
  async (t) => {
    t.ok(
      existsSync(MANIFEST),
      'docs/img/screenshots.json: written by scripts/screenshots.mjs with the pictures',
    );
    t.equal(manifest.script, 'scripts/screenshots.mjs');
    t.ok(existsSync(path.join(ROOT, manifest.script)), 'the script is in the repo');
    // the pictures moved with their section (docs/admin.md shows them as img/…): read every page
    const pages = docFiles().map(readDoc).join('\n');
    const shown = [...new Set([...pages.matchAll(/\bimg\/([\w.-]+\.png)/g)].map((m) => m[1]!))];
    t.ok(shown.length >= 3, `the docs show ${shown.join(', ')}`);
    for (const file of shown) {
      const entry = manifest.images.find((i) => i.file === file);
      t.ok(entry, `${file} is one scripts/screenshots.mjs made`);
      if (!entry) continue;
      const hash = createHash('sha256')
        .update(readFileSync(path.join(IMG, file)))
        .digest('hex');
      t.equal(
        hash,
        entry.sha256,
        `${file} is the picture the script wrote (run "pnpm screenshots" to make it again)`,
      );
    }
    const pngs = readdirSync(IMG).filter((f) => f.endsWith('.png'));
    t.same(
      pngs.filter((f) => !manifest.images.some((i) => i.file === f)),
      [],
      'no other picture in docs/img',
    );
  },
);

t.test('every node message in the pictures is one the agent writes', async (t) => {
  const rows = manifest.images.flatMap((i) => i.rows.map((r) => ({ ...r, file: i.file })));
  t.ok(rows.length > 0, 'the pictures show rows');
  t.ok(
    ['Ready', 'Preloading', 'Failed'].every((p) => rows.some((r) => r.phase === p)),
    'Ready, Preloading and Failed rows',
  );
  for (const r of rows.filter((x) => x.message !== '-')) {
    t.notMatch(r.message, /[<>]/, `${r.file} ${r.node}: no markup in a message`);
    t.same(
      unexplained(r.message, parts),
      [] as string[],
      `${r.file} ${r.node}: "${r.message}" is made of the agent's own words`,
    );
  }
  for (const r of rows.filter((x) => x.reason))
    t.ok(parts.has(r.reason), `${r.file} ${r.node}: reason ${r.reason} is one the sources name`);
});

t.test('the check itself: fixture sentences and markup are caught', async (t) => {
  t.same(
    unexplained('Done: update 4.15.1 is loaded on this node. You may remove the USB stick.', parts),
    [],
  );
  t.same(
    unexplained('Copying 7.4 GB of 18.4 GB, about 4 min left. Do not remove the USB stick.', parts),
    [],
  );
  t.not(
    unexplained('Done: 4.15.1 is loaded. You can remove the USB stick.', parts).length,
    0,
    'a sentence the agent never writes',
  );
  t.not(
    unexplained('<img src=x onerror="window.pwned=1">disk <b>full</b>', parts).length,
    0,
    'the XSS test string',
  );
  // the other sentences the earlier, hand-seeded pictures showed
  t.not(unexplained('Loading images into the container runtime.', parts).length, 0);
  t.not(unexplained('Copying the bundle from the stick: do not remove it.', parts).length, 0);
});

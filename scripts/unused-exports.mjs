#!/usr/bin/env node
// `pnpm lint`, third part: every export of shipped code (agent/src, builder/src, packages/*/src)
// has an importer, so a package's surface says what others use of it (#41). An export counts as
// used when some other file imports it by name, through its package's index or directly; a
// re-export passes the use on to the module it names. Importers are the shipped code, the bins,
// scripts/, bench/ and test/: a test pins an export as a seam it checks, and reaching past the
// index into dist/ instead would tie tests to file layout. A namespace import or a literal
// dynamic import() uses every export of its module.
//
//   node scripts/unused-exports.mjs            # list the unused exports; exit 1 if any
//   node scripts/unused-exports.mjs --counts   # exports per package and how many are unused
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const shippedDirs = (root) => [
  'agent/src',
  'builder/src',
  ...readdirSync(path.join(root, 'packages')).map((p) => `packages/${p}/src`),
];
const OTHER_IMPORTER_DIRS = ['agent/bin', 'builder/bin', 'scripts', 'bench', 'test'];
const SOURCE_FILE = /\.(ts|mts|mjs|js)$/;
const SKIPPED_DIR = new Set(['node_modules', 'dist', 'fixtures', 'results']);

/** Every source file under `dir` (relative to ROOT), declaration files and fixtures left out. */
function sourceFiles(root, dir) {
  const abs = path.join(root, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { withFileTypes: true }).flatMap((e) => {
    if (e.isDirectory())
      return SKIPPED_DIR.has(e.name) ? [] : sourceFiles(root, path.join(dir, e.name));
    return SOURCE_FILE.test(e.name) && !e.name.endsWith('.d.ts') ? [path.join(abs, e.name)] : [];
  });
}

/** Package name -> the absolute path of its src/index.ts, for bare `@offline-bundle/…` imports. */
function packageEntries(root) {
  const entries = new Map();
  for (const dir of shippedDirs(root)) {
    const pkg = path.join(root, dir, '..', 'package.json');
    if (existsSync(pkg))
      entries.set(JSON.parse(readFileSync(pkg, 'utf8')).name, path.join(root, dir, 'index.ts'));
  }
  return entries;
}

/** The source file an import specifier names, or undefined outside the scanned code (dist/x.js maps to src/x.ts). */
function resolver(entries) {
  return (from, spec) => {
    if (entries.has(spec)) return entries.get(spec);
    if (!spec.startsWith('.')) return undefined;
    const abs = path.resolve(path.dirname(from), spec).replace(/\/dist\//, '/src/');
    for (const candidate of [abs.replace(/\.js$/, '.ts'), abs, `${abs}.ts`])
      if (existsSync(candidate)) return candidate;
    return undefined;
  };
}

// a test reaching a module through a computed path (`await import(LOCK_JS)`, a script it writes)
const DIST_PATH = /\b(agent|builder|packages\/[\w-]+)\/dist\/([\w/.-]+)\.js\b/g;
// a script a test writes for a child process (`node -e`): its imports are text, not statements
const TEXT_IMPORT = /import\s*\{([^}]*)\}\s*from\s*['"`](@[\w-]+\/[\w-]+)['"`]/g;

const hasExportModifier = (node) =>
  ts.canHaveModifiers(node) &&
  (ts.getModifiers(node) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);

/** The names a statement exports itself (not re-exports), with their lines. */
function declaredExports(sf, statement) {
  const line = (n) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  if (
    ts.isExportDeclaration(statement) &&
    !statement.moduleSpecifier &&
    statement.exportClause &&
    ts.isNamedExports(statement.exportClause)
  ) {
    return statement.exportClause.elements.map((e) => ({ name: e.name.text, line: line(e) }));
  }
  if (!hasExportModifier(statement)) return [];
  if (ts.isVariableStatement(statement))
    return statement.declarationList.declarations.flatMap((d) =>
      ts.isIdentifier(d.name) ? [{ name: d.name.text, line: line(d) }] : [],
    );
  if (statement.name && ts.isIdentifier(statement.name))
    return [{ name: statement.name.text, line: line(statement) }];
  return [];
}

/** One file's exports, re-exports and imports, by a syntax walk (no type checker: fast, and enough for names). */
function readModule(root, file, resolve) {
  const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const mod = {
    exports: [],
    reexports: [],
    stars: [],
    imports: [],
    everything: [],
    byText: [],
    text: sf.text,
  };
  for (const s of sf.statements) {
    mod.exports.push(...declaredExports(sf, s));
    if (!(ts.isImportDeclaration(s) || ts.isExportDeclaration(s)) || !s.moduleSpecifier) continue;
    const target = resolve(file, s.moduleSpecifier.text);
    if (!target) continue;
    if (ts.isExportDeclaration(s)) {
      if (!s.exportClause) mod.stars.push(target);
      else if (ts.isNamespaceExport(s.exportClause)) mod.everything.push(target);
      else
        for (const e of s.exportClause.elements)
          mod.reexports.push({
            name: e.name.text,
            target,
            source: (e.propertyName ?? e.name).text,
            line: sf.getLineAndCharacterOfPosition(e.getStart(sf)).line + 1,
          });
      continue;
    }
    const clause = s.importClause;
    if (!clause) continue;
    if (clause.name) mod.imports.push({ target, name: 'default' });
    if (clause.namedBindings && ts.isNamespaceImport(clause.namedBindings))
      mod.everything.push(target);
    else if (clause.namedBindings)
      for (const e of clause.namedBindings.elements)
        mod.imports.push({ target, name: (e.propertyName ?? e.name).text });
  }
  const visit = (node) => {
    const literal =
      (ts.isCallExpression(node) &&
        node.expression.kind === ts.SyntaxKind.ImportKeyword &&
        node.arguments[0]) ||
      (ts.isImportTypeNode(node) && node.argument.literal);
    if (literal && ts.isStringLiteralLike(literal)) {
      const target = resolve(file, literal.text);
      if (target) mod.everything.push(target);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  for (const m of sf.text.matchAll(DIST_PATH))
    mod.byText.push(path.join(root, m[1], 'src', `${m[2]}.ts`));
  for (const m of sf.text.matchAll(TEXT_IMPORT)) {
    const target = resolve(file, m[2]);
    if (!target) continue;
    for (const part of m[1].split(',')) {
      const name = part
        .trim()
        .replace(/^type\s+/, '')
        .split(/\s+as\s+/)[0]
        .trim();
      if (name) mod.imports.push({ target, name });
    }
  }
  return mod;
}

/** Marks (file, name) used and passes the use through re-exports and `export *`. */
function propagate(modules, seeds) {
  const used = new Set();
  const queue = [...seeds];
  while (queue.length) {
    const [file, name] = queue.pop();
    const key = `${file}\0${name}`;
    if (used.has(key)) continue;
    used.add(key);
    const mod = modules.get(file);
    if (!mod) continue;
    for (const r of mod.reexports) if (r.name === name) queue.push([r.target, r.source]);
    if (!mod.exports.some((e) => e.name === name))
      for (const star of mod.stars) queue.push([star, name]);
  }
  return used;
}

/** Every export of shipped code under `root`, and those imported nowhere: `{ file, name, line }`, absolute paths. */
export function unusedExports(root = ROOT) {
  const shipped = shippedDirs(root);
  const resolve = resolver(packageEntries(root));
  const files = [
    ...new Set([...shipped, ...OTHER_IMPORTER_DIRS].flatMap((d) => sourceFiles(root, d))),
  ];
  const modules = new Map(files.map((f) => [f, readModule(root, f, resolve)]));
  const seeds = [];
  for (const mod of modules.values()) {
    for (const i of mod.imports) seeds.push([i.target, i.name]);
    for (const target of mod.everything)
      for (const e of modules.get(target)?.exports ?? []) seeds.push([target, e.name]);
    for (const target of mod.everything)
      for (const r of modules.get(target)?.reexports ?? []) seeds.push([target, r.name]);
    // a module named by a path in the text: the names of its exports that the text mentions
    for (const target of mod.byText) {
      const names = [
        ...(modules.get(target)?.exports ?? []),
        ...(modules.get(target)?.reexports ?? []),
      ].map((e) => e.name);
      for (const name of names)
        if (new RegExp(`\\b${name}\\b`).test(mod.text)) seeds.push([target, name]);
    }
  }
  const used = propagate(modules, seeds);
  const shippedFiles = files.filter((f) =>
    shipped.some((d) => f.startsWith(path.join(root, d) + path.sep)),
  );
  const all = shippedFiles.flatMap((f) =>
    [...modules.get(f).exports, ...modules.get(f).reexports].map((e) => ({ file: f, ...e })),
  );
  return { all, unused: all.filter((e) => !used.has(`${e.file}\0${e.name}`)) };
}

/** agent, builder or packages/<name>: the shipped unit a file belongs to. */
const unitOf = (file) =>
  path
    .relative(ROOT, file)
    .split(path.sep)
    .slice(0, path.relative(ROOT, file).startsWith('packages') ? 2 : 1)
    .join('/');

function main() {
  const { all, unused } = unusedExports();
  if (process.argv.includes('--counts')) printCounts(all, unused);
  else {
    for (const e of unused)
      console.log(
        `${path.relative(ROOT, e.file)}:${e.line ?? ''} ${e.name} is exported but imported nowhere: drop the export (or the code, if nothing uses it)`,
      );
    if (unused.length) {
      console.error(`${unused.length} unused exports (scripts/unused-exports.mjs)`);
      process.exitCode = 1;
    }
  }
}

function printCounts(all, unused) {
  const rows = new Map();
  for (const e of all) {
    const row = rows.get(unitOf(e.file)) ?? { exports: 0, unused: 0, public: 0 };
    row.exports += 1;
    if (path.basename(e.file) === 'index.ts') row.public += 1;
    if (unused.includes(e)) row.unused += 1;
    rows.set(unitOf(e.file), row);
  }
  for (const [unit, r] of [...rows].sort())
    console.log(
      `${unit.padEnd(28)} ${String(r.exports).padStart(4)} exports (${r.public} from index), ${r.unused} unused`,
    );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();

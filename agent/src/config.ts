import { hostname } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { isDigest, normalizeArch } from '@offline-bundle/oci';
import { readSmallFile, unsafePermissions } from '@offline-bundle/host';
import { isValidNodeName, LIMITS } from '@offline-bundle/status';

export const DEFAULT_CONFIG_PATH = '/etc/bundle-agent/config.yaml';
/** Largest config file read: the documented example is about 3 KiB. */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

export type RuntimeKind = 'crio' | 'containerd';

/** The validated configuration; every path is already under `root`. */
export interface AgentConfig {
  root: string;
  nodeName: string;
  runtime: RuntimeKind;
  /** Node architecture bundles must match. */
  arch: string;
  criSocket: string;
  trust: { keys: string[]; digest?: string };
  /**
   * current: the running release; fromCluster: read it from OpenShift's ClusterVersion when
   * current is unset; allowUnknown: load even when neither gives a running version (the
   * downgrade and upgrade-source checks are then skipped, so it is off by default);
   * clusterWaitMinutes: how long a load waits for the cluster when the running version was
   * never seen there (0: refuse at once).
   */
  version: { current?: string; fromCluster: boolean; allowDowngrade: boolean; allowAnySource: boolean; allowUnknown: boolean; clusterWaitMinutes: number };
  paths: {
    upgradeDir: string;
    stateDir: string;
    statusFile: string;
    crioDropInDir: string;
    registriesDropInDir: string;
    containerdCertsDir: string;
    imageStoreDir: string;
  };
  media: { roots: string[]; watchDirs: string[]; pollSeconds: number };
  space: { reserveBytes: number };
  /** keep: the staged layout after Ready; untilComplete: until the cluster runs the release (it can restore vanished images without the stick). */
  staging: { keep: boolean | 'untilComplete' };
  preload: { method: 'cri' | 'command' | 'none'; command: string[]; concurrency: number; retries: number; timeoutSeconds: number };
  reload: { command: string[] };
  containerd: { namespace: string };
  /** File-name prefix of every drop-in the agent writes (and the only ones it removes). */
  prefix: string;
  /**
   * Switching to a newer agent a Ready bundle carries. quadlet: a drop-in setting the
   * container's Image=, then the daemon-reload and restart commands; off: the agent is
   * replaced by other means (a MachineConfig, install.sh). tarball is refused (not built).
   */
  selfUpgrade: {
    mode: 'off' | 'quadlet';
    /** The Quadlet unit's drop-in directory (under root). */
    dropInDir: string;
    daemonReload: string[];
    /** Must return before the restart stops this process (systemctl --no-block). */
    restart: string[];
    /** Schedules the host-side rollback: the agent appends --unit=UNIT-rollback-HEX --on-active=SECONDSs /bin/sh -c SCRIPT (systemd-run). Empty: none. */
    scheduleRollback: string[];
    /** How long the new agent has to start and report before the switch is undone. */
    confirmMinutes: number;
    /** The systemd unit the rollback script restarts. */
    unit: string;
  };
  status: {
    /** Kubeconfig for the per-node NodeBundleStatus; no cluster reporting without it. */
    kubeconfig?: string;
    /** Loopback address of GET /status and /metrics; none without it. */
    listen?: { host: string; port: number };
    /** The technician's line on the node's console (<root>/run/issue.d/bundle-agent.issue). */
    console: boolean;
    /** How often the status file says the agent is alive when nothing else changes. */
    heartbeatSeconds: number;
  };
}

export class ConfigError extends Error {
  readonly code = 'INVALID_CONFIG';
  /** Every problem found, one line each ("FILE: KEY: what is wrong and what to write"). */
  readonly problems: string[];
  constructor(message: string | string[]) {
    const problems = typeof message === 'string' ? [message] : message;
    super(problems.join('\n'));
    this.problems = problems;
    this.name = 'ConfigError';
  }
}

const SIZE_RE = /^(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$/;
const UNITS: Record<string, number> = { B: 1, KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, TiB: 1024 ** 4 };

type Raw = Record<string, unknown>;

/** From the privileged --pid=host container: a command in the host's namespaces (as the CRI-O reload). */
const ON_HOST = ['nsenter', '--target', '1', '--mount', '--uts', '--ipc', '--net', '--pid', '--'];

/** "127.x.y.z:PORT", "localhost:PORT" or "[::1]:PORT": the agent's servers never listen beyond this node. */
export function parseLoopbackAddress(value: string): { host: string; port: number } | undefined {
  const m = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\]):(\d{1,5})$/.exec(value);
  if (!m || Number(m[2]) > 65535) return undefined;
  return { host: m[1] === 'localhost' ? '127.0.0.1' : m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
}

/**
 * Reads values and collects every problem instead of stopping at the first, so one run names
 * all of them. A bad value reads as its default (or empty) so the rest can still be checked;
 * only the first problem of each key is kept, so one mistake is not reported twice.
 */
class Reader {
  private readonly problems: string[] = [];
  private readonly keys = new Set<string>();

  constructor(private readonly file: string) {}

  fail(key: string, what: string): void {
    if (this.keys.has(key)) return;
    this.keys.add(key);
    this.problems.push(`${this.file}: ${key}: ${what}`);
  }

  /** Whether a problem was found at `key` or under it. */
  failed(key: string): boolean {
    return [...this.keys].some((k) => k === key || k.startsWith(`${key}.`) || k.startsWith(`${key}[`));
  }

  /** Throws every problem found, if any. */
  done(): void {
    if (this.problems.length) throw new ConfigError(this.problems);
  }

  obj(v: unknown, key: string): Raw {
    if (v === undefined || v === null) return {};
    if (typeof v !== 'object' || Array.isArray(v)) {
      this.fail(key, 'must be a mapping');
      return {};
    }
    return v as Raw;
  }

  str(v: unknown, key: string, def?: string): string {
    if (v === undefined || v === null) {
      if (def !== undefined) return def;
      this.fail(key, 'is required');
      return '';
    }
    if (typeof v !== 'string' || v === '') {
      this.fail(key, 'must be a non-empty string');
      return def ?? '';
    }
    return v;
  }

  bool(v: unknown, key: string, def: boolean): boolean {
    if (v === undefined || v === null) return def;
    if (typeof v !== 'boolean') {
      this.fail(key, 'must be true or false');
      return def;
    }
    return v;
  }

  int(v: unknown, key: string, def: number, min = 0): number {
    if (v === undefined || v === null) return def;
    if (!Number.isInteger(v) || (v as number) < min) {
      this.fail(key, `must be a whole number of at least ${min}`);
      return def;
    }
    return v as number;
  }

  size(v: unknown, key: string, def: number): number {
    if (v === undefined || v === null) return def;
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
    // no trim: the shipped JSON Schema refuses surrounding spaces, and both must accept the same
    const m = typeof v === 'string' ? SIZE_RE.exec(v) : null;
    if (!m) {
      this.fail(key, 'must be a byte count such as 1073741824 or "1GiB"');
      return def;
    }
    return Math.round(Number(m[1]) * UNITS[m[2] ?? 'B']!);
  }

  strings(v: unknown, key: string, def: string[]): string[] {
    if (v === undefined || v === null) return def;
    if (!Array.isArray(v)) {
      this.fail(key, 'must be a list');
      return def;
    }
    return (v as unknown[]).map((x, i) => this.str(x, `${key}[${i}]`));
  }

  known(raw: Raw, key: string, allowed: string[]): void {
    for (const k of Object.keys(raw)) {
      if (!allowed.includes(k)) this.fail(key ? `${key}.${k}` : k, `unknown key (known: ${allowed.join(', ')})`);
    }
  }
}

/**
 * Parses and validates a config document; unknown keys are errors so typos never pass
 * silently. Every problem in the document is reported at once (ConfigError.problems).
 */
export function parseConfig(text: string, file = 'config'): AgentConfig {
  const r: Reader = new Reader(file);
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`${file}: not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const raw = r.obj(doc, '(top)');
  r.known(raw, '', ['root', 'nodeName', 'runtime', 'arch', 'criSocket', 'trust', 'version', 'paths', 'media', 'space', 'staging', 'preload', 'reload', 'containerd', 'prefix', 'status', 'selfUpgrade']);
  const root = r.str(raw.root, 'root', '/');
  if (!isAbsolute(root)) r.fail('root', 'must be an absolute path');
  const under = (p: string, key: string) => {
    if (!isAbsolute(p)) r.fail(key, 'must be an absolute path (it is taken under root)');
    return join(root, p);
  };
  const runtime = r.str(raw.runtime, 'runtime', 'crio');
  if (runtime !== 'crio' && runtime !== 'containerd') r.fail('runtime', 'must be crio or containerd');

  const trust = r.obj(raw.trust, 'trust');
  r.known(trust, 'trust', ['keys', 'digest']);
  const keys = r.strings(trust.keys, 'trust.keys', []).map((k, i) => under(k, `trust.keys[${i}]`));
  const digest = trust.digest === undefined ? undefined : r.str(trust.digest, 'trust.digest');
  if (digest !== undefined && !isDigest(digest)) r.fail('trust.digest', 'must be sha256:<64 hex digits>');
  if (keys.length === 0 && !digest && !r.failed('trust')) r.fail('trust', 'give keys (the factory\'s public keys) and/or digest (the expected bundle sha256): the agent loads nothing it cannot verify');

  const version = r.obj(raw.version, 'version');
  r.known(version, 'version', ['current', 'fromCluster', 'allowDowngrade', 'allowAnySource', 'allowUnknown', 'clusterWaitMinutes']);
  const paths = r.obj(raw.paths, 'paths');
  const pathKeys = ['upgradeDir', 'stateDir', 'statusFile', 'crioDropInDir', 'registriesDropInDir', 'containerdCertsDir', 'imageStoreDir'];
  r.known(paths, 'paths', pathKeys);
  const p = (key: string, def: string) => under(r.str(paths[key], `paths.${key}`, def), `paths.${key}`);
  const stateDir = p('stateDir', '/var/lib/bundle-agent');
  const media = r.obj(raw.media, 'media');
  r.known(media, 'media', ['roots', 'watchDirs', 'pollSeconds']);
  const space = r.obj(raw.space, 'space');
  r.known(space, 'space', ['reserveBytes']);
  const staging = r.obj(raw.staging, 'staging');
  r.known(staging, 'staging', ['keep']);
  const preload = r.obj(raw.preload, 'preload');
  r.known(preload, 'preload', ['method', 'command', 'concurrency', 'retries', 'timeoutSeconds']);
  const method = r.str(preload.method, 'preload.method', 'cri');
  if (method !== 'cri' && method !== 'command' && method !== 'none') r.fail('preload.method', 'must be cri, command or none');
  const command = r.strings(preload.command, 'preload.command', []);
  if (method === 'command' && command.length === 0) r.fail('preload.command', 'is required when preload.method is command (e.g. [crictl, pull])');
  const reload = r.obj(raw.reload, 'reload');
  r.known(reload, 'reload', ['command']);
  const containerd = r.obj(raw.containerd, 'containerd');
  // 'ctr' is accepted and ignored: pins went through ctr processes before they used containerd's API
  r.known(containerd, 'containerd', ['ctr', 'namespace']);
  const prefix = r.str(raw.prefix, 'prefix', 'offline-bundle');
  if (!/^[a-z0-9][a-z0-9-]*$/.test(prefix)) r.fail('prefix', 'must be lowercase letters, digits and dashes');
  const status = r.obj(raw.status, 'status');
  r.known(status, 'status', ['kubeconfig', 'listen', 'console', 'heartbeatSeconds']);
  let listen: { host: string; port: number } | undefined;
  if (status.listen !== undefined) {
    listen = parseLoopbackAddress(r.str(status.listen, 'status.listen'));
    if (!listen) r.fail('status.listen', 'must be a loopback address such as 127.0.0.1:9469');
  }
  if (typeof version.current === 'number') r.fail('version.current', `must be quoted ("${version.current}"): YAML reads an unquoted 4.10 as the number 4.1`);
  const current = version.current === undefined ? undefined : r.str(version.current, 'version.current');

  const selfUpgrade = r.obj(raw.selfUpgrade, 'selfUpgrade');
  r.known(selfUpgrade, 'selfUpgrade', ['mode', 'dropInDir', 'daemonReload', 'restart', 'scheduleRollback', 'confirmMinutes', 'unit']);
  const upgradeMode = r.str(selfUpgrade.mode, 'selfUpgrade.mode', 'off');
  if (upgradeMode === 'tarball') r.fail('selfUpgrade.mode', 'tarball is not built yet: on a tarball install, install a new agent with install.sh from its tarball, and set off');
  if (upgradeMode !== 'off' && upgradeMode !== 'quadlet') r.fail('selfUpgrade.mode', 'must be off or quadlet');
  // podman, which runs the Quadlet unit, finds images in CRI-O's store, never in containerd's
  if (upgradeMode === 'quadlet' && runtime !== 'crio') r.fail('selfUpgrade.mode', 'quadlet needs runtime crio (podman reads CRI-O\'s image store, not containerd\'s)');
  const unit = r.str(selfUpgrade.unit, 'selfUpgrade.unit', 'bundle-agent');
  if (!/^[A-Za-z0-9][A-Za-z0-9@._-]{0,200}$/.test(unit)) r.fail('selfUpgrade.unit', 'must be a systemd unit name (letters, digits, @ . _ -)');

  // the kubelet registers the Node under the lowercased host name; the status object carries its name
  const nodeName = r.str(raw.nodeName, 'nodeName', hostname().toLowerCase());
  const nodeNameRule = `is not a Kubernetes node name (lowercase letters, digits, '-' and '.'; at most ${LIMITS.nodeName})`;
  if (!r.failed('nodeName') && !isValidNodeName(nodeName)) {
    r.fail('nodeName', raw.nodeName === undefined || raw.nodeName === null ? `the host name ${JSON.stringify(nodeName)} ${nodeNameRule}: set nodeName` : `${JSON.stringify(nodeName)} ${nodeNameRule}`);
  }

  if (version.fromCluster === true && status.kubeconfig === undefined) r.fail('version.fromCluster', 'needs status.kubeconfig (the credentials to read ClusterVersion)');
  const config: AgentConfig = {
    root,
    nodeName,
    runtime: runtime as RuntimeKind,
    arch: normalizeArch(r.str(raw.arch, 'arch', normalizeArch(process.arch === 'x64' ? 'amd64' : process.arch))),
    criSocket: under(r.str(raw.criSocket, 'criSocket', runtime === 'crio' ? '/var/run/crio/crio.sock' : '/run/containerd/containerd.sock'), 'criSocket'),
    trust: { keys, ...(digest ? { digest } : {}) },
    version: {
      ...(current ? { current } : {}),
      fromCluster: r.bool(version.fromCluster, 'version.fromCluster', false),
      allowDowngrade: r.bool(version.allowDowngrade, 'version.allowDowngrade', false),
      allowAnySource: r.bool(version.allowAnySource, 'version.allowAnySource', false),
      allowUnknown: r.bool(version.allowUnknown, 'version.allowUnknown', false),
      clusterWaitMinutes: r.int(version.clusterWaitMinutes, 'version.clusterWaitMinutes', 30, 0),
    },
    paths: {
      upgradeDir: p('upgradeDir', '/var/lib/upgrade'),
      stateDir,
      statusFile: paths.statusFile === undefined ? join(stateDir, 'status.json') : p('statusFile', ''),
      crioDropInDir: p('crioDropInDir', '/etc/crio/crio.conf.d'),
      registriesDropInDir: p('registriesDropInDir', '/etc/containers/registries.conf.d'),
      containerdCertsDir: p('containerdCertsDir', '/etc/containerd/certs.d'),
      imageStoreDir: p('imageStoreDir', runtime === 'crio' ? '/var/lib/containers/storage' : '/var/lib/containerd'),
    },
    media: {
      roots: r.strings(media.roots, 'media.roots', ['/media', '/run/media', '/mnt']).map((m, i) => under(m, `media.roots[${i}]`)),
      watchDirs: r.strings(media.watchDirs, 'media.watchDirs', [join('/var/lib/bundle-agent', 'drop')]).map((m, i) => under(m, `media.watchDirs[${i}]`)),
      pollSeconds: r.int(media.pollSeconds, 'media.pollSeconds', 2, 1),
    },
    space: { reserveBytes: r.size(space.reserveBytes, 'space.reserveBytes', 1024 ** 3) },
    staging: { keep: staging.keep === 'untilComplete' ? 'untilComplete' : r.bool(staging.keep, 'staging.keep', false) },
    preload: {
      method: method as AgentConfig['preload']['method'],
      command,
      concurrency: r.int(preload.concurrency, 'preload.concurrency', 3, 1),
      retries: r.int(preload.retries, 'preload.retries', 3, 0),
      timeoutSeconds: r.int(preload.timeoutSeconds, 'preload.timeoutSeconds', 1800, 1),
    },
    reload: { command: r.strings(reload.command, 'reload.command', runtime === 'crio' ? ['systemctl', 'reload', 'crio'] : []) },
    containerd: { namespace: r.str(containerd.namespace, 'containerd.namespace', 'k8s.io') },
    prefix,
    selfUpgrade: {
      mode: upgradeMode as AgentConfig['selfUpgrade']['mode'],
      dropInDir: under(r.str(selfUpgrade.dropInDir, 'selfUpgrade.dropInDir', `/etc/containers/systemd/${unit}.container.d`), 'selfUpgrade.dropInDir'),
      daemonReload: r.strings(selfUpgrade.daemonReload, 'selfUpgrade.daemonReload', [...ON_HOST, 'systemctl', 'daemon-reload']),
      restart: r.strings(selfUpgrade.restart, 'selfUpgrade.restart', [...ON_HOST, 'systemctl', '--no-block', 'restart', unit]),
      scheduleRollback: r.strings(selfUpgrade.scheduleRollback, 'selfUpgrade.scheduleRollback', [...ON_HOST, 'systemd-run', '--collect']),
      // 0 would roll back every switch before the new agent could confirm it
      confirmMinutes: r.int(selfUpgrade.confirmMinutes, 'selfUpgrade.confirmMinutes', 10, 1),
      unit,
    },
    status: {
      ...(status.kubeconfig !== undefined ? { kubeconfig: under(r.str(status.kubeconfig, 'status.kubeconfig'), 'status.kubeconfig') } : {}),
      ...(listen ? { listen } : {}),
      console: r.bool(status.console, 'status.console', true),
      heartbeatSeconds: r.int(status.heartbeatSeconds, 'status.heartbeatSeconds', 30, 1),
    },
  };
  r.done();
  return config;
}

/**
 * Reads and validates the config. It decides what the agent trusts and which commands it
 * runs as root, so one that someone else could change is refused like a bad key.
 */
export async function loadConfig(path = DEFAULT_CONFIG_PATH): Promise<AgentConfig> {
  let file;
  try {
    file = await readSmallFile(path, MAX_CONFIG_FILE_BYTES);
  } catch (err) {
    throw new ConfigError(`cannot read config ${path}: ${(err as Error).message}; pass --config FILE`);
  }
  const unsafe = await unsafePermissions(path, file.stats);
  if (unsafe) throw new ConfigError(`config ${unsafe}`);
  return parseConfig(file.bytes.toString('utf8'), path);
}

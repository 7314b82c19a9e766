import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { normalizeArch } from '@offline-bundle/oci';
import { readSmallFile, unsafePermissions } from '@offline-bundle/host';
import { certificateIp, isValidNodeName } from '@offline-bundle/status';
import {
  atOrUnder,
  LOOPBACK_FIX,
  NODE_NAME_RULE,
  schemaDefault,
  schemaProblems,
} from './config-schema.js';

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
  version: {
    current?: string;
    fromCluster: boolean;
    allowDowngrade: boolean;
    allowAnySource: boolean;
    allowUnknown: boolean;
    clusterWaitMinutes: number;
  };
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
  /**
   * reserveBytes: kept free on every filesystem a load writes to. kubeletConfig: the kubelet's
   * configuration files, the first that exists read for its image GC and eviction thresholds;
   * kubeletRootDir: the kubelet's directory, whose filesystem is its nodefs.
   */
  space: { reserveBytes: number; kubeletConfig: string[]; kubeletRootDir: string };
  /** keep: the staged layout after Ready; untilComplete: until the cluster runs the release (it can restore vanished images without the stick). */
  staging: {
    keep: boolean | 'untilComplete';
    serveUntilComplete: boolean;
    serveCheckSeconds: number;
    retrySeconds: number;
  };
  preload: {
    method: 'cri' | 'command' | 'none';
    command: string[];
    concurrency: number;
    retries: number;
    timeoutSeconds: number;
    stallSeconds: number;
  };
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
  /**
   * Bundles sent between nodes (agent/src/peers): the mutual-TLS credentials (under root), the
   * upload cap and downloader slots of the peer server (controlPlaneDownloaders on a
   * control-plane node), and whether it pauses while this node's own load runs.
   */
  /**
   * The authenticated metrics listener for the cluster's Prometheus (packages/status
   * metrics-listener.ts): address undefined is the Node's InternalIP; cert and key (both or
   * neither) undefined is a self-signed certificate in <stateDir>/metrics-tls.
   */
  metrics: {
    enabled: boolean;
    address?: string;
    port: number;
    cert?: string;
    key?: string;
    clientCA?: string;
  };
  peers: {
    /**
     * On by default and inert until approved: the peer port is open, and approved bundles are
     * fetched, only while a BundleApproval exists and the peer keys are installed; nothing at all
     * without status.kubeconfig. false: never.
     */
    enabled: boolean;
    /** The host port (9000–9999) on the Node's InternalIP, published in status.serving. */
    port: number;
    ca: string;
    cert: string;
    key: string;
    uploadRate: number;
    downloaders: number;
    controlPlaneDownloaders: number;
    pauseWhileLoading: boolean;
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

const UNITS: Record<string, number> = {
  B: 1,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  TB: 1e12,
  KiB: 1024,
  MiB: 1024 ** 2,
  GiB: 1024 ** 3,
  TiB: 1024 ** 4,
};

type Raw = Record<string, unknown>;

/** From the privileged --pid=host container: a command in the host's namespaces (as the CRI-O reload). */
const ON_HOST = ['nsenter', '--target', '1', '--mount', '--uts', '--ipc', '--net', '--pid', '--'];

/** "127.x.y.z:PORT", "localhost:PORT" or "[::1]:PORT": the agent's servers never listen beyond this node. */
export function parseLoopbackAddress(value: string): { host: string; port: number } | undefined {
  const m = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\]):(\d{1,5})$/.exec(value);
  if (!m || Number(m[2]) > 65535) return undefined;
  return {
    host: m[1] === 'localhost' ? '127.0.0.1' : m[1]!.replace(/^\[|\]$/g, ''),
    port: Number(m[2]),
  };
}

/** A byte count the schema accepted (1073741824, "1GiB", "1.5 GB") in bytes. */
function byteCount(v: number | string): number {
  if (typeof v === 'number') return v;
  const m = /^([\d.]+)\s*(\w*)$/.exec(v)!;
  return Math.round(Number(m[1]) * UNITS[m[2] || 'B']!);
}

/**
 * Collects every problem instead of stopping at the first, so one run names all of them;
 * only the first problem of each key is kept, so one mistake is not reported twice.
 */
class Problems {
  private readonly lines: string[] = [];
  private readonly keys = new Set<string>();

  constructor(readonly file: string) {}

  fail(key: string, what: string): void {
    if (this.keys.has(key)) return;
    this.keys.add(key);
    this.lines.push(`${this.file}: ${key}: ${what}`);
  }

  /** Whether a problem was found at `key` or under it. */
  failed(key: string): boolean {
    return [...this.keys].some((k) => atOrUnder(k, key));
  }

  /** Throws every problem found, if any. */
  done(): void {
    if (this.lines.length) throw new ConfigError(this.lines);
  }
}

/**
 * The document's values once the schema has checked them. A key left empty (null) or refused
 * reads as its default, so the rest can still be checked.
 */
class Settings {
  constructor(
    private readonly raw: Raw,
    readonly problems: Problems,
  ) {}

  /** The value written at a dotted key; undefined when absent, empty or refused. */
  given<T>(key: string): T | undefined {
    return this.problems.failed(key)
      ? undefined
      : ((this.written(key) ?? undefined) as T | undefined);
  }

  /** The value written at a dotted key, refused or not. */
  written(key: string): unknown {
    let v: unknown = this.raw;
    for (const part of key.split('.'))
      v = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Raw)[part] : undefined;
    return v;
  }

  /** The value written at `key`, else the schema's default for it. */
  value<T>(key: string): T {
    const v = this.given<T>(key) ?? schemaDefault(key);
    // a default dropped from the schema must not read as a silent undefined
    if (v === undefined)
      throw new Error(`config.schema.json gives ${key} no default: a bug; report it`);
    return v as T;
  }
}

/** The document as a mapping: an empty one is {}, anything else is a problem and reads as {}. */
function parseDocument(text: string, problems: Problems): Raw {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(
      `${problems.file}: not valid YAML: ${(err as Error).message.split('\n')[0]}`,
    );
  }
  if (doc === undefined || doc === null) return {};
  if (typeof doc === 'object' && !Array.isArray(doc)) return doc as Raw;
  problems.fail('(top)', 'must be a mapping');
  return {};
}

function versionOf(s: Settings): AgentConfig['version'] {
  const current = s.given<string>('version.current');
  return {
    ...(current ? { current } : {}),
    fromCluster: s.value('version.fromCluster'),
    allowDowngrade: s.value('version.allowDowngrade'),
    allowAnySource: s.value('version.allowAnySource'),
    allowUnknown: s.value('version.allowUnknown'),
    clusterWaitMinutes: s.value('version.clusterWaitMinutes'),
  };
}

function pathsOf(
  s: Settings,
  under: (p: string) => string,
  runtime: RuntimeKind,
): AgentConfig['paths'] {
  const path = (key: string) => under(s.value(`paths.${key}`));
  const stateDir = path('stateDir');
  const statusFile = s.given<string>('paths.statusFile');
  return {
    upgradeDir: path('upgradeDir'),
    stateDir,
    statusFile: statusFile === undefined ? join(stateDir, 'status.json') : under(statusFile),
    crioDropInDir: path('crioDropInDir'),
    registriesDropInDir: path('registriesDropInDir'),
    containerdCertsDir: path('containerdCertsDir'),
    imageStoreDir: under(
      s.given('paths.imageStoreDir') ??
        (runtime === 'crio' ? '/var/lib/containers/storage' : '/var/lib/containerd'),
    ),
  };
}

function selfUpgradeOf(s: Settings, under: (p: string) => string): AgentConfig['selfUpgrade'] {
  const unit = s.value<string>('selfUpgrade.unit');
  return {
    mode: s.value('selfUpgrade.mode'),
    dropInDir: under(
      s.given('selfUpgrade.dropInDir') ?? `/etc/containers/systemd/${unit}.container.d`,
    ),
    daemonReload: s.value('selfUpgrade.daemonReload'),
    restart: s.given('selfUpgrade.restart') ?? [
      ...ON_HOST,
      'systemctl',
      '--no-block',
      'restart',
      unit,
    ],
    scheduleRollback: s.value('selfUpgrade.scheduleRollback'),
    confirmMinutes: s.value('selfUpgrade.confirmMinutes'),
    unit,
  };
}

function statusOf(s: Settings, under: (p: string) => string): AgentConfig['status'] {
  const kubeconfig = s.given<string>('status.kubeconfig');
  const address = s.given<string>('status.listen');
  const listen = address === undefined ? undefined : parseLoopbackAddress(address);
  if (address !== undefined && !listen) s.problems.fail('status.listen', LOOPBACK_FIX);
  return {
    ...(kubeconfig !== undefined ? { kubeconfig: under(kubeconfig) } : {}),
    ...(listen ? { listen } : {}),
    console: s.value('status.console'),
    heartbeatSeconds: s.value('status.heartbeatSeconds'),
  };
}

function metricsOf(s: Settings, under: (p: string) => string): AgentConfig['metrics'] {
  let address = s.given<string>('metrics.address');
  if (address !== undefined && !isIP(address))
    s.problems.fail(
      'metrics.address',
      `${JSON.stringify(address)} is not an IP address: give the node's address (or leave it out for the Node's InternalIP)`,
    );
  else if (address !== undefined) {
    // an IPv4-mapped address as IPv4 (what clients dial and the certificate names); 0.0.0.0 and :: are no node's address
    try {
      address = certificateIp(address);
    } catch (err) {
      s.problems.fail(
        'metrics.address',
        `${(err as Error).message} (or leave it out for the Node's InternalIP)`,
      );
    }
  }
  const file = (key: string) => {
    const v = s.given<string>(`metrics.${key}`);
    return v === undefined ? {} : { [key]: under(v) };
  };
  return {
    enabled: s.value('metrics.enabled'),
    ...(address !== undefined ? { address } : {}),
    port: s.value('metrics.port'),
    ...file('cert'),
    ...file('key'),
    ...file('clientCA'),
  };
}

function peersOf(s: Settings, under: (p: string) => string): AgentConfig['peers'] {
  return {
    enabled: s.value('peers.enabled'),
    port: s.value('peers.port'),
    ca: under(s.value('peers.ca')),
    cert: under(s.value('peers.cert')),
    key: under(s.value('peers.key')),
    uploadRate: byteCount(s.value('peers.uploadRate')),
    downloaders: s.value('peers.downloaders'),
    controlPlaneDownloaders: s.value('peers.controlPlaneDownloaders'),
    pauseWhileLoading: s.value('peers.pauseWhileLoading'),
  };
}

/** The peer server's downloader slots on this node: the caller knows its role. */
/**
 * Whether a staged layout outlives its load: as staging.keep says, or (staging.serveUntilComplete,
 * on OpenShift: the node read a ClusterVersion once) until the cluster runs its release, to be served until then.
 */
export function layoutKept(
  config: Pick<AgentConfig, 'staging' | 'status'>,
  openshift: boolean,
): boolean | 'untilComplete' {
  if (config.staging.keep !== false) return config.staging.keep;
  return config.staging.serveUntilComplete && config.status.kubeconfig !== undefined && openshift
    ? 'untilComplete'
    : false;
}

export function peerSlots(config: AgentConfig, controlPlane: boolean): number {
  return controlPlane ? config.peers.controlPlaneDownloaders : config.peers.downloaders;
}

/** The configuration the values give, with the defaults that depend on other keys or this host. */
function configOf(s: Settings): AgentConfig {
  const root = s.value<string>('root');
  const under = (p: string) => join(root, p);
  const runtime = s.value<RuntimeKind>('runtime');
  const crio = runtime === 'crio';
  const digest = s.given<string>('trust.digest');
  return {
    root,
    // the kubelet registers the Node under the lowercased host name; the status object carries its name
    nodeName: s.given('nodeName') ?? hostname().toLowerCase(),
    runtime,
    arch: normalizeArch(
      s.given('arch') ?? normalizeArch(process.arch === 'x64' ? 'amd64' : process.arch),
    ),
    criSocket: under(
      s.given('criSocket') ??
        (crio ? '/var/run/crio/crio.sock' : '/run/containerd/containerd.sock'),
    ),
    trust: { keys: s.value<string[]>('trust.keys').map(under), ...(digest ? { digest } : {}) },
    version: versionOf(s),
    paths: pathsOf(s, under, runtime),
    media: {
      roots: s.value<string[]>('media.roots').map(under),
      watchDirs: s.value<string[]>('media.watchDirs').map(under),
      pollSeconds: s.value('media.pollSeconds'),
    },
    space: {
      reserveBytes: byteCount(s.value('space.reserveBytes')),
      kubeletConfig: s.value<string[]>('space.kubeletConfig').map(under),
      kubeletRootDir: under(s.value('space.kubeletRootDir')),
    },
    staging: {
      keep: s.value('staging.keep'),
      serveUntilComplete: s.value('staging.serveUntilComplete'),
      serveCheckSeconds: s.value('staging.serveCheckSeconds'),
      retrySeconds: s.value('staging.retrySeconds'),
    },
    preload: {
      method: s.value('preload.method'),
      command: s.value('preload.command'),
      concurrency: s.value('preload.concurrency'),
      retries: s.value('preload.retries'),
      timeoutSeconds: s.value('preload.timeoutSeconds'),
      stallSeconds: s.value('preload.stallSeconds'),
    },
    reload: { command: s.given('reload.command') ?? (crio ? ['systemctl', 'reload', 'crio'] : []) },
    containerd: { namespace: s.value('containerd.namespace') },
    prefix: s.value('prefix'),
    selfUpgrade: selfUpgradeOf(s, under),
    status: statusOf(s, under),
    metrics: metricsOf(s, under),
    peers: peersOf(s, under),
  };
}

/** What one key cannot say alone: the rules between keys, and a node name taken from the host. */
function checkCombinations(s: Settings, c: AgentConfig): void {
  const p = s.problems;
  if (!p.failed('nodeName') && !isValidNodeName(c.nodeName)) {
    p.fail(
      'nodeName',
      s.given('nodeName') === undefined
        ? `the host name ${JSON.stringify(c.nodeName)} ${NODE_NAME_RULE}: set nodeName`
        : `${JSON.stringify(c.nodeName)} ${NODE_NAME_RULE}`,
    );
  }
  // (a list refused for one of its items reads as empty: that item is the problem)
  if (
    c.preload.method === 'command' &&
    c.preload.command.length === 0 &&
    !p.failed('preload.command')
  )
    p.fail('preload.command', 'is required when preload.method is command (e.g. [crictl, pull])');
  // podman, which runs the Quadlet unit, finds images in CRI-O's store, never in containerd's
  // (a runtime refused as it stands is named here too: crio is what quadlet needs)
  if (c.selfUpgrade.mode === 'quadlet' && (s.written('runtime') ?? 'crio') !== 'crio')
    p.fail(
      'selfUpgrade.mode',
      "quadlet needs runtime crio (podman reads CRI-O's image store, not containerd's)",
    );
  // a rate below a TLS record's worth per second would stall every response past the idle timeout
  if (!p.failed('peers.uploadRate') && c.peers.uploadRate < 65536)
    p.fail('peers.uploadRate', 'must be at least 64KiB (per second)');
  if (c.version.fromCluster && c.status.kubeconfig === undefined && !p.failed('status.kubeconfig'))
    p.fail(
      'version.fromCluster',
      'needs status.kubeconfig (the credentials to read ClusterVersion)',
    );
  if (c.metrics.enabled && c.status.kubeconfig === undefined && !p.failed('status.kubeconfig'))
    p.fail(
      'metrics.enabled',
      "needs status.kubeconfig (each request's token and access are reviewed by the API server)",
    );
  if (
    (c.metrics.cert === undefined) !== (c.metrics.key === undefined) &&
    !p.failed('metrics.cert') &&
    !p.failed('metrics.key')
  )
    p.fail(
      c.metrics.cert === undefined ? 'metrics.cert' : 'metrics.key',
      'metrics.cert and metrics.key go together: give both, or neither for a self-signed certificate',
    );
  // on by default, where a node without a kubeconfig just stays inert: only asking for it by name is a mistake
  if (
    s.given('peers.enabled') === true &&
    c.status.kubeconfig === undefined &&
    !p.failed('status.kubeconfig')
  )
    p.fail(
      'peers.enabled',
      "needs status.kubeconfig (peers are found through the cluster: approvals and the other nodes' NodeBundleStatus)",
    );
}

/**
 * Parses and validates a config document against the shipped JSON Schema, then what the schema
 * cannot say; unknown keys are errors so typos never pass silently. Every problem in the
 * document is reported at once (ConfigError.problems).
 */
export function parseConfig(text: string, file = 'config'): AgentConfig {
  const problems = new Problems(file);
  const raw = parseDocument(text, problems);
  for (const { key, what } of schemaProblems(raw)) problems.fail(key, what);
  const settings = new Settings(raw, problems);
  const config = configOf(settings);
  checkCombinations(settings, config);
  problems.done();
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
    throw new ConfigError(
      `cannot read config ${path}: ${(err as Error).message}; pass --config FILE`,
    );
  }
  const unsafe = await unsafePermissions(path, file.stats);
  if (unsafe) throw new ConfigError(`config ${unsafe}`);
  return parseConfig(file.bytes.toString('utf8'), path);
}

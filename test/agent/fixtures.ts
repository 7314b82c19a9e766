// Shared pieces of the agent tests: real bundles made by the `bundle` CLI, a temp node root
// with a config, loop-mounted "USB sticks", and the CLIs run as child processes.
import { spawn, execFileSync } from 'node:child_process';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify as stringifyYaml } from 'yaml';
import { NODE_ARGS } from '../../scripts/node-args.mjs';
import { cliBin } from '../helpers/bundled-clis.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import { runCaptured, type Run } from '../helpers/run-captured.js';
import { startContainerd } from '../runtime/lib.js';
import type { RuntimeTarget } from '@offline-bundle/agent';

export const BUNDLE = cliBin('bundle');
export const AGENT = cliBin('bundle-agent');

export type { Run };

export function run(
  bin: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
  timeoutMs = 120_000,
): Promise<Run> {
  return runCaptured(process.execPath, [bin, ...args], { env, timeout: timeoutMs });
}

export interface AppImage {
  name: string;
  arch?: string;
  files: Record<string, string | Buffer>;
}

/** Builds a signed bundle of the given images (named as a cluster would pull them) with the real CLI. */
/** `create`: how `bundle ARGS` runs (default: the built CLI under node; the package test passes the packaged one). */
export async function makeBundle(
  dir: string,
  opts: {
    key: string;
    version: string;
    images: AppImage[];
    upgradeFrom?: string[];
    arch?: string;
    out: string;
    create?: (args: string[]) => Promise<{ code: number | null; stderr: string }>;
  },
): Promise<string> {
  const layout = join(dir, `layout-${opts.version}-${opts.arch ?? 'amd64'}`);
  const specs: string[] = [];
  for (const [i, img] of opts.images.entries()) {
    const tag = `img${i}`;
    await writeImageLayout(layout, {
      tag,
      platforms: [
        { os: 'linux', architecture: img.arch ?? opts.arch ?? 'amd64', layers: [img.files] },
      ],
    });
    specs.push('--image', `oci:${layout}:${tag}=${img.name}`);
  }
  const r = await (opts.create ?? ((args: string[]) => run(BUNDLE, args)))([
    'create',
    '--quiet',
    '--version',
    opts.version,
    '--arch',
    opts.arch ?? 'amd64',
    ...specs,
    ...(opts.upgradeFrom ?? []).flatMap((v) => ['--upgrade-from', v]),
    '--key',
    opts.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    opts.out,
  ]);
  if (r.code !== 0) throw new Error(`bundle create failed: ${r.stderr}`);
  return opts.out;
}

export async function keygen(dir: string, name = 'factory'): Promise<{ key: string; pub: string }> {
  const r = await run(BUNDLE, ['keygen', '--out', join(dir, name)]);
  if (r.code !== 0) throw new Error(r.stderr);
  return { key: join(dir, `${name}.key`), pub: join(dir, `${name}.pub`) };
}

/** Writes a config under a fresh node root; keys are copied in, since every path is under root. */
export async function nodeRoot(
  root: string,
  pub: string | undefined,
  extra: string,
): Promise<string> {
  await mkdir(join(root, 'etc/bundle-agent/keys'), { recursive: true });
  if (pub) execFileSync('cp', [pub, join(root, 'etc/bundle-agent/keys/factory.pub')]);
  const config = join(root, 'etc/bundle-agent/config.yaml');
  await writeFile(
    config,
    `root: ${root}\nnodeName: node-a\narch: amd64\n${pub ? 'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\n' : ''}${extra}`,
  );
  return config;
}

/**
 * A node root with its own real containerd (socket and certs.d under the root) and a daemon
 * config for it: version 1.0.0 running, no space reserve, the drop directory polled every second.
 */
export async function containerdNode(
  t: { teardown(fn: () => unknown): void },
  prefix: string,
  extra = '',
  opts: ContainerdNodeOptions = {},
) {
  const dir = await tmpdir(t, prefix);
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const ctd = await startContainerd(30_000, {
    certsDir: join(root, 'etc/containerd/certs.d'),
    socket: join(root, 'run/containerd/containerd.sock'),
    ...(opts.netns ? { netns: opts.netns } : {}),
  });
  t.teardown(() => ctd.stop());
  // reporting to the API stand-in as node-a, with the node's own identity; strings quoted as the tests that edit the file expect ('current: "1.0.0"')
  if (opts.api) await opts.api.writeNodeKubeconfig(root, 'node-a', { certPaths: 'root' });
  const settings = {
    version: { current: '1.0.0' },
    ...(opts.api ? { status: { kubeconfig: '/var/lib/kubelet/kubeconfig', console: false } } : {}),
    ...opts.settings,
  };
  const config = await nodeRoot(
    root,
    keys.pub,
    `runtime: containerd
${stringifyYaml(settings, { defaultStringType: 'QUOTE_DOUBLE', defaultKeyType: 'PLAIN' })}space:
  reserveBytes: 0
media:
  roots: [/media]
  watchDirs: [/var/lib/bundle-agent/drop]
  pollSeconds: 1
${extra}`,
  );
  await mkdir(join(root, 'var/lib/bundle-agent/drop'), { recursive: true });
  return { dir, keys, root, ctd, config };
}

export interface ContainerdNodeOptions {
  netns?: string;
  /** Top-level config keys (version, staging, ...) over the defaults (version.current 1.0.0). */
  settings?: Record<string, unknown>;
  /** The API stand-in to report to (status.kubeconfig: node-a's own identity). */
  api?: {
    writeNodeKubeconfig(root: string, node: string, o: { certPaths: 'root' }): Promise<unknown>;
  };
}

/**
 * The CRI-O files of a node root for the CRI-O stand-in (test/helpers/crio-standin.mjs):
 * registries.conf and crio.conf with their drop-in directories, all under the root. Returns
 * the stand-in's options for them.
 */
export async function crioFiles(root: string, registries = 'unqualified-search-registries = []\n') {
  const p = (rel: string) => join(root, rel);
  await mkdir(p('etc/containers/registries.conf.d'), { recursive: true });
  await mkdir(p('etc/crio/crio.conf.d'), { recursive: true });
  await writeFile(p('etc/containers/registries.conf'), registries);
  await writeFile(p('etc/crio/crio.conf'), '[crio]\n[crio.image]\n');
  return {
    dir: p('run/crio'),
    registriesConf: p('etc/containers/registries.conf'),
    registriesDropInDir: p('etc/containers/registries.conf.d'),
    crioConf: p('etc/crio/crio.conf'),
    crioDropInDir: p('etc/crio/crio.conf.d'),
  };
}

/**
 * The reload command that stands for `systemctl reload crio` (ExecReload=kill -HUP $MAINPID) on
 * a stand-in whose pid is in `pidFile`; `andThen`, a shell command run after the signal.
 */
export const crioSighup = (pidFile: string, andThen?: string): string[] => [
  'sh',
  '-c',
  `kill -HUP "$(cat ${JSON.stringify(pidFile)})"${andThen === undefined ? '' : ` && ${andThen}`}`,
];

/**
 * The agent config of a node whose runtime is the CRI-O stand-in under `root` (crioFiles): its
 * socket, running release `current`, no reserve, the given reload command, then `extra` (more
 * top-level YAML keys).
 */
export function crioNodeConfig(
  root: string,
  pub: string,
  opts: { reload: string[]; current?: string; extra?: string },
): Promise<string> {
  return nodeRoot(
    root,
    pub,
    `runtime: crio
criSocket: /run/crio/crio.sock
version:
  current: "${opts.current ?? '1.0.0'}"
space:
  reserveBytes: 0
reload:
  command: [${opts.reload.map((a) => JSON.stringify(a)).join(', ')}]
${opts.extra ?? ''}`,
  );
}

/** A runtime that accepts every call and does nothing: for loads whose runtime steps are not under test (preload.method none). */
export const acceptingRuntime = (): RuntimeTarget =>
  ({
    mirror: async () => async () => undefined,
    preload: async () => undefined,
    pin: async () => undefined,
    unpin: async () => undefined,
    pinnedRefs: async () => new Set<string>(),
    apply: async () => undefined,
    inspector: async () => undefined,
    cleanup: async () => undefined,
    close: async () => undefined,
  }) as unknown as RuntimeTarget;

let mountChecked: boolean | undefined;
/** Whether this machine lets us loop-mount an ext4 image (root, loop devices). */
export function canLoopMount(dir: string): boolean {
  if (mountChecked !== undefined) return mountChecked;
  try {
    const img = join(dir, 'probe.img');
    const mnt = join(dir, 'probe-mnt');
    execFileSync('truncate', ['-s', '8M', img]);
    execFileSync('mkfs.ext4', ['-q', '-F', img]);
    execFileSync('mkdir', ['-p', mnt]);
    execFileSync('mount', ['-o', 'loop', img, mnt], { stdio: 'ignore' });
    execFileSync('umount', [mnt]);
    mountChecked = true;
  } catch {
    mountChecked = false;
  }
  return mountChecked;
}

/** A "USB stick": a loop-mounted ext4 filesystem labelled STICK, or a plain directory where mount is not permitted. */
export async function stick(
  dir: string,
  mnt: string,
  sizeMiB: number,
  t: { teardown(fn: () => unknown): void },
): Promise<'loop' | 'dir'> {
  await mkdir(mnt, { recursive: true });
  if (!canLoopMount(dir)) return 'dir';
  const img = join(dir, `stick-${Math.random().toString(36).slice(2)}.img`);
  execFileSync('truncate', ['-s', `${sizeMiB}M`, img]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'STICK', img]);
  execFileSync('mount', ['-o', 'loop', img, mnt]);
  t.teardown(() => {
    try {
      execFileSync('umount', ['-l', mnt]);
    } catch {
      /* already gone */
    }
  });
  return 'loop';
}

/** A small filesystem (tmpfs) for "not enough space" cases; undefined where mounting is not allowed. */
export function smallFs(
  dir: string,
  sizeKiB: number,
  t: { teardown(fn: () => unknown): void },
): boolean {
  try {
    execFileSync('mkdir', ['-p', dir]);
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeKiB}k`, 'tmpfs', dir], {
      stdio: 'ignore',
    });
    t.teardown(() => {
      try {
        execFileSync('umount', ['-l', dir]);
      } catch {
        /* gone */
      }
    });
    return true;
  } catch {
    return false;
  }
}

/**
 * `bundle-agent run --config CONFIG` as a child, its output gathered, stopped at teardown; and a
 * wait for its status file (STATUS) to satisfy `ok`, failing on the agent's exit or a hang.
 */
export function daemonChild(
  t: { teardown: (fn: () => Promise<void>) => void },
  config: string,
  statusFile: string,
  opts: { netns?: string } = {},
) {
  // ip netns exec execs node: the child's pid is the agent's, SIGTERM reaches it; node gets the
  // flags the shipped launcher passes (the peers bench runs its daemons through here)
  const argv = [process.execPath, ...NODE_ARGS['bundle-agent'], AGENT, 'run', '--config', config];
  const child = opts.netns
    ? spawn('ip', ['netns', 'exec', opts.netns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { log: '' };
  child.stdout.on('data', (b: Buffer) => {
    out.log += b;
  });
  child.stderr.on('data', (b: Buffer) => {
    out.log += b;
  });
  const exited = new Promise((res) => child.once('exit', res));
  t.teardown(async () => {
    await stop();
  });
  const status = async () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
  /** The status once `ok` holds of it (and of the log so far); fails when the agent exits first, or after 120 s (only against a hang). */
  const statusWhen = async (what: string, ok: (s: any, log: string) => unknown) => {
    let last: any;
    const seen = () =>
      `status: ${JSON.stringify(last)?.slice(0, 1500)}; log: ${out.log.slice(-2000)}`;
    const hit = await until(
      what,
      async () => {
        last = await status();
        if (await ok(last, out.log)) return { s: last };
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(
            `the agent exited (${child.exitCode ?? child.signalCode}) before: ${what}; ${seen()}`,
          );
        return undefined;
      },
      { timeoutMs: 120_000, stepMs: 50, detail: seen },
    );
    return hit.s;
  };
  /** Ends the agent (SIGTERM unless told) and returns its log. */
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
    return out.log;
  };
  return { child, out, until: statusWhen, stop };
}

/** A collect archive's files (under its one top directory), unpacked into `into`, by relative path. */
export async function unpackArchive(file: string, into: string): Promise<Map<string, string>> {
  await mkdir(into);
  execFileSync('tar', ['-xzf', file, '-C', into]);
  const [top] = await readdir(into);
  const out = new Map<string, string>();
  const walk = async (d: string, rel: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      if (e.isDirectory()) await walk(join(d, e.name), `${rel}${e.name}/`);
      else out.set(`${rel}${e.name}`, await readFile(join(d, e.name), 'utf8'));
    }
  };
  await walk(join(into, top!), '');
  return out;
}

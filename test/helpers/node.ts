// A booted node for tests: a Debian trixie root (systemd, podman with Quadlet, skopeo, crun,
// containerd: the parts of an RHCOS node Debian has) booted with its own systemd as PID 1 under
// systemd-nspawn, per the recipe in ../shared/ENVIRONMENT.md ("A booted node").
//
//   const root = await buildRoot();                     // cached by package list
//   const br = await makeBridge(t);                     // a network with no way out
//   const node = await bootNode(t, { root, bridge: br, hostname: 'node-a', files: {...} });
//   await node.run(['podman', 'images']);                // run by the node's own systemd
//   await node.plugStick(t, img);                        // a stick appears under /run/media
//
// How commands run inside: with --register=no there is no machined, so `systemd-run -M` and
// machinectl cannot find the node. Instead the node's own /usr/bin/systemd-run is started in
// the node's mount and PID namespaces (nsenter -m -p on the node's PID 1) and asks the node's
// systemd, over its private socket, to run the command as a transient service
// (`systemd-run --wait --pipe`). The command itself is then a child of the node's PID 1:
// nspawn's seccomp filter, cgroup and namespaces apply to it, which a plain `nsenter` into the
// node would skip. Only the systemd-run client runs outside the filter.
//
// Everything a node holds lives under /var/tmp/ob-nodes/<machine>/ (overlay of the cached root,
// ext4 container storage, host mounts of sticks) with an `owner` file naming the test process.
// Teardown powers the node off (SIGKILL by PID to what its cgroups still hold after 30 s),
// unmounts, detaches, removes its cgroups and bridge; a later bootNode reaps what a killed test
// process left (owner no longer alive).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  chmodSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { pidExists } from '@offline-bundle/host';

type T = { teardown(fn: () => unknown): void };

export const CACHE = '/var/cache/offline-bundle-test';
const NODES = '/var/tmp/ob-nodes';
// A boot takes 5–20 s; on a machine loaded with other tests (load 20 on 2 cores) one took over 120 s.
const BOOT_TIMEOUT_MS = 240_000;
const CGROUP_TREES = ['/sys/fs/cgroup/systemd', '/sys/fs/cgroup/unified'];

/** What an RHCOS node has that Debian packages: systemd, podman 5 (Quadlet), skopeo, containerd, openssl. */
export const NODE_PACKAGES = [
  'systemd',
  'systemd-sysv',
  'dbus',
  'podman',
  'skopeo',
  'crun',
  'conmon',
  'netavark',
  'aardvark-dns',
  'passt',
  'nftables',
  'containerd',
  'iproute2',
  'ca-certificates',
  'openssl',
  'util-linux',
  'mount',
  'procps',
];
const SUITE = 'trixie';
// Edits made to the root once, part of the cache key.
const ROOT_EDITS: Record<string, string> = {
  // no pids controller under nspawn here: podman's default pids limit would fail every container
  '/etc/containers/containers.conf': '[containers]\npids_limit = 0\n',
};

/**
 * Why booted-node tests cannot run on this host, or undefined when they can. A host that is
 * CI's (root on Debian 12 with scripts/setup.sh run) always can: a missing tool there is a
 * failure, not a skip (see requireNodeSupport).
 */
export function nodeSupport(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (mounts, cgroups, systemd-nspawn)';
  for (const tool of ['systemd-nspawn', 'mmdebstrap', 'nsenter', 'python3', 'mkfs.ext4', 'ip']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} is not installed (scripts/setup.sh installs systemd-container and mmdebstrap)`;
    }
  }
  if (!CGROUP_TREES.some((c) => existsSync(join(c, 'cgroup.procs'))))
    return 'no writable cgroup tree at /sys/fs/cgroup/{systemd,unified}';
  return undefined;
}

/** A reason to skip, or undefined; never a skip on CI (CI=true): there the reason is thrown. */
export function nodeSkipReason(): string | undefined {
  const why = nodeSupport();
  if (why && process.env.CI) throw new Error(`booted-node tests must run on CI, but: ${why}`);
  return why;
}

function sh(
  cmd: string,
  args: string[],
  opts: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      env: opts.env ?? process.env,
    });
    let stdout = '';
    let stderr = '';
    const timer = opts.timeoutMs
      ? setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs)
      : undefined;
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    if (child.stdin) {
      child.stdin.on('error', () => undefined); // a command that exits without reading its input
      child.stdin.end(opts.input);
    }
  });
}

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function must(r: Run, what: string): Run {
  if (r.code !== 0)
    throw new Error(
      `${what} failed (exit ${r.code}): ${(r.stderr || r.stdout).trim().slice(-2000)}`,
    );
  return r;
}

const quiet = (cmd: string, args: string[]) => {
  try {
    execFileSync(cmd, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/**
 * The node root: mmdebstrap minbase of NODE_PACKAGES, cached at CACHE/node-root-<hash> (hash of
 * suite, packages and ROOT_EDITS), built in a temporary directory and renamed into place, so a
 * run killed half-way leaves no root that looks finished. Returns its path and the build time
 * (0 when reused).
 */
export async function buildRoot(): Promise<{ dir: string; buildMs: number }> {
  const key = createHash('sha256')
    .update(JSON.stringify({ SUITE, NODE_PACKAGES, ROOT_EDITS }))
    .digest('hex')
    .slice(0, 16);
  const dir = join(CACHE, `node-root-${key}`);
  if (existsSync(join(dir, 'usr/lib/systemd/systemd'))) return { dir, buildMs: 0 };
  mkdirSync(CACHE, { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const started = Date.now();
  must(
    await sh(
      'mmdebstrap',
      ['--quiet', '--variant=minbase', `--include=${NODE_PACKAGES.join(',')}`, SUITE, tmp],
      { timeoutMs: 900_000 },
    ),
    'mmdebstrap (building the node root)',
  );
  for (const [path, contents] of Object.entries(ROOT_EDITS))
    writeFileSync(join(tmp, path), contents);
  try {
    renameSync(tmp, dir);
  } catch (e) {
    // another test process finished the same root first: use its copy
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(join(dir, 'usr/lib/systemd/systemd'))) throw e;
  }
  return { dir, buildMs: Date.now() - started };
}

export interface Bridge {
  name: string;
  hostAddress: string;
  prefix: string;
  nodeAddress(i: number): string;
}

/**
 * A bridge with the host at .1 of a private /24 and no route or forwarding out of it: nodes on
 * it reach the host's address and each other, and nothing else (no registry, no internet).
 */
export async function makeBridge(t: T): Promise<Bridge> {
  const name = `obbr${randomBytes(3).toString('hex')}`;
  // a /24 no interface of the host uses yet (another test file's bridge)
  const used = execFileSync('ip', ['-o', '-4', 'addr'], { encoding: 'utf8' });
  const free = Array.from({ length: 250 }, (_, i) => `10.231.${i + 1}`).filter(
    (p) => !used.includes(` ${p}.`),
  );
  const prefix = free[randomBytes(1)[0]! % free.length]!;
  must(await sh('ip', ['link', 'add', name, 'type', 'bridge']), `ip link add ${name}`);
  t.teardown(() => quiet('ip', ['link', 'del', name]));
  must(await sh('ip', ['addr', 'add', `${prefix}.1/24`, 'dev', name]), 'ip addr add');
  must(await sh('ip', ['link', 'set', name, 'up']), 'ip link set up');
  return {
    name,
    hostAddress: `${prefix}.1`,
    prefix,
    nodeAddress: (i: number) => `${prefix}.${10 + i}`,
  };
}

export interface NodeOptions {
  root: string;
  bridge: Bridge;
  /** the node's address on the bridge (default .10) */
  address?: string;
  hostname: string;
  /** files written into the node's root before it boots: node path → contents (mode 0644, or [contents, mode]) */
  files?: Record<string, string | Buffer | [string | Buffer, number]>;
  /** symbolic links made before boot (node path → target), e.g. enabling a unit in a .wants directory */
  links?: Record<string, string>;
  /** runs with the node root's host path after files and links are written, before boot (e.g. to write a kubeconfig) */
  prepare?: (root: string) => Promise<void>;
  /** host paths bound at the same path in the node, read-only */
  readOnlyBinds?: string[];
  /** size of the node's ext4 container storage (sparse), MiB; default 4096 */
  storageMiB?: number;
  /**
   * nspawn's --console: 'pipe' (default: boot messages only) or 'read-only' (a pseudo-terminal,
   * so console-getty.service runs a real agetty on it and its screen, /etc/issue with
   * /run/issue.d, shows in console())
   */
  console?: 'pipe' | 'read-only';
  /** how long boot may take to reach `running`; default 120 s */
  bootTimeoutMs?: number;
}

export interface Node {
  machine: string;
  hostname: string;
  address: string;
  /** the node's PID 1, as the host sees it */
  leader: number;
  /** milliseconds from starting nspawn to `systemctl is-system-running` answering running/degraded */
  bootMs: number;
  /** Runs argv as a transient service of the node's systemd; resolves with its exit code and output. */
  run(argv: string[], opts?: { timeoutMs?: number; properties?: string[] }): Promise<Run>;
  /** run(), throwing with the output when the exit code is not 0. */
  must(argv: string[], opts?: { timeoutMs?: number }): Promise<string>;
  /** systemctl in the node (not through a transient service: also works while the node is degraded). */
  systemctl(...args: string[]): Promise<Run>;
  /** journalctl -u UNIT -o cat (all boots), or the whole journal without a unit. */
  journal(unit?: string): Promise<string>;
  /**
   * Loop-mounts the ext4 image read-only on the host and attaches that mount in the running node
   * at `at` (default /run/media/bundle-agent/<loop device>, where the shipped udev rule mounts a
   * stick), as a hotplugged stick appears. Returns the node path. Unplugged at teardown.
   */
  plugStick(image: string, at?: string): Promise<string>;
  /** Detaches a stick from the node (and the host) as pulling it out would. */
  unplugStick(at: string): Promise<void>;
  /**
   * A reboot of the node's services: node-down.target is started with job mode
   * replace-irreversibly and pulls in shutdown.target, so every unit that conflicts with it (every
   * service with default dependencies: the agent, the runtime, their containers) stops as in a
   * reboot's first phase, and a unit asking for a job meanwhile (the agent's `systemctl reload
   * crio` at its stop) is refused as then. `systemctl reset-failed` forgets failures and start-rate
   * counters as a boot does; `systemctl isolate default.target` starts everything again through
   * the boot transaction's dependencies and ordering. Mounts (the node's disks and binds), /run and
   * the kernel stay. Resolves with the milliseconds until the node's systemd reports running (or
   * degraded) again. (A soft-reboot would stop the container-storage bind: systemd loads its
   * mount unit before the drop-in that could keep it, as a unit's RequiresMountsFor= names it.)
   */
  restartServices(): Promise<number>;
  /** The console output so far (systemd's boot messages, agetty's /etc/issue with /run/issue.d). */
  console(): string;
  stop(): Promise<void>;
}

const PLUG_PY = `
import ctypes, os, sys
pid, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD = -100
# open_tree(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE): a detached copy of the host mount
fd = libc.syscall(428, AT_FDCWD, src.encode(), 1 | 0o2000000 | 0x8000)
if fd < 0: sys.exit('open_tree %s: %s' % (src, os.strerror(ctypes.get_errno())))
ns = os.open('/proc/%s/ns/mnt' % pid, os.O_RDONLY)
if libc.setns(ns, 0x00020000) != 0: sys.exit('setns: ' + os.strerror(ctypes.get_errno()))
os.chdir('/')
os.makedirs(dst, exist_ok=True)
# move_mount(MOVE_MOUNT_F_EMPTY_PATH): attach it in the node's namespace
if libc.syscall(429, fd, b'', AT_FDCWD, dst.encode(), 4) != 0: sys.exit('move_mount %s: %s' % (dst, os.strerror(ctypes.get_errno())))
`;

function cgroupPids(machine: string): number[] {
  const pids: number[] = [];
  for (const tree of CGROUP_TREES) {
    const top = join(tree, 'nodes', machine);
    if (!existsSync(top)) continue;
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true }))
        if (e.isDirectory()) walk(join(d, e.name));
      try {
        for (const l of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n'))
          if (l) pids.push(Number(l));
      } catch {
        /* gone */
      }
    };
    walk(top);
  }
  return [...new Set(pids)];
}

function removeCgroups(machine: string): void {
  for (const tree of CGROUP_TREES) {
    const top = join(tree, 'nodes', machine);
    if (existsSync(top)) quiet('find', [top, '-depth', '-type', 'd', '-exec', 'rmdir', '{}', ';']);
  }
}

/** Unmounts everything under dir, deepest first (lazily when busy); loop devices of `mount -o loop` detach with it. */
function unmountUnder(dir: string): void {
  const mounts = readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[1]?.replace(/\\040/g, ' '))
    .filter((m): m is string => !!m && (m === dir || m.startsWith(`${dir}/`)));
  for (const m of mounts.sort((a, b) => b.length - a.length)) {
    if (!quiet('umount', [m])) quiet('umount', ['-l', m]);
  }
}

/** Kills by PID what the machine's cgroups hold, unmounts its directory, removes its cgroups and the directory. */
function destroyMachine(machine: string, nspawnPid?: number): void {
  if (nspawnPid && pidExists(nspawnPid))
    try {
      process.kill(nspawnPid, 'SIGKILL');
    } catch {
      /* gone */
    }
  for (let i = 0; i < 20; i++) {
    const pids = cgroupPids(machine).filter((pid) => pidExists(pid));
    if (!pids.length) break;
    for (const p of pids)
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* gone */
      }
    execFileSync('sleep', ['0.1']);
  }
  const dir = join(NODES, machine);
  unmountUnder(dir);
  removeCgroups(machine);
  rmSync(dir, { recursive: true, force: true });
}

/**
 * The pid that owns a machine directory; undefined while another test file is making or
 * removing it (no owner file yet or any more) unless it has been so for 10 minutes.
 */
function ownerOf(machine: string): number | undefined {
  const dir = join(NODES, machine);
  try {
    return Number(readFileSync(join(dir, 'owner'), 'utf8').trim()) || 0;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    const since = (() => {
      try {
        return Date.now() - statSync(dir).mtimeMs;
      } catch {
        return 0;
      }
    })();
    return since > 10 * 60_000 ? 0 : undefined;
  }
}

/** Cleans up nodes whose test process is gone (killed by a timeout before its teardown ran). */
function reapStale(): void {
  if (!existsSync(NODES)) return;
  for (const machine of readdirSync(NODES)) {
    const owner = ownerOf(machine);
    if (owner === undefined || (owner && pidExists(owner))) continue;
    destroyMachine(machine);
  }
}

function findLeader(nspawnPid: number): number | undefined {
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === nspawnPid) return Number(e);
    } catch {
      /* gone */
    }
  }
  return undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Boots a node: overlay of the root, its own ext4 container storage (overlay storage cannot sit
 * on overlayfs) at /var/lib/containers and /var/lib/containerd, its own cgroup, a veth on the
 * bridge with `address`, and `files` written into it before boot. Resolves once the node's
 * systemd reports running (or degraded). Stopped at t's teardown.
 */
export async function bootNode(t: T, opts: NodeOptions): Promise<Node> {
  reapStale();
  const machine = `ob-${opts.hostname.slice(0, 16)}-${randomBytes(2).toString('hex')}`;
  const dir = join(NODES, machine);
  const p = (...s: string[]) => join(dir, ...s);
  for (const d of ['upper', 'work', 'merged', 'storage', 'sticks'])
    mkdirSync(p(d), { recursive: true });
  // written whole before it is seen: another test file's reapStale reads it
  writeFileSync(p('owner.tmp'), `${process.pid}\n`);
  renameSync(p('owner.tmp'), p('owner'));
  let nspawn: ChildProcess | undefined;
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    if (nspawn?.pid && nspawn.exitCode === null) {
      const leader = findLeader(nspawn.pid);
      if (leader)
        await sh(
          'nsenter',
          ['-t', String(leader), '-m', '-p', '--', 'systemctl', 'poweroff', '--no-block'],
          { timeoutMs: 10_000 },
        ).catch(() => undefined);
      const until = Date.now() + 30_000;
      while (nspawn.exitCode === null && Date.now() < until) await sleep(100);
    }
    destroyMachine(machine, nspawn?.pid);
  };
  t.teardown(stop);

  must(
    await sh('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=${opts.root},upperdir=${p('upper')},workdir=${p('work')}`,
      p('merged'),
    ]),
    'overlay mount of the node root',
  );
  const img = p('storage.img');
  must(await sh('truncate', ['-s', `${opts.storageMiB ?? 4096}M`, img]), 'truncate');
  must(await sh('mkfs.ext4', ['-q', '-F', '-L', 'node-storage', img]), 'mkfs.ext4');
  must(await sh('mount', ['-o', 'loop', img, p('storage')]), 'mount of the container storage');
  for (const d of ['containers', 'containerd']) mkdirSync(p('storage', d), { recursive: true });

  const address = opts.address ?? opts.bridge.nodeAddress(0);
  const files: NonNullable<NodeOptions['files']> = {
    '/etc/hostname': `${opts.hostname}\n`,
    // the node's address on the bridge, and no default route: nothing beyond the bridge is reachable
    '/etc/systemd/system/node-address.service': `[Unit]\nDescription=test node address on the bridge\nDefaultDependencies=no\nBefore=network.target\nWants=network.target\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/sbin/ip link set host0 up\nExecStart=/usr/sbin/ip addr replace ${address}/24 dev host0\n\n[Install]\nWantedBy=sysinit.target\n`,
    ...opts.files,
  };
  // what a reboot stops first: every unit that conflicts with shutdown.target (restartServices)
  files['/etc/systemd/system/node-down.target'] ??=
    '[Unit]\nDescription=test node: every service stopped, as on the way to a reboot\nDefaultDependencies=no\nRequires=shutdown.target\nAfter=shutdown.target\nAllowIsolate=yes\n';
  const links = {
    '/etc/systemd/system/sysinit.target.wants/node-address.service': '../node-address.service',
    ...opts.links,
  };
  for (const [path, spec] of Object.entries(files)) {
    const [contents, mode] = Array.isArray(spec) ? spec : [spec, 0o644];
    const target = p('merged', path);
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, contents);
    chmodSync(target, mode);
  }
  for (const [path, target] of Object.entries(links)) {
    mkdirSync(dirname(p('merged', path)), { recursive: true });
    rmSync(p('merged', path), { force: true });
    symlinkSync(target, p('merged', path));
  }
  await opts.prepare?.(p('merged'));

  for (const tree of CGROUP_TREES) mkdirSync(join(tree, 'nodes', machine), { recursive: true });
  const binds = [
    `--bind=${p('storage/containers')}:/var/lib/containers`,
    `--bind=${p('storage/containerd')}:/var/lib/containerd`,
    ...(opts.readOnlyBinds ?? []).map((b) => `--bind-ro=${b}`),
  ];
  // The launching shell moves itself into the node's cgroup (v1 name=systemd and the unified
  // tree) before exec'ing nspawn, so the node's processes are found and killed by cgroup.
  const enter = CGROUP_TREES.map(
    (c) => `echo $$ > ${join(c, 'nodes', machine, 'cgroup.procs')}`,
  ).join('; ');
  const started = Date.now();
  let consoleText = '';
  nspawn = spawn(
    'sh',
    [
      '-c',
      `${enter}; exec systemd-nspawn "$@"`,
      'sh',
      '-D',
      p('merged'),
      '-M',
      machine,
      `--hostname=${opts.hostname}`,
      '--boot',
      '--register=no',
      '--keep-unit',
      `--console=${opts.console ?? 'pipe'}`,
      `--network-bridge=${opts.bridge.name}`,
      '--system-call-filter=@keyring bpf',
      ...binds,
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY: '1' },
    },
  );
  writeFileSync(p('nspawn.pid'), `${nspawn.pid}\n`);
  nspawn.stdout!.on('data', (d: Buffer) => {
    consoleText += d;
  });
  nspawn.stderr!.on('data', (d: Buffer) => {
    consoleText += d;
  });

  let leader: number | undefined;
  const deadline = started + (opts.bootTimeoutMs ?? BOOT_TIMEOUT_MS);
  for (;;) {
    if (nspawn.exitCode !== null)
      throw new Error(
        `systemd-nspawn exited (${nspawn.exitCode}) before the node booted:\n${consoleText.slice(-3000)}`,
      );
    leader ??= findLeader(nspawn.pid!);
    if (leader) {
      const r = await sh(
        'nsenter',
        ['-t', String(leader), '-m', '-p', '--', 'systemctl', 'is-system-running', '--wait'],
        { timeoutMs: Math.max(1000, deadline - Date.now()) },
      );
      const state = r.stdout.trim();
      if (state === 'running' || state === 'degraded') break;
      if (state && !['starting', 'initializing', 'offline'].includes(state))
        throw new Error(
          `node ${machine} booted into state "${state}":\n${consoleText.slice(-3000)}`,
        );
    }
    if (Date.now() > deadline)
      throw new Error(
        `node ${machine} did not boot within ${opts.bootTimeoutMs ?? BOOT_TIMEOUT_MS} ms:\n${consoleText.slice(-3000)}`,
      );
    await sleep(100);
  }
  const bootMs = Date.now() - started;
  const L = String(leader);
  const inNode = (argv: string[], timeoutMs = 300_000) =>
    sh('nsenter', ['-t', L, '-m', '-p', '--', ...argv], { timeoutMs });

  const run: Node['run'] = (argv, o = {}) =>
    inNode(
      [
        '/usr/bin/systemd-run',
        '--wait',
        '--pipe',
        '--quiet',
        '--collect',
        '--service-type=exec',
        ...(o.properties ?? []).map((x) => `--property=${x}`),
        '--',
        ...argv,
      ],
      o.timeoutMs,
    );
  const sticks: string[] = [];
  const node: Node = {
    machine,
    hostname: opts.hostname,
    address,
    leader: leader!,
    bootMs,
    run,
    must: async (argv, o) =>
      must(await run(argv, o), `in ${opts.hostname}: ${argv.join(' ')}`).stdout,
    systemctl: (...args) => inNode(['systemctl', '--no-pager', ...args], 120_000),
    journal: async (unit) =>
      (
        await inNode(
          ['journalctl', '--no-pager', '-o', 'cat', ...(unit ? ['-u', unit] : [])],
          60_000,
        )
      ).stdout,
    plugStick: async (image, at) => {
      const hostMnt = p('sticks', String(sticks.length));
      mkdirSync(hostMnt, { recursive: true });
      must(
        await sh('mount', ['-o', 'loop,ro,nosuid,nodev,noexec', image, hostMnt]),
        `loop mount of ${image}`,
      );
      const dev =
        readFileSync('/proc/self/mounts', 'utf8')
          .split('\n')
          .find((l) => l.split(' ')[1] === hostMnt)
          ?.split(' ')[0] ?? '/dev/loop';
      const target = at ?? `/run/media/bundle-agent/${dev.split('/').pop()}`;
      must(
        await sh('python3', ['-c', PLUG_PY, L, hostMnt, target]),
        `attaching the stick at ${target} in ${opts.hostname}`,
      );
      sticks.push(target);
      return target;
    },
    unplugStick: async (at) => {
      must(await inNode(['umount', '-l', at]), `umount ${at} in the node`);
    },
    restartServices: async () => {
      const began = Date.now();
      must(
        await inNode(
          ['systemctl', 'start', '--job-mode=replace-irreversibly', 'node-down.target'],
          120_000,
        ),
        `systemctl start node-down.target in ${opts.hostname}`,
      );
      // a boot starts with no failed units and fresh start-rate counters (StartLimitBurst=)
      must(
        await inNode(['systemctl', 'reset-failed'], 30_000),
        `systemctl reset-failed in ${opts.hostname}`,
      );
      must(
        await inNode(
          ['systemctl', 'isolate', 'default.target'],
          opts.bootTimeoutMs ?? BOOT_TIMEOUT_MS,
        ),
        `systemctl isolate default.target in ${opts.hostname}`,
      );
      const state = (
        await inNode(
          ['systemctl', 'is-system-running', '--wait'],
          opts.bootTimeoutMs ?? BOOT_TIMEOUT_MS,
        )
      ).stdout.trim();
      if (state !== 'running' && state !== 'degraded')
        throw new Error(
          `node ${machine} is "${state}" after its services restarted:\n${consoleText.slice(-3000)}`,
        );
      return Date.now() - began;
    },
    console: () => consoleText,
    stop,
  };
  return node;
}

const REPO = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');

export interface PackagedAgent {
  version: string;
  /** bundle-agent-VERSION-linux-amd64.tar.gz: the agent tarball as `pnpm package` writes it */
  tarball: string;
  /** bundle-agent-VERSION.oci.tar: the agent image as `pnpm package` writes it (amd64 only here) */
  ociTar: string;
  /** the unpacked agent tarball's prefix (bin/bundle-agent, lib/bundle-agent/node, ...) */
  prefix: string;
  /** the Node runtime the agent ships (lib/bundle-agent/node) */
  node: string;
  /** milliseconds `scripts/package.mjs` took (0 when reused) */
  buildMs: number;
}

/**
 * The agent as `pnpm package` ships it (amd64): scripts/package.mjs --only agent --arch amd64,
 * run after `tsc -b`, cached at CACHE/agent-package-<hash> by the contents of every file git
 * knows under agent/, packages/, scripts/ and the lockfile (built in a temporary directory,
 * renamed into place).
 */
export async function packagedAgent(): Promise<PackagedAgent> {
  const version = JSON.parse(readFileSync(join(REPO, 'agent/package.json'), 'utf8'))
    .version as string;
  const files = execFileSync(
    'git',
    [
      'ls-files',
      '-z',
      '--cached',
      '--others',
      '--exclude-standard',
      'agent',
      'packages',
      'scripts',
      'pnpm-lock.yaml',
      'package.json',
    ],
    { cwd: REPO, encoding: 'utf8', maxBuffer: 1 << 26 },
  )
    .split('\0')
    .filter(Boolean)
    .sort();
  const h = createHash('sha256');
  for (const f of files) {
    h.update(`${f}\0`);
    try {
      h.update(readFileSync(join(REPO, f)));
    } catch {
      h.update('(missing)');
    }
  }
  const dir = join(CACHE, `agent-package-${h.digest('hex').slice(0, 16)}`);
  const top = join(dir, `bundle-agent-${version}-linux-amd64`);
  const result = (buildMs: number): PackagedAgent => ({
    version,
    tarball: join(dir, `bundle-agent-${version}-linux-amd64.tar.gz`),
    ociTar: join(dir, `bundle-agent-${version}.oci.tar`),
    prefix: top,
    node: join(top, 'lib/bundle-agent/node'),
    buildMs,
  });
  if (existsSync(join(top, 'lib/bundle-agent/node'))) return result(0);
  mkdirSync(CACHE, { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const started = Date.now();
  must(
    await sh(
      process.execPath,
      [join(REPO, 'scripts/package.mjs'), '--only', 'agent', '--arch', 'amd64', '--out', tmp],
      { timeoutMs: 900_000, env: { PATH: process.env.PATH, HOME: process.env.HOME } },
    ),
    'scripts/package.mjs (the agent artifacts)',
  );
  must(
    await sh('tar', ['-xzf', join(tmp, `bundle-agent-${version}-linux-amd64.tar.gz`), '-C', tmp]),
    'unpacking the agent tarball',
  );
  try {
    renameSync(tmp, dir);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(join(top, 'lib/bundle-agent/node'))) throw e;
  }
  return result(Date.now() - started);
}

// Faults as tests (issue 7): bundle-agent in CRI-O mode against the CRI-O contract stand-in
// (test/helpers/crio-standin.mjs, a CRI ImageService that reads registries.conf.d only at
// start and on SIGHUP; CRI-O itself cannot run here). Each fault is injected into a real
// `bundle-agent load` (or `run`) child process at a phase read from its status.json, and
// each case ends Ready after recovery with nothing left behind: no *.partial (a staging cut
// short keeps its verified pieces for the same bundle's next load, which resumes), no staged
// layout (staging.keep is false), no offline-bundle-mirror.conf drop-in, phase Ready.
//
// Synchronisation is by polling (status.json, the stand-in's event log, process state);
// a process is frozen with SIGSTOP the moment the phase shows, so the fault lands inside
// that phase however loaded the machine is.
import t from 'tap';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { copyFile, mkdir, readdir, readFile, readlink, rm, stat, statfs, truncate, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pidExists } from '@offline-bundle/host';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, crioFiles, keygen, makeBundle, nodeRoot, smallFs } from './fixtures.js';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startKubeStandIn } from '../helpers/kube-standin.js';

// The images' home: a host that never resolves, so only the agent's mirror can serve them.
const ORIGIN = 'origin.offline-bundle.invalid';
const MIRROR_DROP_IN = 'offline-bundle-mirror.conf';
const STAGED = '1.1.0-amd64';

// One key and one bundle for the whole file: a large random layer makes Staging and the
// pulls last long enough to be caught, two small images make several pulls.
const shared = await tmpdir(t, 'ob-faults-');
const keys = await keygen(shared);
const BIG_MIB = 24;
const BUNDLE = await makeBundle(shared, {
  key: keys.key,
  version: '1.1.0',
  upgradeFrom: ['1.0.0'],
  images: [
    { name: `${ORIGIN}/acme/big:v1`, files: { 'big.bin': randomBytes(BIG_MIB * 1024 * 1024) } },
    { name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } },
    { name: `${ORIGIN}/acme/tool:v2`, files: { 'tool.txt': 'tool v2' } },
  ],
  out: join(shared, 'update.bundle'),
});
const MANIFEST = JSON.parse(execFileSync('sh', ['-c', `zstd -dc ${JSON.stringify(BUNDLE)} | tar -xO bundle.json`]).toString());
/** The agent pulls each image by digest and by tag. */
const REFS = MANIFEST.images.reduce((k: number, i: { tag?: string }) => k + (i.tag ? 2 : 1), 0);

interface Status { phase: string; bundle?: { mode?: string; file?: string }; progress: { bytesTotal: number; imagesDone: number; imagesTotal: number }; conditions: { type: string; status: string; reason: string; message: string }[] }

interface Node {
  dir: string;
  root: string;
  config: string;
  /** The bundle's copy on this node's "stick" (<root>/stick, a plain directory), restored by restore(). */
  file: string;
  upgradeDir: string;
  crio: any;
  /** Starts the stand-in again on the same state dir (its store survives) and updates the pid file the reload command reads. */
  restartCrio: () => Promise<any>;
  /** While this file exists the reload command waits after its SIGHUP: holds the agent inside a reload. */
  gate: string;
  status: () => Promise<Status | undefined>;
  leftovers: (ignore?: string[]) => Promise<{ partial: string[]; staged: string[]; dropIns: string[] }>;
  restore: () => Promise<void>;
}

async function node(t: any, opts: { extra?: string; retries?: number | 'default'; upgradeFs?: number } = {}): Promise<Node> {
  const dir = await tmpdir(t, 'ob-fault-');
  const root = join(dir, 'node');
  const p = (rel: string) => join(root, rel);
  const files = await crioFiles(root);
  const upgradeDir = p('var/lib/upgrade');
  if (opts.upgradeFs !== undefined && !smallFs(upgradeDir, opts.upgradeFs, t)) throw new Error('mounting a tmpfs is not permitted here');
  const startCrio = () => startCrioStandin(t, files);
  const pidFile = p('run/crio/pid');
  const gate = join(dir, 'reload.gate');
  const n: Node = {
    dir, root, upgradeDir, gate,
    config: '',
    file: p('stick/update.bundle'),
    crio: await startCrio(),
    restartCrio: async () => {
      n.crio = await startCrio();
      await writeFile(pidFile, String(n.crio.pid));
      return n.crio;
    },
    status: async () => readFile(p('var/lib/bundle-agent/status.json'), 'utf8').then((s) => JSON.parse(s) as Status, () => undefined),
    leftovers: async (ignore = []) => {
      const up = (await readdir(upgradeDir).catch(() => [] as string[])).filter((x) => !ignore.includes(x));
      return {
        partial: up.filter((x) => x.endsWith('.partial')),
        staged: up.filter((x) => !x.endsWith('.partial')),
        dropIns: (await readdir(p('etc/containers/registries.conf.d'))).filter((x) => x.includes('offline-bundle')),
      };
    },
    restore: async () => {
      await mkdir(p('stick'), { recursive: true });
      await copyFile(BUNDLE, n.file);
    },
  };
  await writeFile(pidFile, String(n.crio.pid));
  await n.restore();
  // `systemctl reload crio` as ExecReload=kill -HUP $MAINPID; the gate only exists when a test holds a reload.
  const reload = ['sh', '-c', `kill -HUP "$(cat ${JSON.stringify(pidFile)})" && while [ -e ${JSON.stringify(gate)} ]; do sleep 0.05; done`];
  const retries = opts.retries === 'default' ? '' : `  retries: ${opts.retries ?? 2}\n`;
  n.config = await nodeRoot(root, keys.pub, `runtime: crio
criSocket: /run/crio/crio.sock
version:
  current: "1.0.0"
space:
  reserveBytes: 0
preload:
  method: cri
${retries}reload:
  command: [${reload.map((a) => JSON.stringify(a)).join(', ')}]
${opts.extra ?? ''}`);
  return n;
}

interface Agent { child: ChildProcess; stderr: () => string; exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> }

/** A `bundle-agent` child process (load FILE, or run). */
function agent(n: Node, args: string[]): Agent {
  const child = spawn(process.execPath, [AGENT, ...args, '--config', n.config], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => { stdout += d; });
  child.stderr!.on('data', (d: Buffer) => { stderr += d; });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  // never left behind, even frozen
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) {
      try { child.kill('SIGKILL'); } catch { /* gone */ }
    }
  };
  process.once('exit', stop);
  exit.then(() => process.removeListener('exit', stop));
  return { child, exit, stderr: () => stderr };
}

const startLoad = (n: Node, file = n.file) => agent(n, ['load', file, '--json']);

async function load(n: Node, file = n.file) {
  return startLoad(n, file).exit;
}

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 120_000, stepMs = 10): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** Polls status.json until `pred` holds; fails at once if the agent exits first. */
async function waitStatus(n: Node, a: Agent | undefined, what: string, pred: (s: Status) => boolean, timeoutMs = 120_000): Promise<Status> {
  return until(what, async () => {
    const s = await n.status();
    if (s && pred(s)) return s;
    if (a && (a.child.exitCode !== null || a.child.signalCode !== null)) {
      const r = await a.exit;
      throw new Error(`the agent exited (${r.code ?? r.signal}) before ${what}; last status ${JSON.stringify(s?.phase)}: ${r.stderr.slice(-1500)}`);
    }
    return undefined;
  }, timeoutMs);
}

const phase = (p: string) => (s: Status) => s.phase === p;

/**
 * Waits until the agent is in its one sequential pass over `file` (staging in staged mode, the
 * full verification in media mode): a descriptor of it whose offset is at least one of the
 * pass's 1 MiB reads (READ_CHUNK). The header read before it (Verifying) reads 64 KiB chunks
 * and stops within the first few; the seek-index and registry reads are positional and leave
 * offsets at 0. Read from /proc at once, where status.json trails the agent by its queued
 * writes. Resolves to the offset and the file's size.
 */
const PASS_CHUNK = 1024 * 1024;
async function waitReading(a: Agent, file: string, timeoutMs = 120_000): Promise<{ pos: number; size: number }> {
  const pid = a.child.pid!;
  const size = (await stat(file)).size;
  return until(`the agent to read ${file}`, async () => {
    if (a.child.exitCode !== null || a.child.signalCode !== null) throw new Error(`the agent exited before it read the bundle: ${(await a.exit).stderr.slice(-1500)}`);
    for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
      if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')) !== file) continue;
      const pos = Number(/^pos:\s*(\d+)/m.exec(await readFile(`/proc/${pid}/fdinfo/${fd}`, 'utf8').catch(() => ''))?.[1] ?? 0);
      if (pos >= PASS_CHUNK) return { pos, size };
    }
    return undefined;
  }, timeoutMs, 2);
}

/** Starts a load of n.file and freezes it (SIGSTOP) in the middle of its read pass. */
async function frozenMidRead(t: any, n: Node): Promise<Agent> {
  const a = startLoad(n);
  const { pos, size } = await waitReading(a, n.file);
  a.child.kill('SIGSTOP');
  t.ok(pos < size, `frozen while reading the bundle (offset ${pos} of ${size})`);
  return a;
}
const cond = (s: Status | undefined, type: string) => s?.conditions.find((c) => c.type === type);

const gone = (pid: number) => !pidExists(pid);

/** Pulls the stand-in has finished (this process's events): proves a pull was still in flight. */
async function pullsDone(n: Node): Promise<number> {
  return (await n.crio.events()).filter((e: any) => e.event === 'pull' && e.outcome === 'ok').length;
}

/** Exit 0, phase Ready, nothing left behind. */
async function expectReady(t: any, n: Node, r: { code: number | null; stderr: string }, what: string) {
  t.equal(r.code, 0, `${what}: exits 0`, { stderr: r.stderr.slice(-2000) });
  const s = await n.status();
  t.equal(s?.phase, 'Ready', `${what}: phase Ready`);
  t.equal(cond(s, 'Ready')?.status, 'True', `${what}: Ready=True`);
  t.same(await n.leftovers(), { partial: [], staged: [], dropIns: [] }, `${what}: no *.partial, no staged layout, no mirror drop-in`);
}

/** Exit non-zero, phase Failed with `reason`, nothing left behind. */
async function expectFailed(t: any, n: Node, r: { code: number | null; stderr: string }, reason: string | RegExp, what: string, ignore: string[] = []): Promise<Status | undefined> {
  t.not(r.code, 0, `${what}: exits non-zero`);
  t.not(r.code, null, `${what}: exits by itself (not killed by a signal)`);
  const s = await n.status();
  t.equal(s?.phase, 'Failed', `${what}: phase Failed`);
  const failed = cond(s, 'Failed');
  t.match(failed?.reason, reason, `${what}: Failed reason ${failed?.reason} (${failed?.message})`);
  t.match(r.stderr, new RegExp(`event=failed .*reason=${failed?.reason}`), `${what}: the journal line names the reason`);
  t.same(await n.leftovers(ignore), { partial: [], staged: [], dropIns: [] }, `${what}: no *.partial, no staged layout, no mirror drop-in`);
  return s;
}

// ---------------------------------------------------------------------------------------

t.test('1. SIGKILL during staging: a new load, and the daemon at start, recover', async (t) => {
  const n = await node(t, { extra: 'media:\n  roots: [/media]\n  watchDirs: [/stick]\n  pollSeconds: 1\n' });
  // the daemon's watched "stick" is <root>/stick: the same copy the loads read
  const file = n.file;

  /** Kills a load in Staging; whether its partial staging names the bundle yet (then the next load resumes it). */
  const killInStaging = async (named = false): Promise<boolean> => {
    let a: Agent;
    if (named) {
      // once the partial staging names its bundle (bundle.json verified), while the rest is still read
      a = startLoad(n);
      const marker = join(n.upgradeDir, `${STAGED}.partial`, 'resume.json');
      await until('the partial staging to name its bundle', async () => stat(marker).then(() => true, () => false), 120_000, 2);
      a.child.kill('SIGSTOP');
    } else {
      a = await frozenMidRead(t, n);
    }
    a.child.kill('SIGKILL');
    const r = await a.exit;
    t.equal(r.signal, 'SIGKILL', 'the agent was killed in Staging');
    const left = await n.leftovers();
    t.same(left.partial, [`${STAGED}.partial`], 'it left its partial staging behind');
    return stat(join(n.upgradeDir, `${STAGED}.partial`, 'resume.json')).then(() => true, () => false);
  };
  // killed before bundle.json was verified, the pieces name no bundle: dropped, not resumed
  const recovered = (marked: boolean) => (marked ? /resuming: .* already staged \(\d+ of \d+ files, each hashed again while the rest is read\)/ : /removed unfinished staging that names no bundle: 1\.1\.0-amd64\.partial/);

  let marked = await killInStaging(true);
  t.ok(marked, 'killed after its bundle.json was verified');
  const again = await load(n, file);
  t.match(again.stderr, recovered(marked), marked ? 'the new load resumed the staging' : 'the new load dropped the unnamed partial staging');
  await expectReady(t, n, again, 'a new load of the same file');

  marked = await killInStaging();
  const d = agent(n, ['run']);
  t.teardown(() => { d.child.kill('SIGKILL'); });
  // its own journal line, not status.json: the killed load may not have overwritten the last Ready there
  // the journal line comes as the status changes; the file is written just after it
  await until('the daemon to load the stick to Ready or Failed', async () => (/event=(ready|failed)/.test(d.stderr()) && ['Ready', 'Failed'].includes((await n.status())?.phase ?? '')) || d.child.exitCode !== null);
  const s = (await n.status())!;
  t.equal(s.bundle?.file, file, 'the status is about the stick\'s bundle');
  d.child.kill('SIGTERM');
  const r = await d.exit;
  t.equal(s.phase, "Ready", `the daemon loaded it: Ready (${s.phase} ${JSON.stringify(cond(s, "Failed"))} ${d.stderr().slice(-600)})`);
  t.equal(r.code, 0, 'the daemon stops cleanly on SIGTERM');
  t.match(r.stderr, recovered(marked), marked ? 'the daemon resumed the staging the killed load left' : 'the start-up cleanup removed the unnamed partial staging');
  t.same(await n.leftovers(), { partial: [], staged: [], dropIns: [] }, 'nothing left');
});

t.test('2. SIGKILL during pre-load (runtime frozen): the next load removes the drop-in and the layout, then Ready', async (t) => {
  const n = await node(t);
  const a = startLoad(n);
  await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
  process.kill(n.crio.pid, 'SIGSTOP');
  try {
    t.ok((await pullsDone(n)) < REFS, 'a pull is still in flight when the runtime freezes');
    a.child.kill('SIGKILL');
    t.equal((await a.exit).signal, 'SIGKILL');
  } finally {
    process.kill(n.crio.pid, 'SIGCONT');
  }
  t.same(await n.leftovers(), { partial: [], staged: [STAGED], dropIns: [MIRROR_DROP_IN] }, 'the killed load left the mirror drop-in and the staged layout');
  const r = await load(n);
  await expectReady(t, n, r, 'the next load');
  t.match(r.stderr, /removed staged layouts no release needs any more/, 'it says it removed the staged layout');
});

/** The stand-in's own children (its skopeo pulls): a runtime killed outright takes its pulls with it. */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

t.test('3. the runtime killed during pre-load and restarted: the pulls retry, the same load ends Ready', async (t) => {
  // preload.retries and the backoff as shipped (3 retries, 1 s doubling, with jitter)
  const n = await node(t, { retries: 'default' });
  const a = startLoad(n);
  await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
  const old = n.crio.pid;
  const pulls = childrenOf(old);
  process.kill(old, 'SIGKILL');
  for (const c of pulls) try { process.kill(c, 'SIGKILL'); } catch { /* done already */ }
  const killedAt = Date.now();
  await until('the killed stand-in to be gone', async () => gone(old), 30_000);
  t.ok((await pullsDone(n)) < REFS, 'pulls were still in flight when the runtime died');
  await n.restartCrio();
  const downMs = Date.now() - killedAt;
  t.comment(`the runtime was down for ${downMs} ms`);
  const r = await a.exit;
  await expectReady(t, n, r, 'the same load');
  const ev = await n.crio.events();
  t.ok(ev.some((e: any) => e.event === 'pull' && e.outcome === 'ok' && e.mirror), 'the restarted runtime pulled through the mirror (it read the drop-in at start)');
});

t.test('4. the upgrade filesystem fills up mid-copy: Failed, nothing left; with the space back, Ready', async (t) => {
  // room for the layout (the space check passes), not for the layout and a filler
  const n = await node(t, { upgradeFs: Math.ceil((MANIFEST.totals.layoutBytes * 1.25) / 1024) });
  const filler = join(n.upgradeDir, 'filler');
  const a = await frozenMidRead(t, n);
  try {
    t.same((await n.leftovers()).partial, [`${STAGED}.partial`], 'staging has begun (the space check passed)');
    const fs = await statfs(n.upgradeDir);
    const free = fs.bavail * fs.bsize;
    execFileSync('fallocate', ['-l', String(free), filler]);
    const after = await statfs(n.upgradeDir);
    t.equal(after.bavail, 0, 'the filler took every free block');
  } finally {
    a.child.kill('SIGCONT');
  }
  const s = await expectFailed(t, n, await a.exit, 'InsufficientSpace', 'the load', ['filler']);
  t.match(cond(s, 'Failed')?.message, /ENOSPC.*free space on the filesystem of .*var\/lib\/upgrade/, 'the message names the cause and where to free space');
  await rm(filler);
  await expectReady(t, n, await load(n), 'the next load, with the space back');
});

// The media-mode node: too little room to stage the layout (a 64 KiB upgradeDir), room enough for the images.
const mediaNode = (t: any) => node(t, { upgradeFs: 64 });

async function bundleFault(t: any, n: Node, fault: () => Promise<void>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const a = await frozenMidRead(t, n);
  try {
    await fault();
  } finally {
    a.child.kill('SIGCONT');
  }
  return a.exit;
}

t.test('5. the bundle truncated or deleted while it is read', async (t) => {
  const shrink = (n: Node) => () => truncate(n.file, Math.floor(MANIFEST.totals.layoutBytes / 2));
  const remove = (n: Node) => () => unlink(n.file);

  t.test('staged mode', async (t) => {
    const n = await node(t);
    // the verified pieces stay for a resume; the next load of the same bundle leaves nothing
    const kept = [`${STAGED}.partial`];
    let r = await bundleFault(t, n, shrink(n));
    await expectFailed(t, n, r, 'Truncated', 'truncated while staged', kept);
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');

    r = await bundleFault(t, n, remove(n));
    const gone = await expectFailed(t, n, r, 'MediaRemoved', 'deleted while staged', kept);
    t.match(cond(gone, 'Failed')?.message, /disappeared .*Plug it in again/, 'the message says the media went away');
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');
  });

  t.test('media mode (too little disk to stage)', async (t) => {
    const n = await mediaNode(t);
    let r = await bundleFault(t, n, shrink(n));
    await expectFailed(t, n, r, 'Truncated', 'truncated while verified from the media');
    await n.restore();
    r = await load(n);
    await expectReady(t, n, r, 'the restored file');
    t.match(r.stdout, /"mode":"media"/, 'served from the media');

    r = await bundleFault(t, n, remove(n));
    await expectFailed(t, n, r, 'MediaRemoved', 'deleted while verified from the media');
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');
  });
});

t.test('6. SIGTERM at each phase: Failed, Interrupted, nothing left; the next load is Ready', async (t) => {
  const interrupt = async (t: any, n: Node, at: ((s: Status) => boolean) | 'reading', atWhat: string, hold?: 'reload') => {
    let a: Agent;
    if (at === 'reading') {
      // the read pass: staging in staged mode, the full verification in media mode
      a = await frozenMidRead(t, n);
      a.child.kill('SIGTERM');
      a.child.kill('SIGCONT');
    } else if (hold) {
      a = startLoad(n);
      // hold the agent inside its second reload (after the pulls, with the pins): the Pinning phase
      await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
      await writeFile(n.gate, '');
      await waitStatus(n, a, atWhat, at);
      a.child.kill('SIGTERM');
      await rm(n.gate);
    } else {
      const before = await pullsDone(n);
      a = startLoad(n);
      await waitStatus(n, a, atWhat, at);
      a.child.kill('SIGSTOP');
      t.ok((await pullsDone(n)) - before < REFS, 'frozen while pulls are still to come');
      a.child.kill('SIGTERM');
      a.child.kill('SIGCONT');
    }
    // a stop in Staging keeps the verified pieces for a resume; the next load leaves nothing
    await expectFailed(t, n, await a.exit, 'Interrupted', `SIGTERM at ${atWhat}`, atWhat === 'Staging' ? [`${STAGED}.partial`] : []);
    await expectReady(t, n, await load(n), 'the next load');
  };
  t.test('Verifying (the full verification pass, media mode)', async (t) => interrupt(t, await mediaNode(t), 'reading', 'Verifying'));
  const n = await node(t);
  t.test('Staging', async (t) => interrupt(t, n, 'reading', 'Staging'));
  t.test('Preloading (serving)', async (t) => interrupt(t, n, phase('Preloading'), 'Preloading'));
  t.test('Pinning', async (t) => interrupt(t, n, phase('Pinning'), 'Pinning', 'reload'));
});

t.test('7. the cluster API down for a whole load, with the shipped version.fromCluster config (RBAC-enforcing API stand-in)', async (t) => {
  // version and status.kubeconfig as deploy/openshift/config.yaml.in ships them, instead of version.current
  const shipped = parseYaml(readFileSync(new URL('../../deploy/openshift/config.yaml.in', import.meta.url), 'utf8'));
  t.equal(shipped.version.fromCluster, true);
  const fromCluster = async (t: any) => {
    const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
    t.teardown(() => api.close());
    const n = await node(t);
    await writeFile(n.config, (await readFile(n.config, 'utf8')).replace('version:\n  current: "1.0.0"\n', stringifyYaml({ version: shipped.version, status: { kubeconfig: shipped.status.kubeconfig } })));
    await api.writeNodeKubeconfig(n.root, 'node-a', { certPaths: 'root' });
    return { api, n };
  };
  t.test('a fresh node waits for the cluster (not a failure), and loads once it answers', async (t) => {
    const { api, n } = await fromCluster(t);
    await api.pause();
    const a = startLoad(n);
    const waiting = await waitStatus(n, a, 'Ready False WaitingForCluster', (s) => s.conditions.some((c) => c.type === 'Ready' && c.reason === 'WaitingForCluster'));
    t.equal(waiting.phase, 'Verifying', 'waiting, not Failed');
    const c = waiting.conditions.find((x) => x.type === 'Ready')!;
    t.match(c.message, /the cluster's API server did not answer .*ECONNREFUSED.*this node never saw its running version, so the update waits for the cluster \(trying again for up to 30 min\); or set version\.current/);
    t.notMatch(c.message, 'version.fromCluster', 'does not tell the admin to set what is set');
    t.equal((await n.leftovers()).staged.length + (await n.leftovers()).partial.length, 0, 'nothing staged while the version is unknown');
    await api.resume();
    const r = await a.exit;
    await expectReady(t, n, r, 'the load once the API server is back');
    t.match(r.stderr, /the cluster answered: it runs 1\.0\.0; the load goes on/);
    t.equal((r.stderr.match(/update waits for the cluster/g) ?? []).length, 1, 'the wait logged once');
  });
  t.test('a node that saw its running version before loads without the API', async (t) => {
    const { api, n } = await fromCluster(t);
    await expectReady(t, n, await load(n), 'a first load with the API up');
    await api.pause();
    const r = await load(n);
    await expectReady(t, n, r, 'a load with nothing listening on the API server\'s port');
    t.match(r.stderr, /cannot read the running version from the cluster \(.*ECONNREFUSED.*\); using the last one seen there, 1\.0\.0 at /);
  });
});

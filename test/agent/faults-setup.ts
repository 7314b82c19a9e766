// Shared set-up of the fault tests (faults.test.ts: cases 1-4; faults-media.test.ts: 5-7), split
// so each file stays well under tap's per-file timeout on a loaded machine. See faults.test.ts.
import t from 'tap';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readdir, readFile, readlink, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pidExists } from '@offline-bundle/host';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import {
  AGENT,
  crioFiles,
  crioNodeConfig,
  crioSighup,
  keygen,
  makeBundle,
  smallFs,
} from './fixtures.js';

// The images' home: a host that never resolves, so only the agent's mirror can serve them.
export const ORIGIN = 'origin.offline-bundle.invalid';
export const MIRROR_DROP_IN = 'offline-bundle-mirror.conf';
export const STAGED = '1.1.0-amd64';

// One key and one bundle for the whole file: a large random layer makes Staging and the
// pulls last long enough to be caught, two small images make several pulls.
export const shared = await tmpdir(t, 'ob-faults-');
export const keys = await keygen(shared);
export const BIG_MIB = 24;
export const BUNDLE = await makeBundle(shared, {
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
export const MANIFEST = JSON.parse(
  execFileSync('sh', ['-c', `zstd -dc ${JSON.stringify(BUNDLE)} | tar -xO bundle.json`]).toString(),
);
/** The agent pulls each image by digest and by tag. */
export const REFS = MANIFEST.images.reduce(
  (k: number, i: { tag?: string }) => k + (i.tag ? 2 : 1),
  0,
);

export interface Status {
  phase: string;
  bundle?: { mode?: string; file?: string };
  progress: { bytesTotal: number; imagesDone: number; imagesTotal: number };
  conditions: { type: string; status: string; reason: string; message: string }[];
}

export interface Node {
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
  leftovers: (
    ignore?: string[],
  ) => Promise<{ partial: string[]; staged: string[]; dropIns: string[] }>;
  restore: () => Promise<void>;
}

/** A node whose upgrade directory is a 64 KiB tmpfs: too small to stage, so the agent serves from the media. */
export const mediaNode = (t: any) => node(t, { upgradeFs: 64 });

export async function node(
  t: any,
  opts: { extra?: string; retries?: number | 'default'; upgradeFs?: number } = {},
): Promise<Node> {
  const dir = await tmpdir(t, 'ob-fault-');
  const root = join(dir, 'node');
  const p = (rel: string) => join(root, rel);
  const files = await crioFiles(root);
  const upgradeDir = p('var/lib/upgrade');
  if (opts.upgradeFs !== undefined && !smallFs(upgradeDir, opts.upgradeFs, t))
    throw new Error('mounting a tmpfs is not permitted here');
  const startCrio = () => startCrioStandin(t, files);
  const pidFile = p('run/crio/pid');
  const gate = join(dir, 'reload.gate');
  const n: Node = {
    dir,
    root,
    upgradeDir,
    gate,
    config: '',
    file: p('stick/update.bundle'),
    crio: await startCrio(),
    restartCrio: async () => {
      n.crio = await startCrio();
      await writeFile(pidFile, String(n.crio.pid));
      return n.crio;
    },
    status: async () =>
      readFile(p('var/lib/bundle-agent/status.json'), 'utf8').then(
        (s) => JSON.parse(s) as Status,
        () => undefined,
      ),
    leftovers: async (ignore = []) => {
      const up = (await readdir(upgradeDir).catch(() => [] as string[])).filter(
        (x) => !ignore.includes(x),
      );
      return {
        partial: up.filter((x) => x.endsWith('.partial')),
        staged: up.filter((x) => !x.endsWith('.partial')),
        dropIns: (await readdir(p('etc/containers/registries.conf.d'))).filter((x) =>
          x.includes('offline-bundle'),
        ),
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
  const retries = opts.retries === 'default' ? '' : `  retries: ${opts.retries ?? 2}\n`;
  n.config = await crioNodeConfig(root, keys.pub, {
    reload: crioSighup(pidFile, `while [ -e ${JSON.stringify(gate)} ]; do sleep 0.05; done`),
    extra: `preload:\n  method: cri\n${retries}${opts.extra ?? ''}`,
  });
  return n;
}

export interface Agent {
  child: ChildProcess;
  stderr: () => string;
  exit: Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
  }>;
}

/** A `bundle-agent` child process (load FILE, or run). */
export function agent(n: Node, args: string[]): Agent {
  const child = spawn(process.execPath, [AGENT, ...args, '--config', n.config], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d;
  });
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d;
  });
  const exit = new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
  }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  // never left behind, even frozen
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        child.kill('SIGKILL');
      } catch {
        /* gone */
      }
    }
  };
  process.once('exit', stop);
  exit.then(() => process.removeListener('exit', stop));
  return { child, exit, stderr: () => stderr };
}

export const startLoad = (n: Node, file = n.file) => agent(n, ['load', file, '--json']);

export async function load(n: Node, file = n.file) {
  return startLoad(n, file).exit;
}

/** Polls status.json until `pred` holds; fails at once if the agent exits first. */
export async function waitStatus(
  n: Node,
  a: Agent | undefined,
  what: string,
  pred: (s: Status) => boolean,
  timeoutMs = 120_000,
): Promise<Status> {
  return until(
    what,
    async () => {
      const s = await n.status();
      if (s && pred(s)) return s;
      if (a && (a.child.exitCode !== null || a.child.signalCode !== null)) {
        const r = await a.exit;
        throw new Error(
          `the agent exited (${r.code ?? r.signal}) before ${what}; last status ${JSON.stringify(s?.phase)}: ${r.stderr.slice(-1500)}`,
        );
      }
      return undefined;
    },
    { timeoutMs },
  );
}

export const phase = (p: string) => (s: Status) => s.phase === p;

/**
 * Waits until the agent is in its one sequential pass over `file` (staging in staged mode, the
 * full verification in media mode): a descriptor of it whose offset is at least one of the
 * pass's 1 MiB reads (READ_CHUNK). The header read before it (Verifying) reads 64 KiB chunks
 * and stops within the first few; the seek-index and registry reads are positional and leave
 * offsets at 0. Read from /proc at once, where status.json trails the agent by its queued
 * writes. Resolves to the offset and the file's size.
 */
export const PASS_CHUNK = 1024 * 1024;
export async function waitReading(
  a: Agent,
  file: string,
  timeoutMs = 120_000,
): Promise<{ pos: number; size: number }> {
  const pid = a.child.pid!;
  const size = (await stat(file)).size;
  return until(
    `the agent to read ${file}`,
    async () => {
      if (a.child.exitCode !== null || a.child.signalCode !== null)
        throw new Error(
          `the agent exited before it read the bundle: ${(await a.exit).stderr.slice(-1500)}`,
        );
      for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
        if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')) !== file) continue;
        const pos = Number(
          /^pos:\s*(\d+)/m.exec(
            await readFile(`/proc/${pid}/fdinfo/${fd}`, 'utf8').catch(() => ''),
          )?.[1] ?? 0,
        );
        if (pos >= PASS_CHUNK) return { pos, size };
      }
      return undefined;
    },
    { timeoutMs, stepMs: 2 },
  );
}

/** Starts a load of n.file and freezes it (SIGSTOP) in the middle of its read pass. */
export async function frozenMidRead(t: any, n: Node): Promise<Agent> {
  const a = startLoad(n);
  const { pos, size } = await waitReading(a, n.file);
  a.child.kill('SIGSTOP');
  t.ok(pos < size, `frozen while reading the bundle (offset ${pos} of ${size})`);
  return a;
}
export const cond = (s: Status | undefined, type: string) =>
  s?.conditions.find((c) => c.type === type);

export const gone = (pid: number) => !pidExists(pid);

/** Pulls the stand-in has finished (this process's events): proves a pull was still in flight. */
export async function pullsDone(n: Node): Promise<number> {
  return (await n.crio.events()).filter((e: any) => e.event === 'pull' && e.outcome === 'ok')
    .length;
}

/** Exit 0, phase Ready, nothing left behind. */
export async function expectReady(
  t: any,
  n: Node,
  r: { code: number | null; stderr: string },
  what: string,
) {
  t.equal(r.code, 0, `${what}: exits 0`, { stderr: r.stderr.slice(-2000) });
  const s = await n.status();
  t.equal(s?.phase, 'Ready', `${what}: phase Ready`);
  t.equal(cond(s, 'Ready')?.status, 'True', `${what}: Ready=True`);
  t.same(
    await n.leftovers(),
    { partial: [], staged: [], dropIns: [] },
    `${what}: no *.partial, no staged layout, no mirror drop-in`,
  );
}

/** Exit non-zero, phase Failed with `reason`, nothing left behind. */
export async function expectFailed(
  t: any,
  n: Node,
  r: { code: number | null; stderr: string },
  reason: string | RegExp,
  what: string,
  ignore: string[] = [],
): Promise<Status | undefined> {
  t.not(r.code, 0, `${what}: exits non-zero`);
  t.not(r.code, null, `${what}: exits by itself (not killed by a signal)`);
  const s = await n.status();
  t.equal(s?.phase, 'Failed', `${what}: phase Failed`);
  const failed = cond(s, 'Failed');
  t.match(failed?.reason, reason, `${what}: Failed reason ${failed?.reason} (${failed?.message})`);
  t.match(
    r.stderr,
    new RegExp(`event=failed .*reason=${failed?.reason}`),
    `${what}: the journal line names the reason`,
  );
  t.same(
    await n.leftovers(ignore),
    { partial: [], staged: [], dropIns: [] },
    `${what}: no *.partial, no staged layout, no mirror drop-in`,
  );
  return s;
}

// ---------------------------------------------------------------------------------------

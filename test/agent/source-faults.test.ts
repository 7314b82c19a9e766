// A whole agent load (runLoad: admission, staging, Ready) reading its bundle through the
// in-memory BundleSource double (ctx.openBundle), each fault compared with the same fault done to
// the file the load reads: the same reason and message in the status. The runtime is a stand-in
// that accepts every call (preload.method none: no image is pulled); what is under test is the
// bundle's bytes, not the runtime.
import t from 'tap';
import { chmod, readFile, readdir, rm, unlink, writeFile } from 'node:fs/promises';
import { openSync, closeSync, readSync, writeSync, truncateSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, parseConfig, runLoad, type PipelineContext } from '@offline-bundle/agent';
import type { BundleSource } from '@offline-bundle/format';
import { StatusTracker, emptyStatus, type Status } from '@offline-bundle/status';
import { makeBundle, readFrames } from '../format/craft.js';
import { MemorySource, type MemoryFaults } from '../helpers/memory-source.js';
import { acceptingRuntime, nodeRoot } from './fixtures.js';

async function node(t: Parameters<Parameters<typeof t.test>[1]>[0]) {
  const b = await makeBundle(t, { layerSizes: [12 * 1024 * 1024, 6 * 1024 * 1024] });
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  const root = join(b.dir, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\n',
  );
  await chmod(b.dir, 0o755);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  return { ...b, config };
}

type Node = Awaited<ReturnType<typeof node>>;

/**
 * The file's fault and the memory's are compared from the same start: a staging cut short keeps
 * its verified pieces and the next load would resume them (test/agent/resume.test.ts), so they go.
 */
async function freshStart(n: Node): Promise<void> {
  for (const x of await readdir(n.config.paths.upgradeDir))
    if (x.endsWith('.partial'))
      await rm(join(n.config.paths.upgradeDir, x), { recursive: true, force: true });
}

interface Outcome {
  ok: boolean;
  reason?: string;
  message?: string;
  phase: string;
  mode?: string;
}

/** One load of `n.path`, its bytes from `openBundle` (the file itself when not given); `onStatus` sees every change. */
async function load(
  n: Node,
  openBundle?: (file: string) => Promise<BundleSource>,
  onStatus?: (s: Status) => void,
): Promise<Outcome> {
  const tracker = new StatusTracker(emptyStatus('node-a'));
  if (onStatus) tracker.onChange(onStatus);
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const ctx: PipelineContext = {
    config: n.config,
    log,
    tracker,
    runtime: acceptingRuntime(),
    ...(openBundle ? { openBundle } : {}),
  };
  const ok = await runLoad(n.path, ctx).then(
    () => true,
    () => false,
  );
  const failed = tracker.current.conditions.find((c) => c.type === 'Failed');
  return {
    ok,
    phase: tracker.current.phase,
    ...(failed ? { reason: failed.reason, message: failed.message } : {}),
    ...(tracker.current.bundle?.mode ? { mode: tracker.current.bundle.mode } : {}),
  };
}

/** The bundle's bytes from memory, with `faults`; the sources the load opened, to see it close them. */
function fromMemory(bytes: Buffer, faults: MemoryFaults) {
  const opened: MemorySource[] = [];
  const openBundle = async (file: string) => {
    const s = new MemorySource(bytes, file, faults);
    opened.push(s);
    return s;
  };
  return { opened, openBundle };
}

/** Once, at the first status change into `phase`: the load has admitted the bundle, the pass has not started. */
function atPhase(phase: string, fault: () => void) {
  let done = false;
  return (s: Status) => {
    if (!done && s.phase === phase) {
      done = true;
      fault();
    }
  };
}

t.test(
  'a load through the memory source: Ready, read through it, closed by the load',
  async (t) => {
    const n = await node(t);
    const mem = fromMemory(await readFile(n.path), {});
    const r = await load(n, mem.openBundle);
    t.same(r, { ok: true, phase: 'Ready', mode: 'staged' }, 'Ready, staged');
    t.equal(mem.opened.length, 1, 'one source for the whole load');
    t.ok(
      mem.opened[0]!.reads >= 2,
      `the head and the staging pass both read through it (${mem.opened[0]!.reads} reads)`,
    );
    t.ok(mem.opened[0]!.closed, 'closed by the load that opened it');
    // and the default: the file, opened once, gives the same
    t.same(await load(n), r, 'the file itself: the same outcome');
  },
);

t.test('a short read: Truncated, as the file cut while it is staged', async (t) => {
  const n = await node(t);
  const bytes = await readFile(n.path);
  const cut = Math.floor(bytes.length / 2);
  const fromFile = await load(
    n,
    undefined,
    atPhase('Staging', () => truncateSync(n.path, cut)),
  );
  t.equal(fromFile.reason, 'Truncated', `the file: ${fromFile.message}`);
  await writeFile(n.path, bytes);
  await freshStart(n);
  // cut once admitted, as the file was: one cut before the load is refused before any copy (below)
  const mem = fromMemory(bytes, {});
  const fromMem = await load(
    n,
    mem.openBundle,
    atPhase('Staging', () => {
      mem.opened[0]!.faults.shortAt = cut;
    }),
  );
  t.same(fromMem, fromFile, 'the same reason and message');
  t.ok(mem.opened[0]!.closed, 'closed after the failure');
});

t.test(
  "a file cut before the load: Truncated before any byte is copied, its progress never shown as the bundle's",
  async (t) => {
    const n = await node(t);
    const bytes = await readFile(n.path);
    await writeFile(n.path, bytes.subarray(0, Math.floor(bytes.length * 0.6)));
    const seen: Status[] = [];
    const r = await load(n, undefined, (s) => seen.push(structuredClone(s)));
    t.equal(r.reason, 'Truncated', r.message ?? '');
    t.match(
      r.message,
      /is cut short: .* no seek table at its end .*copy the bundle again/,
      'names the cause and the fix',
    );
    t.notOk(
      seen.some((s) => s.phase === 'Staging' || s.progress.bytesTotal > 0),
      'no copy started, no "N of N" of the cut file shown',
    );
    t.same(
      (await readdir(n.config.paths.upgradeDir).catch(() => [])).filter((x) => !x.startsWith('.')),
      [],
      'nothing staged',
    );
    await writeFile(n.path, bytes);
    t.same(
      await load(n),
      { ok: true, phase: 'Ready', mode: 'staged' },
      'the whole file then loads',
    );
  },
);

t.test(
  'an error mid-range (EIO): MediaRemoved, as the file deleted while it is staged',
  async (t) => {
    const n = await node(t);
    const bytes = await readFile(n.path);
    const fromFile = await load(
      n,
      undefined,
      atPhase('Staging', () => void unlink(n.path)),
    );
    t.equal(fromFile.reason, 'MediaRemoved', `the file: ${fromFile.message}`);
    await writeFile(n.path, bytes);
    await freshStart(n);
    const frames = await readFrames(n.path);
    const mem = fromMemory(bytes, {
      errorAt: frames[Math.floor(frames.length / 2)]!.compressedOffset + 7,
    });
    const fromMem = await load(n, mem.openBundle);
    t.equal(fromMem.reason, fromFile.reason, 'the same reason');
    t.match(
      fromMem.message,
      `cannot read ${n.path}: EIO`,
      `naming the bundle and the system's reason: ${fromMem.message}`,
    );
    t.equal(fromMem.phase, 'Failed');
  },
);

t.test(
  'a byte flipped between the head check and the staging pass: refused as the file rewritten between them',
  async (t) => {
    const n = await node(t);
    const bytes = await readFile(n.path);
    const at = 20; // inside the first frame: bundle.json, which both reads cover
    const flip = () => {
      const fd = openSync(n.path, 'r+');
      const one = Buffer.alloc(1);
      readSync(fd, one, 0, 1, at);
      one[0] = one[0]! ^ 0x01;
      writeSync(fd, one, 0, 1, at);
      closeSync(fd);
    };
    const fromFile = await load(n, undefined, atPhase('Staging', flip));
    t.notOk(fromFile.ok, `the file: ${fromFile.reason} ${fromFile.message}`);
    await writeFile(n.path, bytes);
    const mem = fromMemory(bytes, { flip: { at, fromRead: 2 } });
    const fromMem = await load(n, mem.openBundle);
    t.same(fromMem, fromFile, 'the same reason and message');
  },
);

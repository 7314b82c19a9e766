// A whole agent load (runLoad) cut short while staging (EIO from the in-memory source double at
// 60% of the bundle, as a stick pulled), then the same bundle again: Ready, with fewer bytes read
// from the source than the bundle has, and "resuming: ... already staged" said. A kept blob
// corrupted between the two loads is found and read again; another bundle drops the partial.
// The runtime is a stand-in that accepts every call (preload.method none): under test is staging.
import t from 'tap';
import { chmod, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  createLogger,
  parseConfig,
  runLoad,
  type PipelineContext,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { makeBundle } from '../format/craft.js';
import { MemorySource, type MemoryFaults } from '../helpers/memory-source.js';
import { nodeRoot } from './fixtures.js';

const MiB = 1024 * 1024;

const acceptingRuntime = (): RuntimeTarget =>
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

async function node(t: Parameters<Parameters<typeof t.test>[1]>[0], extra = '') {
  const b = await makeBundle(t, { layerSizes: [3 * MiB, 5 * MiB, 4 * MiB, 6 * MiB, 2 * MiB] });
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  const root = join(b.dir, 'node');
  const configFile = await nodeRoot(
    root,
    pub,
    'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\n' +
      extra,
  );
  await chmod(b.dir, 0o755);
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  return { ...b, config, bytes: await readFile(b.path) };
}

type Node = Awaited<ReturnType<typeof node>>;

/** One load of `n.path` with its bytes from memory (`bytes`, with `faults`): outcome, log lines, the source. */
async function load(n: Node, faults: MemoryFaults = {}, bytes = n.bytes) {
  const tracker = new StatusTracker(emptyStatus('node-a'));
  const lines: string[] = [];
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        lines.push(String(c));
        cb();
      },
    }),
  );
  const sources: MemorySource[] = [];
  const openBundle = async (file: string) => {
    const s = new MemorySource(bytes, file, faults);
    sources.push(s);
    return s;
  };
  const ctx: PipelineContext = {
    config: n.config,
    log,
    tracker,
    runtime: acceptingRuntime(),
    openBundle,
  };
  const ok = await runLoad(n.path, ctx).then(
    () => true,
    () => false,
  );
  const failed = tracker.current.conditions.find((c) => c.type === 'Failed');
  return {
    ok,
    phase: tracker.current.phase,
    reason: failed?.reason,
    message: failed?.message,
    log: lines.join(''),
    read: sources.reduce((s, x) => s + x.bytesRead, 0),
  };
}

const partials = async (n: Node) =>
  (await readdir(n.config.paths.upgradeDir)).filter((x) => x.endsWith('.partial'));

t.test(
  'staging cut at 60%, the same bundle again: resumed, fewer bytes read than the bundle has, Ready',
  async (t) => {
    const n = await node(t);
    const first = await load(n, { errorAt: Math.floor(n.bytes.length * 0.6) });
    t.equal(first.reason, 'MediaRemoved', `cut: ${first.message}`);
    t.equal((await partials(n)).length, 1, 'the partial staging stays for a resume');
    const second = await load(n);
    t.equal(second.phase, 'Ready', `Ready: ${second.message ?? ''}`);
    t.match(
      second.log,
      /resuming: [\d.]+ [KMG]?B of [\d.]+ [KMG]?B already staged \(\d+ of \d+ files, each hashed again while the rest is read\)/,
      'said in the log',
    );
    const kept = Number(/keptBytes=(\d+)/.exec(second.log)?.[1]);
    t.ok(kept > 0, `kept ${kept} layout bytes`);
    // the head (read once, by admit, in 1 MiB chunks), a small frame per header, the seek table, the missing entries' frames
    t.ok(
      second.read < n.bytes.length - kept + 3 * MiB && second.read < n.bytes.length,
      `read ${second.read} of ${n.bytes.length} bytes from the source on resume (the first load read ${first.read})`,
    );
    t.same(await partials(n), [], 'no partial left');
  },
);

t.test(
  'resumed while the pulls run beside the staging (a signed bundle, preload on): the verify line names no empty digest (#40 item 8)',
  async (t) => {
    const n = await node(t, 'staging:\n  keep: false\n');
    n.config.preload.method = 'cri';
    t.equal((await load(n, { errorAt: Math.floor(n.bytes.length * 0.6) })).reason, 'MediaRemoved');
    const second = await load(n);
    t.equal(second.phase, 'Ready', `Ready: ${second.message ?? ''}`);
    const verified = second.log.split('\n').find((l) => l.includes('event=verified')) ?? '';
    t.match(
      verified,
      /verified \(staging resumed: each entry checked against the signed bundle\.json, the file not hashed whole\) event=verified signer=/,
    );
    t.notMatch(verified, /digest=(\s|$)/, `no "digest=" with nothing after it: ${verified}`);
  },
);

t.test(
  'a kept blob corrupted on disk between the two loads: found by the re-hash, read again, Ready',
  async (t) => {
    const n = await node(t);
    await load(n, { errorAt: Math.floor(n.bytes.length * 0.6) });
    const [p] = await partials(n);
    const blobs = join(n.config.paths.upgradeDir, p!, 'blobs/sha256');
    const victim = join(
      blobs,
      (await readdir(blobs)).find((x) => !x.endsWith('.writing'))!,
    );
    const data = await readFile(victim);
    data[0]! ^= 0x01;
    await writeFile(victim, data);
    const second = await load(n);
    t.equal(second.phase, 'Ready');
    t.match(
      second.log,
      /1 kept file no longer matched its signed digest \(damaged on this node's disk\) and is read again from the bundle/,
      'said',
    );
  },
);

t.test('another bundle arrives: the partial staging of the first goes', async (t) => {
  const n = await node(t);
  await load(n, { errorAt: Math.floor(n.bytes.length * 0.6) });
  t.equal((await partials(n)).length, 1);
  const other = await makeBundle(t, { key: n.key, layerSizes: [MiB] });
  const r = await load(n, {}, await readFile(other.path));
  t.equal(r.phase, 'Ready', `the other bundle loads: ${r.message ?? ''}`);
  t.notMatch(r.log, /resuming:/, 'not resumed');
  t.same(await partials(n), [], "the first bundle's pieces are gone");
});

t.test(
  'a kept layout (staging.keep: true) damaged on disk: staged again from the bundle, not failed (#24 item 3)',
  async (t) => {
    const n = await node(t, 'staging:\n  keep: true\n');
    t.equal((await load(n)).phase, 'Ready', 'first load');
    const layout = join(
      n.config.paths.upgradeDir,
      (await readdir(n.config.paths.upgradeDir)).find((x) => !x.endsWith('.partial'))!,
    );
    const blobs = join(layout, 'blobs/sha256');
    const victim = join(blobs, (await readdir(blobs))[0]!);
    const data = await readFile(victim);
    data[0]! ^= 0x01;
    await writeFile(victim, data);
    const again = await load(n);
    t.equal(again.phase, 'Ready', `Ready: ${again.message ?? ''}`);
    t.match(
      again.log,
      /the layout staged earlier in .* is damaged \(.*\): staging it again from the bundle/,
      'said',
    );
    t.ok(again.read >= n.bytes.length, 'the whole bundle read again');
    const fixed = await readFile(victim);
    fixed[0]! ^= 0x01;
    t.same(fixed, data, 'the blob is whole again');
  },
);

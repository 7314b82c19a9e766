// A real SIGKILL of a load from peers (runLoad of a PeerSource, in a child process) in the middle
// of its fetch: the partial staging stays under the resume marker naming its bundle, the dead
// process's load lock does not block the next load, and the next load from peers resumes it,
// fetching only what was missing. Real mutual-TLS peer servers on 127.0.0.x (one slowed to
// 1 MiB/s so the kill lands mid-fetch); the runtime is a stand-in (preload.method none).
import t from 'tap';
import { spawn } from 'node:child_process';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { partialBundle } from '@offline-bundle/format';
import {
  PeerSource,
  createLogger,
  parseConfig,
  peerFetchBase,
  runLoad,
  type PipelineContext,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
const slow = await w.server({ uploadBytesPerSecond: 1024 * 1024 });
const repo = resolve(import.meta.dirname, '../..');

/** The child: runLoad of a PeerSource from `endpoint`, printing each entry placed (the parent kills it mid-way). */
const CHILD = `
import { readFile } from 'node:fs/promises';
import { Writable } from 'node:stream';
const a = JSON.parse(process.env.KILL_ARGS);
const agent = await import(a.repo + '/agent/dist/index.js');
const format = await import(a.repo + '/packages/format/dist/index.js');
const status = await import(a.repo + '/packages/status/dist/index.js');
const config = agent.parseConfig(await readFile(a.configFile, 'utf8'), a.configFile);
const credentials = await agent.loadPeerCredentials(a.ca);
const trust = await format.loadTrust(config.trust.keys);
const directory = { approved: async () => [a.approval], peersFor: async () => [a.endpoint] };
const none = async () => undefined;
const runtime = { mirror: async () => none, preload: none, pin: none, unpin: none, pinnedRefs: async () => new Set(), apply: none, inspector: none, cleanup: none, close: none };
const log = agent.createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
const tracker = new status.StatusTracker(status.emptyStatus('killed-node'));
const source = new agent.PeerSource({ ...agent.peerFetchBase(config, credentials, trust), approval: a.approval, directory, connectTimeoutMs: 1000,
  onVerified: (e) => process.stdout.write('placed ' + e.path + '\\n') });
await agent.runLoad(source, { config, log, tracker, runtime });
process.stdout.write('done\\n');
`;

t.test(
  'kill -9 mid-fetch through runLoad(PeerSource): the partial is kept under its marker, the next load resumes it',
  async (t) => {
    const pub = join(w.b.dir, 'factory.pub');
    await writeFile(pub, w.b.key.publicPem);
    const root = join(w.b.dir, 'kill-mid-fetch', 'node');
    const configFile = await nodeRoot(
      root,
      pub,
      'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n',
    );
    const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
    const script = join(w.b.dir, 'kill-child.mjs');
    await writeFile(script, CHILD);
    const child = spawn(process.execPath, [script], {
      env: {
        ...process.env,
        KILL_ARGS: JSON.stringify({
          repo,
          configFile,
          ca: w.ca,
          approval: w.approval,
          endpoint: endpoint('slow', slow.url),
        }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (c: Buffer) => {
      err += String(c);
    });
    const exited = new Promise<NodeJS.Signals | null>((res) =>
      child.on('exit', (_code, signal) => res(signal)),
    );
    // oci-layout and two more entries in place: the rest is still arriving at 1 MiB/s
    await new Promise<void>((res, rej) => {
      child.stdout.on('data', (c: Buffer) => {
        out += String(c);
        if (out.split('\n').filter((l) => l.startsWith('placed ')).length >= 3) res();
      });
      child.on('exit', () => rej(new Error(`the child ended before the kill: ${out} ${err}`)));
    });
    child.kill('SIGKILL');
    t.equal(await exited, 'SIGKILL', 'killed mid-fetch');
    t.notMatch(out, /done/, 'the load had not finished');
    const upgradeDir = config.paths.upgradeDir;
    t.same(await readdir(upgradeDir), ['1.2.3-amd64.partial'], 'the partial staging is kept');
    t.equal(
      await partialBundle(join(upgradeDir, '1.2.3-amd64.partial')),
      w.approval.manifestDigest,
      'under the resume marker naming its bundle',
    );

    const before = seed.counters.bytesServed;
    const tracker = new StatusTracker(emptyStatus('restarted-node'));
    const ctx: PipelineContext = {
      config,
      log: createLogger(new Writable({ write: (_c, _e, cb) => cb() })),
      tracker,
      runtime: acceptingRuntime(),
    };
    const source = new PeerSource({
      ...peerFetchBase(config, w.credentials, w.b.trust),
      approval: w.approval,
      directory: new FixedDirectory([w.approval], [endpoint('seed', seed.url)]),
      connectTimeoutMs: 1000,
    });
    t.equal(
      (await runLoad(source, ctx)).version,
      '1.2.3',
      "the next load (the dead process's lock no obstacle) completes",
    );
    const fetched = seed.counters.bytesServed - before;
    t.ok(
      fetched > 0 && fetched < w.layoutBytes,
      `resumed: ${fetched} of ${w.layoutBytes} layout bytes fetched again`,
    );
    t.same(await readdir(upgradeDir), ['1.2.3-amd64'], 'put in place');
    t.equal(tracker.current.phase, 'Ready');
  },
);

// A load from peers stopped after its fetch was put in place (the rename of `<target>.partial`
// before the pulls) keeps what it fetched: after a SIGKILL the start-up cleanup, and after a
// stop (Interrupted) the load itself, put the unrecorded layout back as a marked partial staging,
// which the next fetch re-hashes and does not fetch again. Real mutual-TLS peers on 127.0.0.x; the
// runtime is a stand-in (preload.method none) that stops the load at its mirror step.
import t, { type Test } from 'tap';
import { mkdir, readFile, readdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  AgentError,
  PeerService,
  createLogger,
  parseConfig,
  readReleases,
  removeLeftovers,
} from '@offline-bundle/agent';
import { partialBundle } from '@offline-bundle/format';
import type { RuntimeTarget } from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { acceptingRuntime, nodeRoot } from './fixtures.js';
import { FixedDirectory, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t);
const seed = await w.server();
let nodes = 0;

async function peerNode(directory: FixedDirectory, runtime: () => RuntimeTarget) {
  const pub = join(w.b.dir, 'factory.pub');
  await writeFile(pub, w.b.key.publicPem);
  const configFile = await nodeRoot(
    join(w.b.dir, `kill-node-${++nodes}`, 'node'),
    pub,
    `runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\nstaging:\n  keep: true\npreload:\n  method: none\nreload:\n  command: ["true"]\n`,
  );
  const config = parseConfig(await readFile(configFile, 'utf8'), configFile);
  const tracker = new StatusTracker(emptyStatus('node-kill'));
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const service = new PeerService({
    directory,
    credentials: w.credentials,
    address: `127.0.0.${140 + nodes}`,
    port: 9470,
    context: { config, log, tracker },
    runtime,
  });
  return { config, log, tracker, service };
}

/** The accepting stand-in whose mirror step (during the load, after the rename) runs `stop`. */
const stoppingAt = (stop: () => Promise<never>) => (): RuntimeTarget =>
  ({ ...acceptingRuntime(), mirror: stop }) as RuntimeTarget;

async function nextLookFetches(
  t: Test,
  n: Awaited<ReturnType<typeof peerNode>>,
  directory: FixedDirectory,
): Promise<void> {
  const layout = join(n.config.paths.upgradeDir, '1.2.3-amd64');
  t.same(
    await readdir(n.config.paths.upgradeDir),
    ['1.2.3-amd64.partial'],
    'the layout is back in the staging place',
  );
  t.equal(
    await partialBundle(`${layout}.partial`),
    w.approval.manifestDigest,
    'under the resume marker naming its bundle',
  );
  const served = seed.counters.bytesServed;
  const again = await peerNode(directory, acceptingRuntime);
  again.config.paths = n.config.paths;
  t.equal((await again.service.syncOnce())?.version, '1.2.3', 'loaded at the next look');
  t.equal(
    seed.counters.bytesServed,
    served,
    'not one blob byte fetched again: every entry re-hashed in place',
  );
  t.same(await readdir(n.config.paths.upgradeDir), ['1.2.3-amd64'], 'put in place by its load');
}

t.test(
  'a SIGKILL during the pulls (simulated: the layout as it lay at the kill): the restart cleanup puts it back as a marked partial, the next look fetches nothing again',
  async (t) => {
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    let layout = '';
    const n = await peerNode(
      directory,
      stoppingAt(async () => {
        // the process dies here: the layout stays as the rename left it, which the finally would not
        await rename(layout, `${layout}.killed`);
        throw new Error('killed (a test stands in for SIGKILL)');
      }),
    );
    layout = join(n.config.paths.upgradeDir, '1.2.3-amd64');
    t.equal(await n.service.syncOnce(), undefined, 'the load did not finish');
    await rename(`${layout}.killed`, layout);
    t.same(await readReleases(n.config.paths.stateDir), [], 'no record of the layout');
    await removeLeftovers(n.config, acceptingRuntime(), n.log, []);
    await nextLookFetches(t, n, directory);
  },
);

t.test(
  'a stop (Interrupted) during the pulls puts the layout back as a marked partial, not removed; the next look fetches nothing again',
  async (t) => {
    const directory = new FixedDirectory([w.approval], [endpoint('seed', seed.url)]);
    const n = await peerNode(
      directory,
      stoppingAt(async () => {
        throw new AgentError('Interrupted', 'stopped (a test stands in for SIGTERM)');
      }),
    );
    t.equal(await n.service.syncOnce(), undefined, 'the load was stopped');
    await nextLookFetches(t, n, directory);
  },
);

t.test(
  'an unrecorded layout whose bundle.json cannot be read is still removed by the cleanup',
  async (t) => {
    const n = await peerNode(new FixedDirectory([], []), acceptingRuntime);
    const layout = join(n.config.paths.upgradeDir, '9.9.9-amd64');
    await mkdir(join(layout, 'bundle.json'), { recursive: true });
    await removeLeftovers(n.config, acceptingRuntime(), n.log, []);
    t.same(await readdir(n.config.paths.upgradeDir), [], 'removed, no partial made of it');
  },
);

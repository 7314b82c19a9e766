// EUS to EUS from one stick (#43), on the agent: a bundle carrying the path 4.15.40 → 4.16.2
// (made by the real `bundle create` from generated releases in a real docker-registry and a saved
// update graph) loaded by `bundle-agent load` into the CRI-O stand-in. A node running 4.14.30
// takes the whole path and keeps both releases' images pinned; one running 4.15.40 takes the rest
// of it; one running an unrelated release is refused in one line naming what to run first.
// Prune keeps 4.15.40's images until the node runs 4.16.2, and takes them then. The daemon
// (real containerd, the API stand-in for ClusterVersion and the MCD's Node) serves the kept
// bundle until 4.16.2, not 4.15.40, completed and this node applied it.
import t from 'tap';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readStatusFile } from '@offline-bundle/status';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { clusterVersionDoc, startKubeStandIn } from '../helpers/kube-standin.js';
import {
  AGENT,
  containerdNode,
  crioFiles,
  crioNodeConfig,
  daemonChild,
  keygen,
  run,
} from './fixtures.js';
import { makePathBundle } from './path-bundle-setup.js';

const work = await tmpdir(t, 'ob-path-load-');
const keys = await keygen(work);

const { file, unique15 } = await makePathBundle(work, keys.key);

let nodes = 0;
/** A fresh node root with its own CRI-O stand-in, running `current`. */
async function node(current: string) {
  const root = join(work, `node-${++nodes}`);
  await mkdir(root, { recursive: true });
  const crio = await startCrioStandin(t, await crioFiles(root));
  const config = await crioNodeConfig(root, keys.pub, {
    reload: ['kill', '-HUP', String(crio.pid)],
    current,
  });
  const agent = (...args: string[]) =>
    run(AGENT, [...args, '--config', config], process.env, 300_000);
  const setCurrent = async (v: string) =>
    writeFile(
      config,
      (await readFile(config, 'utf8')).replace(/current: "[^"]*"/, `current: "${v}"`),
    );
  const list = async () =>
    JSON.parse((await agent('releases', 'list', '--json')).stdout) as { releases: any[] };
  // through the agent's reader: the file holds bundle.path in the form older agents accept
  const status = async () =>
    (await readStatusFile(join(root, 'var/lib/bundle-agent/status.json'))) as any;
  return { root, agent, setCurrent, list, status };
}

t.test(
  'a node running 4.14.30 takes the whole path: both releases recorded, every image pinned, the path in the status',
  async (t) => {
    const n = await node('4.14.30');
    const load = await n.agent('load', file, '--json');
    t.equal(load.code, 0, load.stderr.slice(-800));
    const rows = (await n.list()).releases;
    t.same(
      rows.map((r) => [r.version, r.images, r.imagesPresent, r.pinned]),
      [
        ['4.15.40', 4, 4, 'yes'],
        ['4.16.2', 4, 4, 'yes'],
      ],
      'each release its own images (its release image and payload; etcd in both), all in the runtime and pinned',
    );
    t.same(
      rows.map((r) => r.path),
      [
        ['4.15.40', '4.16.2'],
        ['4.15.40', '4.16.2'],
      ],
    );
    t.equal(rows[0].heldFor, '4.16.2', '4.15.40 kept for the final release');
    const text = (await n.agent('releases', 'list')).stdout;
    t.match(text, /^4\.15\.40 +amd64 +kept for 4\.16\.2 /m);
    t.match(
      text,
      /Update path 4\.15\.40 → 4\.16\.2 \(amd64\), from one bundle: 4\.15\.40 stays pinned until 4\.16\.2 runs\./,
    );
    const s = await n.status();
    t.same(
      [s.phase, s.bundle.version, s.bundle.path],
      ['Ready', '4.16.2', ['4.15.40', '4.16.2']],
      'status.bundle.path names the path',
    );

    const forget = await n.agent('releases', 'forget', '4.15.40');
    t.equal(forget.code, 1, 'forget refuses the intermediate release while the node runs 4.14.30');
    t.match(
      forget.stderr,
      /4\.15\.40 is a release of the update path 4\.15\.40 → 4\.16\.2 this node has not finished \(it runs 4\.14\.30\).*forget it once 4\.16\.2 runs/,
    );
    t.equal(forget.stderr.trim().split('\n').length, 1, 'in one line');

    for (const v of ['4.14.30', '4.15.40']) {
      await n.setCurrent(v);
      const prune = await n.agent('releases', 'prune', '--json');
      t.equal(prune.code, 0, prune.stderr);
      t.same(
        JSON.parse(prune.stdout).forgotten,
        [],
        `running ${v}: prune takes nothing of the path`,
      );
      t.same(
        (await n.list()).releases.map((r) => [r.version, r.pinned]),
        [
          ['4.15.40', 'yes'],
          ['4.16.2', 'yes'],
        ],
        `running ${v}: both still pinned`,
      );
    }
    await n.setCurrent('4.16.2');
    const prune = await n.agent('releases', 'prune', '--json');
    t.equal(prune.code, 0, prune.stderr);
    t.same(
      JSON.parse(prune.stdout).forgotten.map((f: any) => [f.version, f.unpinned]),
      [['4.15.40', 3]],
      'running 4.16.2: 4.15.40 is an old release; its release image, cvo and mco unpinned, etcd kept',
    );
    const after = (await n.list()).releases;
    t.same(
      after.map((r) => [r.version, r.images, r.pinned]),
      [['4.16.2', 4, 'yes']],
      'the final release keeps its images pinned',
    );
    const dropIns = join(n.root, 'etc/crio/crio.conf.d');
    const pins = (
      await Promise.all((await readdir(dropIns)).map((f) => readFile(join(dropIns, f), 'utf8')))
    ).join('\n');
    t.match(pins, /pinned_images/, 'the pin list is there');
    for (const ref of unique15)
      t.notOk(pins.includes(ref.slice(ref.indexOf('@'))), `${ref} no longer pinned`);
  },
);

t.test(
  'a node running an unrelated release is refused in one line naming what to run first',
  async (t) => {
    const n = await node('4.13.9');
    const load = await n.agent('load', file);
    t.not(load.code, 0);
    t.match(load.stderr, /NotAnUpgradeSource/);
    t.match(
      load.stderr,
      /the path 4\.15\.40 → 4\.16\.2 cannot be taken from the running 4\.13\.9: 4\.15\.40 upgrades from 4\.14\.30, so this node's cluster must run 4\.14\.30 \(or a release of the path\) first/,
    );
    t.same((await n.list()).releases, [], 'nothing recorded');
  },
);

t.test('a node running 4.15.40 takes the rest of the path', async (t) => {
  const n = await node('4.15.40');
  const load = await n.agent('load', file, '--json');
  t.equal(load.code, 0, load.stderr.slice(-800));
  const rows = (await n.list()).releases;
  t.same(
    rows.map((r) => [r.version, r.running, r.pinned]),
    [
      ['4.15.40', true, 'yes'],
      ['4.16.2', false, 'yes'],
    ],
    'the running 4.15.40 and 4.16.2 recorded and pinned',
  );
});

/** Node node-a as the Machine Config Daemon annotates it, Done on `config`. */
const mcdNode = (config: string) => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'node-a',
    labels: { 'node-role.kubernetes.io/worker': '' },
    annotations: {
      'machineconfiguration.openshift.io/state': 'Done',
      'machineconfiguration.openshift.io/currentConfig': config,
      'machineconfiguration.openshift.io/desiredConfig': config,
    },
  },
  status: { conditions: [{ type: 'Ready', status: 'True' }] },
});
const serving = (s: any) =>
  s?.phase === 'Ready' &&
  s.conditions?.some(
    (c: any) => c.type === 'Serving' && c.status === 'True' && c.reason === 'KeptUntilComplete',
  );

t.test(
  'the daemon serves the path bundle until the final release completed and this node applied it, not the first hop (containerd)',
  async (t) => {
    const api = await startKubeStandIn({ clusterVersion: '4.14.30' });
    t.teardown(() => api.close());
    api.nodes = [mcdNode('rendered-worker-414')];
    const n = await containerdNode(t, 'ob-path-serve-', '', {
      api,
      settings: {
        staging: { serveUntilComplete: true, serveCheckSeconds: 1 },
        version: { fromCluster: true },
      },
    });
    // the node trusts the key the path bundle was signed with
    await writeFile(join(n.root, 'etc/bundle-agent/keys/factory.pub'), await readFile(keys.pub));
    await writeFile(join(n.root, 'var/lib/bundle-agent/drop/path.bundle'), await readFile(file));
    const statusFile = join(n.root, 'var/lib/bundle-agent/status.json');
    const agent = daemonChild(t, n.config, statusFile);
    const s = await agent.until('Ready and serving the path bundle', serving);
    t.same((await readStatusFile(statusFile))?.bundle?.path, ['4.15.40', '4.16.2']);
    t.match(
      s.conditions.find((c: any) => c.type === 'Serving').message,
      /^4\.16\.2 is served/,
      'served as its final release',
    );

    // the first hop: the cluster completed 4.15.40 and this node applied its OS update
    api.clusterVersion = clusterVersionDoc('4.15.40');
    api.nodes = [mcdNode('rendered-worker-415')];
    await agent.until('4.15.40 applied on this node', (_x: any, log: string) =>
      /this node applied 4\.15\.40, a release of the path to 4\.16\.2/.test(log),
    );
    await new Promise((r) => setTimeout(r, 2_500));
    t.ok(
      serving(await agent.until('status', (x: any) => x)),
      'still served once the first hop completed and was applied',
    );
    // the final release completed, but this node's pool has not rolled it yet: its MCD is Done on 4.15.40's config
    api.clusterVersion = clusterVersionDoc('4.16.2');
    await agent.until('the history says 4.16.2 complete', (x: any) =>
      x?.history?.some((e: any) => e.version === '4.16.2' && e.state === 'complete'),
    );
    await new Promise((r) => setTimeout(r, 2_500));
    t.ok(
      serving(await agent.until('status', (x: any) => x)),
      'still served until this node applies 4.16.2 too',
    );
    api.nodes = [mcdNode('rendered-worker-416')];
    const ended = await agent.until('serving ends', (x: any) =>
      x?.conditions?.some((c: any) => c.type === 'Serving' && c.reason === 'ServingEnded'),
    );
    t.match(
      ended.conditions.find((c: any) => c.type === 'Serving').message,
      /the cluster's upgrade to 4\.16\.2 completed and this node applied it/,
    );
  },
);

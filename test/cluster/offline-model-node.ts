// A node of the offline cluster model (offline-model*.test.ts): a node root on this host whose
// CRI-O is the CRI-O contract stand-in (test/helpers/crio-standin.mjs, --containers-storage: it
// also keeps what it pulls in the node's containers-storage, which CRI-O shares with podman,
// skopeo and rpm-ostree), the real bundle-agent daemon (runtime crio, reporting to the API
// stand-in as system:node:NAME), and a watch directory standing for the USB stick.
// A cold start: agent and runtime stop, the store is emptied (crio-wipe after an unclean
// shutdown), then both start again.
import { copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { CriImageClient } from '@offline-bundle/runtime';
import type { KubeApiStandIn } from '../helpers/kube-standin.js';
// @ts-expect-error: JavaScript helpers without type declarations
import { startService } from '../helpers/service.mjs';
import { until } from '../helpers/until.js';
import { crioFiles, crioSighup, daemonChild, nodeRoot } from '../agent/fixtures.js';

const CRIO_STANDIN = fileURLToPath(new URL('../helpers/crio-standin.mjs', import.meta.url));
export const NODE = 'node-a';

type Teardown = { teardown(fn: () => unknown): void };
export type Agent = ReturnType<typeof daemonChild>;

export interface ModelNode {
  name: string;
  root: string;
  /** containers-storage as skopeo names it: [vfs@GRAPHROOT+RUNROOT] */
  storageSpec: string;
  socket: string;
  agent: Agent;
  /** The stick: the bundle appears in the agent's watch directory. */
  plug(file: string): Promise<void>;
  /** The technician takes the stick out once the node said so. */
  unplug(file: string): Promise<void>;
  /** Stop the agent and the runtime, wipe the runtime's store as crio-wipe does, start both again. */
  coldStart(): Promise<void>;
  /** The node's agent status file. */
  status(): Promise<any>;
  cri(): CriImageClient;
  /** `systemctl reload crio` (SIGHUP), resolved with the stand-in's reload event once it re-read its files. */
  reloadCrio(): Promise<{
    outcome: string;
    files: string[];
    pinnedImages: string[];
    error?: string;
  }>;
  /** Every agent's output so far (the agents a cold start replaced first). */
  logs(): string;
}

/** containers-storage of the node (vfs: no overlay on this host's temp dir), shared by the stand-in's skopeo and ours. */
async function storageConf(root: string): Promise<{ conf: string; graph: string; run: string }> {
  const graph = path.join(root, 'var/lib/containers/storage');
  const run = path.join(root, 'run/containers/storage');
  const conf = path.join(root, 'etc/containers/storage.conf');
  await mkdir(path.dirname(conf), { recursive: true });
  await writeFile(conf, `[storage]\ndriver = "vfs"\ngraphroot = "${graph}"\nrunroot = "${run}"\n`);
  return { conf, graph, run };
}

/** The CRI-O stand-in of the node: socket at root/run/crio/crio.sock, its pid where the agent's reload command reads it. */
async function startCrio(t: Teardown, root: string, state: string, storage: string) {
  const files = await crioFiles(root);
  const socket = path.join(root, 'run/crio/crio.sock');
  await mkdir(path.dirname(socket), { recursive: true });
  const { CriImageClient: Client } = await import('@offline-bundle/runtime');
  const svc = await startService({
    name: 'crio-standin',
    command: process.execPath,
    args: [
      CRIO_STANDIN,
      '--state-dir',
      state,
      '--listen',
      socket,
      '--registries-conf',
      files.registriesConf,
      '--registries-conf-dir',
      files.registriesDropInDir,
      '--config',
      files.crioConf,
      '--config-dir',
      files.crioDropInDir,
      '--containers-storage',
      '--exit-with-parent',
    ],
    env: { ...process.env, CONTAINERS_STORAGE_CONF: storage },
    ready: async () => {
      const c = new Client(socket, { callTimeoutMs: 5000 });
      try {
        await c.listImages();
        return true;
      } finally {
        c.close();
      }
    },
    readyWhat: `answer on ${socket}`,
    timeoutMs: 30_000,
    pollMs: 100,
    killAfterMs: 5000,
  });
  t.teardown(() => svc.stop());
  await writeFile(path.join(root, 'run/crio/pid'), String(svc.pid));
  return { svc, socket };
}

function agentConfig(serve: boolean): string {
  return `runtime: crio
criSocket: /run/crio/crio.sock
space:
  reserveBytes: 0
preload:
  method: cri
  retries: 1
media:
  roots: [/media]
  watchDirs: [/var/lib/bundle-agent/drop]
  pollSeconds: 1
${stringify({ staging: { serveUntilComplete: serve, serveCheckSeconds: 1 }, version: { fromCluster: true }, status: { kubeconfig: '/var/lib/kubelet/kubeconfig', console: false } })}`;
}

/** The stand-in's events (one JSON a line) so far. */
async function crioEvents(state: string): Promise<any[]> {
  return (await readFile(path.join(state, 'events.jsonl'), 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

async function sighupCrio(root: string, state: string): Promise<any> {
  const before = (await crioEvents(state)).length;
  process.kill(Number(await readFile(path.join(root, 'run/crio/pid'), 'utf8')), 'SIGHUP');
  return until(
    'the CRI-O stand-in reloads',
    async () => (await crioEvents(state)).slice(before).find((e) => e.event === 'reload'),
    { timeoutMs: 10_000, stepMs: 50 },
  );
}

/** Node `name` (node-a unless said) of the model, its agent started; `serve`: staging.serveUntilComplete. */
export async function modelNode(
  t: Teardown,
  work: string,
  opts: { api: KubeApiStandIn; pub: string; serve: boolean; name?: string },
): Promise<ModelNode> {
  const name = opts.name ?? NODE;
  const root = path.join(work, name);
  const state = path.join(root, 'var/lib/crio-standin');
  const storage = await storageConf(root);
  let crio = await startCrio(t, root, state, storage.conf);
  await opts.api.writeNodeKubeconfig(root, name, { certPaths: 'root' });
  const config = await nodeRoot(
    root,
    opts.pub,
    `reload:\n  command: [${crioSighup(path.join(root, 'run/crio/pid'))
      .map((a) => JSON.stringify(a))
      .join(', ')}]\n${agentConfig(opts.serve)}`,
  );
  // nodeRoot names every node node-a
  await writeFile(
    config,
    (await readFile(config, 'utf8')).replace(/^nodeName: .*$/m, `nodeName: ${name}`),
  );
  const drop = path.join(root, 'var/lib/bundle-agent/drop');
  await mkdir(drop, { recursive: true });
  const statusFile = path.join(root, 'var/lib/bundle-agent/status.json');
  const earlier: string[] = [];
  const n: ModelNode = {
    name,
    root,
    socket: crio.socket,
    storageSpec: `[vfs@${storage.graph}+${storage.run}]`,
    agent: daemonChild(t, config, statusFile),
    plug: async (file) => copyFile(file, path.join(drop, path.basename(file))),
    unplug: async (file) => rm(path.join(drop, path.basename(file)), { force: true }),
    status: async () => JSON.parse(await readFile(statusFile, 'utf8')),
    cri: () => new CriImageClient(crio.socket),
    reloadCrio: () => sighupCrio(root, state),
    logs: () => [...earlier, n.agent.out.log].join('\n--- cold start ---\n'),
    coldStart: async () => {
      earlier.push(await n.agent.stop('SIGKILL'));
      await crio.svc.stop();
      // crio-wipe: CRI-O's storage (ours: the stand-in's store and the containers-storage it shares) is gone
      for (const d of [
        path.join(state, 'storage'),
        path.join(state, 'images.json'),
        storage.graph,
        storage.run,
      ])
        await rm(d, { recursive: true, force: true });
      crio = await startCrio(t, root, state, storage.conf);
      n.agent = daemonChild(t, config, statusFile);
    },
  };
  return n;
}

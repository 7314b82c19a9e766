// The offline cluster model's setup and steps (offline-model*.test.ts): the API server stand-in
// (RBAC, ClusterVersion, MachineConfigPools, PinnedImageSets, the upgrade gate's admission
// policy evaluated with CEL) holding one OpenShift 4.15.0 cluster of worker nodes (node-a, or
// those named), each a node root with its own agent (offline-model-node.ts), the admin's `bundle cluster` commands with the shipped admin RBAC,
// and the steps of an upgrade: stick → Ready → prepare → check → upgrade → the components
// that pull by themselves → ClusterVersion Completed.
import path from 'node:path';
import { bundle } from '../builder/lib.js';
import {
  clusterVersionDoc,
  startKubeStandIn,
  type KubeApiStandIn,
} from '../helpers/kube-standin.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import { ADMIN, bindAdmin, node } from './lib.js';
import {
  buildReleases,
  csvOf,
  podsOf,
  type ModelRelease,
  type ModelReleases,
} from './offline-model-release.js';
import { modelNode, NODE, type ModelNode } from './offline-model-node.js';
import {
  cvoVerifyRelease,
  kubeletStartPods,
  mcdApplyOsImage,
  type Outcome,
  type PodStart,
} from './offline-model-standins.js';

const MCO = 'machineconfiguration.openshift.io';
export const POOL = 'worker';

export interface Model extends ModelReleases {
  api: KubeApiStandIn;
  /** The first of `nodes`. */
  node: ModelNode;
  nodes: ModelNode[];
  /** `bundle cluster ARGS` as the admin, with the factory's key (for the commands that read a bundle). */
  cluster(args: string[]): ReturnType<typeof bundle>;
  /** The same without the key: status, dashboard. */
  admin(args: string[]): ReturnType<typeof bundle>;
}

type T = { teardown(fn: () => unknown): void };

/**
 * The model: releases 4.15.1 and 4.15.2 built (or the first `releases` of them), the cluster at
 * 4.15.0, each node's agent running (node-a, or `nodes`). `serve`: staging.serveUntilComplete;
 * `pinnedImageSets` false: a cluster without the kind (OpenShift before 4.16, or the feature off).
 */
export async function startModel(
  t: T,
  opts: { serve: boolean; pinnedImageSets: boolean; nodes?: string[]; releases?: number },
): Promise<Model> {
  const work = await tmpdir(t, 'ob-offline-model-');
  const built = await buildReleases(
    work,
    [
      { version: '4.15.1', previous: '4.15.0' },
      { version: '4.15.2', previous: '4.15.1' },
    ].slice(0, opts.releases ?? 2),
  );
  const api = await startKubeStandIn({ clusterVersion: '4.15.0' });
  t.teardown(() => api.close());
  const kubeconfig = await api.tokenKubeconfig(
    path.join(work, 'admin.kubeconfig'),
    bindAdmin(api, ADMIN),
  );
  const names = opts.nodes ?? [NODE];
  api.nodes = names.map((n) => node(n));
  const pool = (name: string) => ({
    apiVersion: `${MCO}/v1`,
    kind: 'MachineConfigPool',
    metadata: { name },
    spec: { pinnedImageSets: [] },
  });
  api.replaceAll('machineconfigpools', [pool('master'), pool(POOL)]);
  if (!opts.pinnedImageSets) api.absent.add(`${MCO}/pinnedimagesets`);
  const nodes = await Promise.all(
    names.map((name) =>
      modelNode(t, work, { api, pub: built.factory.pub, serve: opts.serve, name }),
    ),
  );
  return {
    ...built,
    api,
    node: nodes[0]!,
    nodes,
    cluster: (args) =>
      bundle(['cluster', ...args, '--key', built.factory.pub, '--kubeconfig', kubeconfig]),
    admin: (args) => bundle(['cluster', ...args, '--kubeconfig', kubeconfig]),
  };
}

const served = (s: any, version: string) =>
  s?.conditions?.some(
    (c: any) =>
      c.type === 'Serving' &&
      c.status === 'True' &&
      c.reason === 'KeptUntilComplete' &&
      String(c.message).startsWith(`${version} `),
  );

/** The stick goes into node `n` (node-a unless said); it is Ready for `r` (and serving it, when on) and says so to the API; the stick comes out. */
export async function stickToReady(
  m: Model,
  r: ModelRelease,
  serve: boolean,
  n: ModelNode = m.node,
): Promise<any> {
  await n.plug(r.file);
  const s = await n.agent.until(
    `${n.name} Ready for ${r.version}${serve ? ' and serving it' : ''}`,
    (x: any) =>
      x?.phase === 'Ready' && x.bundle?.version === r.version && (!serve || served(x, r.version)),
  );
  await until(
    `NodeBundleStatus ${n.name} Ready for ${r.version}`,
    () => {
      const st = m.api.get('nodebundlestatuses', n.name)?.status;
      return st?.phase === 'Ready' && st.bundle?.version === r.version;
    },
    { timeoutMs: 60_000, stepMs: 200, detail: () => n.logs().slice(-4000) },
  );
  await n.unplug(r.file);
  return s;
}

/** The cluster as it runs once `r` rolled out: its pods and the OLM operator's CSV. */
export function recordCluster(m: Model, r: ModelRelease): void {
  m.api.pods = podsOf(r);
  m.api.replaceAll('clusterserviceversions', [csvOf(r)]);
}

/** ClusterVersion as the CVO writes it: `state` for `r` at the head of the history (Partial while under way, Completed once done). */
export function clusterVersionSays(
  m: Pick<Model, 'api'>,
  r: ModelRelease,
  state: 'Partial' | 'Completed',
): void {
  const cv = m.api.clusterVersion ?? clusterVersionDoc(r.previous);
  const history = (cv.status.history as any[]).filter((h) => h.version !== r.version);
  m.api.clusterVersion = {
    ...cv,
    status: {
      ...cv.status,
      desired: { version: r.version, image: r.release },
      history: [
        {
          state,
          version: r.version,
          image: r.release,
          verified: true,
          startedTime: new Date().toISOString(),
          ...(state === 'Completed' ? { completionTime: new Date().toISOString() } : {}),
        },
        ...history,
      ],
    },
  };
}

export interface Components {
  cvo: Outcome;
  mcd: Outcome;
  kubelet: PodStart[];
}

/** What pulls by itself on node `n` (node-a unless said) during the upgrade to `r`: the CVO, the MCD, then the kubelet restarting every pod. */
export async function components(
  m: Model,
  r: ModelRelease,
  n: ModelNode = m.node,
): Promise<Components> {
  const cvo = await cvoVerifyRelease(m.api, n, r.release, m.keyring);
  const mcd = await mcdApplyOsImage(m.api, n, POOL, r.os);
  const kubelet = await kubeletStartPods(n, podsOf(r));
  return { cvo, mcd, kubelet };
}

/** The gaps `bundle cluster check` names, as [why, image]. */
export async function checkGaps(
  m: Model,
  r: ModelRelease,
): Promise<{ code: number | null; gaps: [string, string][]; stderr: string }> {
  const c = await m.cluster(['check', r.file, '--json']);
  const gaps = c.stdout
    ? (JSON.parse(c.stdout).gaps as { why: string; image: string }[]).map(
        (g) => [g.why, g.image] as [string, string],
      )
    : [];
  return { code: c.code, gaps, stderr: c.stderr };
}

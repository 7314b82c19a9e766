// Stand-ins for the cluster components that pull images by themselves during an upgrade, each
// refusing what the real one refuses (offline cluster model, offline-model*.test.ts):
// - "MCD": first writes the CRI-O drop-in the MCO writes for the PinnedImageSets of the node's
//   pool (/etc/crio/crio.conf.d/50-pinned-images, [crio.image] pinned_images = every image the
//   sets list; removed when they list none) and reloads CRI-O as `systemctl reload crio` does.
//   Then applies the release's OS image by digest. When a PinnedImageSet of the node's pool
//   lists it, from containers-storage only (the MCO's PinnedImageSet behaviour); otherwise
//   rpm-ostree pulls it (ostree-unverified-registry:) through the node's registries.conf and
//   registries.conf.d, as containers/image reads them: here no registry exists, so only a
//   mirror drop-in the agent wrote can answer.
// - "CVO": gets the release image by digest as the real one does, through its "version-…" pod
//   in openshift-cluster-version (no pull policy set: IfNotPresent for a digest), so through the
//   CRI, whose runtime pulls through its own registries.conf(.d) view when the image is absent;
//   then verifies the release signature from the ConfigMap
//   openshift-config-managed/mirrored-release-signatures (keys sha256-<hex>-N, OpenPGP over an
//   atomic container signature) against the release keyring, as the CVO does.
// - "kubelet": starts every pod of a recorded pod list through the CRI, with each container's
//   imagePullPolicy: IfNotPresent pulls only when ImageStatus finds nothing; Always always pulls.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import * as openpgp from 'openpgp';
import type { Doc } from '../status/lib.js';
import type { KubeApiStandIn } from '../helpers/kube-standin.js';
import type { ModelNode } from './offline-model-node.js';
// @ts-expect-error: JavaScript helper without type declarations
import { startPods as startPodsJs } from '../helpers/kubelet-standin.mjs';

const toml = createRequire(new URL('../../packages/runtime/package.json', import.meta.url))(
  'smol-toml',
) as { parse(s: string): any; stringify(o: unknown): string };

export interface Outcome {
  step: string;
  ok: boolean;
  via?: string;
  error?: string;
}

function tool(
  cmd: 'skopeo' | 'podman',
  args: string[],
  env: Record<string, string> = {},
): Promise<{ ok: boolean; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d;
    });
    child.on('close', (code) => resolve({ ok: code === 0, out: out.trim() }));
  });
}

/**
 * The node's registries configuration as containers/image reads it: registries.conf, then every
 * registries.conf.d/*.conf in lexical order, a later [[registry]] with the same prefix replacing
 * an earlier one. Written as one file for skopeo (HOME empty: no per-user file is read).
 */
export async function nodeRegistriesConf(root: string, out: string): Promise<string> {
  const base = path.join(root, 'etc/containers/registries.conf');
  const dir = path.join(root, 'etc/containers/registries.conf.d');
  const files = [
    base,
    ...(await readdir(dir).catch(() => []))
      .filter((f) => f.endsWith('.conf'))
      .sort()
      .map((f) => path.join(dir, f)),
  ];
  const merged: { 'unqualified-search-registries': string[]; registry: Map<string, any> } = {
    'unqualified-search-registries': [],
    registry: new Map(),
  };
  for (const f of files) {
    const doc = toml.parse(await readFile(f, 'utf8').catch(() => ''));
    if (doc['unqualified-search-registries'])
      merged['unqualified-search-registries'] = doc['unqualified-search-registries'];
    for (const r of doc.registry ?? []) merged.registry.set(r.prefix ?? r.location, r);
  }
  await writeFile(
    out,
    toml.stringify({
      'unqualified-search-registries': merged['unqualified-search-registries'],
      registry: [...merged.registry.values()],
    }),
  );
  return out;
}

/**
 * A pull by digest through the node's registries configuration, as rpm-ostree's
 * ostree-unverified-registry: does (containers/image, through skopeo's proxy). Done with podman
 * into a throw-away store: skopeo 1.9 here cannot be given a registries.conf, podman reads
 * CONTAINERS_REGISTRIES_CONF (and the host's /etc/containers/registries.conf.d, which names no
 * host used here).
 */
async function pullThroughNode(
  node: ModelNode,
  ref: string,
): Promise<{ ok: boolean; out: string }> {
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'ob-model-pull-'));
  try {
    const conf = await nodeRegistriesConf(node.root, path.join(tmp, 'registries.conf'));
    const r = await tool(
      'podman',
      [
        '--root',
        path.join(tmp, 'root'),
        '--runroot',
        path.join(tmp, 'run'),
        '--storage-driver',
        'vfs',
        '--events-backend',
        'none',
        'pull',
        '--quiet',
        ref,
      ],
      { CONTAINERS_REGISTRIES_CONF: conf, HOME: tmp },
    );
    return r.ok
      ? r
      : {
          ok: false,
          out: `${r.out}\n(the node's registries configuration, composed:\n${await readFile(conf, 'utf8')})`,
        };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** The PinnedImageSets bound to `pool` (listed in its spec.pinnedImageSets) that name `image`: the MCD takes the OS image from containers-storage only when one does. */
export function pinningSets(api: KubeApiStandIn, pool: string, image: string): string[] {
  if (api.absent.has('machineconfiguration.openshift.io/pinnedimagesets')) return [];
  const names: string[] = (api.get('machineconfigpools', pool)?.spec?.pinnedImageSets ?? []).map(
    (s: Doc) => s.name,
  );
  return names.filter((n) =>
    (api.get('pinnedimagesets', n)?.spec?.pinnedImages ?? []).some((p: Doc) => p.name === image),
  );
}

/** The MCO's pins drop-in, as the MCD writes it on every node of a pool with PinnedImageSets. */
export const MCO_PINS_DROP_IN = '50-pinned-images';

/** Every image the PinnedImageSets bound to `pool` list, sorted. */
function poolPinnedImages(api: KubeApiStandIn, pool: string): string[] {
  if (api.absent.has('machineconfiguration.openshift.io/pinnedimagesets')) return [];
  const names: string[] = (api.get('machineconfigpools', pool)?.spec?.pinnedImageSets ?? []).map(
    (s: Doc) => s.name,
  );
  return [
    ...new Set(
      names.flatMap((n) =>
        (api.get('pinnedimagesets', n)?.spec?.pinnedImages ?? []).map((p: Doc) => String(p.name)),
      ),
    ),
  ].sort();
}

/**
 * "MCD", its PinnedImageSet part: the node's 50-pinned-images drop-in made to list what the
 * pool's sets list (removed when none), and CRI-O reloaded when that changed it. Returns the list.
 */
export async function mcdSyncPinnedImages(
  api: KubeApiStandIn,
  node: ModelNode,
  pool: string,
): Promise<string[]> {
  const images = poolPinnedImages(api, pool);
  const file = path.join(node.root, 'etc/crio/crio.conf.d', MCO_PINS_DROP_IN);
  const before = await readFile(file, 'utf8').catch(() => undefined);
  const next = images.length
    ? toml.stringify({ crio: { image: { pinned_images: images } } })
    : undefined;
  if (next === before) return images;
  if (next === undefined) await rm(file, { force: true });
  else {
    await writeFile(`${file}.tmp`, next);
    await rename(`${file}.tmp`, file);
  }
  const reload = await node.reloadCrio();
  if (reload.outcome !== 'ok')
    throw new Error(
      `MCD: CRI-O refused its reload after ${MCO_PINS_DROP_IN} changed: ${reload.error}`,
    );
  return images;
}

/** "MCD": its pins drop-in kept in step, then the OS image of the release, from containers-storage when pinned, else pulled through registries.conf. */
export async function mcdApplyOsImage(
  api: KubeApiStandIn,
  node: ModelNode,
  pool: string,
  osImage: string,
): Promise<Outcome> {
  const step = 'MCD: apply the OS image';
  await mcdSyncPinnedImages(api, node, pool);
  const sets = pinningSets(api, pool, osImage);
  if (sets.length) {
    const r = await tool('skopeo', [
      'inspect',
      '--raw',
      `containers-storage:${node.storageSpec}${osImage}`,
    ]);
    return r.ok
      ? { step, ok: true, via: `containers-storage (PinnedImageSet ${sets.join(', ')})` }
      : { step, ok: false, via: 'containers-storage', error: r.out };
  }
  const r = await pullThroughNode(node, osImage);
  return r.ok
    ? { step, ok: true, via: 'registries.conf' }
    : { step, ok: false, via: 'registries.conf', error: r.out };
}

/** "CVO": the release image by digest through the CRI (its version pod), and its signature ConfigMap verified. */
export async function cvoVerifyRelease(
  api: KubeApiStandIn,
  node: ModelNode,
  release: string,
  keyring: string,
): Promise<Outcome> {
  const step = 'CVO: pull and verify the release image';
  const [got] = await kubeletStartPods(node, [
    {
      metadata: { namespace: 'openshift-cluster-version', name: 'version-x7k2p' },
      spec: { containers: [{ name: 'payload', image: release }] },
    },
  ]);
  if (!got!.ok) return { step, ok: false, via: 'CRI', error: got!.error };
  const digest = release.split('@')[1]!;
  const cm = api.configMap('openshift-config-managed', 'mirrored-release-signatures');
  if (cm?.metadata?.labels?.['release.openshift.io/verification-signatures'] === undefined)
    return {
      step,
      ok: false,
      error: 'no signature ConfigMap labelled release.openshift.io/verification-signatures',
    };
  const prefix = `${digest.replace(':', '-')}-`;
  const keys = await openpgp.readKeys({ armoredKeys: await readFile(keyring, 'utf8') });
  for (const [k, b64] of Object.entries((cm.binaryData ?? {}) as Record<string, string>)) {
    if (!k.startsWith(prefix)) continue;
    const message = await openpgp.readMessage({ binaryMessage: Buffer.from(b64, 'base64') });
    const v = await openpgp.verify({ message, verificationKeys: keys, format: 'binary' });
    try {
      await v.signatures[0]!.verified;
    } catch {
      continue;
    }
    const doc = JSON.parse(Buffer.from(v.data as Uint8Array).toString('utf8'));
    if (doc.critical?.image?.['docker-manifest-digest'] === digest)
      return { step, ok: true, via: `CRI (${got!.action}), signature ${k} verified` };
  }
  return { step, ok: false, error: `no verified signature for ${digest} in the ConfigMap` };
}

const startPods = startPodsJs as (
  cri: { imageStatus(ref: string): Promise<unknown>; pullImage(ref: string): Promise<string> },
  pods: Doc[],
) => Promise<PodStart[]>;

export interface PodStart {
  pod: string;
  image: string;
  policy: string;
  ok: boolean;
  action: 'present' | 'pulled' | 'failed';
  error?: string;
}

/** "kubelet": every container of every pod, started with its pull policy through the CRI (test/helpers/kubelet-standin.mjs, which a booted node runs as its kubelet.service). */
export async function kubeletStartPods(
  node: Pick<ModelNode, 'cri'>,
  pods: Doc[],
): Promise<PodStart[]> {
  const cri = node.cri();
  try {
    return await startPods(cri, pods);
  } finally {
    cri.close();
  }
}

/** The kubelet's result as one line per pod that did not start, for assertions. */
export const failedPods = (starts: PodStart[]): string[] =>
  starts.filter((s) => !s.ok).map((s) => `${s.pod} (${s.policy})`);

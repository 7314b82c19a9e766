// Bundles for the cluster tests, written with the format library itself (no registry needed:
// the cluster commands read only bundle.json and the release signature blobs), and the
// objects the stand-in API server serves.
import { createPrivateKey } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import path from 'node:path';
import { generateKeyPair, writeBundle, RELEASE_SIGNATURE_MEDIA_TYPE } from '@offline-bundle/format';
import { sha256 } from '@offline-bundle/oci';
import { tmpdir, type Doc } from '../status/lib.js';
import { bundle } from '../builder/lib.js';
import { releaseKey, signRelease, type TestReleaseKey } from '../builder/release-signing.js';
import { startKubeStandIn, type KubeApiStandIn } from '../helpers/kube-standin.js';

export const RELEASE_REPO = 'quay.io/openshift-release-dev/ocp-release';
export const ART_REPO = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev';
const MT = 'application/vnd.oci.image.manifest.v1+json';

export interface TestBundle { file: string; fileDigest: string; releaseDigest: string; payloadDigest: string; pub: string; version: string }

/**
 * A bundle of release `version` (accepting `upgradeFrom`) whose release signatures are made by
 * `sign(releaseDigest)`. Its "images" are small JSON blobs standing in for manifests.
 */
export async function makeBundle(dir: string, opts: { version: string; upgradeFrom: string[]; sign?: (digest: string, reference: string) => Promise<Buffer[]> }): Promise<TestBundle> {
  await mkdir(dir, { recursive: true });
  const blob = async (name: string, bytes: Buffer, mediaType: string) => {
    const file = path.join(dir, name);
    await writeFile(file, bytes);
    return { digest: sha256(bytes), size: bytes.length, mediaType, path: file };
  };
  const release = await blob('release.json', Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT, release: opts.version })), MT);
  const payload = await blob('payload.json', Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT, component: `cli-${opts.version}` })), MT);
  const reference = `${RELEASE_REPO}:${opts.version}-x86_64`;
  const sigs = opts.sign ? await opts.sign(release.digest, reference) : [];
  const sigBlobs = await Promise.all(sigs.map((s, i) => blob(`sig-${i}`, s, RELEASE_SIGNATURE_MEDIA_TYPE)));
  const { privatePem, publicPem } = generateKeyPair('ed25519');
  const pub = path.join(dir, 'factory.pub');
  await writeFile(pub, publicPem);
  const images = [
    { repository: RELEASE_REPO, tag: `${opts.version}-x86_64`, digest: release.digest, mediaType: MT, platforms: [{ os: 'linux', architecture: 'amd64' }], component: 'release' },
    { repository: ART_REPO, tag: null, digest: payload.digest, mediaType: MT, platforms: [{ os: 'linux', architecture: 'amd64' }], component: 'cli' },
  ];
  const index = Buffer.from(JSON.stringify({ schemaVersion: 2, manifests: [] }));
  const file = path.join(dir, `${opts.version}.bundle`);
  const w = await writeBundle({
    release: {
      name: opts.version, version: opts.version, arch: 'amd64', image: reference, digest: release.digest, upgradeFrom: opts.upgradeFrom,
      ...(sigBlobs.length ? { signatures: sigBlobs.map((b) => ({ digest: b.digest, keyIds: [] })) } : {}),
    },
    images, index, blobs: [release, payload, ...sigBlobs], imageStoreBytes: 0, key: createPrivateKey(privatePem), output: file,
    createdAt: '2026-11-23T00:00:00.000Z', tool: { name: 'offline-bundle', version: 'test' },
  });
  return { file, fileDigest: w.fileDigest, releaseDigest: release.digest, payloadDigest: payload.digest, pub, version: opts.version };
}

export function node(name: string, labels: Record<string, string> = { 'node-role.kubernetes.io/worker': '' }): Doc {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name, labels }, status: { conditions: [{ type: 'Ready', status: 'True' }] } };
}

/** A NodeBundleStatus as the agent reports it. */
export function nodeStatus(name: string, phase: string, digest: string, version: string, extra: { reason?: string } = {}): Doc {
  const ready = phase === 'Ready';
  return {
    apiVersion: 'bundles.offline-bundle.io/v1alpha1', kind: 'NodeBundleStatus', metadata: { name },
    status: {
      node: name, phase, bundle: { file: `/run/media/STICK/${version}.bundle`, version, digest },
      conditions: [
        { type: 'Pinned', status: ready ? 'True' : 'False', reason: ready ? 'Pinned' : 'NotYet', message: '' },
        ...(phase === 'Failed' ? [{ type: 'Failed', status: 'True', reason: extra.reason ?? 'PullFailed', message: 'pulling failed' }] : []),
        { type: 'Ready', status: ready ? 'True' : 'False', reason: ready ? 'Loaded' : (extra.reason ?? 'InProgress'), message: ready ? 'loaded' : 'not yet' },
      ],
      progress: { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 }, history: [], message: '', updatedAt: new Date().toISOString(),
    },
  };
}

export function clusterVersion(version: string): Doc {
  return {
    apiVersion: 'config.openshift.io/v1', kind: 'ClusterVersion', metadata: { name: 'version' },
    spec: { clusterID: 'c0ffee', channel: 'stable-4.15', desiredUpdate: { version, image: `${RELEASE_REPO}@sha256:${'0'.repeat(64)}`, force: false } },
    status: { history: [{ state: 'Completed', version, image: `${RELEASE_REPO}@sha256:${'0'.repeat(64)}` }] },
  };
}

export const ADMIN = 'alice';

/** `user` bound as deploy/admin-rbac.yaml's header says; returns a token for that user. */
export function bindAdmin(api: KubeApiStandIn, user: string, opts: { signatureRole?: boolean } = {}): string {
  api.bind({ kind: 'ClusterRole', name: 'offline-bundle-admin' }, { kind: 'User', name: user });
  if (opts.signatureRole ?? true) api.bind({ kind: 'Role', name: 'offline-bundle-release-signatures' }, { kind: 'User', name: user }, 'openshift-config-managed');
  return api.addToken(user);
}

export interface Fixture {
  work: string;
  api: KubeApiStandIn;
  kubeconfig: string;
  key: TestReleaseKey;
  keyring: string;
  b: TestBundle;
  trust: string[];
  cluster(args: string[]): ReturnType<typeof bundle>;
  /** Three Nodes all Ready for `b`, OpenShift 4.15.0, nothing else. */
  allReady(): void;
}

/**
 * The RBAC-enforcing API stand-in with the shipped deploy/*rbac.yaml, a kubeconfig of an admin
 * who is not cluster-admin but bound the way deploy/admin-rbac.yaml's header says (so every
 * call of `bundle cluster` must be allowed by those rules), a release key and a signed 4.15.1 bundle.
 */
export async function clusterFixture(t: { teardown(fn: () => unknown): void }): Promise<Fixture> {
  const work = await tmpdir(t, 'ob-cluster-');
  const api = await startKubeStandIn();
  t.teardown(() => api.close());
  const kubeconfig = await api.tokenKubeconfig(path.join(work, 'kubeconfig'), bindAdmin(api, ADMIN));
  const key = await releaseKey();
  const keyring = path.join(work, 'release.asc');
  await writeFile(keyring, key.armored);
  const b = await makeBundle(path.join(work, 'b1'), { version: '4.15.1', upgradeFrom: ['4.15.0'], sign: async (d, ref) => [await signRelease(key, ref, d)] });
  const allReady = () => {
    api.nodes = ['master-0', 'worker-0', 'worker-1'].map((n) => node(n, n.startsWith('master') ? { 'node-role.kubernetes.io/master': '' } : { 'node-role.kubernetes.io/worker': '' }));
    api.statuses = api.nodes.map((n) => nodeStatus(n.metadata.name, 'Ready', b.fileDigest, b.version));
    api.clusterVersion = clusterVersion('4.15.0');
    api.pods = [];
    api.machineAutoscalers = undefined;
    api.clusterAutoscalers = undefined;
    api.clearConfigMaps();
  };
  return { work, api, kubeconfig, key, keyring, b, trust: ['--key', b.pub], cluster: (args) => bundle(['cluster', ...args, '--kubeconfig', kubeconfig]), allReady };
}

/** What `oc adm upgrade` (or `oc annotate`) sends: a merge patch of ClusterVersion "version", here by a cluster-admin of `api`. */
export async function ocPatchClusterVersion(api: KubeApiStandIn, patch: unknown): Promise<{ status: number; message: string }> {
  const token = api.addToken('kubeadmin', ['system:cluster-admins']);
  const ca = await readFile(api.caFile);
  return new Promise((resolve, reject) => {
    const req = request(new URL('/apis/config.openshift.io/v1/clusterversions/version', api.url), {
      method: 'PATCH', ca, headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/merge-patch+json' },
    }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, message: String(JSON.parse(body || '{}').message ?? '') }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(patch));
  });
}

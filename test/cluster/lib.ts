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

export interface TestBundle {
  file: string;
  fileDigest: string;
  releaseDigest: string;
  payloadDigest: string;
  pub: string;
  version: string;
  via: TestHop[];
  sharedDigest?: string;
}
/** A release of a path bundle before its final one. */
export interface TestHop {
  version: string;
  releaseDigest: string;
  payloadDigest: string;
}

/**
 * A bundle of release `version` (accepting `upgradeFrom`) whose release signatures are made by
 * `sign(releaseDigest)`. Its "images" are small JSON blobs standing in for manifests. With
 * `via`, an update path (#43): those releases first, oldest first, each with its own release
 * image, payload image and signatures; `upgradeFrom` then names the last of them. Each release
 * of a path lists its payload in the head as the builder does, unless `payloads: false` (a
 * bundle built before the head said); `shared`: one more payload image every release lists.
 */
export async function makeBundle(
  dir: string,
  opts: {
    version: string;
    upgradeFrom: string[];
    sign?: (digest: string, reference: string) => Promise<Buffer[]>;
    via?: { version: string; upgradeFrom: string[] }[];
    payloads?: false;
    shared?: boolean;
  },
): Promise<TestBundle> {
  await mkdir(dir, { recursive: true });
  const blob = async (name: string, bytes: Buffer, mediaType: string) => {
    const file = path.join(dir, name);
    await writeFile(file, bytes);
    return { digest: sha256(bytes), size: bytes.length, mediaType, path: file };
  };
  const shared = opts.shared
    ? await blob(
        'payload-shared.json',
        Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT, component: 'etcd' })),
        MT,
      )
    : undefined;
  const releaseOf = async (version: string, upgradeFrom: string[]) => {
    const release = await blob(
      `release-${version}.json`,
      Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT, release: version })),
      MT,
    );
    const payload = await blob(
      `payload-${version}.json`,
      Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT, component: `cli-${version}` })),
      MT,
    );
    const reference = `${RELEASE_REPO}:${version}-x86_64`;
    const sigs = opts.sign ? await opts.sign(release.digest, reference) : [];
    const sigBlobs = await Promise.all(
      sigs.map((s, i) => blob(`sig-${version}-${i}`, s, RELEASE_SIGNATURE_MEDIA_TYPE)),
    );
    const head = {
      name: version,
      version,
      arch: 'amd64',
      image: reference,
      digest: release.digest,
      upgradeFrom,
      ...(sigBlobs.length
        ? { signatures: sigBlobs.map((b) => ({ digest: b.digest, keyIds: [] })) }
        : {}),
      ...(opts.via?.length ? { adds: { images: 2, bytes: release.size + payload.size } } : {}),
      ...(opts.via?.length && opts.payloads !== false
        ? { payload: [release.digest, payload.digest, ...(shared ? [shared.digest] : [])].sort() }
        : {}),
    };
    const images = [
      {
        repository: RELEASE_REPO,
        tag: `${version}-x86_64`,
        digest: release.digest,
        mediaType: MT,
        platforms: [{ os: 'linux', architecture: 'amd64' }],
        component: 'release',
      },
      {
        repository: ART_REPO,
        tag: null,
        digest: payload.digest,
        mediaType: MT,
        platforms: [{ os: 'linux', architecture: 'amd64' }],
        component: 'cli',
      },
    ];
    return {
      head,
      images,
      blobs: [release, payload, ...sigBlobs],
      releaseDigest: release.digest,
      payloadDigest: payload.digest,
    };
  };
  const hops = [];
  for (const h of opts.via ?? []) hops.push(await releaseOf(h.version, h.upgradeFrom));
  const final = await releaseOf(opts.version, opts.upgradeFrom);
  const { privatePem, publicPem } = generateKeyPair('ed25519');
  const pub = path.join(dir, 'factory.pub');
  await writeFile(pub, publicPem);
  const index = Buffer.from(JSON.stringify({ schemaVersion: 2, manifests: [] }));
  const file = path.join(dir, `${opts.version}.bundle`);
  const all = [...hops, final];
  const w = await writeBundle({
    release: { ...final.head, ...(hops.length ? { via: hops.map((h) => h.head) } : {}) },
    images: [
      ...all.flatMap((r) => r.images),
      ...(shared
        ? [
            {
              repository: ART_REPO,
              tag: null,
              digest: shared.digest,
              mediaType: MT,
              platforms: [{ os: 'linux', architecture: 'amd64' }],
              component: 'etcd',
            },
          ]
        : []),
    ],
    index,
    blobs: [...all.flatMap((r) => r.blobs), ...(shared ? [shared] : [])],
    imageStoreBytes: 0,
    key: createPrivateKey(privatePem),
    output: file,
    createdAt: '2026-11-23T00:00:00.000Z',
    tool: { name: 'offline-bundle', version: 'test' },
  });
  const via = hops.map((h) => ({
    version: h.head.version,
    releaseDigest: h.releaseDigest,
    payloadDigest: h.payloadDigest,
  }));
  return {
    file,
    fileDigest: w.fileDigest,
    releaseDigest: final.releaseDigest,
    payloadDigest: final.payloadDigest,
    pub,
    version: opts.version,
    via,
    ...(shared ? { sharedDigest: shared.digest } : {}),
  };
}

export function node(
  name: string,
  labels: Record<string, string> = { 'node-role.kubernetes.io/worker': '' },
): Doc {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

/** A NodeBundleStatus as the agent reports it. */
export function nodeStatus(
  name: string,
  phase: string,
  digest: string,
  version: string,
  extra: { reason?: string } = {},
): Doc {
  const ready = phase === 'Ready';
  return {
    apiVersion: 'bundles.offline-bundle.io/v1alpha1',
    kind: 'NodeBundleStatus',
    metadata: { name },
    status: {
      node: name,
      phase,
      bundle: { file: `/run/media/STICK/${version}.bundle`, version, digest },
      conditions: [
        {
          type: 'Pinned',
          status: ready ? 'True' : 'False',
          reason: ready ? 'Pinned' : 'NotYet',
          message: '',
        },
        ...(phase === 'Failed'
          ? [
              {
                type: 'Failed',
                status: 'True',
                reason: extra.reason ?? 'PullFailed',
                message: 'pulling failed',
              },
            ]
          : []),
        {
          type: 'Ready',
          status: ready ? 'True' : 'False',
          reason: ready ? 'Loaded' : (extra.reason ?? 'InProgress'),
          message: ready ? 'loaded' : 'not yet',
        },
      ],
      progress: { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 },
      history: [],
      message: '',
      updatedAt: new Date().toISOString(),
    },
  };
}

export function clusterVersion(version: string): Doc {
  return {
    apiVersion: 'config.openshift.io/v1',
    kind: 'ClusterVersion',
    metadata: { name: 'version' },
    spec: {
      clusterID: 'c0ffee',
      channel: 'stable-4.15',
      desiredUpdate: { version, image: `${RELEASE_REPO}@sha256:${'0'.repeat(64)}`, force: false },
    },
    status: {
      history: [{ state: 'Completed', version, image: `${RELEASE_REPO}@sha256:${'0'.repeat(64)}` }],
    },
  };
}

export const ADMIN = 'alice';

/** `user` bound as deploy/admin-rbac.yaml's header says; returns a token for that user. */
export function bindAdmin(
  api: KubeApiStandIn,
  user: string,
  opts: { signatureRole?: boolean } = {},
): string {
  api.bind({ kind: 'ClusterRole', name: 'offline-bundle-admin' }, { kind: 'User', name: user });
  if (opts.signatureRole ?? true)
    api.bind(
      { kind: 'Role', name: 'offline-bundle-release-signatures' },
      { kind: 'User', name: user },
      'openshift-config-managed',
    );
  if (opts.signatureRole ?? true)
    api.bind(
      { kind: 'Role', name: 'offline-bundle-admin-acks' },
      { kind: 'User', name: user },
      'openshift-config',
    );
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
  const kubeconfig = await api.tokenKubeconfig(
    path.join(work, 'kubeconfig'),
    bindAdmin(api, ADMIN),
  );
  const key = await releaseKey();
  const keyring = path.join(work, 'release.asc');
  await writeFile(keyring, key.armored);
  const b = await makeBundle(path.join(work, 'b1'), {
    version: '4.15.1',
    upgradeFrom: ['4.15.0'],
    sign: async (d, ref) => [await signRelease(key, ref, d)],
  });
  const allReady = () => {
    api.nodes = ['master-0', 'worker-0', 'worker-1'].map((n) =>
      node(
        n,
        n.startsWith('master')
          ? { 'node-role.kubernetes.io/master': '' }
          : { 'node-role.kubernetes.io/worker': '' },
      ),
    );
    api.statuses = api.nodes.map((n) =>
      nodeStatus(n.metadata.name, 'Ready', b.fileDigest, b.version),
    );
    api.clusterVersion = clusterVersion('4.15.0');
    api.pods = [];
    api.machineAutoscalers = undefined;
    api.clusterAutoscalers = undefined;
    api.clearConfigMaps();
  };
  return {
    work,
    api,
    kubeconfig,
    key,
    keyring,
    b,
    trust: ['--key', b.pub],
    cluster: (args) => bundle(['cluster', ...args, '--kubeconfig', kubeconfig]),
    allReady,
  };
}

/** What `oc adm upgrade` (or `oc annotate`) sends: a merge patch of ClusterVersion "version", here by a cluster-admin of `api`. */
export async function ocPatchClusterVersion(
  api: KubeApiStandIn,
  patch: unknown,
): Promise<{ status: number; message: string }> {
  const token = api.addToken('kubeadmin', ['system:cluster-admins']);
  const ca = await readFile(api.caFile);
  return new Promise((resolve, reject) => {
    const req = request(
      new URL('/apis/config.openshift.io/v1/clusterversions/version', api.url),
      {
        method: 'PATCH',
        ca,
        headers: {
          Authorization: `Bearer ${token}`,
          'Content-Type': 'application/merge-patch+json',
        },
      },
      (res) => {
        let body = '';
        res.on('data', (d) => {
          body += d;
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            message: String(JSON.parse(body || '{}').message ?? ''),
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(patch));
  });
}

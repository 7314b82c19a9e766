// The releases of the offline cluster model (offline-model*.test.ts), built the way a factory
// builds them: OpenShift-shaped release images (release-manifests/image-references naming the
// payload by digest under quay.io, the OS image `rhel-coreos` among them) pushed to a real
// docker-registry that stands for quay.io through a registries.conf mirror, release signatures
// made with a test release key (OpenPGP, the CVO's format), and `bundle create --release`
// carrying them with an OLM operator and two workloads. The node never sees that registry.
import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Doc } from '../status/lib.js';
import { bundle, keygen, type KeyPair } from '../builder/lib.js';
import { releaseKey, signRelease, type TestReleaseKey } from '../builder/release-signing.js';
// @ts-expect-error: JavaScript helpers without type declarations
import { pushImage, releaseFiles, writeImageLayout } from '../helpers/images.mjs';
// @ts-expect-error: JavaScript helpers without type declarations
import { startRegistry } from '../helpers/registry.mjs';

export const ART = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev';
export const REL = 'quay.io/openshift-release-dev/ocp-release';
export const OLM = 'registry.redhat.io/lvms4/lvms-rhel9-operator';
/** A site workload pulled with imagePullPolicy Always, and one with IfNotPresent. */
export const WEB = 'registry.example.com/shop/web:1.0';
export const DB = 'registry.example.com/shop/db:1.0';
/** Payload operators that run as pods (the CVO runs the release image itself). */
export const OPERATORS = ['cluster-network-operator', 'cluster-etcd-operator'] as const;

export interface ModelRelease {
  version: string;
  previous: string;
  file: string;
  /** sha256 of the bundle file, as nodes report it. */
  fileDigest: string;
  /** The release image by digest (what desiredUpdate names, what the CVO pod runs). */
  release: string;
  /** rhel-coreos by digest: what the MCD applies. */
  os: string;
  operators: Record<(typeof OPERATORS)[number], string>;
  /** The OLM operator by digest. */
  olm: string;
}

export interface ModelReleases {
  factory: KeyPair;
  key: TestReleaseKey;
  keyring: string;
  releases: ModelRelease[];
}

const amd64 = (files: Record<string, string>) => [
  { os: 'linux', architecture: 'amd64', layers: [files] },
];

/** Site images, the same bytes in every bundle: the OLM operator and the two workloads. */
async function siteImages(work: string): Promise<{ args: string[]; olm: string }> {
  const layout = path.join(work, 'site-images');
  const olm = await writeImageLayout(layout, {
    tag: 'olm',
    platforms: amd64({ manager: 'lvms operator v4.15' }),
  });
  await writeImageLayout(layout, {
    tag: 'web',
    platforms: amd64({ 'srv/index.html': 'shop web 1.0' }),
  });
  await writeImageLayout(layout, { tag: 'db', platforms: amd64({ 'srv/db': 'shop db 1.0' }) });
  return {
    olm: `${OLM}@${olm.digest}`,
    args: [
      '--image',
      `oci:${layout}:olm=${OLM}:v4.15`,
      '--image',
      `oci:${layout}:web=${WEB}`,
      '--image',
      `oci:${layout}:db=${DB}`,
    ],
  };
}

/** One release pushed to the stand-in for quay.io, signed, and bundled. */
async function oneRelease(
  work: string,
  host: string,
  r: { version: string; previous: string },
  ctx: {
    factory: KeyPair;
    key: TestReleaseKey;
    keyring: string;
    site: { args: string[]; olm: string };
    conf: string;
    createArgs: string[];
  },
): Promise<ModelRelease> {
  const art = `${host}/openshift-release-dev/ocp-v4.0-art-dev`;
  const images: Record<string, string> = {};
  for (const name of ['rhel-coreos', ...OPERATORS]) {
    const files =
      name === 'rhel-coreos'
        ? { 'usr/lib/os-release': `ID=rhcos\nVERSION_ID=${r.version}\n` }
        : { [`usr/bin/${name}`]: `${name} ${r.version}` };
    const pushed = await pushImage(
      { tag: `${name}-${r.version}`, platforms: amd64(files) },
      `${art}:${name}-${r.version}`,
    );
    images[name] = `${ART}@${pushed.digest}`;
  }
  const tag = `${r.version}-x86_64`;
  const rel = await pushImage(
    { tag, platforms: amd64(releaseFiles({ version: r.version, previous: [r.previous], images })) },
    `${host}/openshift-release-dev/ocp-release:${tag}`,
  );
  const sig = path.join(work, `${r.version}.sig`);
  await writeFile(sig, await signRelease(ctx.key, `${REL}:${tag}`, rel.digest));
  const file = path.join(work, `${r.version}.bundle`);
  const c = await bundle([
    'create',
    '--quiet',
    '--release',
    `${REL}:${tag}`,
    '--registries-conf',
    ctx.conf,
    '--release-signature',
    sig,
    '--release-keyring',
    ctx.keyring,
    ...ctx.site.args,
    ...ctx.createArgs,
    '--key',
    ctx.factory.key,
    '--cache',
    path.join(work, 'cache'),
    '-o',
    file,
  ]);
  if (c.code !== 0) throw new Error(`bundle create ${r.version}: ${c.stderr}`);
  const fileDigest = `sha256:${createHash('sha256')
    .update(await readFile(file))
    .digest('hex')}`;
  const operators = Object.fromEntries(
    OPERATORS.map((o) => [o, images[o]!]),
  ) as ModelRelease['operators'];
  return {
    ...r,
    file,
    fileDigest,
    release: `${REL}@${rel.digest}`,
    os: images['rhel-coreos']!,
    operators,
    olm: ctx.site.olm,
  };
}

/**
 * Builds the bundles of `versions` (each upgrading from the one before); the registry is stopped
 * once they are written. `createArgs`: more `bundle create` arguments (a booted node's stick
 * carries the agent image: --agent-image).
 */
export async function buildReleases(
  work: string,
  versions: { version: string; previous: string }[],
  createArgs: string[] = [],
): Promise<ModelReleases> {
  const reg = await startRegistry({ timeoutMs: 30_000 });
  try {
    const factory = await keygen(work);
    const key = await releaseKey();
    const keyring = path.join(work, 'release.asc');
    await writeFile(keyring, key.armored);
    // the factory's view of quay.io: our registry, the names kept
    const conf = path.join(work, 'factory-registries.conf');
    await writeFile(
      conf,
      `unqualified-search-registries = []\n[[registry]]\nprefix = "quay.io/openshift-release-dev"\nlocation = "quay.io/openshift-release-dev"\n[[registry.mirror]]\nlocation = "${reg.host}/openshift-release-dev"\ninsecure = true\n`,
    );
    const site = await siteImages(work);
    const releases: ModelRelease[] = [];
    for (const r of versions)
      releases.push(
        await oneRelease(work, reg.host, r, { factory, key, keyring, site, conf, createArgs }),
      );
    return { factory, key, keyring, releases };
  } finally {
    await reg.stop();
  }
}

const RS = (name: string) => ({ kind: 'ReplicaSet', name });

function pod(
  ns: string,
  name: string,
  image: string,
  imagePullPolicy: string,
  owner: { kind: string; name: string },
): Doc {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { namespace: ns, name, ownerReferences: [{ ...owner, controller: true }] },
    spec: { nodeName: 'node-a', containers: [{ name: 'main', image, imagePullPolicy }] },
  };
}

/**
 * The pods of the cluster once `r` rolled out, in the shape an OpenShift pod list has: the CVO
 * (the release image), payload operators by digest, an OLM operator by digest, a Deployment
 * pulling with Always and a StatefulSet with IfNotPresent (both by tag, as sites write them).
 */
export function podsOf(r: ModelRelease): Doc[] {
  return [
    pod(
      'openshift-cluster-version',
      'cluster-version-operator-6f9c-xk2',
      r.release,
      'IfNotPresent',
      RS('cluster-version-operator-6f9c'),
    ),
    pod(
      'openshift-network-operator',
      'network-operator-5d7b-q8w',
      r.operators['cluster-network-operator'],
      'IfNotPresent',
      RS('network-operator-5d7b'),
    ),
    pod(
      'openshift-etcd-operator',
      'etcd-operator-7c4f-m3n',
      r.operators['cluster-etcd-operator'],
      'IfNotPresent',
      RS('etcd-operator-7c4f'),
    ),
    pod(
      'openshift-storage',
      'lvms-operator-64d8-z9p',
      r.olm,
      'IfNotPresent',
      RS('lvms-operator-64d8'),
    ),
    pod('shop', 'web-7b9d-4hj', WEB, 'Always', RS('web-7b9d')),
    pod('shop', 'db-0', DB, 'IfNotPresent', { kind: 'StatefulSet', name: 'db' }),
  ];
}

/** OLM's ClusterServiceVersion of the operator: relatedImages, as `check` reads them. */
export function csvOf(r: ModelRelease): Doc {
  return {
    apiVersion: 'operators.coreos.com/v1alpha1',
    kind: 'ClusterServiceVersion',
    metadata: { namespace: 'openshift-storage', name: 'lvms-operator.v4.15.0' },
    spec: { relatedImages: [{ name: 'lvms-operator', image: r.olm }] },
  };
}

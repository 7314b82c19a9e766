// The shape of an OpenShift release payload, as sizes only: which images exist, which layers
// they share and how large each layer is. A real 4.x x86_64 payload has ~190 images and
// 18-20 GB of gzip layers; almost every image starts from the same RHEL base layer (~80 MB),
// most add a shared runtime layer (~30 MB), a few use an older base or share the `oc` client
// layer, and each adds one to three layers of its own, mostly small, a few large (the
// machine-os image alone is ~1 GB). Sizes are drawn from a seeded generator so every run,
// and both sides of a comparison, see the same shape.

const MiB = 1024 * 1024;
/** Largest layer file the generator builds (it holds a layer twice in memory while gzipping). */
const MAX_LAYER = 128 * MiB;

/** Shapes by image count: the default 40-image release, the full-size one, and a small one for the suite's smoke run. */
export const SHAPES = {
  8: { images: 8, bytes: 400 * MiB },
  40: { images: 40, bytes: 2 * 1024 * MiB },
  190: { images: 190, bytes: 19 * 1024 * MiB },
};

const NAMES = [
  'cli',
  'etcd',
  'console',
  'installer',
  'machine-os-content',
  'hyperkube',
  'oauth-server',
  'haproxy-router',
  'cluster-version-operator',
  'cluster-network-operator',
  'ovn-kubernetes',
  'multus-cni',
  'coredns',
  'prometheus',
  'alertmanager',
  'thanos',
  'grafana',
  'kube-state-metrics',
  'node-exporter',
  'cluster-monitoring-operator',
  'machine-config-operator',
  'cluster-authentication-operator',
  'cluster-ingress-operator',
  'cluster-dns-operator',
  'cluster-image-registry-operator',
  'docker-registry',
  'cluster-storage-operator',
  'csi-snapshot-controller',
  'cluster-kube-apiserver-operator',
  'cluster-etcd-operator',
  'operator-lifecycle-manager',
  'operator-registry',
  'must-gather',
  'tools',
  'pod',
  'deployer',
  'cluster-samples-operator',
  'insights-operator',
  'console-operator',
  'cluster-autoscaler',
];

/** mulberry32: a small seeded generator (the shape must not change between runs). */
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Splits `bytes` into layers of at most MAX_LAYER. */
function pieces(bytes) {
  const n = Math.max(1, Math.ceil(bytes / MAX_LAYER));
  return Array.from({ length: n }, () => Math.max(1024, Math.floor(bytes / n)));
}

/**
 * @param {{ images: number, bytes: number }} shape
 * @param {number} scale multiplies every layer size (0.05 for a quick run)
 * @returns {{ shared: Record<string, number>, images: { name: string, layers: ({ shared: string }|{ own: number })[] }[], bytes: number }}
 *   layers are named shared layers or sizes of the image's own layers; bytes: the unique layer bytes in all
 */
export function releaseShape(shape, scale) {
  const rand = seeded(shape.images);
  const shared = {
    'base-rhel9': 80 * MiB * scale,
    runtime: 30 * MiB * scale,
    'base-rhel8': 70 * MiB * scale,
    'oc-client': 40 * MiB * scale,
  };
  const images = [];
  for (let i = 0; i < shape.images; i++) {
    const name = NAMES[i] ?? `component-${i}`;
    const r = rand();
    /** @type {({ shared: string }|{ own: number })[]} */
    const layers = [{ shared: r < 0.1 ? 'base-rhel8' : 'base-rhel9' }];
    if (r >= 0.1 && r < 0.85) layers.push({ shared: 'runtime' });
    if (rand() < 0.2) layers.push({ shared: 'oc-client' });
    const own = 1 + Math.floor(rand() * 3);
    // heavy tail: most images add a few MB to tens of MB, a few add hundreds
    for (let k = 0; k < own; k++) layers.push({ own: Math.exp(rand() * 5) });
    if (name === 'machine-os-content') layers.push({ own: 400 });
    images.push({ name, layers });
  }
  // Own layers share what the shared ones leave of the target size.
  const sharedBytes = Object.values(shared).reduce((a, b) => a + b, 0);
  const weights = images.flatMap((im) => im.layers.filter((l) => 'own' in l).map((l) => l.own));
  const perWeight =
    Math.max(0, shape.bytes * scale - sharedBytes) / weights.reduce((a, b) => a + b, 0);
  for (const im of images) {
    im.layers = im.layers.flatMap((l) =>
      'own' in l ? pieces(l.own * perWeight).map((own) => ({ own })) : [l],
    );
  }
  for (const k of Object.keys(shared)) shared[k] = Math.max(1024, Math.floor(shared[k]));
  const bytes =
    sharedBytes +
    images.reduce((s, im) => s + im.layers.reduce((t, l) => t + ('own' in l ? l.own : 0), 0), 0);
  return { shared, images, bytes };
}

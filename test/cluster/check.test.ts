// `bundle cluster check`: the registry-free closure from the API (stand-in API server, the
// shipped admin RBAC). A cluster seeded with gaps (a workload no bundle carries, an operator's
// related image no bundle carries, a pod pulling a bundle image with Always, a node that never
// loaded) is named gap by gap, and nothing else is.
import t from 'tap';
import { errorCode } from '../builder/lib.js';
import { ART_REPO, RELEASE_REPO, clusterFixture, node } from './lib.js';

const { api, b, trust, cluster, allReady } = await clusterFixture(t);
const payload = `${ART_REPO}@${b.payloadDigest}`;
const release = `${RELEASE_REPO}@${b.releaseDigest}`;

const pod = (
  ns: string,
  name: string,
  image: string,
  imagePullPolicy = 'IfNotPresent',
  owner?: { kind: string; name: string },
) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: {
    namespace: ns,
    name,
    ...(owner ? { ownerReferences: [{ ...owner, controller: true }] } : {}),
  },
  spec: { containers: [{ name: 'c', image, imagePullPolicy }] },
});
const template = (
  kind: string,
  ns: string,
  name: string,
  image: string,
  imagePullPolicy?: string,
) => ({
  apiVersion: kind === 'Job' || kind === 'CronJob' ? 'batch/v1' : 'apps/v1',
  kind,
  metadata: { namespace: ns, name },
  spec:
    kind === 'CronJob'
      ? {
          jobTemplate: {
            spec: {
              template: {
                spec: {
                  containers: [
                    { name: 'c', image, ...(imagePullPolicy ? { imagePullPolicy } : {}) },
                  ],
                },
              },
            },
          },
        }
      : {
          template: {
            spec: {
              containers: [{ name: 'c', image, ...(imagePullPolicy ? { imagePullPolicy } : {}) }],
            },
          },
        },
});

/** A cluster whose every image is in the bundle: payload operators and a CronJob by digest, the CVO by the release digest. */
function closed(): void {
  allReady();
  api.pods = [
    pod('openshift-cluster-version', 'cvo-1', release, 'IfNotPresent', {
      kind: 'ReplicaSet',
      name: 'cvo-7d',
    }),
    pod('openshift-etcd', 'etcd-0', payload),
  ];
  for (const r of [
    'deployments',
    'daemonsets',
    'statefulsets',
    'replicasets',
    'jobs',
    'cronjobs',
    'clusterserviceversions',
  ])
    api.replaceAll(r, []);
  api.put(
    'deployments',
    template('Deployment', 'openshift-cluster-version', 'cluster-version-operator', release),
  );
  api.put(
    'cronjobs',
    template('CronJob', 'openshift-image-registry', 'pruner', payload, 'IfNotPresent'),
  );
}

t.test(
  'a closed cluster: every image asked for is in the bundle, every node ready: exit 0',
  async (t) => {
    closed();
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    t.match(j, { complete: true, needed: 2, gaps: [], nodes: [] });
    t.match(
      j.summary,
      /^2 images the cluster asks for, 2 of them in the bundle; 3 of 3 nodes Ready/,
    );
  },
);

t.test(
  'a cluster seeded with gaps: each named with why and who asks, and nothing else',
  async (t) => {
    closed();
    api.put(
      'deployments',
      template('Deployment', 'shop', 'web', 'registry.example.com/team/web:v3'),
    );
    api.put(
      'statefulsets',
      template('StatefulSet', 'shop', 'db', 'registry.example.com/team/db:latest'),
    );
    api.put('clusterserviceversions', {
      apiVersion: 'operators.coreos.com/v1alpha1',
      kind: 'ClusterServiceVersion',
      metadata: { namespace: 'openshift-local-storage', name: 'local-storage-operator.v4.15.0' },
      spec: {
        relatedImages: [
          { name: 'op', image: payload },
          {
            name: 'diskmaker',
            image:
              'registry.redhat.io/openshift4/ose-local-storage-diskmaker@sha256:' + 'ab'.repeat(32),
          },
        ],
      },
    });
    api.put(
      'pods',
      pod('monitoring', 'scraper-abc', payload, 'Always', { kind: 'DaemonSet', name: 'scraper' }),
    );
    api.put('nodes', node('worker-2'));
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'CLOSURE_INCOMPLETE', r.stderr);
    const j = JSON.parse(r.stdout);
    t.same(
      j.gaps.map((g: { why: string; image: string; users: string[] }) => [g.why, g.image, g.users]),
      [
        [
          'PullAlways',
          payload,
          [
            'openshift-etcd/Pod/etcd-0',
            'monitoring/Pod/scraper-abc',
            'openshift-image-registry/CronJob/pruner',
            '/ClusterServiceVersion/local-storage-operator.v4.15.0',
          ],
        ],
        ['InNoBundle', 'registry.example.com/team/db:latest', ['shop/StatefulSet/db']],
        ['InNoBundle', 'registry.example.com/team/web:v3', ['shop/Deployment/web']],
        [
          'InNoBundle',
          'registry.redhat.io/openshift4/ose-local-storage-diskmaker@sha256:' + 'ab'.repeat(32),
          ['/ClusterServiceVersion/local-storage-operator.v4.15.0'],
        ],
      ].sort((a, b) => String(a[1]).localeCompare(String(b[1]))),
    );
    t.same(
      j.nodes.map((n: { node: string; phase: string }) => [n.node, n.phase]),
      [['worker-2', 'NotReported']],
      'the node that never loaded, and no other',
    );
    const text = await cluster(['check', b.file, ...trust]);
    t.match(
      text.stdout,
      /^InNoBundle: registry\.example\.com\/team\/web:v3: in no bundle given: .*asked for by shop\/Deployment\/web$/m,
    );
    t.match(
      text.stdout,
      /^PullAlways: .*set IfNotPresent; asked for by .*monitoring\/Pod\/scraper-abc/m,
    );
    t.match(
      text.stdout,
      /^nodes: 3 of 4 nodes Ready .*worker-2 never reported: plug the stick into worker-2$/m,
    );
  },
);

t.test(
  "the bundle's digest under another name, or a tag it does not carry, is a gap: the runtime looks an image up by the name it is asked by",
  async (t) => {
    closed();
    api.put(
      'deployments',
      template('Deployment', 'shop', 'cli', `${ART_REPO}:latest`, 'IfNotPresent'),
    );
    api.put(
      'deployments',
      template(
        'Deployment',
        'shop',
        'same-digest-other-repo',
        `registry.example.com/mirror/cli@${b.payloadDigest}`,
      ),
    );
    const r = await cluster(['check', b.file, ...trust, '--json']);
    t.same(
      JSON.parse(r.stdout).gaps.map((g: { image: string }) => g.image),
      [`${ART_REPO}:latest`, `registry.example.com/mirror/cli@${b.payloadDigest}`],
      'the runtime looks an image up by the name it is asked by',
    );
  },
);

t.test(
  'who asks for one image is named 20 times at most (a DaemonSet on every node is not 5,000 names)',
  async (t) => {
    closed();
    for (let i = 0; i < 30; i++)
      api.put(
        'pods',
        pod('shop', `agent-${i}`, 'registry.example.com/team/agent:v1', 'IfNotPresent', {
          kind: 'DaemonSet',
          name: 'agent',
        }),
      );
    const r = await cluster(['check', b.file, ...trust, '--json']);
    const gap = JSON.parse(r.stdout).gaps.find(
      (g: { image: string }) => g.image === 'registry.example.com/team/agent:v1',
    );
    t.equal(gap.users.length, 20);
    t.equal(gap.users[0], 'shop/Pod/agent-0');
  },
);

// `bundle cluster prepare` against the stand-in API server (contract test: test/cluster/apiserver.ts):
// the signature ConfigMap exactly as oc-mirror lays it out (server-side apply), Always pods and
// autoscalers, a bad signature, the version graph, RBAC denial.
import t from 'tap';
import path from 'node:path';
import { writeFile } from 'node:fs/promises';
import { errorCode, bundle } from '../builder/lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import {
  ART_REPO,
  RELEASE_REPO,
  bindAdmin,
  clusterFixture,
  clusterVersion,
  makeBundle,
  nodeStatus,
  node,
} from './lib.js';

const { work, api, kubeconfig, key, keyring, b, trust, cluster, allReady } =
  await clusterFixture(t);
const cm = 'openshift-config-managed/mirrored-release-signatures';
void [
  api,
  b,
  trust,
  clusterVersion,
  path,
  writeFile,
  bundle,
  releaseKey,
  signRelease,
  ART_REPO,
  RELEASE_REPO,
  makeBundle,
  nodeStatus,
  node,
  work,
  kubeconfig,
  key,
  keyring,
  cm,
];

t.test('prepare', async (t) => {
  t.test(
    'applies the signature ConfigMap exactly as oc-mirror lays it out, by server-side apply',
    async (t) => {
      allReady();
      const r = await cluster(['prepare', b.file, ...trust, '--release-keyring', keyring]);
      t.equal(r.code, 0, r.stderr);
      const { resourceVersion, ...metadata } = api.configMap(
        'openshift-config-managed',
        'mirrored-release-signatures',
      )!.metadata;
      t.ok(resourceVersion, "the server's own field");
      const obj = {
        ...api.configMap('openshift-config-managed', 'mirrored-release-signatures'),
        metadata,
      };
      const sig = await signatureBytes();
      t.same(obj, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: {
          name: 'mirrored-release-signatures',
          namespace: 'openshift-config-managed',
          labels: { 'release.openshift.io/verification-signatures': '' },
          annotations: { createdBy: 'offline-bundle' },
        },
        binaryData: { [`sha256-${b.releaseDigest.slice(7)}-1`]: sig.toString('base64') },
      });
      const apply = api.requests.find(
        (q) => q.method === 'PATCH' && q.path.endsWith('/configmaps/mirrored-release-signatures'),
      )!;
      t.equal(apply.contentType, 'application/apply-patch+yaml');
      t.equal(apply.query.get('fieldManager'), `offline-bundle-sha256-${b.releaseDigest.slice(7)}`);
      t.match(r.stdout, `applied ConfigMap ${cm}: sha256-${b.releaseDigest.slice(7)}-1`);
      t.match(r.stdout, 'version graph: the cluster runs 4.15.0; 4.15.1 accepts 4.15.0');
      const again = await cluster(['prepare', b.file, ...trust]);
      t.match(again.stdout, `${cm} already holds`, 'a second run changes nothing');
    },
  );
  t.test("another release's keys stay (one field manager per release)", async (t) => {
    const b2 = await makeBundle(path.join(work, 'b2'), {
      version: '4.15.2',
      upgradeFrom: ['4.15.0'],
      sign: async (d, ref) => [
        await signRelease(key, ref, d),
        await signRelease(key, `${RELEASE_REPO}@${d}`, d),
      ],
    });
    const r = await cluster(['prepare', b2.file, '--key', b2.pub, '--json']);
    t.equal(r.code, 0, r.stderr);
    t.same(
      Object.keys(
        api.configMap('openshift-config-managed', 'mirrored-release-signatures')!.binaryData,
      ).sort(),
      [
        `sha256-${b.releaseDigest.slice(7)}-1`,
        `sha256-${b2.releaseDigest.slice(7)}-1`,
        `sha256-${b2.releaseDigest.slice(7)}-2`,
      ].sort(),
    );
  });
  t.test('warns about Always pods using bundle images and about autoscaling', async (t) => {
    allReady();
    api.pods = [
      {
        metadata: {
          namespace: 'openshift-marketplace',
          name: 'catalog-abc',
          ownerReferences: [{ kind: 'Deployment', name: 'catalog', controller: true }],
        },
        spec: {
          containers: [
            { name: 'c', image: `${ART_REPO}@${b.payloadDigest}`, imagePullPolicy: 'Always' },
          ],
        },
      },
      {
        metadata: { namespace: 'app', name: 'fine' },
        spec: {
          containers: [
            { name: 'c', image: `${ART_REPO}@${b.payloadDigest}`, imagePullPolicy: 'IfNotPresent' },
          ],
        },
      },
      {
        metadata: { namespace: 'app', name: 'other' },
        spec: {
          containers: [
            { name: 'c', image: 'docker.io/library/busybox:1', imagePullPolicy: 'Always' },
          ],
        },
      },
    ];
    api.machineAutoscalers = [
      { metadata: { namespace: 'openshift-machine-api', name: 'worker-us-east-1a' } },
    ];
    api.clusterAutoscalers = [
      { metadata: { name: 'default' }, spec: { resourceLimits: { maxNodesTotal: 10 } } },
    ];
    const r = await cluster(['prepare', b.file, ...trust, '--json']);
    t.equal(r.code, 0, r.stderr);
    const w = JSON.parse(r.stdout).warnings as { kind: string; object: string }[];
    t.same(
      w.map((x) => [x.kind, x.object]),
      [
        ['Autoscaling', 'openshift-machine-api/MachineAutoscaler/worker-us-east-1a'],
        ['Autoscaling', '/ClusterAutoscaler/default'],
        ['PullAlways', 'openshift-marketplace/Deployment/catalog'],
      ],
    );
    const text = await cluster(['prepare', b.file, ...trust]);
    t.match(
      text.stdout,
      /warning: PullAlways: openshift-marketplace\/Deployment\/catalog: pulls .* imagePullPolicy: Always/,
    );
  });
  t.test(
    'per node, what its runtime holds of the bundle: held, pinned, which names it lacks; a node publishing nothing is not known (#38)',
    async (t) => {
      allReady();
      const { runtimeHoldings } = await import('@offline-bundle/status');
      const release = `${RELEASE_REPO}@${b.releaseDigest}`;
      const tag = `${RELEASE_REPO}:4.15.1-x86_64`;
      const payload = `${ART_REPO}@${b.payloadDigest}`;
      const holds = (
        name: string,
        listed: { repoTags: string[]; repoDigests: string[]; pinned: boolean }[],
      ) => {
        const s = api.get('nodebundlestatuses', name)!;
        api.put('nodebundlestatuses', {
          ...s,
          status: { ...s.status, runtime: runtimeHoldings(listed, [release, tag, payload]) },
        });
      };
      // worker-0 holds the release pinned and the payload unpinned; worker-1 lost the payload; master-0 publishes nothing
      holds('worker-0', [
        { repoTags: [tag], repoDigests: [release], pinned: true },
        { repoTags: [], repoDigests: [payload], pinned: false },
      ]);
      holds('worker-1', [{ repoTags: [tag], repoDigests: [release], pinned: true }]);
      for (const dry of [[], ['--dry-run']]) {
        const r = await cluster(['prepare', b.file, ...trust, '--json', ...dry]);
        t.equal(r.code, 0, r.stderr);
        t.same(
          JSON.parse(r.stdout).holdings,
          [
            {
              node: 'master-0',
              published: false,
              names: 0,
              held: 0,
              pinned: 0,
              missing: 0,
              unknown: 0,
              pinsReported: false,
              lacks: [],
            },
            {
              node: 'worker-0',
              published: true,
              names: 3,
              held: 3,
              pinned: 2,
              missing: 0,
              unknown: 0,
              pinsReported: true,
              lacks: [],
            },
            {
              node: 'worker-1',
              published: true,
              names: 3,
              held: 2,
              pinned: 2,
              missing: 1,
              unknown: 0,
              pinsReported: true,
              lacks: [payload],
            },
          ],
          `--json${dry.length ? ' --dry-run' : ''}: per node, of the bundle's 3 image names`,
        );
      }
      const text = (await cluster(['prepare', b.file, ...trust])).stdout;
      t.match(
        text,
        'holdings: master-0: publishes nothing of its runtime (an older agent, or no load since it started): what it holds of 4.15.1 is not known\n',
      );
      t.match(text, 'holdings: worker-0: holds 3 of 3 image names of 4.15.1, 2 pinned\n');
      t.match(
        text,
        `holdings: worker-1: holds 2 of 3 image names of 4.15.1, 2 pinned; lacks 1: ${payload}\n`,
      );
    },
  );
  t.test('a bad signature is refused before anything is applied', async (t) => {
    allReady();
    const other = await releaseKey('Not The Release Key');
    const wrong = await makeBundle(path.join(work, 'wrong'), {
      version: '4.15.1',
      upgradeFrom: ['4.15.0'],
      sign: async (_d, ref) => [await signRelease(key, ref, 'sha256:' + '12'.repeat(32))],
    });
    const r = await cluster(['prepare', wrong.file, '--key', wrong.pub]);
    t.equal(errorCode(r.stderr), 'BAD_RELEASE_SIGNATURE', r.stderr);
    const untrusted = await makeBundle(path.join(work, 'untrusted'), {
      version: '4.15.1',
      upgradeFrom: ['4.15.0'],
      sign: async (d, ref) => [await signRelease(other, ref, d)],
    });
    const u = await cluster([
      'prepare',
      untrusted.file,
      '--key',
      untrusted.pub,
      '--release-keyring',
      keyring,
    ]);
    t.equal(errorCode(u.stderr), 'UNTRUSTED_RELEASE_SIGNATURE', u.stderr);
    t.equal(api.list('configmaps').length, 0, 'nothing applied');
    const unsigned = await makeBundle(path.join(work, 'unsigned'), {
      version: '4.15.1',
      upgradeFrom: ['4.15.0'],
    });
    const n = await cluster(['prepare', unsigned.file, '--key', unsigned.pub]);
    t.equal(errorCode(n.stderr), 'NO_RELEASE_SIGNATURES', n.stderr);
    const badKey = await cluster(['prepare', b.file, '--key', wrong.pub]);
    t.equal(errorCode(badKey.stderr), 'UNTRUSTED_KEY', 'the bundle itself must be trusted');
  });
  t.test('the running version is not an accepted source', async (t) => {
    allReady();
    api.clusterVersion = clusterVersion('4.14.9');
    const r = await cluster(['prepare', b.file, ...trust]);
    t.equal(errorCode(r.stderr), 'NOT_AN_UPGRADE_SOURCE', r.stderr);
    api.clusterVersion = undefined;
    const k = await cluster(['prepare', b.file, ...trust]);
    t.equal(errorCode(k.stderr), 'NOT_OPENSHIFT', k.stderr);
  });
  t.test('RBAC refuses the apply (an admin without the signature Role): FORBIDDEN', async (t) => {
    allReady();
    const kc = await api.tokenKubeconfig(
      path.join(work, 'no-role.kubeconfig'),
      bindAdmin(api, 'bob', { signatureRole: false }),
    );
    const r = await bundle(['cluster', 'prepare', b.file, ...trust, '--kubeconfig', kc]);
    t.equal(errorCode(r.stderr), 'FORBIDDEN', r.stderr);
    t.match(
      r.stderr,
      'configmaps "mirrored-release-signatures" is forbidden: User "bob" cannot get resource "configmaps" in API group "" in the namespace "openshift-config-managed"',
    );
    t.equal(
      api.configMap('openshift-config-managed', 'mirrored-release-signatures'),
      undefined,
      'nothing applied',
    );
  });
});

async function signatureBytes(): Promise<Buffer> {
  const { readReleaseSignatures, loadTrust, withBundleFile } =
    await import('@offline-bundle/format');
  return (
    await withBundleFile(b.file, async (s) => readReleaseSignatures(s, await loadTrust([b.pub])))
  ).signatures[0]!.bytes;
}

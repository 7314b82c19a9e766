// #23's "Done when", end to end with no mocks: a bundle.yaml naming a release, two extra images,
// one operator of a catalog generated here (a version range of one channel) and a Helm chart, all
// pushed to a real docker-registry on 127.0.0.1, builds a bundle whose `inspect --json` lists
// exactly the set computed here from those inputs; `bundle diff -f` compares the file with it;
// the catalog's size is in the log; and on a node with a real containerd the operator's images
// load and are pinned like the release's, the chart served but never pulled.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { formatBytes } from '@offline-bundle/cli';
// @ts-expect-error: JavaScript helpers without type declarations
import { pushChart, pushImage, releaseFiles } from '../helpers/images.mjs';
// @ts-expect-error: JavaScript helpers without type declarations
import { startRegistry } from '../helpers/registry.mjs';
import { AGENT, BUNDLE, containerdNode, run } from './fixtures.js';

/** "1.10.0" against "1.2.0", by number (the semver package is the builder's, not the tests'). */
const cmp = (a: string, b: string) => {
  const [pa, pb] = [a.split('.').map(Number), b.split('.').map(Number)];
  return pa.map((x, i) => x - pb[i]!).find((d) => d !== 0) ?? 0;
};
const img = (ref: string, files: Record<string, string>, config?: object) =>
  pushImage(
    {
      tag: 'x',
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [files], ...(config ? { config } : {}) },
      ],
    },
    ref,
  );

t.test(
  'a bundle.yaml with a release, images, an operator range and a chart: inspect lists exactly its set; the operator loads and pins like the release',
  async (t) => {
    const reg = await startRegistry({ timeoutMs: 30_000 });
    t.teardown(() => reg.stop());
    const n = await containerdNode(t, 'ob-file-node-');
    const H = reg.host;

    const cvo = await img(`${H}/ocp/art:cvo`, { 'usr/bin/cvo': 'cvo' });
    const etcd = await img(`${H}/ocp/art:etcd`, { 'usr/bin/etcd': 'etcd' });
    const payload = { 'cluster-version-operator': cvo.digestRef, etcd: etcd.digestRef };
    const release = await pushImage(
      {
        tag: '4.14.1',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [releaseFiles({ version: '4.14.1', previous: ['1.0.0'], images: payload })],
          },
        ],
      },
      `${H}/ocp/release:4.14.1`,
    );
    const app = await img(`${H}/team/app:v1`, { 'app.txt': 'app' });
    const tool = await img(`${H}/team/tool:v1`, { 'tool.txt': 'tool' });
    const chart = await pushChart({ name: 'demo', version: '0.1.0' }, `${H}/charts/demo:0.1.0`);

    // the catalog: one package, three versions in its stable channel
    const versions = ['1.0.0', '1.1.0', '1.2.0'];
    const ops: Record<string, { bundle: string; controller: string }> = {};
    for (const v of versions) {
      ops[v] = {
        bundle: (await img(`${H}/ops/alpha-bundle:v${v}`, { 'manifests/csv.yaml': v })).digestRef,
        controller: (await img(`${H}/ops/alpha-controller:v${v}`, { manager: v })).digestRef,
      };
    }
    const fbc = [
      { schema: 'olm.package', name: 'alpha', defaultChannel: 'stable' },
      {
        schema: 'olm.channel',
        package: 'alpha',
        name: 'stable',
        entries: versions.map((v, i) => ({
          name: `alpha.v${v}`,
          ...(i ? { replaces: `alpha.v${versions[i - 1]}` } : {}),
        })),
      },
      ...versions.map((v) => ({
        schema: 'olm.bundle',
        name: `alpha.v${v}`,
        package: 'alpha',
        image: ops[v]!.bundle,
        properties: [{ type: 'olm.package', value: { packageName: 'alpha', version: v } }],
        relatedImages: [
          { name: 'controller', image: ops[v]!.controller },
          { name: 'bundle', image: ops[v]!.bundle },
        ],
      })),
    ];
    const catalog = await img(
      `${H}/redhat/operator-index:v4.14`,
      { 'configs/alpha/catalog.json': fbc.map((o) => JSON.stringify(o)).join('\n') },
      { Labels: { 'operators.operatorframework.io.index.configs.v1': '/configs' } },
    );
    const range = { minVersion: '1.1.0', maxVersion: '1.2.0' };

    const doc = {
      apiVersion: 'offline-bundle/v1alpha1',
      kind: 'Bundle',
      release: release.ref,
      images: [app.ref, tool.ref],
      operators: [
        {
          catalog: catalog.ref,
          packages: [{ name: 'alpha', channels: [{ name: 'stable', ...range }] }],
        },
      ],
      charts: [`oci://${chart.ref}`],
      tlsVerify: false,
      cache: join(n.dir, 'cache'),
      key: n.keys.key,
      output: 'site.bundle',
    };
    const work = join(n.dir, 'factory');
    await mkdir(work, { recursive: true });
    const file = join(work, 'bundle.yaml');
    await writeFile(file, stringify(doc));
    const c = await run(BUNDLE, ['create', '-f', file]);
    t.equal(c.code, 0, c.stderr);
    const out = join(work, 'site.bundle');

    // the set the inputs name: the release, its payload, the images, the catalog, and each bundle in range with its related images
    const inRange = versions.filter(
      (v) => cmp(v, range.minVersion) >= 0 && cmp(v, range.maxVersion) <= 0,
    );
    const operatorImages = [
      catalog.ref,
      ...inRange.flatMap((v) => [ops[v]!.bundle, ops[v]!.controller]),
    ];
    const expected = [
      release.ref,
      ...Object.values(payload),
      app.ref,
      tool.ref,
      ...operatorImages,
    ].sort();
    const inspected = JSON.parse((await run(BUNDLE, ['inspect', out, '--json'])).stdout);
    t.same(
      inspected.images.map((i: { reference: string }) => i.reference).sort(),
      expected,
      'inspect --json: exactly the resolved images',
    );
    t.same(
      inspected.charts.map((i: { reference: string }) => i.reference),
      [chart.ref],
      'and the chart, apart',
    );

    // the catalog is carried whole, and the log says how big it is: its manifest, config and layers
    const m = JSON.parse(
      execFileSync('sh', ['-c', `zstd -dc '${out}' | tar -xO bundle.json`]).toString(),
    );
    const size = new Map<string, number>(
      m.blobs.map((b: { digest: string; size: number }) => [b.digest, b.size]),
    );
    const catalogBytes = [
      catalog.digest,
      catalog.manifests[0].config,
      ...catalog.manifests[0].layers,
    ].reduce((s: number, d: string) => s + size.get(d)!, 0);
    t.match(
      c.stderr,
      `(the catalog image is carried whole: ${formatBytes(catalogBytes)})`,
      'the catalog warning names its size',
    );

    // bundle diff -f: the file against the bundle it built is no change; a narrower file lacks what the bundle has
    const same = JSON.parse(
      (await run(BUNDLE, ['diff', '--quiet', '-f', file, out, '--json'])).stdout,
    );
    t.same(
      [
        same.images.added,
        same.images.removed,
        same.images.changed,
        same.charts.added,
        same.charts.removed,
      ],
      [[], [], [], [], []],
      'diff -f: the file is the bundle',
    );
    t.equal(same.images.unchanged, expected.length);
    t.equal(same.blobs.added.count + same.blobs.removed.count, 0, 'and so are its blobs');
    const narrower = join(work, 'narrower.yaml');
    await writeFile(narrower, stringify({ ...doc, images: [app.ref], charts: [] }));
    const text = await run(BUNDLE, ['diff', '--quiet', '-f', narrower, out]);
    t.equal(text.code, 0, text.stderr);
    t.match(
      text.stdout,
      /images: 1 added, 0 removed, 0 changed/,
      'the bundle has one image the file does not',
    );
    t.match(text.stdout, new RegExp(`\\+ ${tool.ref.replace(/[.]/g, '\\.')}`));
    t.match(text.stdout, /charts: 1 added, 0 removed/);

    // on the node: the origin is gone, the bundle is all there is
    await reg.stop();
    const r = await run(AGENT, ['load', out, '--config', n.config, '--json'], process.env, 120_000);
    t.equal(r.code, 0, `load (${r.stderr.slice(-600)})`);
    const listed = execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', 'ls'], {
      encoding: 'utf8',
    }).split('\n');
    const pinned = new Set(
      listed
        .filter((l) => l.includes('io.cri-containerd.pinned=pinned'))
        .map((l) => l.split(/\s+/)[0]),
    );
    const names = new Set(listed.map((l) => l.split(/\s+/)[0]));
    for (const ref of [...Object.values(payload), release.ref, ...operatorImages])
      t.ok(pinned.has(ref), `${ref} loaded and pinned`);
    t.notOk(
      [...names].some((x) => x?.includes('charts/demo')),
      'the chart is not in the runtime',
    );
  },
);

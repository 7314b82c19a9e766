// Review fixes of the Helm charts (#23): `bundle diff -f` takes create's flags (one definition);
// charts outside the image-store estimate; an operator catalog carried whole is a warning (--json's
// too). Real docker-registry on 127.0.0.1 (charts-review-setup.ts).
import t from 'tap';
import { bundle, bundleJson, listDir } from './lib.js';
import { pushImage } from '../helpers/images.mjs';
import { H, app, build, cache, create, demo, isc, keys, own } from './charts-review-setup.js';

t.test(
  "bundle diff -f takes create's flags: an ImageSetConfiguration without a release, with --version and the registry flags",
  async (t) => {
    const built = await create(isc(`oci://${H}/charts`), [
      '--version',
      '1.0',
      '--key',
      keys.key,
      '-o',
      'o.bundle',
    ]);
    t.equal(built.code, 0, built.stderr);
    const d = await bundle([
      'diff',
      '--quiet',
      '-f',
      built.file,
      built.output,
      '--version',
      '1.0',
      '--tls-verify=false',
      '--cache',
      cache,
      '--arch',
      'amd64',
      '--json',
    ]);
    t.equal(d.code, 0, d.stderr);
    const diff = JSON.parse(d.stdout);
    t.same(
      [
        diff.images.added,
        diff.images.removed,
        diff.images.changed,
        diff.charts.added,
        diff.charts.removed,
        diff.charts.changed,
      ],
      [[], [], [], [], [], []],
      'the file, resolved with the flags, is the bundle',
    );
    t.same([diff.images.unchanged, diff.charts.unchanged], [1, 1]);
    t.equal(diff.from.release.version, '1.0', "--version names the file's release");

    // --chart adds to the file's charts as in create: the bundle lacks it
    const more = await bundle([
      'diff',
      '--quiet',
      '-f',
      built.file,
      built.output,
      '--version',
      '1.0',
      '--tls-verify=false',
      '--cache',
      cache,
      '--chart',
      build.ref,
      '--json',
    ]);
    t.equal(more.code, 0, more.stderr);
    t.same(
      JSON.parse(more.stdout).charts.removed.map((c: { reference: string }) => c.reference),
      [build.ref],
      "--chart adds to the file's charts",
    );

    const stray = await bundle(['diff', built.output, built.output, '--version', '1.0']);
    t.equal(stray.code, 2, 'a flag of -f without -f: a usage error');
    t.match(stray.stderr, /--version goes with -f/);
  },
);

t.test('charts are not counted in the image-store estimate', async (t) => {
  const totals = async (args: string[]) => {
    const r = await create(undefined, [
      '--version',
      '1.0',
      '--key',
      keys.key,
      '-o',
      'o.bundle',
      ...args,
    ]);
    t.equal(r.code, 0, r.stderr);
    return (await bundleJson(r.output)).totals as { imageStoreBytes: number };
  };
  t.equal(
    (await totals(['--chart', demo.ref])).imageStoreBytes,
    0,
    'a chart-only bundle needs no image store',
  );
  const withChart = await totals(['--image', app.ref, '--chart', demo.ref]);
  const without = await totals(['--image', app.ref]);
  t.ok(without.imageStoreBytes > 0);
  t.equal(
    withChart.imageStoreBytes,
    without.imageStoreBytes,
    "an image and a chart: the image's figure",
  );
});

t.test(
  'an operator catalog carried whole is a warning: "warning:" on stderr, and in --json\'s warnings',
  async (t) => {
    const op = await pushImage(
      {
        tag: 'v1.0.0',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [{ 'manifests/csv.yaml': 'kind: ClusterServiceVersion' }],
          },
        ],
      },
      `${H}/operators/op-bundle:v1.0.0`,
    );
    const fbc = [
      { schema: 'olm.package', name: 'op', defaultChannel: 'stable' },
      { schema: 'olm.channel', package: 'op', name: 'stable', entries: [{ name: 'op.v1.0.0' }] },
      {
        schema: 'olm.bundle',
        name: 'op.v1.0.0',
        package: 'op',
        image: op.digestRef,
        properties: [{ type: 'olm.package', value: { packageName: 'op', version: '1.0.0' } }],
        relatedImages: [],
      },
    ];
    const catalog = await pushImage(
      {
        tag: 'v1',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            config: { Labels: { 'operators.operatorframework.io.index.configs.v1': '/configs' } },
            layers: [{ 'configs/op/catalog.json': fbc.map((o) => JSON.stringify(o)).join('\n') }],
          },
        ],
      },
      `${H}/operators/catalog:v1`,
    );
    const doc = own({
      version: '1.0',
      operators: [{ catalog: catalog.ref, packages: [{ name: 'op' }] }],
    });
    const text = await create(doc, ['--key', keys.key, '-o', 'o.bundle']);
    t.equal(text.code, 0, text.stderr);
    t.match(
      text.stderr,
      new RegExp(
        `^warning: WholeCatalog: ${catalog.ref.replace(/[.]/g, '\\.')}: op\\.v1\\.0\\.0 selected, the catalog not trimmed to them \\(the catalog image is carried whole: [0-9.]+ [KMG]?B\\)$`,
        'm',
      ),
      'a warning line, even with --quiet',
    );
    const json = await create(doc, ['--key', keys.key, '-o', 'o.bundle', '--json']);
    t.equal(json.code, 0, json.stderr);
    t.match(
      JSON.parse(json.stdout).warnings,
      [{ kind: 'WholeCatalog', object: catalog.ref, message: /carried whole/ }],
      '--json: in its warnings',
    );
    t.notMatch(json.stderr, /WholeCatalog/, '--json: not on stderr too');
    const plan = await create(doc, ['--dry-run', '--json']);
    t.match(
      JSON.parse(plan.stdout).warnings,
      [{ kind: 'WholeCatalog', object: catalog.ref }],
      '--dry-run --json: in its warnings',
    );
    t.same((await listDir(plan.dir)).sort(), ['bundle.yaml'], 'a dry run writes nothing');
  },
);

// Helm charts stored as OCI artifacts (#23 item 3): generated here as helm push stores them (helm
// is not installed: a NAME-VERSION.tgz with Chart.yaml, Helm's config and chart media types),
// pushed to a real docker-registry on 127.0.0.1. `bundle create` carries each like an image
// (manifest, config, chart layer, provenance) into bundle.json's charts, apart from images;
// `bundle inspect` lists them apart; the extracted layout serves them to skopeo; the frozen
// 0.1.0 reader reads such a bundle and counts no chart among its images.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import { skopeoInspectRaw, startRegistry } from '../helpers/registry.mjs';
import { pushChart, pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { ROOT, bundle, bundleJson, errorCode, keygen, listDir, refNames, run } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-charts-');
const keys = await keygen(work);
const H = reg.host;

const app = await pushImage(
  { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }] },
  `${H}/team/app:v1`,
);
const demo = await pushChart(
  { name: 'demo', version: '0.1.0', provenance: 'signed by nobody\n' },
  `${H}/charts/demo:0.1.0`,
);
const other = await pushChart({ name: 'other', version: '2.0.0' }, `${H}/charts/other:2.0.0`);
const notChart = await pushChart(
  { name: 'odd', version: '1.0.0', configMediaType: 'application/vnd.oci.image.config.v1+json' },
  `${H}/charts/odd:1.0.0`,
);
const extra = await pushChart(
  { name: 'extra', version: '1.0.0', extraLayer: 'application/vnd.oci.image.layer.v1.tar+gzip' },
  `${H}/charts/extra:1.0.0`,
);

let n = 0;
async function createFrom(doc: object, args: string[] = []) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  await writeFile(file, stringify(doc));
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--cache',
      path.join(work, 'cache'),
      '--key',
      keys.key,
      '-o',
      path.join(dir, 'o.bundle'),
      '-f',
      file,
      ...args,
    ],
    { cwd: dir },
  );
  return { ...r, dir, output: path.join(dir, 'o.bundle') };
}
const own = (fields: object) => ({
  apiVersion: 'offline-bundle/v1alpha1',
  kind: 'Bundle',
  version: '1.0',
  ...fields,
});

t.test(
  'charts: carried whole (manifest, config, chart layer, provenance), listed apart from images',
  async (t) => {
    const r = await createFrom(own({ images: [app.ref], charts: [`oci://${demo.ref}`] }), [
      '--chart',
      other.digestRef,
    ]);
    t.equal(r.code, 0, r.stderr);
    const m = await bundleJson(r.output);
    t.same(
      m.images.map((i) => i.digest),
      [app.digest],
      'images: the image only',
    );
    t.same(
      m.charts?.map((c) => [c.repository, c.tag, c.digest]).sort(),
      [
        [`${H}/charts/demo`, '0.1.0', demo.digest],
        [`${H}/charts/other`, null, other.digest],
      ].sort(),
      'charts: by tag (oci://) and by digest (--chart)',
    );
    t.same(
      m.charts?.map((c) => c.platforms),
      [[], []],
      'a chart has no platform',
    );
    const listed = new Set(m.blobs.map((b) => b.digest));
    for (const d of [...demo.blobs, ...other.blobs])
      t.ok(listed.has(d), `blob ${d.slice(0, 19)} carried`);
    t.ok(
      (await refNames(r.output)).includes(`${H}/charts/demo:0.1.0`),
      'index.json names the chart: the layout is whole',
    );

    const inspected = JSON.parse((await bundle(['inspect', r.output, '--json'])).stdout) as {
      images: { reference: string }[];
      charts: { reference: string; digest: string }[];
    };
    t.same(
      inspected.images.map((i) => i.reference),
      [app.ref],
      'inspect --json: images without the charts',
    );
    t.same(
      inspected.charts.map((c) => c.reference).sort(),
      [`${H}/charts/demo:0.1.0`, other.digestRef].sort(),
      'and the charts apart',
    );
    const text = (await bundle(['inspect', r.output])).stdout;
    t.match(
      text,
      /charts \(2; served by the node's registry, not pulled\):\n {2}\S+charts\/demo:0\.1\.0/,
      'inspect: a charts section',
    );

    // the extracted layout serves the chart as helm pulls it: manifest and every blob
    const dir = path.join(r.dir, 'layout');
    t.equal((await bundle(['extract', r.output, dir, '--key', keys.pub, '--quiet'])).code, 0);
    const raw = await skopeoInspectRaw(`oci:${dir}:${H}/charts/demo:0.1.0`);
    t.match(
      JSON.parse(raw.toString()),
      { config: { mediaType: 'application/vnd.cncf.helm.config.v1+json' } },
      'skopeo reads the chart from the layout',
    );
  },
);

t.test('--dry-run lists the charts with their sizes; nothing written', async (t) => {
  const r = await createFrom(own({ charts: [demo.ref] }), ['--dry-run', '--json']);
  t.equal(r.code, 0, r.stderr);
  const plan = JSON.parse(r.stdout) as {
    images: unknown[];
    charts: { reference: string; digest: string; bytes: number }[];
  };
  t.same(plan.images, [], 'no image');
  t.same(
    plan.charts.map((c) => [c.reference, c.digest]),
    [[demo.ref, demo.digest]],
  );
  t.ok(plan.charts[0]!.bytes > 0, 'with its bytes');
  t.same(await listDir(r.dir), ['bundle.yaml'], 'nothing written');
});

t.test('what is not a chart is refused, naming where it was given; nothing written', async (t) => {
  const cases: [string, object, string[], string, RegExp][] = [
    [
      'an image under charts',
      own({ charts: [app.ref] }),
      [],
      'UNSUPPORTED_MEDIA_TYPE',
      /bundle\.yaml:\d+ \(charts\[0\]\): \S+team\/app:v1 is not a Helm chart \(its config is application\/vnd\.oci\.image\.config\.v1\+json/,
    ],
    [
      'an artifact of another config',
      own({ charts: [notChart.ref] }),
      [],
      'UNSUPPORTED_MEDIA_TYPE',
      /is not a Helm chart/,
    ],
    [
      'a chart with an image layer',
      own({ charts: [extra.ref] }),
      [],
      'UNSUPPORTED_MEDIA_TYPE',
      /a Helm chart's layers are its application\/vnd\.cncf\.helm\.chart\.content\.v1\.tar\+gzip and an optional provenance file, not application\/vnd\.oci\.image\.layer/,
    ],
    [
      'an HTTP chart repository',
      own({ images: [app.ref] }),
      ['--chart', 'https://charts.example.com/demo-0.1.0.tgz'],
      'INVALID_CONFIG',
      /--chart #1: chart "https:[^"]+" is not an OCI reference/,
    ],
    [
      'a missing chart',
      own({ charts: [`oci://${H}/charts/nope:1.0.0`] }),
      [],
      'NOT_FOUND',
      /bundle\.yaml:\d+ \(charts\[0\]\): manifest 1\.0\.0 not found/,
    ],
  ];
  for (const [what, doc, args, code, want] of cases) {
    const r = await createFrom(doc, args);
    t.equal(errorCode(r.stderr), code, what);
    t.match(r.stderr, want, `${what}: names the cause and where`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, `${what}: one line`);
    t.same(await listDir(r.dir), ['bundle.yaml'], `${what}: nothing written`);
  }
});

t.test("an ImageSetConfiguration's helm repositories at oci:// URLs are charts", async (t) => {
  const r = await createFrom(
    {
      apiVersion: 'mirror.openshift.io/v2alpha1',
      kind: 'ImageSetConfiguration',
      mirror: {
        additionalImages: [{ name: app.ref }],
        helm: {
          repositories: [
            {
              name: 'local',
              url: `oci://${H}/charts`,
              charts: [
                { name: 'demo', version: '0.1.0' },
                { name: 'other', version: '2.0.0' },
              ],
            },
          ],
        },
      },
    },
    ['--version', '1.0'],
  );
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(m.charts?.map((c) => c.digest).sort(), [demo.digest, other.digest].sort());
});

t.test(
  'the 0.1.0 reader (frozen) reads a format 2 bundle with charts, and counts only the images',
  async (t) => {
    const r = await createFrom(own({ images: [app.ref], charts: [demo.ref] }), [
      '--format-version',
      '2',
    ]);
    t.equal(r.code, 0, r.stderr);
    const frozen = await run(process.execPath, [
      path.join(ROOT, 'test', 'fixtures', 'frozen-reader', 'reader-0b1c790.mjs'),
      'verify',
      r.output,
      keys.pub,
    ]);
    const out = JSON.parse(frozen.stdout) as { ok: boolean; schemaVersion: number; images: number };
    t.match(
      out,
      { ok: true, schemaVersion: 2, images: 1 },
      `the old reader verifies it; its images are the image only (a chart never reaches its runtime) ${frozen.stderr}`,
    );
  },
);

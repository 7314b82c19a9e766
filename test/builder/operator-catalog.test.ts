// Operators from a catalog (#23 item 2, the first part): a file-based catalog generated here (two
// packages, three channels; one package as opm's stream of JSON objects, one as YAML documents)
// in a catalog image pushed to a real docker-registry on 127.0.0.1. `bundle create -f` selects
// bundles by package, channel and version range (default: the default channel's head) and
// carries each selected bundle image, its relatedImages and the catalog image.
import t from 'tap';
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode, keygen, listDir } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-catalog-');
const keys = await keygen(work);
const H = reg.host;

const image = (repo: string, tag: string) =>
  pushImage(
    {
      tag,
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [{ [`${repo}/${tag}`]: `${repo} ${tag}` }] },
      ],
    },
    `${H}/operators/${repo}:${tag}`,
  );
const versions = { alpha: ['1.0.0', '1.1.0', '1.2.0', '1.3.0'], beta: ['2.0.0', '2.1.0'] };
const bundles: Record<string, { bundle: string; related: string[] }> = {};
for (const [pkg, vs] of Object.entries(versions)) {
  for (const v of vs) {
    const b = await image(`${pkg}-bundle`, `v${v}`);
    const ctl = await image(`${pkg}-controller`, `v${v}`);
    bundles[`${pkg}.v${v}`] = { bundle: b.digestRef, related: [ctl.digestRef, b.digestRef] };
  }
}
const bundleObj = (pkg: string, v: string) => ({
  schema: 'olm.bundle',
  name: `${pkg}.v${v}`,
  package: `${pkg}-operator`,
  image: bundles[`${pkg}.v${v}`]!.bundle,
  properties: [{ type: 'olm.package', value: { packageName: `${pkg}-operator`, version: v } }],
  relatedImages: bundles[`${pkg}.v${v}`]!.related.map((image, i) => ({
    name: i ? 'bundle' : 'controller',
    image,
  })),
});
const alpha = [
  { schema: 'olm.package', name: 'alpha-operator', defaultChannel: 'stable' },
  {
    schema: 'olm.channel',
    package: 'alpha-operator',
    name: 'stable',
    entries: [
      { name: 'alpha.v1.0.0' },
      { name: 'alpha.v1.1.0', replaces: 'alpha.v1.0.0' },
      { name: 'alpha.v1.2.0', replaces: 'alpha.v1.1.0' },
    ],
  },
  {
    schema: 'olm.channel',
    package: 'alpha-operator',
    name: 'fast',
    entries: [{ name: 'alpha.v1.2.0' }, { name: 'alpha.v1.3.0', replaces: 'alpha.v1.2.0' }],
  },
  ...versions.alpha.map((v) => bundleObj('alpha', v)),
];
const beta = [
  { schema: 'olm.package', name: 'beta-operator', defaultChannel: 'v2' },
  {
    schema: 'olm.channel',
    package: 'beta-operator',
    name: 'v2',
    entries: [{ name: 'beta.v2.0.0' }, { name: 'beta.v2.1.0', skips: ['beta.v2.0.0'] }],
  },
  ...versions.beta.map((v) => bundleObj('beta', v)),
];
const catalog = await pushImage(
  {
    tag: 'v4.14',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        config: { Labels: { 'operators.operatorframework.io.index.configs.v1': '/configs' } },
        layers: [
          { 'bin/opm': 'opm stand-in' },
          {
            // opm's JSON: objects one after another, pretty-printed, not an array
            'configs/alpha-operator/catalog.json': alpha
              .map((o) => JSON.stringify(o, null, 2))
              .join('\n'),
            // not in a directory of its own name: found when the package's own directory has nothing
            'configs/others/beta.yaml': beta.map((o) => stringify(o)).join('---\n'),
          },
        ],
      },
    ],
  },
  `${H}/redhat/operator-index:v4.14`,
);

let n = 0;
async function createFrom(doc: object, args: string[] = []) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  await writeFile(file, stringify(doc));
  const r = await bundle([
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
  ]);
  return { ...r, dir, output: path.join(dir, 'o.bundle') };
}
const own = (operators: object[]) => ({
  apiVersion: 'offline-bundle/v1alpha1',
  kind: 'Bundle',
  version: '1.0',
  operators,
});
async function inspected(file: string): Promise<string[]> {
  const r = await bundle(['inspect', file, '--json']);
  return (JSON.parse(r.stdout) as { images: { reference: string }[] }).images
    .map((i) => i.reference)
    .sort();
}
const imagesOf = (...names: string[]) =>
  [
    ...new Set([
      catalog.ref,
      ...names.flatMap((b) => [bundles[b]!.bundle, ...bundles[b]!.related]),
    ]),
  ].sort();

t.test("a version range in a channel, and a package's default channel head", async (t) => {
  const r = await createFrom(
    own([
      {
        catalog: catalog.ref,
        packages: [
          {
            name: 'alpha-operator',
            channels: [{ name: 'stable', minVersion: '1.1.0', maxVersion: '1.2.0' }],
          },
          { name: 'beta-operator' },
        ],
      },
    ]),
  );
  t.equal(r.code, 0, r.stderr);
  t.same(
    await inspected(r.output),
    imagesOf('alpha.v1.1.0', 'alpha.v1.2.0', 'beta.v2.1.0'),
    'inspect lists exactly the catalog, the selected bundles and their related images',
  );
  const m = await bundleJson(r.output);
  const cat = m.images.find((i) => `${i.repository}:${i.tag}` === catalog.ref)!;
  t.equal(cat.digest, catalog.digest, 'the catalog image by its digest');
  t.equal(cat.component, 'operator-catalog', 'marked as the catalog');
  const cs = await bundle(['catalog-sources', r.output]);
  t.equal(cs.code, 0, cs.stderr);
  t.same(
    parseAllDocuments(cs.stdout).map((d) => d.toJS()),
    [
      {
        apiVersion: 'operators.coreos.com/v1alpha1',
        kind: 'CatalogSource',
        metadata: {
          name: `operator-index-v4-14-${createHash('sha256').update(catalog.ref).digest('hex').slice(0, 8)}`,
          namespace: 'openshift-marketplace',
        },
        spec: {
          sourceType: 'grpc',
          image: catalog.digestRef,
          displayName: `${catalog.ref} (offline bundle)`,
        },
      },
    ],
    'a CatalogSource pointing at the catalog by digest, named by its name, tag and a hash of its reference',
  );
});

t.test("a channel's head, two channels of one package", async (t) => {
  const r = await createFrom(
    own([
      {
        catalog: catalog.ref,
        packages: [{ name: 'alpha-operator', channels: [{ name: 'stable' }, { name: 'fast' }] }],
      },
    ]),
  );
  t.equal(r.code, 0, r.stderr);
  t.same(await inspected(r.output), imagesOf('alpha.v1.2.0', 'alpha.v1.3.0'));
});

t.test("an ImageSetConfiguration's operators, read as is", async (t) => {
  const r = await createFrom(
    {
      kind: 'ImageSetConfiguration',
      apiVersion: 'mirror.openshift.io/v2alpha1',
      mirror: {
        operators: [
          {
            catalog: catalog.ref,
            packages: [
              { name: 'alpha-operator', channels: [{ name: 'fast', minVersion: '1.3.0' }] },
            ],
          },
        ],
      },
    },
    ['--version', '1.0'],
  );
  t.equal(r.code, 0, r.stderr);
  t.same(await inspected(r.output), imagesOf('alpha.v1.3.0'));
  const full = await createFrom(
    {
      kind: 'ImageSetConfiguration',
      apiVersion: 'mirror.openshift.io/v2alpha1',
      mirror: {
        operators: [{ catalog: catalog.ref, full: true, packages: [{ name: 'alpha-operator' }] }],
      },
    },
    ['--version', '1.0'],
  );
  t.equal(errorCode(full.stderr), 'INVALID_CONFIG');
  t.match(full.stderr, /\(mirror\.operators\[0\]\.full\): a whole catalog is not carried/);
});

t.test('a package or channel the catalog does not have is named, nothing written', async (t) => {
  const pkg = await createFrom(
    own([{ catalog: catalog.ref, packages: [{ name: 'gamma-operator' }] }]),
  );
  t.equal(errorCode(pkg.stderr), 'NOT_FOUND');
  t.match(
    pkg.stderr,
    /bundle\.yaml:\d+ \(operators\[0\]\): the catalog has no package gamma-operator \(it has: alpha-operator, beta-operator\)/,
  );
  const ch = await createFrom(
    own([
      {
        catalog: catalog.ref,
        packages: [{ name: 'alpha-operator', channels: [{ name: 'candidate' }] }],
      },
    ]),
  );
  t.equal(errorCode(ch.stderr), 'NOT_FOUND');
  t.match(ch.stderr, /package alpha-operator has no channel candidate \(it has: fast, stable\)/);
  const range = await createFrom(
    own([
      {
        catalog: catalog.ref,
        packages: [{ name: 'beta-operator', channels: [{ name: 'v2', minVersion: '3.0.0' }] }],
      },
    ]),
  );
  t.match(range.stderr, /no bundle of beta-operator in channel v2 is in >=3\.0\.0/);
  const notCatalog = await createFrom(
    own([{ catalog: bundles['beta.v2.0.0']!.bundle, packages: [{ name: 'beta-operator' }] }]),
  );
  t.equal(errorCode(notCatalog.stderr), 'INVALID_CONFIG');
  t.match(notCatalog.stderr, /holds no file-based catalog under \/configs/);
  const none = await bundle([
    'catalog-sources',
    (
      await createFrom({
        apiVersion: 'offline-bundle/v1alpha1',
        kind: 'Bundle',
        version: '1.0',
        images: [catalog.ref],
      })
    ).output,
  ]);
  t.equal(
    errorCode(none.stderr),
    'NOT_FOUND',
    'catalog-sources of a bundle without catalogs (the image alone is no catalog)',
  );
  for (const r of [pkg, ch, range, notCatalog])
    t.same(
      (await listDir(r.dir)).filter((f) => f.includes('bundle') && f !== 'bundle.yaml'),
      [],
      'no bundle',
    );
});

t.test('a catalog file over 16 MiB is refused, nothing written', async (t) => {
  const huge = await pushImage(
    {
      tag: 'huge',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            {
              'configs/alpha-operator/catalog.json': `${JSON.stringify(alpha[0])}\n${' '.repeat(16 * 1024 * 1024)}`,
            },
          ],
        },
      ],
    },
    `${H}/redhat/operator-index:huge`,
  );
  const r = await createFrom(own([{ catalog: huge.ref, packages: [{ name: 'alpha-operator' }] }]));
  t.equal(errorCode(r.stderr), 'FILE_TOO_LARGE');
  t.match(r.stderr, /"configs\/alpha-operator\/catalog\.json" is larger than 16 MiB/);
  t.same(await listDir(r.dir), ['bundle.yaml']);
});

t.test(
  'two catalogs of the same name and tag in other repositories: diff pairs them by reference, catalog-sources names them apart',
  async (t) => {
    const other = await pushImage(
      {
        tag: 'v4.14',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            config: { Labels: { 'operators.operatorframework.io.index.configs.v1': '/configs' } },
            layers: [
              {
                'configs/alpha-operator/catalog.json': alpha
                  .map((o) => JSON.stringify(o))
                  .join('\n'),
                'configs/other/x': 'another catalog',
              },
            ],
          },
        ],
      },
      `${H}/certified/operator-index:v4.14`,
    );
    const sel = (ref: string) => ({ catalog: ref, packages: [{ name: 'alpha-operator' }] });
    const both = await createFrom(own([sel(catalog.ref), sel(other.ref)]));
    const one = await createFrom(own([sel(catalog.ref)]));
    t.equal(both.code + one.code, 0, both.stderr + one.stderr);
    const d = JSON.parse((await bundle(['diff', both.output, one.output, '--json'])).stdout);
    t.same(
      d.images.removed.map((i: { reference: string }) => i.reference),
      [other.ref],
      'the second catalog removed',
    );
    t.same([d.images.added.length, d.images.changed.length], [0, 0], 'nothing added or changed');
    const same = JSON.parse((await bundle(['diff', both.output, both.output, '--json'])).stdout);
    t.equal(
      same.images.unchanged,
      (await bundleJson(both.output)).images.length,
      'diff A A: every image unchanged',
    );
    const names = parseAllDocuments((await bundle(['catalog-sources', both.output])).stdout).map(
      (x) => (x.toJS() as { metadata: { name: string } }).metadata.name,
    );
    t.equal(new Set(names).size, 2, `two names: ${names.join(', ')}`);
    for (const name of names)
      t.match(name, /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'a DNS-1123 label');
    const again = parseAllDocuments((await bundle(['catalog-sources', one.output])).stdout).map(
      (x) => (x.toJS() as { metadata: { name: string } }).metadata.name,
    );
    t.ok(names.includes(again[0]!), 'a catalog has the same name in every bundle carrying it');
  },
);

t.test(
  'a broken catalog is named with where it came from: a related image that is no reference, a YAML error, a channel without head; escapes not printed',
  async (t) => {
    const evil = 'evil\u001b]0;owned\u0007.v1.0.0';
    const broken = [
      { schema: 'olm.package', name: 'bad-operator', defaultChannel: 'stable' },
      { schema: 'olm.channel', package: 'bad-operator', name: 'stable', entries: [{ name: evil }] },
      {
        schema: 'olm.channel',
        package: 'bad-operator',
        name: 'loop',
        entries: [
          { name: 'a.v1', replaces: 'b.v1' },
          { name: 'b.v1', replaces: 'a.v1' },
        ],
      },
      {
        ...bundleObj('alpha', '1.0.0'),
        name: evil,
        package: 'bad-operator',
        relatedImages: [{ name: 'x', image: 'not a ref!!' }],
      },
    ];
    const many = Array.from({ length: 30 }, (_, i) => ({
      schema: 'olm.package',
      name: `pkg-${String(i).padStart(2, '0')}`,
      defaultChannel: 'stable',
    }));
    const bad = await pushImage(
      {
        tag: 'broken',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [
              {
                'configs/bad-operator/catalog.json': broken
                  .map((o) => JSON.stringify(o))
                  .join('\n'),
                'configs/yaml-operator/catalog.yaml':
                  'schema: olm.package\nname: yaml-operator\n  bad: indentation\n',
              },
            ],
          },
        ],
      },
      `${H}/redhat/operator-index:broken`,
    );
    const related = await bundle([
      'create',
      '--tls-verify=false',
      '--cache',
      path.join(work, 'cache'),
      '--key',
      keys.key,
      '-o',
      path.join(work, 'never.bundle'),
      '-f',
      await (async () => {
        const f = path.join(work, 'broken.yaml');
        await writeFile(
          f,
          stringify(own([{ catalog: bad.ref, packages: [{ name: 'bad-operator' }] }])),
        );
        return f;
      })(),
    ]);
    t.equal(errorCode(related.stderr), 'INVALID_CONFIG');
    t.match(
      related.stderr,
      /broken\.yaml:\d+ \(operators\[0\]\): catalog [^ ]+operator-index:broken: package bad-operator, bundle evil.*: a related image of evil.* "not a ref!!" is not an image reference/,
    );
    t.notOk(
      related.stderr.includes('\u001b'),
      'no terminal escape from the catalog reaches stderr (log and error)',
    );
    const yaml = await createFrom(
      own([{ catalog: bad.ref, packages: [{ name: 'yaml-operator' }] }]),
    );
    t.match(
      yaml.stderr,
      /bundle\.yaml:\d+ \(operators\[0\]\): catalog [^ ]+operator-index:broken: "configs\/yaml-operator\/catalog\.yaml" is not valid YAML/,
    );
    const loop = await createFrom(
      own([
        { catalog: bad.ref, packages: [{ name: 'bad-operator', channels: [{ name: 'loop' }] }] },
      ]),
    );
    t.match(
      loop.stderr,
      /channel loop of bad-operator has no head: each of its entries is replaced or skipped by another/,
    );
    t.notMatch(loop.stderr, /undefined/);
    const manyCat = await pushImage(
      {
        tag: 'many',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [{ 'configs/many.json': many.map((o) => JSON.stringify(o)).join('\n') }],
          },
        ],
      },
      `${H}/redhat/operator-index:many`,
    );
    const missing = await createFrom(own([{ catalog: manyCat.ref, packages: [{ name: 'zzz' }] }]));
    t.match(
      missing.stderr,
      /has no package zzz \(it has: pkg-00, pkg-01, [^)]*pkg-09 and 20 more\)/,
      'the list capped at 10',
    );
  },
);

t.test(
  "a catalog on disk (oc-mirror's oci://) or a bad catalog name is refused before anything is fetched",
  async (t) => {
    const own1 = await createFrom(
      own([{ catalog: 'oci:///srv/catalogs/redhat', packages: [{ name: 'alpha-operator' }] }]),
    );
    t.equal(errorCode(own1.stderr), 'INVALID_CONFIG');
    t.match(
      own1.stderr,
      /bundle\.yaml:\d+ \(operators\[0\]\): catalog "oci:\/\/\/srv\/catalogs\/redhat" is not in a registry; .*skopeo copy oci:DIR:TAG docker:\/\/HOST\/REPO:TAG/,
    );
    const isc = await createFrom(
      {
        kind: 'ImageSetConfiguration',
        apiVersion: 'mirror.openshift.io/v2alpha1',
        mirror: {
          operators: [
            { catalog: 'oci:///srv/catalogs/redhat', packages: [{ name: 'alpha-operator' }] },
          ],
        },
      },
      ['--version', '1.0'],
    );
    t.match(
      isc.stderr,
      /\(mirror\.operators\[0\]\): catalog "oci:\/\/\/srv\/catalogs\/redhat" is not in a registry/,
    );
    const name = await createFrom(
      own([{ catalog: 'Not A Name', packages: [{ name: 'alpha-operator' }] }]),
    );
    t.match(name.stderr, /\(operators\[0\]\): catalog: invalid image reference "Not A Name"/);
  },
);

// tier: unit
// readReleasePayload: release-manifests/image-references and release-metadata
// read from an OpenShift release image's layers.
import t from 'tap';
import { Readable } from 'node:stream';
import { gunzipSync, gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import { compress as zstdCompress } from 'zstd-napi';
import {
  IMAGE_REFERENCES_PATH,
  readReleasePayload,
  RELEASE_METADATA_PATH,
} from '@offline-bundle/openshift-release';
import { buildLayer, releaseFiles } from '../helpers/images.mjs';

const ociErr = (code: string) => ({ name: 'OciError', code });
const dg = (c: string) => 'sha256:' + c.repeat(64);

/** A plain tar with exactly these entry names (no normalization), regular files. */
async function rawTar(entries: Record<string, string>): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(Buffer.from(c as Uint8Array));
  })();
  for (const [name, content] of Object.entries(entries)) {
    await new Promise<void>((resolve, reject) =>
      pack.entry({ name, mode: 0o644, mtime: new Date(0) }, content, (err) =>
        err ? reject(err) : resolve(),
      ),
    );
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Layer openers over in-memory bytes, optionally delivered in chunks of `chunk` bytes. */
function layers(bufs: Buffer[], chunk?: number): (() => Promise<Readable>)[] {
  return bufs.map((buf) => async () => {
    if (!chunk) return Readable.from([buf]);
    const parts: Buffer[] = [];
    for (let i = 0; i < buf.length; i += chunk) parts.push(buf.subarray(i, i + chunk));
    return Readable.from(parts);
  });
}

const images415 = {
  'cluster-version-operator': `quay.io/openshift-release-dev/ocp-v4.0-art-dev@${dg('a')}`,
  etcd: `quay.io/openshift-release-dev/ocp-v4.0-art-dev@${dg('b')}`,
  'machine-os-content': `registry.example.com:5000/rhcos/content:417.94@${dg('c')}`,
};
const release415 = () =>
  releaseFiles({ version: '4.15.3', previous: ['4.15.2', '4.14.9', '4.15.0'], images: images415 });

const expected415 = {
  version: '4.15.3',
  previous: ['4.14.9', '4.15.0', '4.15.2'],
  images: [
    {
      name: 'cluster-version-operator',
      reference: {
        registry: 'quay.io',
        repository: 'openshift-release-dev/ocp-v4.0-art-dev',
        digest: dg('a'),
      },
    },
    {
      name: 'etcd',
      reference: {
        registry: 'quay.io',
        repository: 'openshift-release-dev/ocp-v4.0-art-dev',
        digest: dg('b'),
      },
    },
    {
      name: 'machine-os-content',
      reference: {
        registry: 'registry.example.com:5000',
        repository: 'rhcos/content',
        tag: '417.94',
        digest: dg('c'),
      },
    },
  ],
  pullAlways: [],
};

t.test('paths are the ones the cluster-version-operator uses', async (t) => {
  t.equal(IMAGE_REFERENCES_PATH, 'release-manifests/image-references');
  t.equal(RELEASE_METADATA_PATH, 'release-manifests/release-metadata');
});

t.test('gzip layer: version, sorted previous versions and digest-pinned images', async (t) => {
  const base = await buildLayer({ 'usr/bin/cluster-version-operator': 'ELF' });
  const rel = await buildLayer({
    ...release415(),
    'release-manifests/0000_50_x.yaml': 'kind: ConfigMap\n',
  });
  t.strictSame(await readReleasePayload(layers([base.gz, rel.gz])), expected415);
});

t.test('uncompressed tar layer', async (t) => {
  const rel = await buildLayer(release415());
  t.strictSame(await readReleasePayload(layers([gunzipSync(rel.gz)])), expected415);
});

t.test('zstd layer', async (t) => {
  const rel = await buildLayer(release415());
  t.strictSame(await readReleasePayload(layers([zstdCompress(gunzipSync(rel.gz))])), expected415);
});

t.test('mixed compression across layers', async (t) => {
  const a = await buildLayer({ 'etc/a': 'x' });
  const rel = await buildLayer(release415());
  t.strictSame(
    await readReleasePayload(layers([gunzipSync(a.gz), zstdCompress(gunzipSync(a.gz)), rel.gz])),
    expected415,
  );
});

t.test('later layers override earlier ones, file by file', async (t) => {
  const old = await buildLayer(
    releaseFiles({
      version: '4.15.2',
      previous: ['4.15.1'],
      images: { etcd: `quay.io/o/r@${dg('1')}` },
    }),
  );
  const both = await buildLayer(release415());
  t.strictSame(
    await readReleasePayload(layers([old.gz, both.gz])),
    expected415,
    'both files replaced',
  );
  const back = await readReleasePayload(layers([both.gz, old.gz]));
  t.equal(back.version, '4.15.2', 'order matters: the last layer wins');

  // Only image-references in the upper layer: metadata still from the lower one.
  const refsOnly = releaseFiles({ version: '9.9.9', images: { etcd: `quay.io/o/r@${dg('2')}` } });
  const upper = await buildLayer({ [IMAGE_REFERENCES_PATH]: refsOnly[IMAGE_REFERENCES_PATH]! });
  const mixed = await readReleasePayload(layers([both.gz, upper.gz]));
  t.equal(mixed.version, '4.15.3', 'release-metadata from the lower layer');
  t.strictSame(mixed.previous, ['4.14.9', '4.15.0', '4.15.2']);
  t.strictSame(
    mixed.images,
    [{ name: 'etcd', reference: { registry: 'quay.io', repository: 'o/r', digest: dg('2') } }],
    'images from the upper layer',
  );
});

t.test('"./"- and "/"-prefixed entry names', async (t) => {
  const files = release415();
  const dotted = await rawTar({
    './release-manifests/': '',
    [`./${IMAGE_REFERENCES_PATH}`]: files[IMAGE_REFERENCES_PATH] as string,
    [`./${RELEASE_METADATA_PATH}`]: files[RELEASE_METADATA_PATH] as string,
  });
  t.strictSame(await readReleasePayload(layers([dotted])), expected415, './ prefix');
  t.strictSame(
    await readReleasePayload(layers([gzipSync(dotted)])),
    expected415,
    './ prefix, gzip',
  );
  const absolute = await rawTar({
    [`/${IMAGE_REFERENCES_PATH}`]: files[IMAGE_REFERENCES_PATH] as string,
    [`/${RELEASE_METADATA_PATH}`]: files[RELEASE_METADATA_PATH] as string,
  });
  t.strictSame(await readReleasePayload(layers([absolute])), expected415, '/ prefix');
  const elsewhere = await rawTar({
    [`usr/share/${IMAGE_REFERENCES_PATH}`]: files[IMAGE_REFERENCES_PATH] as string,
  });
  await t.rejects(
    readReleasePayload(layers([elsewhere])),
    ociErr('INVALID_RELEASE'),
    'the path must be exact, not a suffix',
  );
});

t.test('version falls back to the ImageStream name without release-metadata', async (t) => {
  const files = release415();
  const rel = await buildLayer({ [IMAGE_REFERENCES_PATH]: files[IMAGE_REFERENCES_PATH]! });
  const p = await readReleasePayload(layers([rel.gz]));
  t.equal(p.version, '4.15.3');
  t.strictSame(p.previous, []);
  t.equal(p.images.length, 3);
});

t.test('release-metadata version wins over the ImageStream name', async (t) => {
  const files = release415();
  const meta = JSON.stringify({
    kind: 'cincinnati-metadata-v0',
    version: '4.15.3-custom',
    previous: [],
  });
  const rel = await buildLayer({
    [IMAGE_REFERENCES_PATH]: files[IMAGE_REFERENCES_PATH]!,
    [RELEASE_METADATA_PATH]: meta,
  });
  t.equal((await readReleasePayload(layers([rel.gz]))).version, '4.15.3-custom');
});

t.test('missing image-references is INVALID_RELEASE', async (t) => {
  const files = release415();
  const metaOnly = await buildLayer({
    [RELEASE_METADATA_PATH]: files[RELEASE_METADATA_PATH]!,
    'etc/x': 'y',
  });
  await t.rejects(readReleasePayload(layers([metaOnly.gz])), ociErr('INVALID_RELEASE'));
  await t.rejects(readReleasePayload([]), ociErr('INVALID_RELEASE'), 'no layers at all');
  const plain = await buildLayer({ 'bin/sh': 'ELF' });
  await t.rejects(
    readReleasePayload(layers([plain.gz])),
    ociErr('INVALID_RELEASE'),
    'an ordinary image',
  );
});

t.test('a payload image referenced by tag only is INVALID_RELEASE', async (t) => {
  const rel = await buildLayer(
    releaseFiles({
      version: '4.15.3',
      images: { etcd: `quay.io/o/r@${dg('1')}`, console: 'quay.io/openshift/console:4.15' },
    }),
  );
  await t.rejects(
    readReleasePayload(layers([rel.gz])),
    { ...ociErr('INVALID_RELEASE'), message: /console/ },
    'message names the tag',
  );
});

t.test('malformed release manifests are INVALID_RELEASE', async (t) => {
  const cases: [string, Record<string, string>][] = [
    ['image-references is not JSON', { [IMAGE_REFERENCES_PATH]: '{ not json' }],
    [
      'release-metadata is not JSON',
      { ...release415(), [RELEASE_METADATA_PATH]: '{' } as Record<string, string>,
    ],
    [
      'image-references is not an ImageStream',
      { [IMAGE_REFERENCES_PATH]: JSON.stringify({ kind: 'ConfigMap', metadata: { name: '4.1' } }) },
    ],
    [
      'no version anywhere',
      { [IMAGE_REFERENCES_PATH]: JSON.stringify({ kind: 'ImageStream', spec: { tags: [] } }) },
    ],
    [
      'tag from ImageStreamTag',
      {
        [IMAGE_REFERENCES_PATH]: JSON.stringify({
          kind: 'ImageStream',
          metadata: { name: '4.1' },
          spec: {
            tags: [{ name: 'x', from: { kind: 'ImageStreamTag', name: `quay.io/a/b@${dg('3')}` } }],
          },
        }),
      },
    ],
    [
      'tag without a name',
      {
        [IMAGE_REFERENCES_PATH]: JSON.stringify({
          kind: 'ImageStream',
          metadata: { name: '4.1' },
          spec: { tags: [{ from: { kind: 'DockerImage', name: `quay.io/a/b@${dg('3')}` } }] },
        }),
      },
    ],
  ];
  for (const [why, files] of cases) {
    const layer = await buildLayer(files);
    await t.rejects(readReleasePayload(layers([layer.gz])), ociErr('INVALID_RELEASE'), why);
  }
});

t.test('an ImageStream with no tags is a release without payload images', async (t) => {
  const layer = await buildLayer({
    [IMAGE_REFERENCES_PATH]: JSON.stringify({ kind: 'ImageStream', metadata: { name: '4.1.0' } }),
  });
  t.strictSame(await readReleasePayload(layers([layer.gz])), {
    version: '4.1.0',
    previous: [],
    images: [],
    pullAlways: [],
  });
});

t.test('compression is detected whatever the stream chunking', async (t) => {
  const rel = await buildLayer(release415());
  const tarBytes = gunzipSync(rel.gz);
  t.strictSame(
    await readReleasePayload(layers([rel.gz], 512)),
    expected415,
    'gzip, 512-byte chunks',
  );
  t.strictSame(
    await readReleasePayload(layers([tarBytes], 512)),
    expected415,
    'tar, 512-byte chunks',
  );
  await t.resolveMatch(
    readReleasePayload(layers([rel.gz], 1)),
    { version: '4.15.3' },
    'gzip, 1-byte chunks',
  );
  await t.resolveMatch(
    readReleasePayload(layers([tarBytes], 3)),
    { version: '4.15.3' },
    'tar, 3-byte chunks',
  );
});

t.test(
  'release-manifests/*.yaml: workloads pulling a payload image with imagePullPolicy Always',
  async (t) => {
    const deploy = (kind: string, ns: string, name: string, image: string, policy: string) =>
      [
        `kind: ${kind}`,
        'apiVersion: apps/v1',
        `metadata: { namespace: ${ns}, name: ${name} }`,
        'spec:',
        '  template:',
        '    spec:',
        '      containers:',
        `        - { name: c, image: "${image}", imagePullPolicy: ${policy} }`,
      ].join('\n');
    const cron = [
      'kind: CronJob',
      'apiVersion: batch/v1',
      'metadata: { namespace: openshift-x, name: pruner }',
      'spec: { jobTemplate: { spec: { template: { spec: { initContainers: [ { name: i, image: "quay.io/openshift-release-dev/ocp-v4.0-art-dev@' +
        dg('b') +
        '", imagePullPolicy: Always } ] } } } } }',
    ].join('\n');
    const rel = await buildLayer({
      ...release415(),
      'release-manifests/0000_50_marketplace.yaml': [
        deploy(
          'Deployment',
          'openshift-marketplace',
          'catalog',
          images415['cluster-version-operator'],
          'Always',
        ),
        deploy('DaemonSet', 'openshift-y', 'fine', images415.etcd, 'IfNotPresent'),
      ].join('\n---\n'),
      'release-manifests/0000_60_other.yml': deploy(
        'Deployment',
        'openshift-z',
        'elsewhere',
        'docker.io/library/busybox:1',
        'Always',
      ),
      'release-manifests/0000_70_cron.yaml': cron,
      'release-manifests/nested/0000_80_x.yaml': deploy(
        'Deployment',
        'n',
        'nested',
        images415.etcd,
        'Always',
      ),
      'release-manifests/0000_90_broken.yaml': 'kind: [',
    });
    const p = await readReleasePayload(layers([rel.gz]));
    t.strictSame(
      p.pullAlways,
      [
        {
          object: 'openshift-marketplace/Deployment/catalog',
          image: images415['cluster-version-operator'],
          file: 'release-manifests/0000_50_marketplace.yaml',
        },
        {
          object: 'openshift-x/CronJob/pruner',
          image: images415.etcd,
          file: 'release-manifests/0000_70_cron.yaml',
        },
      ],
      'only payload images, only Always, only top-level manifests; broken YAML skipped',
    );
  },
);

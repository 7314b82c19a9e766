// tier: unit
// Pulls overlapped with staging: a blob is served only once the extraction verified it, and an
// image's gate opens only when its manifest, config and every layer are.
import t from 'tap';
import { createHash } from 'node:crypto';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { StagingStore } from '@offline-bundle/agent';
import { catalogOf } from '@offline-bundle/registry';
import type { BundleManifest } from '@offline-bundle/format';
import { tmpdir } from '../helpers/tmp.mjs';

const digestOf = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const settled = async (p: Promise<unknown>) =>
  Promise.race([
    p.then(
      () => 'resolved',
      () => 'rejected',
    ),
    new Promise((r) => setTimeout(() => r('pending'), 50)),
  ]);
const text = async (s: NodeJS.ReadableStream) => {
  let out = '';
  for await (const c of s) out += String(c);
  return out;
};

async function setUp(t: { teardown: (fn: () => unknown) => void }) {
  const root = await tmpdir(t);
  const partial = join(root, 'x.partial');
  const target = join(root, 'x');
  await mkdir(join(partial, 'blobs/sha256'), { recursive: true });
  const config = Buffer.from('{"architecture":"amd64","os":"linux"}');
  const layer = Buffer.from('layer bytes');
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: {
        mediaType: 'application/vnd.oci.image.config.v1+json',
        digest: digestOf(config),
        size: config.length,
      },
      layers: [
        {
          mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
          digest: digestOf(layer),
          size: layer.length,
        },
      ],
    }),
  );
  for (const b of [config, layer, manifest])
    await writeFile(join(partial, 'blobs/sha256', digestOf(b).slice(7)), b);
  const m = {
    images: [
      {
        repository: 'quay.io/ns/app',
        tag: 'v1',
        digest: digestOf(manifest),
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        platforms: [],
      },
    ],
    blobs: [config, layer, manifest].map((b, i) => ({
      digest: digestOf(b),
      size: b.length,
      mediaType: [
        'application/vnd.oci.image.config.v1+json',
        'application/vnd.oci.image.layer.v1.tar+gzip',
        'application/vnd.oci.image.manifest.v1+json',
      ][i]!,
    })),
  } as unknown as BundleManifest;
  const store = new StagingStore(partial, target, catalogOf(m), m);
  return {
    store,
    partial,
    target,
    d: { config: digestOf(config), layer: digestOf(layer), manifest: digestOf(manifest) },
  };
}

t.test(
  'the gate opens once manifest, config and layers are verified; unverified blobs are not served',
  async (t) => {
    const { store, partial, target, d } = await setUp(t);
    const gate = store.image('quay.io/ns/app:v1');
    await t.rejects(
      store.open(d.layer, 0, 11),
      { reason: 'StagingFailed' },
      'a blob on disk but not yet verified is refused',
    );
    store.verified(d.manifest);
    t.equal(await settled(gate), 'pending', 'manifest alone is not enough');
    store.verified(d.config);
    t.equal(await settled(gate), 'pending', 'the layer is still missing');
    store.verified(d.layer);
    t.equal(await settled(gate), 'resolved');
    t.equal(await text(await store.open(d.layer, 0, 11)), 'layer bytes');
    // the rename into place happens while serving: both places work
    await rename(partial, target);
    t.equal(await text(await store.open(d.layer, 6, 11)), 'bytes');
    store.staged();
    t.equal(await text(await store.open(d.layer, 0, 5)), 'layer');
    t.equal(
      await settled(store.image(`quay.io/ns/app@${d.manifest}`)),
      'resolved',
      'the digest name too',
    );
  },
);

t.test('a staging failure ends every wait with its error', async (t) => {
  const { store, d } = await setUp(t);
  const gate = store.image('quay.io/ns/app:v1');
  store.verified(d.manifest);
  const boom = new Error('truncated');
  store.fail(boom);
  await t.rejects(gate, boom);
  await t.rejects(store.image('quay.io/ns/app:v1'), boom, 'and any later one');
  await t.rejects(
    store.image('quay.io/ns/other:v1'),
    { reason: 'StagingFailed' },
    'a name the bundle does not have',
  );
});

t.test('a manifest it cannot read waits for the whole layout', async (t) => {
  const { store, partial, d } = await setUp(t);
  const junk = Buffer.from('not a manifest');
  await writeFile(join(partial, 'blobs/sha256', d.manifest.slice(7)), junk);
  const gate = store.image('quay.io/ns/app:v1');
  store.verified(d.manifest);
  store.verified(d.layer);
  t.equal(await settled(gate), 'pending');
  store.verified(d.config);
  t.equal(await settled(gate), 'resolved');
});

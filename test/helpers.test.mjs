// Exercises the test helpers for real: a private docker-registry, skopeo
// pushes of generated OCI images, and the OpenShift release payload files.
import t from 'tap';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry, skopeoInspectRaw, sha256 } from './helpers/registry.mjs';
import {
  buildLayer,
  pushImage,
  releaseFiles,
  writeImageLayout,
  MT_INDEX,
  MT_MANIFEST,
} from './helpers/images.mjs';
import { tmpdir } from './helpers/tmp.mjs';

/** @param {number} pid */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return /** @type {NodeJS.ErrnoException} */ (e).code !== 'ESRCH';
  }
}

t.test('buildLayer is deterministic and includes parent dirs', async (t) => {
  const a = await buildLayer({ 'usr/bin/tool': '#!/bin/sh\n', 'etc/motd': Buffer.from('hi') });
  const b = await buildLayer({ 'etc/motd': 'hi', '/usr/bin/tool': '#!/bin/sh\n' });
  t.equal(a.digest, b.digest, 'same files, different order/form -> same digest');
  t.equal(a.diffID, b.diffID);
  t.equal(a.size, a.gz.length);
  t.equal(a.digest, sha256(a.gz));
  t.equal(a.mediaType, 'application/vnd.oci.image.layer.v1.tar+gzip');
  const c = await buildLayer({ 'etc/motd': 'hi!' });
  t.not(c.digest, a.digest, 'different content -> different digest');
});

t.test('writeImageLayout replaces entries with the same tag', async (t) => {
  const dir = await tmpdir(t);
  const p = { os: 'linux', architecture: 'amd64', layers: [{ 'a.txt': 'one' }] };
  const first = await writeImageLayout(dir, { tag: 'v1', platforms: [p] });
  await writeImageLayout(dir, { tag: 'v2', platforms: [p], index: true });
  const again = await writeImageLayout(dir, {
    tag: 'v1',
    platforms: [{ ...p, layers: [{ 'a.txt': 'two' }] }],
  });
  t.not(again.digest, first.digest);
  const idx = JSON.parse(await readFile(path.join(dir, 'index.json'), 'utf8'));
  const tags = idx.manifests.map(
    (/** @type {any} */ m) => m.annotations['org.opencontainers.image.ref.name'],
  );
  t.same(tags.sort(), ['v1', 'v2']);
  const v1 = idx.manifests.find(
    (/** @type {any} */ m) => m.annotations['org.opencontainers.image.ref.name'] === 'v1',
  );
  t.equal(v1.digest, again.digest);
  t.equal(v1.mediaType, MT_MANIFEST);
  const blob = await readFile(path.join(dir, 'blobs', 'sha256', again.digest.slice(7)));
  t.equal(sha256(blob), again.digest, 'manifest blob is stored under its digest');
  const cfg = JSON.parse(
    await readFile(path.join(dir, 'blobs', 'sha256', again.manifests[0].config.slice(7)), 'utf8'),
  );
  t.equal(cfg.created, '1970-01-01T00:00:00Z');
  t.equal(cfg.rootfs.diff_ids.length, 1);
  t.ok((await stat(path.join(dir, 'oci-layout'))).isFile());
});

t.test('registry + skopeo round trip', async (t) => {
  const reg = await startRegistry();
  t.teardown(() => reg.stop());
  t.match(reg.host, /^127\.0\.0\.1:\d+$/);
  t.equal(reg.url, `http://${reg.host}`);
  t.ok(alive(reg.pid), 'registry process is running');
  const ping = await fetch(`${reg.url}/v2/`);
  t.equal(ping.status, 200, 'no auth by default');

  const single = await pushImage(
    {
      tag: 'v1',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [{ 'app/hello.txt': 'hello' }],
          config: { Cmd: ['/bin/true'] },
        },
      ],
    },
    `${reg.host}/test/single:v1`,
  );
  t.equal(single.mediaType, MT_MANIFEST);
  t.equal(single.ref, `${reg.host}/test/single:v1`);
  t.equal(single.digestRef, `${reg.host}/test/single@${single.digest}`);
  const singleRaw = await skopeoInspectRaw(`docker://${single.ref}`);
  t.equal(sha256(singleRaw), single.digest, 'registry serves the exact manifest bytes (by tag)');
  t.equal(sha256(await skopeoInspectRaw(single.digestRef)), single.digest, 'and by digest');

  const shared = { 'usr/share/common.txt': 'shared between platforms' };
  const multi = await pushImage(
    {
      tag: 'v2',
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [shared, { arch: 'amd64' }] },
        { os: 'linux', architecture: 'arm64', variant: 'v8', layers: [shared, { arch: 'arm64' }] },
      ],
    },
    `${reg.host}/test/multi:v2`,
  );
  t.equal(multi.mediaType, MT_INDEX);
  const idxRaw = await skopeoInspectRaw(`docker://${multi.ref}`);
  t.equal(sha256(idxRaw), multi.digest, 'registry serves the exact index bytes');
  const idx = JSON.parse(idxRaw.toString('utf8'));
  t.equal(idx.mediaType, MT_INDEX);
  t.same(
    idx.manifests.map((/** @type {any} */ m) => m.platform),
    [
      { architecture: 'amd64', os: 'linux' },
      { architecture: 'arm64', os: 'linux', variant: 'v8' },
    ],
  );
  t.equal(multi.manifests.length, 2);
  const [amd, arm] = multi.manifests;
  t.equal(amd.layers[0], arm.layers[0], 'shared layer has one digest in both platforms');
  t.not(amd.layers[1], arm.layers[1], 'arch-specific layers differ');
  for (const m of multi.manifests) {
    const raw = await skopeoInspectRaw(`docker://${reg.host}/test/multi@${m.digest}`);
    t.equal(sha256(raw), m.digest, `child manifest ${m.platform.architecture} is byte-identical`);
  }
  // Blob is really there and is what we generated.
  const blob = await fetch(`${reg.url}/v2/test/multi/blobs/${amd.layers[0]}`);
  t.equal(blob.status, 200);
  t.equal(sha256(Buffer.from(await blob.arrayBuffer())), amd.layers[0]);

  const pid = reg.pid;
  await reg.stop();
  t.notOk(alive(pid), 'registry process is gone after stop()');
  await t.rejects(stat(reg.dir), { code: 'ENOENT' }, 'temp dir removed');
});

t.test('registry with htpasswd auth over plain http', async (t) => {
  const reg = await startRegistry({ htpasswd: { user: 'alice', password: 'wonderland' } });
  t.teardown(() => reg.stop());
  t.equal((await fetch(`${reg.url}/v2/`)).status, 401, 'anonymous is rejected');
  const basic = 'Basic ' + Buffer.from('alice:wonderland').toString('base64');
  t.equal(
    (await fetch(`${reg.url}/v2/`, { headers: { authorization: basic } })).status,
    200,
    'basic auth accepted',
  );
  t.equal(reg.creds, 'alice:wonderland');
  const img = await pushImage(
    { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'x.txt': 'x' }] }] },
    `${reg.host}/auth/img:v1`,
    { creds: reg.creds },
  );
  t.equal(sha256(await skopeoInspectRaw(img.ref, ['--creds', reg.creds])), img.digest);
  await t.rejects(
    skopeoInspectRaw(img.ref),
    /unauthorized|authentication required/i,
    'anonymous skopeo is rejected',
  );
});

t.test('releaseFiles', async (t) => {
  const images = {
    'machine-config-operator':
      'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'a'.repeat(64),
    'cluster-version-operator':
      'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'b'.repeat(64),
  };
  const files = releaseFiles({ version: '4.14.1', previous: ['4.14.0'], images });
  t.same(Object.keys(files).sort(), [
    'release-manifests/image-references',
    'release-manifests/release-metadata',
  ]);
  const is = JSON.parse(String(files['release-manifests/image-references']));
  t.equal(is.kind, 'ImageStream');
  t.equal(is.apiVersion, 'image.openshift.io/v1');
  t.equal(is.metadata.name, '4.14.1');
  t.equal(is.metadata.creationTimestamp, null);
  t.same(is.spec.lookupPolicy, { local: false });
  t.same(
    Object.fromEntries(is.spec.tags.map((/** @type {any} */ x) => [x.name, x.from])),
    Object.fromEntries(
      Object.entries(images).map(([k, v]) => [k, { kind: 'DockerImage', name: v }]),
    ),
  );
  const md = JSON.parse(String(files['release-manifests/release-metadata']));
  t.same(md, {
    kind: 'cincinnati-metadata-v0',
    version: '4.14.1',
    previous: ['4.14.0'],
    metadata: {},
  });
  const layer = await buildLayer(files);
  t.match(layer.digest, /^sha256:[0-9a-f]{64}$/, 'usable as layer files');
});

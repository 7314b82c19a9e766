// Image sources other than a plain registry name: registries.conf mirrors (the bundle keeps
// the public names while every byte comes from the local mirror), and the local transports
// oci:DIR[:REF]=NAME, oci-archive:FILE[:REF]=NAME and docker-archive:FILE[:REPO:TAG]
// (a docker-save tar built by hand). Each bundle round-trips through skopeo.
import t, { type Test } from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { skopeoCopy, skopeoInspectRaw, sha256, startRegistry } from '../helpers/registry.mjs';
import { buildLayer, pushImage, releaseFiles, writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  bundle,
  bundleJson,
  errorCode,
  hex,
  keygen,
  layoutIndex,
  listDir,
  q,
  readJson,
  refNames,
  sh,
  type BundleJson,
} from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-sources-');
const keys = await keygen(work);
const H = reg.host;

let n = 0;
async function create(args: string[], tlsVerify = false) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const output = path.join(dir, 's.bundle');
  // archives are unpacked under TMPDIR: a private one shows whether anything is left behind
  const tmp = path.join(work, `tmp-${n}`);
  await mkdir(tmp);
  const r = await bundle(
    [
      'create',
      '--quiet',
      ...(tlsVerify ? [] : ['--tls-verify=false']),
      '--key',
      keys.key,
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      output,
      ...args,
    ],
    { env: { TMPDIR: tmp } },
  );
  return { ...r, output, dir, tmp };
}

/** extract + `skopeo copy --all --preserve-digests oci:LAYOUT:REF docker://REG/to/N` for every image; returns served digests. */
async function roundTrip(t: Test, output: string, dir: string): Promise<Map<string, string>> {
  const layout = path.join(dir, 'layout');
  const x = await bundle(['extract', output, layout, '--key', keys.pub, '--quiet']);
  t.equal(x.code, 0, x.stderr);
  const m = await readJson<BundleJson>(path.join(layout, 'bundle.json'));
  const served = new Map<string, string>();
  let i = 0;
  for (const img of m.images) {
    const ref = img.tag ? `${img.repository}:${img.tag}` : `${img.repository}@${img.digest}`;
    const target = `docker://${H}/roundtrip/r${++i}:copied`;
    await skopeoCopy(`oci:${layout}:${ref}`, target, ['--all', '--preserve-digests']);
    served.set(ref, sha256(await skopeoInspectRaw(target)));
  }
  return served;
}

t.test('registries.conf mirrors: built from the local mirror, public names kept', async (t) => {
  const dir = await tmpdir(t);
  const art = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev';
  const compA = await pushImage(
    {
      tag: 'a',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'bin/a': 'component a' }] }],
    },
    `${H}/mirror-digest/ocp-v4.0-art-dev:a`,
  );
  const compB = await pushImage(
    {
      tag: 'b',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'bin/b': 'component b' }] }],
    },
    `${H}/mirror-digest/ocp-v4.0-art-dev:b`,
  );
  const files = releaseFiles({
    version: '4.14.7',
    previous: ['4.14.6'],
    images: { 'comp-a': `${art}@${compA.digest}`, 'comp-b': `${art}@${compB.digest}` },
  });
  const rel = await pushImage(
    { tag: '4.14.7', platforms: [{ os: 'linux', architecture: 'amd64', layers: [files] }] },
    `${H}/mirror-tag/ocp-release:4.14.7`,
  );
  const extra = await pushImage(
    {
      tag: 'v1',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'bin/extra': 'extra' }] }],
    },
    `${H}/mirror-tag/tools:v1`,
  );

  const conf = path.join(dir, 'registries.conf');
  await writeFile(
    conf,
    `
unqualified-search-registries = []

[[registry]]
prefix = "quay.io/openshift-release-dev"
# the public location is unreachable: only the mirrors can serve
location = "127.0.0.1:1/openshift-release-dev"

[[registry.mirror]]
location = "${H}/mirror-digest"
pull-from-mirror = "digest-only"
insecure = true

[[registry.mirror]]
location = "${H}/mirror-tag"
pull-from-mirror = "tag-only"
insecure = true

[[registry]]
location = "blocked.example.com"
blocked = true
`,
  );
  const releaseRef = 'quay.io/openshift-release-dev/ocp-release:4.14.7';
  // no --tls-verify=false: the mirrors' `insecure = true` alone allows plain http
  const r = await create(
    [
      '--registries-conf',
      conf,
      '--release',
      releaseRef,
      '--image',
      'quay.io/openshift-release-dev/tools:v1',
    ],
    true,
  );
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(m.release, {
    name: '4.14.7',
    version: '4.14.7',
    arch: 'amd64',
    image: releaseRef,
    digest: rel.digest,
    upgradeFrom: ['4.14.6'],
  });
  const want = [
    releaseRef,
    `${art}@${compA.digest}`,
    `${art}@${compB.digest}`,
    'quay.io/openshift-release-dev/tools:v1',
  ].sort();
  t.same(
    m.images
      .map((i) => (i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`))
      .sort(),
    want,
    'bundle.json keeps the quay.io names',
  );
  t.same(await refNames(r.output), want, 'index.json annotations keep the quay.io names');
  t.notMatch(
    JSON.stringify([m, await layoutIndex(r.output)]),
    /127\.0\.0\.1|mirror-(tag|digest)/,
    'no trace of the mirror in the names',
  );
  t.equal(
    m.images.find((i) => i.tag === 'v1')!.digest,
    extra.digest,
    'tag reference served by the tag-only mirror',
  );
  const served = await roundTrip(t, r.output, r.dir);
  for (const img of m.images) {
    const ref = img.tag ? `${img.repository}:${img.tag}` : `${img.repository}@${img.digest}`;
    t.equal(served.get(ref), img.digest, `${ref} round-trips`);
  }

  // By digest, the release is only at the tag-only mirror: the digest-only mirror lacks it
  // and the unreachable location is tried last.
  const missing = await create([
    '--registries-conf',
    conf,
    '--release',
    `quay.io/openshift-release-dev/ocp-release@${rel.digest}`,
  ]);
  t.equal(missing.code, 1);
  t.equal(errorCode(missing.stderr), 'NOT_FOUND', 'in no location');
  const blocked = await create([
    '--registries-conf',
    conf,
    '--version',
    '1',
    '--image',
    'blocked.example.com/x/y:v1',
  ]);
  t.equal(errorCode(blocked.stderr), 'NOT_FOUND', 'a blocked registry without mirrors');
  const badConf = path.join(dir, 'bad.conf');
  await writeFile(badConf, '[[registry]\nprefix = ');
  const bad = await create(['--registries-conf', badConf, '--version', '1', '--image', extra.ref]);
  t.equal(errorCode(bad.stderr), 'INVALID_CONFIG', 'a registries.conf that is not TOML');
  t.equal(bad.stderr.trimEnd().split('\n').length, 1, 'reported on one line');
});

t.test('oci: layout directories, named with =REGISTRY/REPO:TAG', async (t) => {
  const dir = await tmpdir(t);
  const layout = path.join(dir, 'layout');
  const v1 = await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }],
  });
  const multi = await writeImageLayout(layout, {
    tag: 'v2',
    platforms: [
      { os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '2 amd64' }] },
      { os: 'linux', architecture: 'arm64', layers: [{ 'app/v': '2 arm64' }] },
    ],
  });
  const named = await writeImageLayout(layout, {
    tag: 'registry.example.com/team/named:v3',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '3' }] }],
  });

  const r = await create([
    '--version',
    '5.0',
    '--all-platforms',
    '--image',
    `oci:${layout}:v1=registry.example.com/team/app:v1`,
    '--image',
    `oci:${layout}:v2=registry.example.com/team/app:v2`,
    '--image',
    `oci:${layout}:registry.example.com/team/named:v3`,
  ]);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(
    m.images.map((i) => [i.repository, i.tag, i.digest]),
    [
      ['registry.example.com/team/app', 'v1', v1.digest],
      ['registry.example.com/team/app', 'v2', multi.digest],
      ['registry.example.com/team/named', 'v3', named.digest],
    ],
  );
  t.equal(m.images[1]!.platforms.length, 2);
  const served = await roundTrip(t, r.output, r.dir);
  t.same(
    [...served.values()],
    [v1.digest, multi.digest, named.digest],
    'skopeo copies give the same digests',
  );

  const bare = await create(['--version', '5.0', '--image', `oci:${layout}:v1`]);
  t.equal(errorCode(bare.stderr), 'INVALID_REFERENCE', 'a bare tag is no registry name');
  const ambiguous = await create([
    '--version',
    '5.0',
    '--image',
    `oci:${layout}=registry.example.com/x:y`,
  ]);
  t.equal(errorCode(ambiguous.stderr), 'INVALID_REFERENCE', 'several images and no :REF');
  const absent = await create([
    '--version',
    '5.0',
    '--image',
    `oci:${layout}:v9=registry.example.com/x:y`,
  ]);
  t.equal(errorCode(absent.stderr), 'NOT_FOUND', 'no such ref in the layout');
  const notLayout = await create([
    '--version',
    '5.0',
    '--image',
    `oci:${dir}/nowhere:v1=registry.example.com/x:y`,
  ]);
  t.equal(errorCode(notLayout.stderr), 'NOT_FOUND', 'not a layout');
});

t.test('oci-archive: a tar of a layout', async (t) => {
  const dir = await tmpdir(t);
  const layout = path.join(dir, 'layout');
  const img = await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ 'srv/archived': 'yes' }, { 'srv/second': 'layer' }],
      },
    ],
  });
  const archive = path.join(dir, 'image.tar');
  t.equal((await sh(`tar -cf ${q(archive)} -C ${q(layout)} .`)).code, 0);
  const r = await create([
    '--version',
    '5.0',
    '--image',
    `oci-archive:${archive}:v1=registry.example.com/team/archived:v1`,
  ]);
  t.equal(r.code, 0, r.stderr);
  const m = await bundleJson(r.output);
  t.same(
    m.images.map((i) => [i.repository, i.tag, i.digest]),
    [['registry.example.com/team/archived', 'v1', img.digest]],
  );
  t.same([...(await roundTrip(t, r.output, r.dir)).values()], [img.digest]);
  t.same(await listDir(r.tmp), [], 'the unpacked archive was removed');

  const notTar = path.join(dir, 'not.tar');
  await writeFile(notTar, 'this is not a tar archive at all'.repeat(40));
  const bad = await create([
    '--version',
    '5.0',
    '--image',
    `oci-archive:${notTar}=registry.example.com/x:y`,
  ]);
  t.equal(bad.code, 1);
  t.equal(errorCode(bad.stderr), 'INVALID_ARCHIVE', 'a file that is not a tar');
  t.same(await listDir(bad.tmp), [], 'nothing left in TMPDIR after the failure');
  const empty = path.join(dir, 'empty.tar');
  t.equal((await sh(`tar -cf ${q(empty)} -T /dev/null`)).code, 0);
  const noLayout = await create([
    '--version',
    '5.0',
    '--image',
    `oci-archive:${empty}=registry.example.com/x:y`,
  ]);
  t.equal(errorCode(noLayout.stderr), 'NOT_FOUND', 'a tar without index.json');
  t.same(await listDir(noLayout.tmp), [], 'nothing left in TMPDIR after the failure');
});

t.test('docker-archive: a docker-save tar built by hand', async (t) => {
  const dir = await tmpdir(t);
  const tree = path.join(dir, 'save');
  const layers = [
    await buildLayer({ 'usr/bin/legacy': 'legacy tool' }),
    await buildLayer({ 'etc/legacy.conf': 'x=1' }),
  ];
  const tars = layers.map((l) => gunzipSync(l.gz));
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      created: '1970-01-01T00:00:00Z',
      config: { Cmd: ['/usr/bin/legacy'] },
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffID) },
    }),
  );
  const configName = `${hex(sha256(config))}.json`;
  const layerNames: string[] = [];
  for (const [i, tar] of tars.entries()) {
    const name = `${hex(sha256(tar))}/layer.tar`;
    await mkdir(path.join(tree, path.dirname(name)), { recursive: true });
    await writeFile(path.join(tree, name), tar);
    layerNames.push(name);
    t.equal(sha256(tar), layers[i]!.diffID);
  }
  await writeFile(path.join(tree, configName), config);
  await writeFile(
    path.join(tree, 'manifest.json'),
    JSON.stringify([
      { Config: configName, RepoTags: ['registry.example.com/legacy/tool:v1'], Layers: layerNames },
    ]),
  );
  await writeFile(
    path.join(tree, 'repositories'),
    JSON.stringify({ 'registry.example.com/legacy/tool': { v1: hex(sha256(tars[1]!)) } }),
  );
  const archive = path.join(dir, 'saved.tar');
  t.equal(
    (
      await sh(
        `tar -cf ${q(archive)} -C ${q(tree)} manifest.json repositories ${q(configName)} ${layerNames.map(q).join(' ')}`,
      )
    ).code,
    0,
  );

  const r = await create([
    '--version',
    '5.0',
    '--image',
    `docker-archive:${archive}`,
    '--image',
    `docker-archive:${archive}:registry.example.com/legacy/tool:v1=registry.example.com/legacy/renamed:v9`,
  ]);
  t.equal(r.code, 0, r.stderr);
  t.same(await listDir(r.tmp), [], 'the unpacked archive was removed');
  const m = await bundleJson(r.output);
  t.same(
    m.images.map((i) => [i.repository, i.tag]),
    [
      ['registry.example.com/legacy/renamed', 'v9'],
      ['registry.example.com/legacy/tool', 'v1'],
    ],
    'named from RepoTags, or as given',
  );
  t.equal(m.images[0]!.digest, m.images[1]!.digest, 'one manifest for both names');
  t.same(m.images[0]!.platforms, [{ os: 'linux', architecture: 'amd64' }]);
  const manifest = JSON.parse(
    (
      await readFile(path.join(r.dir, 'cache', 'blobs', 'sha256', hex(m.images[0]!.digest)))
    ).toString('utf8'),
  );
  t.equal(manifest.mediaType, 'application/vnd.docker.distribution.manifest.v2+json');
  t.equal(manifest.config.digest, sha256(config), "config is the archive's own config file");
  t.same(
    manifest.layers.map((l: { digest: string }) => l.digest),
    tars.map((x) => sha256(x)),
    "layers are the archive's layer.tar files, in order",
  );
  t.equal(m.blobs.length, 4, 'manifest, config, two layers');

  // skopeo 1.9 (containers/image 5.23) skips index.json entries whose media type is not an
  // OCI one, so `oci:LAYOUT:REF` cannot name this Docker schema 2 image; its `dir:` transport
  // takes any manifest type, so the extracted layout's files are handed to skopeo that way.
  const layout = path.join(r.dir, 'layout');
  const x = await bundle(['extract', r.output, layout, '--key', keys.pub, '--quiet']);
  t.equal(x.code, 0, x.stderr);
  const idx = await readJson<{
    manifests: { digest: string; mediaType: string; annotations: Record<string, string> }[];
  }>(path.join(layout, 'index.json'));
  t.same(
    idx.manifests.map((d) => [
      d.annotations['org.opencontainers.image.ref.name'],
      d.digest,
      d.mediaType,
    ]),
    [
      [
        'registry.example.com/legacy/renamed:v9',
        m.images[0]!.digest,
        'application/vnd.docker.distribution.manifest.v2+json',
      ],
      [
        'registry.example.com/legacy/tool:v1',
        m.images[0]!.digest,
        'application/vnd.docker.distribution.manifest.v2+json',
      ],
    ],
  );
  const dirT = path.join(r.dir, 'dir-transport');
  await mkdir(dirT);
  const blob = (d: string) => readFile(path.join(layout, 'blobs', 'sha256', hex(d)));
  await writeFile(path.join(dirT, 'manifest.json'), await blob(m.images[0]!.digest));
  for (const d of [
    manifest.config.digest,
    ...manifest.layers.map((l: { digest: string }) => l.digest),
  ])
    await writeFile(path.join(dirT, hex(d)), await blob(d));
  await writeFile(path.join(dirT, 'version'), 'Directory Transport Version: 1.1\n');
  await skopeoCopy(`dir:${dirT}`, `docker://${H}/legacy/tool:v1`, ['--preserve-digests']);
  t.equal(
    sha256(await skopeoInspectRaw(`${H}/legacy/tool:v1`)),
    m.images[0]!.digest,
    'pushed with skopeo, the registry serves the digest bundle.json lists',
  );
  const pulled = path.join(r.dir, 'pulled');
  await skopeoCopy(`docker://${H}/legacy/tool:v1`, `dir:${pulled}`);
  for (const l of manifest.layers as { digest: string }[])
    t.ok(
      (await readFile(path.join(pulled, hex(l.digest)))).equals(await blob(l.digest)),
      `layer ${l.digest} intact`,
    );
  // skopeo reads the same archive to the same config
  const skopeoConfig = await skopeoInspectRaw(`docker-archive:${archive}`, ['--config']);
  t.equal(sha256(skopeoConfig), sha256(config), 'skopeo sees the same config in the archive');

  const wrongTag = await create([
    '--version',
    '5.0',
    '--image',
    `docker-archive:${archive}:registry.example.com/legacy/tool:v2`,
  ]);
  t.equal(errorCode(wrongTag.stderr), 'NOT_FOUND');
  t.same(await listDir(wrongTag.tmp), [], 'nothing left in TMPDIR after the failure');
});

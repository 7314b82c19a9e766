// --agent-image: a bundle-agent image (here an oci-archive made by skopeo from a generated
// layout with the version label scripts/oci-image.mjs sets) lands in the bundle under the fixed
// name and in bundle.json's agent field; what the factory could get wrong is refused up front.
import t from 'tap';
import path from 'node:path';
import { skopeoCopy } from '../helpers/registry.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { blobEntry, bundle, bundleJson, errorCode, keygen, refNames, tarList } from './lib.js';

const work = await tmpdir(t, 'ob-agent-image-');
const keys = await keygen(work);
const layout = path.join(work, 'layout');
const labelled = await writeImageLayout(layout, {
  tag: 'agent',
  platforms: [
    {
      os: 'linux',
      architecture: 'amd64',
      layers: [{ 'usr/local/bin/bundle-agent': '#!/bin/sh\n' }],
      config: { Labels: { 'org.opencontainers.image.version': '0.9.0' } },
    },
  ],
});
const unlabelled = await writeImageLayout(layout, {
  tag: 'plain',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: 'no label' }] }],
});
const app = await writeImageLayout(layout, {
  tag: 'app',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: 'app' }] }],
});
const archive = path.join(work, 'bundle-agent-0.9.0.oci.tar');
await skopeoCopy(`oci:${layout}:agent`, `oci-archive:${archive}:0.9.0`);

let n = 0;
async function create(args: string[]) {
  const out = path.join(work, `out-${++n}.bundle`);
  const r = await bundle([
    'create',
    '--quiet',
    '--key',
    keys.key,
    '--version',
    '1.0',
    '--cache',
    path.join(work, 'cache'),
    '-o',
    out,
    ...args,
  ]);
  return { ...r, out };
}

t.test(
  '--agent-image oci-archive:FILE: the image under localhost/offline-bundle/bundle-agent:VERSION, named in bundle.json',
  async (t) => {
    const r = await create([
      '--image',
      `oci:${layout}:app=registry.example.com/acme/app:v1`,
      '--agent-image',
      `oci-archive:${archive}`,
    ]);
    t.equal(r.code, 0, r.stderr);
    const doc = (await bundleJson(r.out)) as Awaited<ReturnType<typeof bundleJson>> & {
      agent?: unknown;
    };
    t.strictSame(
      doc.agent,
      {
        version: '0.9.0',
        repository: 'localhost/offline-bundle/bundle-agent',
        digest: labelled.digest,
      },
      'version from the label, the digest skopeo kept',
    );
    t.ok(
      doc.images.some(
        (i) =>
          i.repository === 'localhost/offline-bundle/bundle-agent' &&
          i.tag === '0.9.0' &&
          i.digest === labelled.digest,
      ),
      'listed among the images',
    );
    t.ok(
      (await refNames(r.out)).includes('localhost/offline-bundle/bundle-agent:0.9.0'),
      'served under that name',
    );
    const entries = await tarList(r.out);
    for (const d of [
      labelled.digest,
      labelled.manifests[0]!.config,
      ...labelled.manifests[0]!.layers,
    ])
      t.ok(entries.includes(blobEntry(d)), `${d} is in the archive`);
    t.ok(
      doc.images.some((i) => i.digest === app.digest),
      'the other images are still there',
    );
    const inspect = await bundle(['inspect', r.out]);
    t.match(
      inspect.stdout,
      /agent: +bundle-agent 0\.9\.0 \(localhost\/offline-bundle\/bundle-agent@sha256:/,
    );
  },
);

t.test('no --agent-image: no agent field (bundles stay as before)', async (t) => {
  const r = await create(['--image', `oci:${layout}:app=registry.example.com/acme/app:v1`]);
  t.equal(r.code, 0, r.stderr);
  t.notOk('agent' in (await bundleJson(r.out)));
});

t.test('an image without the label takes --agent-version; without it, refused', async (t) => {
  const bare = await create(['--agent-image', `oci:${layout}:plain`]);
  t.equal(bare.code, 1);
  t.equal(errorCode(bare.stderr), 'INVALID_CONFIG');
  t.match(bare.stderr, /no org\.opencontainers\.image\.version label: give --agent-version/);
  const r = await create(['--agent-image', `oci:${layout}:plain`, '--agent-version', '0.9.1-rc.1']);
  t.equal(r.code, 0, r.stderr);
  t.strictSame(((await bundleJson(r.out)) as { agent?: unknown }).agent, {
    version: '0.9.1-rc.1',
    repository: 'localhost/offline-bundle/bundle-agent',
    digest: unlabelled.digest,
  });
});

t.test(
  'refused before anything is written: =NAME, a contradicting --agent-version, a version with a control character',
  async (t) => {
    const named = await create(['--agent-image', `oci:${layout}:agent=quay.io/x/agent:1`]);
    t.equal(named.code, 1);
    t.match(
      named.stderr,
      /always named localhost\/offline-bundle\/bundle-agent:VERSION; drop the =NAME/,
    );
    const contra = await create([
      '--agent-image',
      `oci-archive:${archive}`,
      '--agent-version',
      '1.0.0',
    ]);
    t.equal(contra.code, 1);
    t.match(
      contra.stderr,
      /--agent-version 1\.0\.0 contradicts the agent image's org\.opencontainers\.image\.version label, 0\.9\.0/,
    );
    const ctl = await create([
      '--agent-image',
      `oci:${layout}:plain`,
      '--agent-version',
      '1.0\u001b[2J',
    ]);
    t.equal(ctl.code, 1);
    t.match(ctl.stderr, /is not an agent version/);
    t.equal(ctl.stderr.trim().split('\n').length, 1, 'one line');
  },
);

t.test(
  '--agent-version must be canonical semver (semver.valid(v) === v): v0.9.0, latest, 1.0, 01.0.0, 1.0.0+b1 refused with one line',
  async (t) => {
    for (const v of ['v0.9.0', 'latest', '1.0', '01.0.0', '1.0.0+b1', '=1.0.0']) {
      const r = await create(['--agent-image', `oci:${layout}:plain`, '--agent-version', v]);
      t.equal(r.code, 1, `${v} refused`);
      t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
      t.match(r.stderr, /is not an agent version: it must be a canonical semver version/);
      t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
    }
  },
);

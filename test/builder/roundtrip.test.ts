// Round trip and interop with standard tools: create -> verify -> extract -> skopeo copy
// into a second, fresh registry gives the same manifest digests; zstd/tar list the file in
// the documented order; openssl verifies both signature types; sha256sum checks the
// .sha256 file; and the same inputs give byte-identical files (ed25519 + SOURCE_DATE_EPOCH).
import t from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { skopeoCopy, skopeoInspectRaw, sha256, startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  blobEntry,
  bundle,
  bundleJson,
  keygen,
  q,
  readJson,
  sh,
  tarList,
  type BundleJson,
  type LayoutIndex,
} from './lib.js';

const src = await startRegistry();
t.teardown(() => src.stop());
const work = await tmpdir(t, 'ob-roundtrip-');
const ecdsa = await keygen(work, 'ecdsa');
const ed = await keygen(work, 'ed', 'ed25519');
const H = src.host;

const base = { 'usr/lib/os-release': 'ID=rt\n' };
const app = await pushImage(
  {
    tag: 'v1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [base, { 'srv/app': 'app' }],
        config: { Env: ['A=1'] },
      },
    ],
  },
  `${H}/rt/app:v1`,
);
const tool = await pushImage(
  {
    tag: 'v3',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [base, { 'srv/tool': 'tool' }] }],
  },
  `${H}/rt/tool:v3`,
);
const multi = await pushImage(
  {
    tag: 'v2',
    platforms: [
      { os: 'linux', architecture: 'amd64', layers: [base, { arch: 'amd64' }] },
      { os: 'linux', architecture: 'arm64', variant: 'v8', layers: [base, { arch: 'arm64' }] },
    ],
  },
  `${H}/rt/multi:v2`,
);

let n = 0;
async function create(args: string[], key = ecdsa.key, env: Record<string, string> = {}) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const output = path.join(dir, 'rt.bundle');
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--key',
      key,
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      output,
      ...args,
    ],
    { env },
  );
  if (r.code !== 0) throw new Error(`bundle create failed: ${r.stderr}`);
  return { output, dir };
}

// tag reference, digest reference, and an index with every platform kept
const rtArgs = [
  '--version',
  '3.1.0',
  '--image',
  app.ref,
  '--image',
  tool.digestRef,
  '--image',
  multi.ref,
  '--all-platforms',
];

t.test(
  'create -> verify -> extract -> skopeo copy into a fresh registry: identical digests',
  async (t) => {
    const { output, dir } = await create(rtArgs);
    const v = await bundle(['verify', output, '--key', ecdsa.pub]);
    t.equal(v.code, 0, `verify exits 0: ${v.stderr}`);
    const layout = path.join(dir, 'layout');
    const x = await bundle(['extract', output, layout, '--key', ecdsa.pub, '--quiet']);
    t.equal(x.code, 0, x.stderr);
    const m = await readJson<BundleJson>(path.join(layout, 'bundle.json'));
    t.equal(m.images.length, 3);

    const dest = await startRegistry();
    t.teardown(() => dest.stop());
    for (const img of m.images) {
      const ref = img.tag ? `${img.repository}:${img.tag}` : `${img.repository}@${img.digest}`;
      const repo = img.repository.slice(H.length + 1);
      // skopeo cannot push to a digest: give digest references a tag at the destination
      const target = `docker://${dest.host}/${repo}:${img.tag ?? 'by-digest'}`;
      await skopeoCopy(`oci:${layout}:${ref}`, target, ['--all', '--preserve-digests']);
      const served = await skopeoInspectRaw(target);
      t.equal(
        sha256(served),
        img.digest,
        `${ref}: the new registry serves the digest bundle.json lists`,
      );
      const original = await skopeoInspectRaw(`docker://${ref}`);
      t.ok(served.equals(original), `${ref}: byte-identical to the source registry's manifest`);
    }
    t.equal(
      sha256(await skopeoInspectRaw(`${dest.host}/rt/multi@${multi.manifests[1]!.digest}`)),
      multi.manifests[1]!.digest,
      'arm64 child copied too',
    );
    t.equal(
      sha256(await skopeoInspectRaw(`${dest.host}/rt/tool@${tool.digest}`)),
      tool.digest,
      'digest reference resolvable by digest at the destination',
    );
  },
);

t.test('interop: zstd | tar order, openssl signature checks, sha256sum -c', async (t) => {
  const { output, dir } = await create(rtArgs);
  const names = await tarList(output);
  t.same(
    names.slice(0, 4),
    ['bundle.json', 'bundle.json.sig', 'oci-layout', 'index.json'],
    'bundle.json, its signature, then the layout',
  );
  const blobs = names.slice(4);
  t.ok(
    blobs.length > 0 && blobs.every((b) => /^blobs\/sha256\/[0-9a-f]{64}$/.test(b)),
    'then only blobs/sha256/<hex>',
  );
  t.same(blobs, [...blobs].sort(), 'blobs sorted');
  const m = await bundleJson(output);
  t.same(
    blobs,
    m.blobs.map((b) => blobEntry(b.digest)),
    'exactly the blobs bundle.json lists',
  );

  const sig = path.join(dir, 'sig');
  await mkdir(sig);
  const x = await sh(`zstd -dc ${q(output)} | tar -x -C ${q(sig)} bundle.json bundle.json.sig`);
  t.equal(x.code, 0, x.stderr);
  const ok = await sh(
    `openssl dgst -sha256 -verify ${q(ecdsa.pub)} -signature bundle.json.sig bundle.json`,
    { cwd: sig },
  );
  t.equal(ok.code, 0, ok.stderr);
  t.equal(ok.stdout.trim(), 'Verified OK');
  await writeFile(
    path.join(sig, 'bundle.json'),
    (await readFile(path.join(sig, 'bundle.json'), 'utf8')).replace('"3.1.0"', '"3.1.1"'),
  );
  const bad = await sh(
    `openssl dgst -sha256 -verify ${q(ecdsa.pub)} -signature bundle.json.sig bundle.json`,
    { cwd: sig },
  );
  t.not(bad.code, 0, 'openssl rejects an edited bundle.json');
  t.match(bad.stdout, /Verification failure/);

  const fp = await sh(`openssl pkey -pubin -in ${q(ecdsa.pub)} -outform DER | sha256sum`);
  t.equal(
    `sha256:${fp.stdout.split(' ')[0]}`,
    m.signer.fingerprint,
    'signer fingerprint = sha256 of the DER public key (openssl)',
  );

  const sum = await sh(`sha256sum -c ${q(path.basename(output))}.sha256`, {
    cwd: path.dirname(output),
  });
  t.equal(sum.code, 0, sum.stderr);
  t.equal(sum.stdout.trim(), `${path.basename(output)}: OK`);
  await writeFile(output, Buffer.concat([await readFile(output), Buffer.from('x')]));
  const sumBad = await sh(`sha256sum -c ${q(path.basename(output))}.sha256`, {
    cwd: path.dirname(output),
  });
  t.not(sumBad.code, 0, 'sha256sum -c notices a changed file');

  // plain tar -x gives an OCI layout skopeo reads
  const full = path.join(dir, 'full');
  await mkdir(full);
  t.equal((await sh(`zstd -dc ${q(output)} | tar -x -C ${q(full)}`)).code, 0);
  t.equal(
    sha256(await skopeoInspectRaw(`oci:${full}:${app.ref}`)),
    app.digest,
    'skopeo inspect oci:DIR:REF after plain tar -x',
  );
  const idx = await readJson<LayoutIndex>(path.join(full, 'index.json'));
  t.equal(idx.manifests.length, 3);
});

t.test(
  'ed25519: openssl pkeyutl -rawin verifies; reproducible with SOURCE_DATE_EPOCH',
  async (t) => {
    const env = { SOURCE_DATE_EPOCH: '1700000000' };
    const args = [
      '--version',
      '3.1.0',
      '--image',
      app.ref,
      '--image',
      tool.digestRef,
      '--image',
      multi.ref,
      '--arch',
      'amd64',
    ];
    const a = await create([...args, '--jobs', '1'], ed.key, env);
    const b = await create([...args, '--jobs', '8'], ed.key, env);
    const m = await bundleJson(a.output);
    t.equal(m.signer.algorithm, 'ed25519');
    t.equal(m.signer.fingerprint, ed.fingerprint);
    t.equal(
      m.creator.createdAt,
      '2023-11-14T22:13:20.000Z',
      'creation time from SOURCE_DATE_EPOCH',
    );
    const [fa, fb] = [await readFile(a.output), await readFile(b.output)];
    t.ok(fa.equals(fb), 'two runs (fresh caches, different --jobs) give byte-identical files');
    t.equal(
      await readFile(`${a.output}.sha256`, 'utf8'),
      await readFile(`${b.output}.sha256`, 'utf8'),
    );

    const sig = path.join(a.dir, 'sig');
    await mkdir(sig);
    await sh(`zstd -dc ${q(a.output)} | tar -x -C ${q(sig)} bundle.json bundle.json.sig`);
    const ok = await sh(
      `openssl pkeyutl -verify -pubin -inkey ${q(ed.pub)} -rawin -in bundle.json -sigfile bundle.json.sig`,
      { cwd: sig },
    );
    t.equal(ok.code, 0, ok.stderr + ok.stdout);
    t.match(ok.stdout, /Signature Verified Successfully/);
    const wrong = await sh(
      `openssl pkeyutl -verify -pubin -inkey ${q(ed.pub)} -rawin -in bundle.json.sig -sigfile bundle.json.sig`,
      { cwd: sig },
    );
    t.not(wrong.code, 0, 'and fails on other data');

    const v = await bundle(['verify', a.output, '--key', ed.pub, '--json']);
    t.equal(v.code, 0, v.stderr);
    t.equal(JSON.parse(v.stdout).signer, ed.fingerprint);

    const later = await create(args, ed.key, { SOURCE_DATE_EPOCH: '1700000001' });
    t.notOk(
      (await readFile(later.output)).equals(fa),
      'a different SOURCE_DATE_EPOCH changes the file',
    );
  },
);
